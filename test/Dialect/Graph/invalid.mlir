// Tests that the verifier refuses a malformed instance of every cdp op.
// RUN: cdp-opt %s -split-input-file -verify-diagnostics

// Tests that cdp.param rejects bad operands or attributes.
func.func @param() {
  // expected-error@+1 {{'cdp.param' op needs a non-empty name}}
  %0 = cdp.param "" : tensor<2xf32>
  return
}

// -----

// Tests that cdp.constant rejects bad operands or attributes.
func.func @constant() {
  // expected-error@+1 {{'cdp.constant' op result #0 must be ranked tensor of 32-bit float or 64-bit signless integer or 1-bit signless integer values, but got 'tensor<2xi32>'}}
  %0 = cdp.constant dense<1> : tensor<2xi32>
  return
}

// -----

// Tests that cdp.constant_of_shape rejects bad operands or attributes.
func.func @constant_of_shape() {
  // expected-error@+2 {{value must hold exactly one element}}
  // expected-error@+1 {{'cdp.constant_of_shape' op failed to infer returned types}}
  %0 = cdp.constant_of_shape {shape = array<i64: 2>, value = dense<[1.0, 2.0]> : tensor<2xf32>} : tensor<2xf32>
  return
}

// -----

// Tests that cdp.shape rejects bad operands or attributes.
func.func @shape(%x: tensor<2x3xf32>) {
  // expected-error@+2 {{'cdp.shape' op inferred type(s) 'tensor<2xi64>' are incompatible with return type(s) of operation 'tensor<3xi64>'}}
  // expected-error@+1 {{'cdp.shape' op failed to infer returned types}}
  %0 = cdp.shape %x : (tensor<2x3xf32>) -> tensor<3xi64>
  return
}

// -----

// Tests that cdp.gemm rejects bad operands or attributes.
func.func @gemm(%x: tensor<2x3xf32>) {
  // expected-error@+2 {{inner dimensions differ: 3 and 2}}
  // expected-error@+1 {{'cdp.gemm' op failed to infer returned types}}
  %0 = cdp.gemm %x, %x : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that cdp.matmul rejects bad operands or attributes.
func.func @matmul(%x: tensor<2x3xf32>) {
  // expected-error@+2 {{inner dimensions differ: 3 and 2}}
  // expected-error@+1 {{'cdp.matmul' op failed to infer returned types}}
  %0 = cdp.matmul %x, %x : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that cdp.conv rejects bad operands or attributes.
func.func @conv(%x: tensor<1x1x3x3xf32>) {
  // expected-error@+2 {{pads must have 4 values, got 2}}
  // expected-error@+1 {{'cdp.conv' op failed to infer returned types}}
  %0 = cdp.conv %x, %x {pads = array<i64: 0, 0>, strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>} : (tensor<1x1x3x3xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x1x1xf32>
  return
}

// -----

// Tests that cdp.max_pool rejects bad operands or attributes.
func.func @max_pool(%x: tensor<2x3xf32>) {
  // expected-error@+2 {{expects an (N, C, spatial...) input with 1 to 3 spatial dimensions, got rank 2}}
  // expected-error@+1 {{'cdp.max_pool' op failed to infer returned types}}
  %0 = cdp.max_pool %x {kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that a 1-D window needs one kernel entry and two pads.
func.func @max_pool_1d(%x: tensor<1x2x8xf32>) {
  // expected-error@+2 {{pads must have 2 values, got 4}}
  // expected-error@+1 {{'cdp.max_pool' op failed to infer returned types}}
  %0 = cdp.max_pool %x {kernel_shape = array<i64: 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1>, dilations = array<i64: 1>} : (tensor<1x2x8xf32>) -> tensor<1x2x7xf32>
  return
}

// -----

// Tests that max_pool_indices takes storage_order 0 or 1 only.
func.func @max_pool_indices(%x: tensor<1x1x4x4xf32>) {
  // expected-error@+2 {{storage_order must be 0 or 1, got 2}}
  // expected-error@+1 {{'cdp.max_pool_indices' op failed to infer returned types}}
  %0 = cdp.max_pool_indices %x {kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>, storage_order = 2} : (tensor<1x1x4x4xf32>) -> tensor<1x1x2x2xi64>
  return
}

// -----

// Tests that cdp.average_pool rejects bad operands or attributes.
func.func @average_pool(%x: tensor<1x1x3x3xf32>) {
  // expected-error@+2 {{window of 5 elements is larger than the padded input of 3}}
  // expected-error@+1 {{'cdp.average_pool' op failed to infer returned types}}
  %0 = cdp.average_pool %x {kernel_shape = array<i64: 5, 5>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>} : (tensor<1x1x3x3xf32>) -> tensor<1x1x1x1xf32>
  return
}

// -----

// Tests that cdp.global_average_pool rejects bad operands or attributes.
func.func @global_average_pool(%x: tensor<2x3xf32>) {
  // expected-error@+2 {{expects an input of rank >= 3 (N, C, spatial...)}}
  // expected-error@+1 {{'cdp.global_average_pool' op failed to infer returned types}}
  %0 = cdp.global_average_pool %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that cdp.batch_norm rejects bad operands or attributes.
func.func @batch_norm(%x: tensor<2x3xf32>, %s: tensor<4xf32>) {
  // expected-error@+2 {{scale must have shape [3], got [4]}}
  // expected-error@+1 {{'cdp.batch_norm' op failed to infer returned types}}
  %0:3 = cdp.batch_norm %x, %s, %s, %s, %s : (tensor<2x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>)
  return
}

// -----

// Tests that cdp.layer_norm rejects bad operands or attributes.
func.func @layer_norm(%x: tensor<2x3xf32>, %s: tensor<4xf32>) {
  // expected-error@+2 {{scale and bias must broadcast to the normalized shape [3]}}
  // expected-error@+1 {{'cdp.layer_norm' op failed to infer returned types}}
  %0:3 = cdp.layer_norm %x, %s : (tensor<2x3xf32>, tensor<4xf32>) -> (tensor<2x3xf32>, tensor<2x1xf32>, tensor<2x1xf32>)
  return
}

// -----

// Tests that cdp.softmax rejects bad operands or attributes.
func.func @softmax(%x: tensor<2x3xf32>) {
  // expected-error@+2 {{axis 2 is out of range for rank 2}}
  // expected-error@+1 {{'cdp.softmax' op failed to infer returned types}}
  %0 = cdp.softmax %x {axis = 2 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that cdp.log_softmax rejects bad operands or attributes.
func.func @log_softmax(%x: tensor<2x3xf32>) {
  // expected-error@+2 {{axis -3 is out of range for rank 2}}
  // expected-error@+1 {{'cdp.log_softmax' op failed to infer returned types}}
  %0 = cdp.log_softmax %x {axis = -3 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that cdp.dropout rejects bad operands or attributes.
func.func @dropout(%x: tensor<2x3xf32>) {
  // expected-error@+2 {{ratio must be in [0, 1), got 1.000000}}
  // expected-error@+1 {{'cdp.dropout' op failed to infer returned types}}
  %0:2 = cdp.dropout %x {ratio = 1.0 : f32} : (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi1>)
  return
}

// -----

// Tests that cdp.relu rejects bad operands or attributes.
func.func @relu(%x: tensor<2x3xi64>) {
  // expected-error@+1 {{'cdp.relu' op operand #0 must be ranked tensor of 32-bit float values, but got 'tensor<2x3xi64>'}}
  %0 = cdp.relu %x : tensor<2x3xi64>
  return
}

// -----

// Tests that cdp.erf rejects bad operands or attributes.
func.func @erf(%x: tensor<2x3xi1>) {
  // expected-error@+1 {{'cdp.erf' op operand #0 must be ranked tensor of 32-bit float values, but got 'tensor<2x3xi1>'}}
  %0 = cdp.erf %x : tensor<2x3xi1>
  return
}

// -----

// Tests that cdp.tanh rejects bad operands or attributes.
func.func @tanh(%x: tensor<2xf64>) {
  // expected-error@+1 {{'cdp.tanh' op operand #0 must be ranked tensor of 32-bit float values, but got 'tensor<2xf64>'}}
  %0 = cdp.tanh %x : tensor<2xf64>
  return
}

// -----

// Tests that cdp.sigmoid rejects bad operands or attributes.
func.func @sigmoid(%x: tensor<2x3xf16>) {
  // expected-error@+1 {{'cdp.sigmoid' op operand #0 must be ranked tensor of 32-bit float values, but got 'tensor<2x3xf16>'}}
  %0 = cdp.sigmoid %x : tensor<2x3xf16>
  return
}

// -----

// Tests that cdp.sqrt rejects bad operands or attributes.
func.func @sqrt(%x: tensor<2x3xi64>) {
  // expected-error@+1 {{'cdp.sqrt' op operand #0 must be ranked tensor of 32-bit float values, but got 'tensor<2x3xi64>'}}
  %0 = cdp.sqrt %x : tensor<2x3xi64>
  return
}

// -----

// Tests that cdp.identity rejects bad operands or attributes.
func.func @identity(%x: tensor<2x3xf64>) {
  // expected-error@+1 {{'cdp.identity' op operand #0 must be ranked tensor of 32-bit float or 64-bit signless integer or 1-bit signless integer values, but got 'tensor<2x3xf64>'}}
  %0 = cdp.identity %x : tensor<2x3xf64>
  return
}

// -----

// Tests that cdp.gelu rejects bad operands or attributes.
func.func @gelu(%x: tensor<2x3xf32>) {
  // expected-error@+1 {{'cdp.gelu' op approximate must be 'none' or 'tanh', got 'fast'}}
  %0 = cdp.gelu %x {approximate = "fast"} : tensor<2x3xf32>
  return
}

// -----

// Tests that cdp.add rejects bad operands or attributes.
func.func @add(%x: tensor<2x3xf32>, %s: tensor<2xf32>) {
  // expected-error@+2 {{shapes [2,3] and [2] do not broadcast}}
  // expected-error@+1 {{'cdp.add' op failed to infer returned types}}
  %0 = cdp.add %x, %s : (tensor<2x3xf32>, tensor<2xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that cdp.sub rejects bad operands or attributes.
func.func @sub(%x: tensor<2x3xf32>, %s: tensor<3xi64>) {
  // expected-error@+2 {{operand element types differ}}
  // expected-error@+1 {{'cdp.sub' op failed to infer returned types}}
  %0 = cdp.sub %x, %s : (tensor<2x3xf32>, tensor<3xi64>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that cdp.mul rejects bad operands or attributes.
func.func @mul(%x: tensor<2x3xf32>) {
  // expected-error@+2 {{'cdp.mul' op inferred type(s) 'tensor<2x3xf32>' are incompatible with return type(s) of operation 'tensor<3x2xf32>'}}
  // expected-error@+1 {{'cdp.mul' op failed to infer returned types}}
  %0 = cdp.mul %x, %x : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<3x2xf32>
  return
}

// -----

// Tests that cdp.div rejects bad operands or attributes.
func.func @div(%x: tensor<2x3xi1>) {
  // expected-error@+1 {{'cdp.div' op operand #0 must be ranked tensor of 32-bit float or 64-bit signless integer values, but got 'tensor<2x3xi1>'}}
  %0 = cdp.div %x, %x : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  return
}

// -----

// Tests that cdp.pow rejects bad operands or attributes.
func.func @pow(%x: tensor<2x3xi64>) {
  // expected-error@+1 {{'cdp.pow' op operand #0 must be ranked tensor of 32-bit float values, but got 'tensor<2x3xi64>'}}
  %0 = cdp.pow %x, %x : (tensor<2x3xi64>, tensor<2x3xi64>) -> tensor<2x3xi64>
  return
}

// -----

// Tests that cdp.cast rejects bad operands or attributes.
func.func @cast(%x: tensor<2x3xf32>) {
  // expected-error@+1 {{'cdp.cast' op result #0 must be ranked tensor of 32-bit float or 64-bit signless integer or 1-bit signless integer values, but got 'tensor<2x3xf16>'}}
  %0 = cdp.cast %x {to = f16} : (tensor<2x3xf32>) -> tensor<2x3xf16>
  return
}

// -----

// Tests that cdp.reshape rejects bad operands or attributes.
func.func @reshape(%x: tensor<2x3xf32>) {
  // expected-error@+2 {{cannot reshape [2,3] into [4,2]}}
  // expected-error@+1 {{'cdp.reshape' op failed to infer returned types}}
  %0 = cdp.reshape %x {shape = array<i64: 4, 2>} : (tensor<2x3xf32>) -> tensor<4x2xf32>
  return
}

// -----

// Tests that cdp.flatten rejects bad operands or attributes.
func.func @flatten(%x: tensor<2x3xf32>) {
  // expected-error@+2 {{axis 3 is out of range for rank 2}}
  // expected-error@+1 {{'cdp.flatten' op failed to infer returned types}}
  %0 = cdp.flatten %x {axis = 3 : i64} : (tensor<2x3xf32>) -> tensor<6x1xf32>
  return
}

// -----

// Tests that cdp.transpose rejects bad operands or attributes.
func.func @transpose(%x: tensor<2x3xf32>) {
  // expected-error@+2 {{perm [0,0] is not a permutation}}
  // expected-error@+1 {{'cdp.transpose' op failed to infer returned types}}
  %0 = cdp.transpose %x {perm = array<i64: 0, 0>} : (tensor<2x3xf32>) -> tensor<2x2xf32>
  return
}

// -----

// Tests that cdp.concat rejects bad operands or attributes.
func.func @concat(%x: tensor<2x3xf32>, %s: tensor<2x4xf32>) {
  // expected-error@+2 {{input shapes [2,3] and [2,4] differ outside axis 0}}
  // expected-error@+1 {{'cdp.concat' op failed to infer returned types}}
  %0 = cdp.concat %x, %s {axis = 0 : i64} : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<4x3xf32>
  return
}

// -----

// Tests that cdp.split rejects bad operands or attributes.
func.func @split(%x: tensor<2x3xf32>) {
  // expected-error@+2 {{split sizes [1,1] do not sum to 3}}
  // expected-error@+1 {{'cdp.split' op failed to infer returned types}}
  %0:2 = cdp.split %x {axis = 1 : i64, split = array<i64: 1, 1>} : (tensor<2x3xf32>) -> (tensor<2x1xf32>, tensor<2x1xf32>)
  return
}

// -----

// Tests that cdp.slice rejects bad operands or attributes.
func.func @slice(%x: tensor<2x3xf32>) {
  // expected-error@+2 {{steps must not be zero}}
  // expected-error@+1 {{'cdp.slice' op failed to infer returned types}}
  %0 = cdp.slice %x {starts = array<i64: 0>, ends = array<i64: 1>, axes = array<i64: 0>, steps = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<1x3xf32>
  return
}

// -----

// Tests that cdp.squeeze rejects bad operands or attributes.
func.func @squeeze(%x: tensor<2x3xf32>) {
  // expected-error@+2 {{cannot squeeze dimension 1 of size 3}}
  // expected-error@+1 {{'cdp.squeeze' op failed to infer returned types}}
  %0 = cdp.squeeze %x {axes = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
  return
}

// -----

// Tests that cdp.unsqueeze rejects bad operands or attributes.
func.func @unsqueeze(%x: tensor<2x3xf32>) {
  // expected-error@+2 {{axis 1 is repeated}}
  // expected-error@+1 {{'cdp.unsqueeze' op failed to infer returned types}}
  %0 = cdp.unsqueeze %x {axes = array<i64: 1, 1>} : (tensor<2x3xf32>) -> tensor<2x1x1x3xf32>
  return
}

// -----

// Tests that cdp.expand rejects bad operands or attributes.
func.func @expand(%x: tensor<2x3xf32>) {
  // expected-error@+2 {{shapes [2,3] and [4,2] do not broadcast}}
  // expected-error@+1 {{'cdp.expand' op failed to infer returned types}}
  %0 = cdp.expand %x {shape = array<i64: 4, 2>} : (tensor<2x3xf32>) -> tensor<4x3xf32>
  return
}

// -----

// Tests that cdp.gather rejects bad operands or attributes.
func.func @gather(%x: tensor<2x3xf32>, %s: tensor<4xi64>) {
  // expected-error@+2 {{axis 2 is out of range for rank 2}}
  // expected-error@+1 {{'cdp.gather' op failed to infer returned types}}
  %0 = cdp.gather %x, %s {axis = 2 : i64} : (tensor<2x3xf32>, tensor<4xi64>) -> tensor<2x4xf32>
  return
}

// -----

// Tests that cdp.reduce_mean rejects bad operands or attributes.
func.func @reduce_mean(%x: tensor<2x3xf32>) {
  // expected-error@+2 {{axis -2 is repeated}}
  // expected-error@+1 {{'cdp.reduce_mean' op failed to infer returned types}}
  %0 = cdp.reduce_mean %x {axes = array<i64: 0, -2>} : (tensor<2x3xf32>) -> tensor<1x3xf32>
  return
}

// -----

// Tests that cdp.reduce_sum rejects bad operands or attributes.
func.func @reduce_sum(%x: tensor<2x3xf32>) {
  // expected-error@+2 {{axis 5 is out of range for rank 2}}
  // expected-error@+1 {{'cdp.reduce_sum' op failed to infer returned types}}
  %0 = cdp.reduce_sum %x {axes = array<i64: 5>} : (tensor<2x3xf32>) -> tensor<1x3xf32>
  return
}

// -----

// Tests that cdp.softmax_cross_entropy_loss rejects bad operands or attributes.
func.func @softmax_cross_entropy_loss(%x: tensor<4x10xf32>, %s: tensor<5xi64>) {
  // expected-error@+2 {{labels shape [5] does not match scores shape [4,10] (expected [4])}}
  // expected-error@+1 {{'cdp.softmax_cross_entropy_loss' op failed to infer returned types}}
  %0:2 = cdp.softmax_cross_entropy_loss %x, %s : (tensor<4x10xf32>, tensor<5xi64>) -> (tensor<f32>, tensor<4x10xf32>)
  return
}

// -----

// Tests that cdp.nll_loss rejects bad operands or attributes.
func.func @nll_loss(%x: tensor<4x10xf32>, %s: tensor<4xi64>) {
  // expected-error@+2 {{reduction must be 'mean', 'sum' or 'none', got 'avg'}}
  // expected-error@+1 {{'cdp.nll_loss' op failed to infer returned types}}
  %0 = cdp.nll_loss %x, %s {reduction = "avg"} : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  return
}

// -----

// Tests that a window whose dilated size overflows 64 bits is refused, not
// wrapped (attributes come from the model file and can hold any int64).
func.func @max_pool_dilation_overflow(%x: tensor<1x1x4xf32>) {
  // expected-error@+2 {{window size or padding overflows 64 bits}}
  // expected-error@+1 {{'cdp.max_pool' op failed to infer returned types}}
  %0 = cdp.max_pool %x {kernel_shape = array<i64: 3>, pads = array<i64: 0, 0>, strides = array<i64: 1>, dilations = array<i64: 4611686018427387904>} : (tensor<1x1x4xf32>) -> tensor<1x1x1xf32>
  return
}

// -----

// Tests that a padded dimension overflowing 64 bits is refused.
func.func @pad_overflow(%x: tensor<2x3xf32>) {
  // expected-error@+2 {{padded dimension overflows 64 bits}}
  // expected-error@+1 {{'cdp.pad' op failed to infer returned types}}
  %0 = cdp.pad %x {pads = array<i64: 0, 9223372036854775807, 0, 1>} : (tensor<2x3xf32>) -> tensor<2x4xf32>
  return
}

// -----

// Tests that a reshape target whose element count overflows 64 bits is
// refused (it must not wrap around to the input's count).
func.func @reshape_overflow(%x: tensor<4xf32>) {
  // expected-error@+2 {{cannot reshape [4] into [4611686018427387905,4]}}
  // expected-error@+1 {{'cdp.reshape' op failed to infer returned types}}
  %0 = cdp.reshape %x {shape = array<i64: 4611686018427387905, 4>} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that the loss-scale ops and an update's overflow check take the
// loss-scale buffer [scale, clean steps, overflow], and sane factors.
func.func @loss_scale(%s: tensor<2xf32>) -> tensor<f32> {
  // expected-error@+1 {{'cdp.loss_scale' op loss-scale state must be tensor<3xf32> (scale, clean steps, overflow), got 'tensor<2xf32>'}}
  %seed = cdp.loss_scale %s : tensor<2xf32> -> tensor<f32>
  return %seed : tensor<f32>
}

// -----

func.func @loss_scale_seed(%s: tensor<3xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{'cdp.loss_scale' op seeds a scalar loss: its result has one element}}
  %seed = cdp.loss_scale %s : tensor<3xf32> -> tensor<2xf32>
  return %seed : tensor<2xf32>
}

// -----

func.func @unscale_factors(%s: tensor<3xf32>, %g: tensor<4xf32>) {
  // expected-error@+1 {{'cdp.unscale_grads' op needs growth_factor > 1 and 0 < backoff_factor < 1}}
  cdp.unscale_grads %s, %g {backoff_factor = 1.5 : f32} : tensor<3xf32>, tensor<4xf32>
  return
}

// -----

func.func @unscale_interval(%s: tensor<3xf32>, %g: tensor<4xf32>) {
  // expected-error@+1 {{'cdp.unscale_grads' op growth_interval must be from 1 to 2^24}}
  cdp.unscale_grads %s, %g {growth_interval = 0 : i64} : tensor<3xf32>, tensor<4xf32>
  return
}

// -----

func.func @update_overflow(%w: tensor<4xf32>, %g: tensor<4xf32>, %s: tensor<4xf32>) {
  // expected-error@+1 {{'cdp.update' op loss-scale state must be tensor<3xf32> (scale, clean steps, overflow), got 'tensor<4xf32>'}}
  cdp.update "w" %w, %g unless_overflow(%s : tensor<4xf32>) {lr = 1.0 : f32, optimizer = "sgd"} : tensor<4xf32>
  return
}

// -----

func.func @product_narrow_operand(%p: tensor<4x8xbf16>, %w: tensor<8x2xf32>) -> tensor<4x2xf32> {
  // expected-error@+1 {{'cdp.matmul' op reads a bf16 operand, which needs narrow_operands = "bf16"}}
  %y = cdp.matmul %p, %w {narrow_operands = "f16"} : (tensor<4x8xbf16>, tensor<8x2xf32>) -> tensor<4x2xf32>
  return %y : tensor<4x2xf32>
}

// -----

func.func @product_unmarked_narrow_operand(%w: tensor<4x8xf32>, %p: tensor<8x2xf16>) -> tensor<4x2xf32> {
  // expected-error@+1 {{'cdp.gemm' op reads a f16 operand, which needs narrow_operands = "f16"}}
  %y = cdp.gemm %w, %p : (tensor<4x8xf32>, tensor<8x2xf16>) -> tensor<4x2xf32>
  return %y : tensor<4x2xf32>
}

// -----

func.func @narrow_result_unrounded(%dy: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> tensor<4x8xbf16> {
  // expected-error@+1 {{'cdp.softmax_grad' op stores its result in bf16, which needs round_result = "bf16"}}
  %dx = cdp.softmax_grad %dy, %y {round_result = "f16"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xbf16>
  return %dx : tensor<4x8xbf16>
}

// -----

func.func @narrow_result_shape(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>) -> tensor<32xbf16> {
  // expected-error@+2 {{'cdp.unary_grad' op inferred type(s) 'tensor<4x8xf32>' are incompatible with return type(s) of operation 'tensor<32xbf16>'}}
  // expected-error@+1 {{'cdp.unary_grad' op failed to infer returned types}}
  %dx = cdp.unary_grad %dy, %x {kind = "relu", round_result = "bf16"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<32xbf16>
  return %dx : tensor<32xbf16>
}

// -----

func.func @pack_narrow_shape(%x: tensor<4x8xf32>) -> tensor<16xbf16> {
  // expected-error@+1 {{'cdp.pack_narrow' op stores 'tensor<4x8xf32>' in a tensor of bf16 values of the same shape, not 'tensor<16xbf16>'}}
  %p = cdp.pack_narrow %x {format = "bf16"} : tensor<4x8xf32> -> tensor<16xbf16>
  return %p : tensor<16xbf16>
}

// -----

func.func @gelu_narrow_input_without_rounding(%x: tensor<4x8xbf16>) -> tensor<4x8xf32> {
  // expected-error@+1 {{'cdp.gelu' op reads a 2-byte input, which needs round_result of its format}}
  %y = cdp.gelu %x : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

func.func @mul_narrow_input_without_rounding(%x: tensor<4x8xbf16>, %s: tensor<f32>) -> tensor<4x8xf32> {
  // expected-error@+1 {{'cdp.mul' op reads a 2-byte input, which needs round_result of its format}}
  %y = cdp.mul %x, %s : (tensor<4x8xbf16>, tensor<f32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

func.func @mul_narrow_result_other_format(%x: tensor<4x8xf32>, %s: tensor<f32>) -> tensor<4x8xf16> {
  // expected-error@+1 {{'cdp.mul' op stores its result in f16, which needs round_result = "f16"}}
  %y = cdp.mul %x, %s {round_result = "bf16"} : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf16>
  return %y : tensor<4x8xf16>
}

// -----

func.func @unary_grad_narrow_gradient_without_rounding(%dy: tensor<4x8xbf16>, %x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error@+1 {{'cdp.unary_grad' op reads a 2-byte input, which needs round_result of its format}}
  %dx = cdp.unary_grad %dy, %x {kind = "relu"} : (tensor<4x8xbf16>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %dx : tensor<4x8xf32>
}

// -----

func.func @dropout_grad_narrow_result_without_rounding(%dy: tensor<4x8xf32>, %m: tensor<4x8xi1>) -> tensor<4x8xbf16> {
  // expected-error@+1 {{'cdp.dropout_grad' op stores its result in bf16, which needs round_result = "bf16"}}
  %dx = cdp.dropout_grad %dy, %m {ratio = 0.1 : f32} : (tensor<4x8xf32>, tensor<4x8xi1>) -> tensor<4x8xbf16>
  return %dx : tensor<4x8xbf16>
}

// -----

func.func @dropout_narrow_input_without_rounding(%x: tensor<4x8xbf16>) -> (tensor<4x8xf32>, tensor<4x8xi1>) {
  // expected-error@+1 {{'cdp.dropout' op reads a 2-byte input, which needs round_result of its format}}
  %y, %m = cdp.dropout %x {ratio = 0.1 : f32} : (tensor<4x8xbf16>) -> (tensor<4x8xf32>, tensor<4x8xi1>)
  return %y, %m : tensor<4x8xf32>, tensor<4x8xi1>
}

// -----

func.func @add_narrow_result_without_rounding(%x: tensor<4x8xbf16>, %y: tensor<4x8xf32>) -> tensor<4x8xbf16> {
  // expected-error@+1 {{'cdp.add' op stores its result in bf16, which needs round_result = "bf16"}}
  %z = cdp.add %x, %y : (tensor<4x8xbf16>, tensor<4x8xf32>) -> tensor<4x8xbf16>
  return %z : tensor<4x8xbf16>
}

// -----

func.func @narrow_product_result_unmarked(%a: tensor<4x8xf32>, %b: tensor<8x2xf32>) -> tensor<4x2xbf16> {
  // expected-error@+1 {{'cdp.matmul' op stores its result in 2 bytes, which needs narrow_operands of that format}}
  %y = cdp.matmul %a, %b {round_result = "bf16"} : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xbf16>
  return %y : tensor<4x2xbf16>
}

// -----

func.func @narrow_log_probabilities(%dl: tensor<f32>, %logp: tensor<4x8xbf16>, %labels: tensor<4xi64>) -> tensor<4x8xf32> {
  // expected-error@+1 {{'cdp.softmax_cross_entropy_loss_grad' op reads 2-byte values, which must be the scores (from_scores)}}
  %d = cdp.softmax_cross_entropy_loss_grad %dl, %logp, %labels : (tensor<f32>, tensor<4x8xbf16>, tensor<4xi64>) -> tensor<4x8xf32>
  return %d : tensor<4x8xf32>
}

// -----

func.func @attention_grad_narrow_gradient_without_format(%dy: tensor<1x2x4x2xf32>, %q: tensor<1x2x4x2xf32>, %k: tensor<1x2x2x4xf32>, %v: tensor<1x2x4x2xf32>, %stats: tensor<1x2x4x2xf32>) -> tensor<1x2x4x2xbf16> {
  // expected-error@+1 {{'cdp.attention_grad' op stores an operand's gradient in bf16, which needs narrow_operands = "bf16"}}
  %da, %db, %dv = cdp.attention_grad %dy, %q, %k, %v, %stats : (tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x2x2x4xf32>, tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>) -> (tensor<1x2x4x2xbf16>, tensor<1x2x2x4xf32>, tensor<1x2x4x2xf32>)
  return %da : tensor<1x2x4x2xbf16>
}

// -----

func.func @attention_narrow_result_other_format(%q: tensor<1x2x4x2xbf16>, %k: tensor<1x2x2x4xbf16>, %v: tensor<1x2x4x2xbf16>) -> tensor<1x2x4x2xf16> {
  // expected-error@+1 {{'cdp.attention' op stores its result in 2 bytes, which needs narrow_operands of round_result's format}}
  %o, %s = cdp.attention %q, %k, %v {narrow_operands = "bf16", round_result = "f16"} : (tensor<1x2x4x2xbf16>, tensor<1x2x2x4xbf16>, tensor<1x2x4x2xbf16>) -> (tensor<1x2x4x2xf16>, tensor<1x2x4x2xf32>)
  return %o : tensor<1x2x4x2xf16>
}

// -----

func.func @attention_narrow_result_unrounded(%q: tensor<1x2x4x2xbf16>, %k: tensor<1x2x2x4xbf16>, %v: tensor<1x2x4x2xbf16>) -> tensor<1x2x4x2xbf16> {
  // expected-error@+1 {{'cdp.attention' op stores its result in bf16, which needs round_result = "bf16"}}
  %o, %s = cdp.attention %q, %k, %v {narrow_operands = "bf16"} : (tensor<1x2x4x2xbf16>, tensor<1x2x2x4xbf16>, tensor<1x2x4x2xbf16>) -> (tensor<1x2x4x2xbf16>, tensor<1x2x4x2xf32>)
  return %o : tensor<1x2x4x2xbf16>
}

// -----

func.func @layer_norm_narrow_output_unrounded(%x: tensor<2x8xf32>, %scale: tensor<8xf32>) -> tensor<2x8xbf16> {
  // expected-error@+1 {{'cdp.layer_norm' op stores its result in bf16, which needs round_result = "bf16"}}
  %y, %m, %i = cdp.layer_norm %x, %scale : (tensor<2x8xf32>, tensor<8xf32>) -> (tensor<2x8xbf16>, tensor<2x1xf32>, tensor<2x1xf32>)
  return %y : tensor<2x8xbf16>
}

// -----

// Grouped-query attention: the keys' and v's heads must divide q's.
func.func @attention_heads_not_grouped(%q: tensor<1x4x3x2xf32>, %k: tensor<1x3x2x5xf32>, %v: tensor<1x3x5x2xf32>) -> tensor<1x4x3x2xf32> {
  // expected-error@+2 {{attention's operands [1,4,3,2], [1,3,2,5] and [1,3,5,2] must have the same batch dimensions (the keys and v may have fewer heads, a divisor of the queries')}}
  // expected-error@+1 {{'cdp.attention' op failed to infer returned types}}
  %o, %s = cdp.attention %q, %k, %v : (tensor<1x4x3x2xf32>, tensor<1x3x2x5xf32>, tensor<1x3x5x2xf32>) -> (tensor<1x4x3x2xf32>, tensor<1x4x3x2xf32>)
  return %o : tensor<1x4x3x2xf32>
}

// -----

// The keys and v grouped alike.
func.func @attention_keys_and_values_grouped_apart(%q: tensor<1x4x3x2xf32>, %k: tensor<1x2x2x5xf32>, %v: tensor<1x1x5x2xf32>) -> tensor<1x4x3x2xf32> {
  // expected-error@+2 {{must have the same batch dimensions}}
  // expected-error@+1 {{'cdp.attention' op failed to infer returned types}}
  %o, %s = cdp.attention %q, %k, %v : (tensor<1x4x3x2xf32>, tensor<1x2x2x5xf32>, tensor<1x1x5x2xf32>) -> (tensor<1x4x3x2xf32>, tensor<1x4x3x2xf32>)
  return %o : tensor<1x4x3x2xf32>
}

// -----

func.func @attention_zero_scale(%q: tensor<1x4x2xf32>, %k: tensor<1x2x4xf32>, %v: tensor<1x4x2xf32>) -> tensor<1x4x2xf32> {
  // expected-error@+1 {{'cdp.attention' op scales its scores by 0.000000e+00; the scale must be finite and nonzero}}
  %o, %s = cdp.attention %q, %k, %v {scale = 0.0 : f32} : (tensor<1x4x2xf32>, tensor<1x2x4xf32>, tensor<1x4x2xf32>) -> (tensor<1x4x2xf32>, tensor<1x4x2xf32>)
  return %o : tensor<1x4x2xf32>
}

// -----

func.func @attention_grad_infinite_scale(%dy: tensor<1x4x2xf32>, %q: tensor<1x4x2xf32>, %k: tensor<1x2x4xf32>, %v: tensor<1x4x2xf32>, %stats: tensor<1x4x2xf32>) -> tensor<1x4x2xf32> {
  // expected-error@+1 {{'cdp.attention_grad' op scales its scores by INF; the scale must be finite and nonzero}}
  %da, %db, %dv = cdp.attention_grad %dy, %q, %k, %v, %stats {scale = 0x7F800000 : f32} : (tensor<1x4x2xf32>, tensor<1x4x2xf32>, tensor<1x2x4xf32>, tensor<1x4x2xf32>, tensor<1x4x2xf32>) -> (tensor<1x4x2xf32>, tensor<1x2x4xf32>, tensor<1x4x2xf32>)
  return %da : tensor<1x4x2xf32>
}
