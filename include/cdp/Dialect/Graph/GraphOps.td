//===- GraphOps.td - cdp graph ops -------------------------*- tablegen -*-===//
//
// Forward ops with ONNX semantics. Every op infers its result types
// (InferTypeOpAdaptor), so the verifier rejects any printed type that
// disagrees with the shape rules, and the importer builds ops without
// computing shapes itself.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_DIALECT_GRAPH_GRAPHOPS_TD
#define CDP_DIALECT_GRAPH_GRAPHOPS_TD

include "cdp/Dialect/Graph/GraphDialect.td"
include "cdp/Dialect/Graph/GradientInterface.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

def CDP_F32Tensor : RankedTensorOf<[F32]>;
def CDP_I64Tensor : RankedTensorOf<[I64]>;
def CDP_BoolTensor : RankedTensorOf<[I1]>;
def CDP_NumTensor : RankedTensorOf<[F32, I64]>;
def CDP_AnyTensor : RankedTensorOf<[F32, I64, I1]>;
// What a reshape may view, a transpose or split move: any tensor, a 2-byte
// one (cdp-narrow-results) too.
def CDP_ViewedTensor : RankedTensorOf<[F32, I64, I1, BF16, F16]>;
// Values stored in 2 bytes under --precision bf16 or fp16 (cdp.pack_narrow).
def CDP_NarrowTensor : RankedTensorOf<[BF16, F16]>;
// A product's operand: float32, or 2-byte values it multiplies as they are.
def CDP_ProductOperand : RankedTensorOf<[F32, BF16, F16]>;
def CDP_NumOrNarrowTensor : RankedTensorOf<[F32, I64, BF16, F16]>;

//===----------------------------------------------------------------------===//
// Base classes
//===----------------------------------------------------------------------===//

// Every backend's kernel computes result element i from element i of each
// operand of the result's type alone, so the result may overwrite such an
// operand whose last use this op is (cdp-reuse-layer-memory decides).
def CDP_ElementwiseInPlace : NativeOpTrait<"ElementwiseInPlace"> {
  let cppNamespace = "::cdp";
}

// The result is the operand's bytes unchanged (same element type and count,
// another shape), so it may lie over the operand's storage: cdp-plan-memory
// places both in one block, and every backend's kernel copies nothing when
// input and output are at one address.
def CDP_ViewOfInput : NativeOpTrait<"ViewOfInput"> {
  let cppNamespace = "::cdp";
}

// The op carries its gradient rule (GraphGradients.cpp, or generated below).
defvar CDP_Differentiable = DeclareOpInterfaceMethods<CDP_DifferentiableOpInterface>;

class CDP_BaseOp<string mnemonic, list<Trait> traits = []>
    : Op<CDP_Dialect, mnemonic, traits> {
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

// Most ops are pure and infer their result types.
class CDP_Op<string mnemonic, list<Trait> traits = []>
    : CDP_BaseOp<mnemonic, !listconcat(traits, [Pure, InferTypeOpAdaptor])>;

class CDP_UnaryOp<string mnemonic, string onnxName, Type type = CDP_F32Tensor,
                  list<Trait> traits = [CDP_ElementwiseInPlace]>
    : CDP_BaseOp<mnemonic, !listconcat(traits, [Pure, SameOperandsAndResultType,
                                                InferTypeOpInterface])> {
  let summary = "element-wise " # onnxName;
  let description = "ONNX `" # onnxName # "`, applied element by element.";
  let arguments = (ins type:$input);
  let results = (outs type:$output);
  let assemblyFormat = "$input attr-dict `:` type($output)";
}

class CDP_BroadcastOp<string mnemonic, string onnxName, Type type = CDP_NumTensor>
    : CDP_Op<mnemonic, [CDP_ElementwiseInPlace, CDP_Differentiable]> {
  let summary = "element-wise " # onnxName # " with numpy broadcasting";
  let description = [{
    ONNX `}] # onnxName # [{`: both operands have the same element type;
    their shapes broadcast as in numpy (aligned at the trailing dimension,
    size-1 dimensions stretch). `round_result` ("bf16" or "f16", set by
    cdp-fuse-roundings) rounds each float result to that format as a
    `cdp.round_to` after the op would, in the same pass.
  }];
  let arguments = (ins type:$lhs, type:$rhs,
                       OptionalAttr<StrAttr>:$round_result);
  let results = (outs type:$output);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Values: parameters and constants
//===----------------------------------------------------------------------===//

def CDP_ParamOp : CDP_BaseOp<"param", [Pure]> {
  let summary = "a named model parameter or buffer";
  let description = [{
    An ONNX initializer that stays a named value: a trainable parameter or,
    with `buffer`, a state tensor such as BatchNorm running statistics. Its
    data is an MLIR resource (`dense_resource<...>`), so it does not bloat the
    printed IR; `value` may be absent when only the shape is known. Every use
    of one initializer reads the same op, so tied weights stay one parameter.
    `frozen` marks a value that is not trained: an initializer torch does not
    train (a mask, a frequency table, a frozen layer), which keeps its name.

    ```mlir
    %w = cdp.param "fc1.weight" {value = dense_resource<fc1.weight> : tensor<64x784xf32>} : tensor<64x784xf32>
    ```
  }];
  let arguments = (ins StrAttr:$name, OptionalAttr<ElementsAttr>:$value,
                       UnitAttr:$buffer, UnitAttr:$frozen);
  let results = (outs CDP_AnyTensor:$output);
  let assemblyFormat = "$name (`buffer` $buffer^)? (`frozen` $frozen^)? attr-dict `:` type($output)";
  let hasVerifier = 1;
}

def CDP_ConstantOp : CDP_Op<"constant", [ConstantLike]> {
  let summary = "a constant tensor (ONNX Constant)";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs CDP_AnyTensor:$output);
  let assemblyFormat = "$value attr-dict";
  let hasFolder = 1;
}

def CDP_ConstantOfShapeOp : CDP_Op<"constant_of_shape"> {
  let summary = "a tensor filled with one value (ONNX ConstantOfShape)";
  let description = "The shape, an input in ONNX, is static here.";
  let arguments = (ins DenseI64ArrayAttr:$shape, ElementsAttr:$value);
  let results = (outs CDP_AnyTensor:$output);
  let assemblyFormat = "attr-dict `:` type($output)";
  let hasFolder = 1;
}

def CDP_ShapeOp : CDP_Op<"shape"> {
  let summary = "the shape of a tensor as a 1-D i64 tensor (ONNX Shape)";
  let description = "Always folds to a constant, since every shape is static.";
  let arguments = (ins CDP_AnyTensor:$input, DefaultValuedAttr<I64Attr, "0">:$start,
                       OptionalAttr<I64Attr>:$end);
  let results = (outs CDP_I64Tensor:$output);
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Linear algebra and convolution
//===----------------------------------------------------------------------===//

def CDP_GemmOp : CDP_Op<"gemm", [CDP_Differentiable]> {
  let summary = "general matrix multiply (ONNX Gemm)";
  let description = [{
    `Y = alpha * op(A) * op(B) + beta * C`, with `op` transposing when
    `trans_a`/`trans_b` is set; `C` broadcasts to `(M, N)`.
    `narrow_operands` ("bf16" or "f16", set by cdp-mark-narrow-products)
    says that every value of `A` and `B` is exact in that format, so a
    backend may multiply them in it with float32 sums. Under it `A` and
    `B` may also be tensors of that format (cdp-read-narrow-operands: the
    values cdp.pack_narrow stored), read as they are. `round_result`
    ("bf16" or "f16", set by cdp-fuse-roundings) rounds each value of the
    result to that format as a `cdp.round_to` after the op would; with it
    and `narrow_operands` of that format the result may be a tensor of the
    format (cdp-narrow-results: where every reader takes 2-byte values).
    `activation` ("relu", set by cdp-fuse-relu on float32 products
    without `round_result`) applies `relu` to each value as it is written,
    as a `cdp.relu` after the op would.
  }];
  let arguments = (ins CDP_ProductOperand:$a, CDP_ProductOperand:$b, Optional<CDP_F32Tensor>:$c,
                       DefaultValuedAttr<F32Attr, "1.0f">:$alpha,
                       DefaultValuedAttr<F32Attr, "1.0f">:$beta,
                       DefaultValuedAttr<BoolAttr, "false">:$trans_a,
                       DefaultValuedAttr<BoolAttr, "false">:$trans_b,
                       OptionalAttr<StrAttr>:$narrow_operands,
                       OptionalAttr<StrAttr>:$round_result,
                       OptionalAttr<StrAttr>:$activation);
  let results = (outs CDP_ProductOperand:$output);
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
  let hasVerifier = 1;
}

def CDP_MatMulOp : CDP_Op<"matmul", [CDP_Differentiable]> {
  let summary = "matrix product with numpy semantics (ONNX MatMul)";
  let description = [{
    1-D operands are promoted to matrices and the promoted dimension removed
    from the result; leading (batch) dimensions broadcast. `trans_a` /
    `trans_b` read an operand with its last two dimensions swapped (numpy's
    `matmul(swapaxes(a, -1, -2), b)`); they need that operand to have rank
    2 or more. The importer never sets them: `cdp-fold-transpose` and the
    MatMul gradient do, so that no Transpose op runs before the product.
    `narrow_operands` as for `cdp.gemm`, with 2-byte operands likewise, and
    `round_result`, with a 2-byte result likewise.
  }];
  let arguments = (ins CDP_ProductOperand:$a, CDP_ProductOperand:$b,
                       DefaultValuedAttr<BoolAttr, "false">:$trans_a,
                       DefaultValuedAttr<BoolAttr, "false">:$trans_b,
                       OptionalAttr<StrAttr>:$narrow_operands,
                       OptionalAttr<StrAttr>:$round_result);
  let results = (outs CDP_ProductOperand:$output);
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
  let hasVerifier = 1;
}

def CDP_ConvOp : CDP_Op<"conv", [CDP_Differentiable]> {
  let summary = "2-D convolution (ONNX Conv)";
  let description = [{
    Input `(N, C, H, W)`, weight `(M, C/group, kH, kW)`, optional bias `(M)`.
    `pads` is `[top, left, bottom, right]`; the importer resolves ONNX
    `auto_pad` into explicit pads. `narrow_operands` ("bf16" or "f16", set
    by cdp-mark-narrow-products) says that every value of the input and
    the weight is exact in that format, so a backend may convolve them in
    it with float32 sums (the bias stays float32); the same mark on
    `cdp.conv_grad_input` and `cdp.conv_grad_weight` names their two
    operands.
  }];
  let arguments = (ins CDP_F32Tensor:$input, CDP_F32Tensor:$weight,
                       Optional<CDP_F32Tensor>:$bias,
                       DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$strides,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<I64Attr, "1">:$group,
                       OptionalAttr<StrAttr>:$narrow_operands);
  let results = (outs CDP_F32Tensor:$output);
}

//===----------------------------------------------------------------------===//
// Pooling and normalization
//===----------------------------------------------------------------------===//

def CDP_MaxPoolOp : CDP_Op<"max_pool", [CDP_Differentiable]> {
  let summary = "max pooling over 1 to 3 spatial dimensions (ONNX MaxPool)";
  let description = [{
    Padding never wins a maximum; `ceil_mode` rounds the output size up.
    `pads` lists the begin pads of every spatial dimension, then the end
    pads.
  }];
  let arguments = (ins CDP_F32Tensor:$input, DenseI64ArrayAttr:$kernel_shape,
                       DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$strides,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<BoolAttr, "false">:$ceil_mode);
  let results = (outs CDP_F32Tensor:$output);
}

def CDP_MaxPoolIndicesOp : CDP_Op<"max_pool_indices"> {
  let summary = "where max pooling found each maximum (ONNX MaxPool's Indices)";
  let description = [{
    For every output of `max_pool` with the same attributes, the position
    of the first maximum of its window in the input, flattened over the
    whole input tensor without padding: row-major, or with the spatial
    dimensions column-major when `storage_order` is 1. Not differentiable.
  }];
  let arguments = (ins CDP_F32Tensor:$input, DenseI64ArrayAttr:$kernel_shape,
                       DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$strides,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<BoolAttr, "false">:$ceil_mode,
                       DefaultValuedAttr<I64Attr, "0">:$storage_order);
  let results = (outs CDP_I64Tensor:$output);
}

def CDP_AveragePoolOp : CDP_Op<"average_pool", [CDP_Differentiable]> {
  let summary = "average pooling over 1 to 3 spatial dimensions (ONNX AveragePool)";
  let description = [{
    `count_include_pad` divides by the whole window (padding included)
    instead of the elements inside the input.
  }];
  let arguments = (ins CDP_F32Tensor:$input, DenseI64ArrayAttr:$kernel_shape,
                       DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$strides,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<BoolAttr, "false">:$ceil_mode,
                       DefaultValuedAttr<BoolAttr, "false">:$count_include_pad);
  let results = (outs CDP_F32Tensor:$output);
}

def CDP_GlobalAveragePoolOp : CDP_Op<"global_average_pool", [CDP_Differentiable]> {
  let summary = "mean over the spatial dimensions (ONNX GlobalAveragePool)";
  let arguments = (ins CDP_F32Tensor:$input);
  let results = (outs CDP_F32Tensor:$output);
}

def CDP_BatchNormOp : CDP_Op<"batch_norm", [CDP_Differentiable]> {
  let summary = "batch normalization (ONNX BatchNormalization)";
  let description = [{
    Inference mode normalizes with `mean` and `var`; training mode with the
    batch statistics, and returns updated running statistics
    `running = momentum * running + (1 - momentum) * batch`; the batch
    variance entering `running_var` is the biased one (ONNX) unless
    `unbiased_running_var` (PyTorch). In inference mode the running results
    equal `mean` and `var`. `activation` ("relu", set by cdp-fuse-relu on a
    training-mode batch norm, kept by the evaluation's inference-mode copy)
    applies `relu` to each output value as it is written, as a `cdp.relu`
    after the op would. `round_result` ("bf16" or "f16", set by
    cdp-fuse-roundings) rounds each output value as it is written (after
    the `relu`, which commutes with the rounding), as autocast's batch norm
    on a bf16 input returns bf16.
  }];
  let arguments = (ins CDP_F32Tensor:$input, CDP_F32Tensor:$scale, CDP_F32Tensor:$bias,
                       CDP_F32Tensor:$mean, CDP_F32Tensor:$var,
                       DefaultValuedAttr<F32Attr, "1e-5f">:$epsilon,
                       DefaultValuedAttr<F32Attr, "0.9f">:$momentum,
                       DefaultValuedAttr<BoolAttr, "false">:$training_mode,
                       DefaultValuedAttr<BoolAttr, "false">:$unbiased_running_var,
                       OptionalAttr<StrAttr>:$activation,
                       OptionalAttr<StrAttr>:$round_result);
  let results = (outs CDP_F32Tensor:$output, CDP_F32Tensor:$running_mean,
                      CDP_F32Tensor:$running_var);
  let hasVerifier = 1;
}

def CDP_LayerNormOp : CDP_Op<"layer_norm", [CDP_Differentiable]> {
  let summary = "layer normalization (ONNX LayerNormalization)";
  let description = [{
    Normalizes over the dimensions from `axis` on. Also returns the mean and
    the inverse standard deviation, shaped like the input with the normalized
    dimensions set to 1. `round_result` ("bf16" or "f16") rounds the output
    to that format, which may then be stored in it: cdp-narrow-results sets
    it where every reader of the output rounds it so anyway (the products
    that multiply it in 2 bytes and the packs the backward keeps), as
    autocast's float32 layer norm followed by the linear layer's cast.
    With `rms` the mean is not subtracted: RMSNorm (Llama's, T5's),
    `y = x / sqrt(mean(x^2) + epsilon) * scale (+ bias)`, its `mean` result
    all zeros (cdp-fuse-rms-norm).
  }];
  let arguments = (ins CDP_F32Tensor:$input, CDP_F32Tensor:$scale,
                       Optional<CDP_F32Tensor>:$bias,
                       DefaultValuedAttr<I64Attr, "-1">:$axis,
                       DefaultValuedAttr<F32Attr, "1e-5f">:$epsilon,
                       OptionalAttr<StrAttr>:$round_result,
                       DefaultValuedAttr<BoolAttr, "false">:$rms);
  let results = (outs CDP_ProductOperand:$output, CDP_F32Tensor:$mean,
                      CDP_F32Tensor:$inv_std_dev);
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
  let hasVerifier = 1;
}

def CDP_SoftmaxOp : CDP_Op<"softmax", [CDP_Differentiable]> {
  let summary = "softmax along one axis (ONNX Softmax, opset 13 semantics)";
  let description = [{
    With `zero_nan_rows`, a row whose softmax holds a NaN (every input -inf:
    a query that may attend to no key; or a NaN or +inf input) is all zeros
    instead: the exporters' `where(isnan(softmax(x)), 0, softmax(x))` after
    attention, folded by cdp-fold-softmax-guard. Such a row's gradient is
    zero (`softmax_grad` reads the zeros), as for torch's
    scaled_dot_product_attention, where the unfolded guard's gradient is NaN.
    With `bias` (which broadcasts to the input, numpy's rules) the softmax
    is that of `input + bias`, each sum a float32 add as `cdp.add`'s
    (attention's mask, folded by cdp-fuse-softmax-bias).
  }];
  let arguments = (ins CDP_F32Tensor:$input, Optional<CDP_F32Tensor>:$bias,
                       DefaultValuedAttr<I64Attr, "-1">:$axis,
                       DefaultValuedAttr<BoolAttr, "false">:$zero_nan_rows);
  let results = (outs CDP_F32Tensor:$output);
}

def CDP_AttentionOp : CDP_Op<"attention", [CDP_Differentiable]> {
  let summary = "softmax(scale A B + bias) V, the scores never stored";
  let description = [{
    `matmul(softmax(scale * matmul(a, b) + bias), v)`, the softmax along
    the last axis, in one op: cdp-fuse-attention folds attention's two
    products and its softmax into it, so that no (..., M, N) scores or
    probabilities are kept for the backward; cdp-fold-attention-scale
    folds the exporters' scalar scalings of `a` and `b` into `scale`
    (default 1), which multiplies the float32 sums of the first product
    before any rounding. `a` is `(..., M, K)`, `b` `(..., K, N)`,
    `v` `(..., N, D)`, all three with the same batch dimensions; `bias`
    broadcasts to the scores `(..., M, N)` (a mask, T5's position bias);
    the result is `(..., M, D)`. `stats` `(..., M, 2)` holds each row's
    maximum and the log of its sum of exponentials: `attention_grad`
    recomputes the probabilities from them, the same bits.
    `zero_nan_rows` as for `cdp.softmax`. `narrow_operands` ("bf16" or
    "f16") says that every value of `a`, `b` and `v` is exact in that
    format and rounds the scores and the probabilities to it, as
    autocast's first product and its cast before the second do (float32
    sums throughout); under it `a`, `b` and `v` may also be tensors of that
    format (cdp-read-narrow-operands), read as they are. `round_result`
    rounds the result as for `cdp.matmul`; where it names the
    narrow_operands format, the result may be a tensor of that format
    (cdp-narrow-results), written so by the second product.
    `layout` "bshd" (cdp-fold-attention-transposes; "bhsd", the default,
    is the order above) keeps the heads after the sequence, as the
    projections write them: `a` (B, M, H, K), `b` the keys (B, N, H, K),
    `v` (B, N, H, D) and the result (B, M, H, D), each head's matrix read
    and written in place; the bias and `stats` keep the (B, H, M, ...)
    order. Grouped-query attention (cdp-fold-repeated-heads): `b` and `v`
    may have fewer heads than `a` (their last batch dimension, a divisor
    `H_kv` of `a`'s `H`); query head `h` reads key/value head
    `h / (H / H_kv)`.
  }];
  let arguments = (ins CDP_ProductOperand:$a, CDP_ProductOperand:$b,
                       CDP_ProductOperand:$v, Optional<CDP_F32Tensor>:$bias,
                       DefaultValuedAttr<BoolAttr, "false">:$zero_nan_rows,
                       OptionalAttr<StrAttr>:$narrow_operands,
                       OptionalAttr<StrAttr>:$round_result,
                       DefaultValuedAttr<F32Attr, "1.0f">:$scale,
                       OptionalAttr<StrAttr>:$layout);
  let results = (outs CDP_ProductOperand:$output, CDP_F32Tensor:$stats);
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
  let hasVerifier = 1;
}

def CDP_LogSoftmaxOp : CDP_Op<"log_softmax", [CDP_Differentiable]> {
  let summary = "log of softmax along one axis (ONNX LogSoftmax, opset 13 semantics)";
  let arguments = (ins CDP_F32Tensor:$input, DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs CDP_F32Tensor:$output);
}

// Not Pure: two dropouts of one tensor draw different masks.
def CDP_DropoutOp : CDP_BaseOp<"dropout", [InferTypeOpAdaptor, CDP_Differentiable]> {
  let summary = "random zeroing with rescaling (ONNX Dropout)";
  let description = [{
    In training mode each element is kept with probability `1 - ratio` and
    scaled by `1 / (1 - ratio)`; `mask` records the kept elements. Outside
    training mode the output is the input and the mask all true.
    `round_result` as for `cdp.add` (the output only). Under `round_result`
    the input may be a tensor of that format, widened as read, and so may
    the output (cdp-narrow-results: GPT-2's residual branch, from the
    projection's product to the residual add).
  }];
  let arguments = (ins CDP_ProductOperand:$input,
                       DefaultValuedAttr<F32Attr, "0.5f">:$ratio,
                       DefaultValuedAttr<BoolAttr, "false">:$training_mode,
                       OptionalAttr<I64Attr>:$seed,
                       OptionalAttr<StrAttr>:$round_result);
  let results = (outs CDP_ProductOperand:$output, CDP_BoolTensor:$mask);
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Element-wise
//===----------------------------------------------------------------------===//

// An element-wise function whose gradient is `unary_grad` of kind
// `gradKind`, which reads the op's input, or its result where `savesResult`
// (the cheaper one to differentiate from: sigmoid, tanh, sqrt).
class CDP_ActivationOp<string mnemonic, string onnxName, string gradKind,
                       bit savesResult = 0>
    : CDP_UnaryOp<mnemonic, onnxName, CDP_F32Tensor,
                  [CDP_ElementwiseInPlace, CDP_Differentiable]> {
  let extraClassDefinition = [{
    ::mlir::LogicalResult $cppClass::buildGradient(::cdp::GradientBuilder &g) {
      return g.unary(g.gradOf(getOutput()), }] #
        !if(savesResult, "getOutput()", "getInput()") # [{, "}] # gradKind # [{");
    }
  }];
}

def CDP_ReluOp : CDP_ActivationOp<"relu", "Relu", "relu", 1>;
def CDP_ErfOp : CDP_ActivationOp<"erf", "Erf", "erf">;
def CDP_TanhOp : CDP_ActivationOp<"tanh", "Tanh", "tanh", 1>;
def CDP_SigmoidOp : CDP_ActivationOp<"sigmoid", "Sigmoid", "sigmoid", 1>;
def CDP_SqrtOp : CDP_ActivationOp<"sqrt", "Sqrt", "sqrt", 1>;
def CDP_IdentityOp : CDP_UnaryOp<"identity", "Identity", CDP_AnyTensor, [CDP_ViewOfInput, CDP_Differentiable]>;

def CDP_ClipOp : CDP_BaseOp<"clip", [CDP_ElementwiseInPlace, CDP_Differentiable, Pure, SameOperandsAndResultType, InferTypeOpInterface]> {
  let summary = "element-wise clamp to [min, max] (ONNX Clip)";
  let description = [{
    `min(max(x, min), max)`; torch's ReLU6 and hardtanh export as this. The
    gradient passes where `min < x < max` (PyTorch's hardtanh rule).
  }];
  let arguments = (ins CDP_F32Tensor:$input, F32Attr:$min, F32Attr:$max);
  let results = (outs CDP_F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($output)";
}

def CDP_HardSigmoidOp : CDP_BaseOp<"hard_sigmoid", [CDP_ElementwiseInPlace, CDP_Differentiable, Pure, SameOperandsAndResultType, InferTypeOpInterface]> {
  let summary = "element-wise max(0, min(1, alpha x + beta)) (ONNX HardSigmoid)";
  let arguments = (ins CDP_F32Tensor:$input,
                       DefaultValuedAttr<F32Attr, "0.2f">:$alpha,
                       DefaultValuedAttr<F32Attr, "0.5f">:$beta);
  let results = (outs CDP_F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($output)";
}

def CDP_HardSwishOp : CDP_ActivationOp<"hard_swish", "HardSwish", "hard_swish"> {
  let description = "ONNX `HardSwish`: `x * max(0, min(1, x / 6 + 1 / 2))`.";
}

def CDP_SiluOp : CDP_ActivationOp<"silu", "SiLU", "silu"> {
  let summary = "element-wise x * sigmoid(x) (torch's SiLU)";
  let description = [{
    `x * sigmoid(x)`, which exporters write as ONNX `Sigmoid` then `Mul`
    and cdp-fuse-silu makes one op (Llama's MLP): its gradient reads `x`
    (PyTorch's `silu_backward`), so neither the sigmoid's values nor the
    product's operands are kept for the backward.
  }];
}

def CDP_RotaryOp : CDP_Op<"rotary", [CDP_Differentiable]> {
  let summary = "rotary position embedding, rotate-half form (Llama's)";
  let description = [{
    `x * cos + rotate_half(x) * sin` along the last axis of `x` (of even
    size D), `rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2])`: the
    rotary embedding of Llama, Mistral and GPT-NeoX as transformers writes
    it and the exporters emit it (Slice, Slice, Neg, Concat, Mul, Mul, Add),
    made one op by cdp-fuse-rotary. `cos` and `sin` broadcast to `x`
    (numpy's rules). Each product is rounded to float32, then the sum, as
    the exported ops compute it. With `adjoint` the op is the transposed
    map, the gradient of `x` from the result's: `dy * cos +
    rotate_half^T(dy * sin)`, `rotate_half^T(z) = concat(z[..., D/2:],
    -z[..., :D/2])`. `cos` and `sin` take no gradient: cdp-fuse-rotary
    fuses only tables computed without a trained parameter.
    `narrow_operands` ("bf16" or "f16"): `x` is exact in that format (a
    2-byte tensor of autocast, whose products with the float32 tables are
    float32); the adjoint then rounds each of its two products to the
    format before the sum, as autograd keeps the gradients of `x` and of
    its rotated half in `x`'s format. The forward is unchanged by it.
  }];
  let arguments = (ins CDP_F32Tensor:$input, CDP_F32Tensor:$cos,
                       CDP_F32Tensor:$sin,
                       DefaultValuedAttr<BoolAttr, "false">:$adjoint,
                       OptionalAttr<StrAttr>:$narrow_operands);
  let results = (outs CDP_F32Tensor:$output);
  let hasVerifier = 1;
}

def CDP_GeluOp : CDP_BaseOp<"gelu", [CDP_ElementwiseInPlace, CDP_Differentiable, Pure, InferTypeOpAdaptor]> {
  let summary = "Gaussian error linear unit (ONNX Gelu)";
  let description = [{
    `approximate = "none"`: `x * 0.5 * (1 + erf(x / sqrt(2)))`;
    `"tanh"`: `x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3)))`.
    `round_result` as for `cdp.add`. Under `round_result` the input may be
    a tensor of that format (cdp-read-narrow-operands: the 2-byte copy the
    backward keeps of a product's rounded result), widened as read, and the
    result may be a tensor of that format (cdp-narrow-results: where every
    reader takes 2-byte values, GPT-2's next product). Printed `: type`
    when input and result share it, else `: (input type) -> result type`.
  }];
  let arguments = (ins CDP_ProductOperand:$input,
                       DefaultValuedStrAttr<StrAttr, "none">:$approximate,
                       OptionalAttr<StrAttr>:$round_result);
  let results = (outs CDP_ProductOperand:$output);
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
  let assemblyFormat = ?;
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
}

def CDP_RoundToOp : CDP_BaseOp<"round_to", [CDP_ElementwiseInPlace, CDP_Differentiable, Pure, SameOperandsAndResultType, InferTypeOpInterface]> {
  let summary = "rounds float32 values to bf16 or fp16, kept in float32";
  let description = [{
    Each value rounded to the nearest value of `format` ("bf16" or "f16"),
    ties to even, NaN kept and, for f16, magnitudes past its largest finite
    value becoming infinities, as PyTorch's `.to(torch.bfloat16)` and
    `.to(torch.float16)` round. The result stays float32 storage: the
    mixed-precision pass (cdp-autocast) puts it where PyTorch's autocast
    computes in the narrow type, so float32 arithmetic between roundings
    gives autocast's values. Its gradient passes unchanged, as that of
    `.to(torch.bfloat16)`: autodiff rounds every gradient contribution that
    reaches a narrow tensor (this op's result, or a result cdp-autocast
    marks `cdp.narrow`), as autograd keeps a bf16 tensor's gradient bf16.
  }];
  let arguments = (ins CDP_F32Tensor:$input, StrAttr:$format);
  let results = (outs CDP_F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($output)";
  let hasVerifier = 1;
}

def CDP_PackNarrowOp : CDP_BaseOp<"pack_narrow", [Pure]> {
  let summary = "stores float32 values in bf16 or fp16, 2 bytes each";
  let description = [{
    The values rounded to `format` ("bf16" or "f16") as `cdp.round_to`
    rounds them, as a tensor of that element type and the input's shape,
    so that a tensor the backward reads after its forward is kept in 2
    bytes a value and a product marked `narrow_operands` reads it as it
    is. cdp-pack-narrow-stash packs values already exact in `format` (a
    `cdp.round_to` result, or one an op marked `cdp.narrow` computes from
    them), so `cdp.unpack_narrow` gives them back bit for bit;
    cdp-read-narrow-operands folds a `cdp.round_to` only the pack reads
    into it.
  }];
  let arguments = (ins CDP_F32Tensor:$input, StrAttr:$format);
  let results = (outs CDP_NarrowTensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
}

def CDP_UnpackNarrowOp : CDP_BaseOp<"unpack_narrow", [Pure]> {
  let summary = "the float32 values a cdp.pack_narrow stored";
  let description = [{
    Each bf16 or fp16 value of the input (`format` names its type) widened
    back to float32 (exactly), in a tensor of the same shape.
  }];
  let arguments = (ins CDP_NarrowTensor:$input, StrAttr:$format);
  let results = (outs CDP_F32Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
}

def CDP_AddOp : CDP_BroadcastOp<"add", "Add", CDP_NumOrNarrowTensor> {
  let description = [{
    ONNX `Add`: both operands have the same element type; their shapes
    broadcast as in numpy (aligned at the trailing dimension, size-1
    dimensions stretch). `round_result` ("bf16" or "f16", set by
    cdp-fuse-roundings) rounds each float result to that format as a
    `cdp.round_to` after the op would, in the same pass. A float operand
    may be a bf16 or f16 tensor, widened as read (cdp-narrow-results: the
    residual branch's value added to the float32 residual stream, as
    autocast adds a bf16 and a float32 tensor), and under `round_result`
    the result may be one.
  }];
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
  let hasVerifier = 1;
}
def CDP_SubOp : CDP_BroadcastOp<"sub", "Sub">;
def CDP_MulOp : CDP_BroadcastOp<"mul", "Mul", CDP_NumOrNarrowTensor> {
  let description = [{
    ONNX `Mul`: both operands have the same element type; their shapes
    broadcast as in numpy (aligned at the trailing dimension, size-1
    dimensions stretch). `round_result` ("bf16" or "f16", set by
    cdp-fuse-roundings) rounds each float result to that format as a
    `cdp.round_to` after the op would, in the same pass. Under
    `round_result` a float operand may be a tensor of that format
    (cdp-narrow-results: a product's rounded result moved by reshapes,
    splits and transposes, GPT-2's attention scaling of q and k), widened
    as read, and the result may be one (where every reader takes 2-byte
    values).
  }];
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
  let hasVerifier = 1;
}
def CDP_DivOp : CDP_BroadcastOp<"div", "Div">;
def CDP_PowOp : CDP_BroadcastOp<"pow", "Pow", CDP_F32Tensor>;
def CDP_MinOp : CDP_BroadcastOp<"min", "Min">;
def CDP_MaxOp : CDP_BroadcastOp<"max", "Max">;

def CDP_ReciprocalOp : CDP_ActivationOp<"reciprocal", "Reciprocal", "reciprocal", 1>;
def CDP_SinOp : CDP_ActivationOp<"sin", "Sin", "sin">;
def CDP_CosOp : CDP_ActivationOp<"cos", "Cos", "cos">;
def CDP_AbsOp : CDP_ActivationOp<"abs", "Abs", "abs">;
def CDP_ExpOp : CDP_ActivationOp<"exp", "Exp", "exp", 1>;
def CDP_LogOp : CDP_ActivationOp<"log", "Log", "log">;

//===----------------------------------------------------------------------===//
// Selection, comparison and logic
//===----------------------------------------------------------------------===//

def CDP_WhereOp : CDP_Op<"where", [CDP_Differentiable]> {
  let summary = "element-wise select with numpy broadcasting (ONNX Where)";
  let description = [{
    `condition ? x : y` per element, the three shapes broadcast as in numpy;
    `x` and `y` have one element type. The gradient of each branch is the
    result's where that branch was chosen, summed back to its shape.
  }];
  let arguments = (ins CDP_BoolTensor:$condition, CDP_NumTensor:$x,
                       CDP_NumTensor:$y);
  let results = (outs CDP_NumTensor:$output);
}

class CDP_CompareOp<string mnemonic, string onnxName> : CDP_Op<mnemonic> {
  let summary = "element-wise " # onnxName # " with numpy broadcasting";
  let description = [{
    ONNX `}] # onnxName # [{`: both operands have one element type; the
    result is bool and carries no gradient.
  }];
  let arguments = (ins CDP_NumTensor:$lhs, CDP_NumTensor:$rhs);
  let results = (outs CDP_BoolTensor:$output);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

def CDP_EqualOp : CDP_CompareOp<"equal", "Equal">;
def CDP_LessOp : CDP_CompareOp<"less", "Less">;
def CDP_LessOrEqualOp : CDP_CompareOp<"less_or_equal", "LessOrEqual">;
def CDP_GreaterOp : CDP_CompareOp<"greater", "Greater">;
def CDP_GreaterOrEqualOp : CDP_CompareOp<"greater_or_equal", "GreaterOrEqual">;

class CDP_LogicOp<string mnemonic, string onnxName> : CDP_Op<mnemonic, [CDP_ElementwiseInPlace]> {
  let summary = "element-wise " # onnxName # " of bool tensors with numpy broadcasting";
  let arguments = (ins CDP_BoolTensor:$lhs, CDP_BoolTensor:$rhs);
  let results = (outs CDP_BoolTensor:$output);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

def CDP_AndOp : CDP_LogicOp<"and", "And">;
def CDP_OrOp : CDP_LogicOp<"or", "Or">;
def CDP_XorOp : CDP_LogicOp<"xor", "Xor">;
def CDP_NotOp : CDP_UnaryOp<"not", "Not", CDP_BoolTensor>;

def CDP_IsNaNOp : CDP_Op<"is_nan"> {
  let summary = "element-wise test for NaN (ONNX IsNaN)";
  let arguments = (ins CDP_F32Tensor:$input);
  let results = (outs CDP_BoolTensor:$output);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
}

def CDP_IsInfOp : CDP_Op<"is_inf"> {
  let summary = "element-wise test for infinities (ONNX IsInf)";
  let arguments = (ins CDP_F32Tensor:$input,
                       DefaultValuedAttr<BoolAttr, "true">:$detect_positive,
                       DefaultValuedAttr<BoolAttr, "true">:$detect_negative);
  let results = (outs CDP_BoolTensor:$output);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
}

def CDP_CastOp : CDP_Op<"cast", [CDP_Differentiable]> {
  let summary = "element type conversion (ONNX Cast)";
  let description = "Float to integer truncates toward zero; to i1, non-zero is true.";
  let arguments = (ins CDP_AnyTensor:$input, TypeAttr:$to);
  let results = (outs CDP_AnyTensor:$output);
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

def CDP_ReshapeOp : CDP_Op<"reshape", [CDP_ViewOfInput, CDP_Differentiable]> {
  let summary = "reinterpret the shape (ONNX Reshape)";
  let description = [{
    `shape` is the final static shape: the importer resolves `0` and `-1`
    from the ONNX shape input.
  }];
  let arguments = (ins CDP_ViewedTensor:$input, DenseI64ArrayAttr:$shape);
  let results = (outs CDP_ViewedTensor:$output);
}

def CDP_FlattenOp : CDP_Op<"flatten", [CDP_ViewOfInput, CDP_Differentiable]> {
  let summary = "collapse to 2-D around an axis (ONNX Flatten)";
  let arguments = (ins CDP_AnyTensor:$input, DefaultValuedAttr<I64Attr, "1">:$axis);
  let results = (outs CDP_AnyTensor:$output);
}

def CDP_TransposeOp : CDP_Op<"transpose", [CDP_Differentiable]> {
  let summary = "permute dimensions (ONNX Transpose)";
  let description = [{
    Moves values of any width: cdp-narrow-results gives a transpose of a
    2-byte value a 2-byte result.
  }];
  let arguments = (ins CDP_ViewedTensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs CDP_ViewedTensor:$output);
}

def CDP_ConcatOp : CDP_Op<"concat", [CDP_Differentiable]> {
  let summary = "join along an axis (ONNX Concat)";
  let description = [{
    Moves values of any width, as cdp.transpose does: cdp-narrow-results
    stores a concat and its inputs in 2 bytes together (the attention
    backward's gradients of q, k and v joined for the input projection).
  }];
  let arguments = (ins Variadic<CDP_ViewedTensor>:$inputs, I64Attr:$axis);
  let results = (outs CDP_ViewedTensor:$output);
}

def CDP_SplitOp : CDP_Op<"split", [CDP_Differentiable]> {
  let summary = "cut along an axis (ONNX Split)";
  let description = [{
    `split` lists the size of every piece; they sum to the axis length.
    Moves values of any width, as cdp.transpose does.
  }];
  let arguments = (ins CDP_ViewedTensor:$input, I64Attr:$axis, DenseI64ArrayAttr:$split);
  let results = (outs Variadic<CDP_ViewedTensor>:$outputs);
}

def CDP_SliceOp : CDP_Op<"slice", [CDP_Differentiable]> {
  let summary = "strided sub-tensor (ONNX Slice)";
  let description = [{
    `starts`, `ends`, `axes` and `steps` have ONNX semantics: negative values
    count from the end and out-of-range values are clamped.
  }];
  let arguments = (ins CDP_AnyTensor:$input, DenseI64ArrayAttr:$starts,
                       DenseI64ArrayAttr:$ends, DenseI64ArrayAttr:$axes,
                       DenseI64ArrayAttr:$steps);
  let results = (outs CDP_AnyTensor:$output);
}

def CDP_PadOp : CDP_Op<"pad", [CDP_Differentiable]> {
  let summary = "constant padding (ONNX Pad, mode constant)";
  let description = [{
    `pads` lists the elements added before each axis, then after each axis
    (ONNX order, none negative); new elements hold `value`.
  }];
  let arguments = (ins CDP_AnyTensor:$input, DenseI64ArrayAttr:$pads,
                       DefaultValuedAttr<F32Attr, "0.0f">:$value);
  let results = (outs CDP_AnyTensor:$output);
}

def CDP_SqueezeOp : CDP_Op<"squeeze", [CDP_ViewOfInput, CDP_Differentiable]> {
  let summary = "remove size-1 dimensions (ONNX Squeeze)";
  let description = "Empty `axes` removes every size-1 dimension.";
  let arguments = (ins CDP_AnyTensor:$input, DenseI64ArrayAttr:$axes);
  let results = (outs CDP_AnyTensor:$output);
}

def CDP_UnsqueezeOp : CDP_Op<"unsqueeze", [CDP_ViewOfInput, CDP_Differentiable]> {
  let summary = "insert size-1 dimensions (ONNX Unsqueeze)";
  let description = "`axes` index the output's dimensions.";
  let arguments = (ins CDP_AnyTensor:$input, DenseI64ArrayAttr:$axes);
  let results = (outs CDP_AnyTensor:$output);
}

def CDP_ExpandOp : CDP_Op<"expand", [CDP_Differentiable]> {
  let summary = "broadcast to a shape (ONNX Expand)";
  let description = "The result shape is the numpy broadcast of the input shape and `shape`.";
  let arguments = (ins CDP_AnyTensor:$input, DenseI64ArrayAttr:$shape);
  let results = (outs CDP_AnyTensor:$output);
}

def CDP_GatherOp : CDP_Op<"gather", [CDP_Differentiable]> {
  let summary = "take entries along an axis (ONNX Gather)";
  let description = [{
    Result shape: `data.shape[:axis] + indices.shape + data.shape[axis+1:]`.
    Negative indices count from the end. `padding_idx` (an embedding lookup's,
    as torch's `nn.Embedding(padding_idx=...)`): lookups of that entry give
    the data no gradient.
  }];
  let arguments = (ins CDP_AnyTensor:$data, CDP_I64Tensor:$indices,
                       DefaultValuedAttr<I64Attr, "0">:$axis,
                       OptionalAttr<I64Attr>:$padding_idx);
  let results = (outs CDP_AnyTensor:$output);
}

def CDP_GatherElementsOp : CDP_Op<"gather_elements", [CDP_Differentiable]> {
  let summary = "take one entry per index along an axis (ONNX GatherElements)";
  let description = [{
    `output[i][j][k] = data[index[i][j][k]][j][k]` for axis 0 (likewise for
    the other axes); `indices` has the data's rank and the result its shape.
    Negative indices count from the end.
  }];
  let arguments = (ins CDP_AnyTensor:$data, CDP_I64Tensor:$indices,
                       DefaultValuedAttr<I64Attr, "0">:$axis);
  let results = (outs CDP_AnyTensor:$output);
}

def CDP_GatherNDOp : CDP_Op<"gather_nd", [CDP_Differentiable]> {
  let summary = "take slices by index tuples (ONNX GatherND)";
  let description = [{
    The last axis of `indices` (length r) indexes the first r axes of
    `data` after `batch_dims` leading axes shared by both; the result is
    `indices.shape[:-1] + data.shape[batch_dims + r:]`.
  }];
  let arguments = (ins CDP_AnyTensor:$data, CDP_I64Tensor:$indices,
                       DefaultValuedAttr<I64Attr, "0">:$batch_dims);
  let results = (outs CDP_AnyTensor:$output);
}

def CDP_CumSumOp : CDP_Op<"cum_sum", [CDP_Differentiable]> {
  let summary = "cumulative sum along an axis (ONNX CumSum)";
  let description = [{
    `exclusive` leaves out the element itself; `reverse` sums from the end.
    The axis, an input in ONNX, is static here.
  }];
  let arguments = (ins CDP_NumTensor:$input, I64Attr:$axis,
                       DefaultValuedAttr<BoolAttr, "false">:$exclusive,
                       DefaultValuedAttr<BoolAttr, "false">:$reverse);
  let results = (outs CDP_NumTensor:$output);
}

def CDP_TriluOp : CDP_Op<"trilu", [CDP_Differentiable]> {
  let summary = "upper or lower triangle of the last two axes (ONNX Trilu)";
  let description = [{
    Keeps `(row, column)` where `column - row >= k` (upper) or `<= k`
    (lower), zero elsewhere. `k`, an input in ONNX, is static here.
  }];
  let arguments = (ins CDP_NumTensor:$input, DefaultValuedAttr<I64Attr, "0">:$k,
                       DefaultValuedAttr<BoolAttr, "true">:$upper);
  let results = (outs CDP_NumTensor:$output);
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

class CDP_ReduceOp<string mnemonic, string onnxName> : CDP_Op<mnemonic, [CDP_Differentiable]> {
  let summary = onnxName # " over axes";
  let description = [{
    ONNX `}] # onnxName # [{`. `axes` are non-negative after import; empty
    `axes` reduces every dimension. `keepdims` keeps reduced dimensions as 1.
  }];
  let arguments = (ins CDP_F32Tensor:$input, DenseI64ArrayAttr:$axes,
                       DefaultValuedAttr<BoolAttr, "true">:$keepdims);
  let results = (outs CDP_F32Tensor:$output);
}

def CDP_ReduceMeanOp : CDP_ReduceOp<"reduce_mean", "ReduceMean">;
def CDP_ReduceSumOp : CDP_ReduceOp<"reduce_sum", "ReduceSum">;

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

def CDP_SoftmaxCrossEntropyLossOp : CDP_Op<"softmax_cross_entropy_loss", [CDP_Differentiable]> {
  let summary = "softmax cross-entropy (ONNX SoftmaxCrossEntropyLoss)";
  let description = [{
    Scores `(N, C, d1, ...)`, labels `(N, d1, ...)`, optional class weights
    `(C)`. `reduction` is `mean`, `sum` or `none`; labels equal to
    `ignore_index` contribute nothing. Also returns the log-probabilities,
    unless cdp-recompute-log-probabilities dropped them (its gradient then
    recomputes them from the scores). With `classes_last` the scores are
    `(N, d1, ..., C)` (a language model's logits, read in place instead of
    transposed), the log-probabilities too. The scores may be a bf16 or f16
    tensor (cdp-narrow-results: the LM head's rounded logits stored in 2
    bytes), widened as read; the log-probabilities are float32.
  }];
  let arguments = (ins CDP_ProductOperand:$scores, CDP_I64Tensor:$labels,
                       Optional<CDP_F32Tensor>:$weights,
                       DefaultValuedStrAttr<StrAttr, "mean">:$reduction,
                       OptionalAttr<I64Attr>:$ignore_index,
                       DefaultValuedAttr<BoolAttr, "false">:$classes_last);
  let results = (outs CDP_F32Tensor:$loss, Optional<CDP_F32Tensor>:$log_prob);
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
}

def CDP_NllLossOp : CDP_Op<"nll_loss", [CDP_Differentiable]> {
  let summary = "negative log-likelihood (ONNX NegativeLogLikelihoodLoss)";
  let description = [{
    Input `(N, C, d1, ...)` of log-probabilities, target `(N, d1, ...)`,
    optional class weights `(C)`; `reduction` and `ignore_index` as in
    `softmax_cross_entropy_loss`.
  }];
  let arguments = (ins CDP_F32Tensor:$input, CDP_I64Tensor:$target,
                       Optional<CDP_F32Tensor>:$weight,
                       DefaultValuedStrAttr<StrAttr, "mean">:$reduction,
                       OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs CDP_F32Tensor:$loss);
}


//===----------------------------------------------------------------------===//
// Training: gradient ops (made by autodiff), optimizer updates, buffer writes
//===----------------------------------------------------------------------===//

def CDP_UnaryGradOp : CDP_Op<"unary_grad", [CDP_ElementwiseInPlace]> {
  let summary = "gradient of an element-wise activation";
  let description = [{
    `dx = dy * f'(saved)`, where `saved` is the forward input `x` for
    `gelu`, `gelu_tanh`, `erf`, `clip` (`params` = min, max),
    `hard_sigmoid` (`params` = alpha, beta) and `hard_swish`, and the
    forward output `y` for `relu` (`dy` where `y > 0`, as PyTorch's
    threshold_backward: the same mask as `x > 0`, a NaN in neither),
    `sigmoid` (`y(1-y)`), `tanh` (`1-y^2`) and `sqrt` (`1/(2y)`). At the
    kinks the derivative is PyTorch's.
    `round_result` as for `cdp.add`; under it the result may be a tensor of
    that format (cdp-narrow-results: the values stored in 2 bytes, for
    readers that take them so). `saved` may be a bf16 or f16 tensor (the
    2-byte copy the backward keeps, cdp-read-narrow-operands), whose values
    the kernel widens exactly as it reads them; so may `grad` under a
    `round_result` of its format (cdp-narrow-results: the gradient the next
    layer's backward product rounded and stored in 2 bytes).
  }];
  let arguments = (ins CDP_ProductOperand:$grad, CDP_ProductOperand:$saved,
                       StrAttr:$kind,
                       DefaultValuedAttr<DenseF32ArrayAttr, "{}">:$params,
                       OptionalAttr<StrAttr>:$round_result);
  let results = (outs CDP_ProductOperand:$output);
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
  let hasVerifier = 1;
}

def CDP_ReduceToOp : CDP_Op<"reduce_to"> {
  let summary = "sum a broadcast result back to an operand's shape";
  let description = [{
    The adjoint of numpy broadcasting: sums over the leading dimensions the
    operand did not have and over the dimensions where it had size 1, giving
    a tensor of shape `shape`. The input may be a bf16 or f16 tensor (a
    gradient cdp-narrow-results stores in 2 bytes), its values read exactly;
    the sums and the result are float32. `round_result` ("bf16" or "f16",
    set by cdp-fuse-roundings: a bias's gradient under autocast) rounds
    each sum to that format as it is written, as a `cdp.round_to` after the
    op would.
  }];
  let arguments = (ins CDP_ProductOperand:$input, DenseI64ArrayAttr:$shape,
                       OptionalAttr<StrAttr>:$round_result);
  let results = (outs CDP_F32Tensor:$output);
  let hasVerifier = 1;
}

def CDP_ConvGradInputOp : CDP_Op<"conv_grad_input"> {
  let summary = "convolution backward with respect to the input";
  let arguments = (ins CDP_F32Tensor:$grad, CDP_F32Tensor:$weight,
                       DenseI64ArrayAttr:$input_shape, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<I64Attr, "1">:$group,
                       OptionalAttr<StrAttr>:$narrow_operands);
  let results = (outs CDP_F32Tensor:$output);
}

def CDP_ConvGradWeightOp : CDP_Op<"conv_grad_weight"> {
  let summary = "convolution backward with respect to the weight";
  let arguments = (ins CDP_F32Tensor:$grad, CDP_F32Tensor:$input,
                       DenseI64ArrayAttr:$weight_shape, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<I64Attr, "1">:$group,
                       OptionalAttr<StrAttr>:$narrow_operands);
  let results = (outs CDP_F32Tensor:$output);
}

def CDP_MaxPoolGradOp : CDP_Op<"max_pool_grad"> {
  let summary = "max pooling backward";
  let description = [{
    Routes each output gradient to the first maximum of its window in
    `input` (the forward input), as PyTorch does.
  }];
  let arguments = (ins CDP_F32Tensor:$grad, CDP_F32Tensor:$input,
                       DenseI64ArrayAttr:$kernel_shape, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<BoolAttr, "false">:$ceil_mode);
  let results = (outs CDP_F32Tensor:$output);
}

def CDP_AveragePoolGradOp : CDP_Op<"average_pool_grad"> {
  let summary = "average pooling backward";
  let arguments = (ins CDP_F32Tensor:$grad, DenseI64ArrayAttr:$input_shape,
                       DenseI64ArrayAttr:$kernel_shape, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<BoolAttr, "false">:$ceil_mode,
                       DefaultValuedAttr<BoolAttr, "false">:$count_include_pad);
  let results = (outs CDP_F32Tensor:$output);
}

def CDP_BatchNormGradOp : CDP_Op<"batch_norm_grad"> {
  let summary = "batch normalization backward";
  let description = [{
    Returns `(dx, dscale, dbias)`. In training mode the statistics are the
    batch's (recomputed from `input`); otherwise `mean` and `var`.
    `round_result` ("bf16" or "f16", set by cdp-fuse-roundings) rounds each
    dx value as it is written (the convolution's gradients after it read
    bf16 values under autocast); dscale and dbias stay float32.
  }];
  let arguments = (ins CDP_F32Tensor:$grad, CDP_F32Tensor:$input,
                       CDP_F32Tensor:$scale, CDP_F32Tensor:$mean, CDP_F32Tensor:$var,
                       DefaultValuedAttr<F32Attr, "1e-5f">:$epsilon,
                       DefaultValuedAttr<BoolAttr, "false">:$training_mode,
                       OptionalAttr<StrAttr>:$round_result);
  let results = (outs CDP_F32Tensor:$input_grad, CDP_F32Tensor:$scale_grad,
                      CDP_F32Tensor:$bias_grad);
  let hasVerifier = 1;
}

def CDP_LayerNormGradOp : CDP_Op<"layer_norm_grad"> {
  let summary = "layer normalization backward";
  let description = [{
    Returns `(dx, dscale, dbias)`, dscale and dbias shaped like `scale`.
    `grad` may be a bf16 or f16 tensor, widened as read (cdp-narrow-results:
    the next linear layer's rounded input gradient). With `addend` (shaped
    like `input`), dx is `addend + dx`, each float32 dx rounded first, as
    the `cdp.add` of autodiff's gradient sum it replaces
    (cdp-fuse-gradient-sums: the residual stream's gradient). With `rms`
    (the forward's RMSNorm) `mean` is not read: the inputs were not
    centered, and dx has no term for the mean's gradient.
  }];
  let arguments = (ins CDP_ProductOperand:$grad, CDP_F32Tensor:$input,
                       CDP_F32Tensor:$scale, CDP_F32Tensor:$mean,
                       CDP_F32Tensor:$inv_std_dev,
                       Optional<CDP_F32Tensor>:$addend,
                       DefaultValuedAttr<I64Attr, "-1">:$axis,
                       DefaultValuedAttr<BoolAttr, "false">:$rms);
  let results = (outs CDP_F32Tensor:$input_grad, CDP_F32Tensor:$scale_grad,
                      CDP_F32Tensor:$bias_grad);
  let hasVerifier = 1;
}

def CDP_SoftmaxGradOp : CDP_Op<"softmax_grad"> {
  let summary = "softmax or log-softmax backward, from the forward output";
  let description = [{
    softmax: `dx = y * (dy - sum(dy * y))`; with `log`:
    `dx = dy - exp(y) * sum(dy)`, sums along `axis`. `round_result` as for
    `cdp.add`; under it the result may be a tensor of that format
    (cdp-narrow-results).
  }];
  let arguments = (ins CDP_F32Tensor:$grad, CDP_F32Tensor:$output_value,
                       DefaultValuedAttr<I64Attr, "-1">:$axis,
                       DefaultValuedAttr<BoolAttr, "false">:$log,
                       OptionalAttr<StrAttr>:$round_result);
  let results = (outs CDP_ProductOperand:$output);
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
  let hasVerifier = 1;
}

def CDP_AttentionGradOp : CDP_Op<"attention_grad"> {
  let summary = "attention backward, the probabilities recomputed";
  let description = [{
    The gradients of `cdp.attention`'s `a`, `b` and `v` (and, with
    `with_bias_grad`, of its bias, summed to the bias's shape) from the result's
    gradient `grad`, its operands and its `stats`. The probabilities are
    recomputed from the stats, then `dv = P^T grad`, `dP = grad v^T`,
    `dS = P * (dP - sum(dP * P))` along each row, `da = scale dS b^T`,
    `db = scale a^T dS` (`scale` the forward's). Under `narrow_operands` (where `grad` is exact in the
    format too) the P that multiplies (as the forward's), dP, dS and the
    three operand gradients are rounded to it, as autograd's bf16 tensors
    are; the softmax's gradient reads P unrounded, as autocast's float32
    softmax does, and the bias's gradient is float32. `a`, `b` and `v` may
    be 2-byte tensors as for `cdp.attention`, and so may `grad`
    (cdp-narrow-results: the output projection's rounded input gradient);
    the bias's gradient is float32, and so are `a_grad`, `b_grad` and
    `v_grad` unless cdp-narrow-results stores them in the narrow_operands
    format (every reader takes them in 2 bytes: the scaling mul, the heads'
    transposes and the concat into the input projection's gradient).
    `layout` as the forward's: `grad` and the operands' gradients are laid
    out as the result and the operands. Under grouped-query attention the
    gradients of `b` and `v` have `a`'s heads, one per query head: the
    gradient rule sums each group's into the key/value head's.
  }];
  let arguments = (ins CDP_ProductOperand:$grad, CDP_ProductOperand:$a,
                       CDP_ProductOperand:$b, CDP_ProductOperand:$v,
                       CDP_F32Tensor:$stats, Optional<CDP_F32Tensor>:$bias,
                       DefaultValuedAttr<BoolAttr, "false">:$zero_nan_rows,
                       DefaultValuedAttr<BoolAttr, "false">:$with_bias_grad,
                       OptionalAttr<StrAttr>:$narrow_operands,
                       DefaultValuedAttr<F32Attr, "1.0f">:$scale,
                       OptionalAttr<StrAttr>:$layout);
  let results = (outs CDP_ProductOperand:$a_grad, CDP_ProductOperand:$b_grad,
                      CDP_ProductOperand:$v_grad,
                      Optional<CDP_F32Tensor>:$bias_grad);
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
  let hasVerifier = 1;
}

def CDP_DropoutGradOp : CDP_Op<"dropout_grad", [CDP_ElementwiseInPlace]> {
  let summary = "dropout backward: `dy * mask / (1 - ratio)`";
  let description = [{
    `round_result` as for `cdp.add`; under it the result may be a tensor of
    that format (cdp-narrow-results: a linear layer's output gradient, read
    by its two backward products and its bias's reduce_to).
  }];
  let arguments = (ins CDP_F32Tensor:$grad, CDP_BoolTensor:$mask,
                       DefaultValuedAttr<F32Attr, "0.5f">:$ratio,
                       OptionalAttr<StrAttr>:$round_result);
  let results = (outs CDP_ProductOperand:$output);
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
  let hasVerifier = 1;
}

def CDP_SliceGradOp : CDP_Op<"slice_grad"> {
  let summary = "slice backward: scatter into zeros of the input's shape";
  let arguments = (ins CDP_F32Tensor:$grad, DenseI64ArrayAttr:$input_shape,
                       DenseI64ArrayAttr:$starts, DenseI64ArrayAttr:$ends,
                       DenseI64ArrayAttr:$axes, DenseI64ArrayAttr:$steps);
  let results = (outs CDP_F32Tensor:$output);
}

def CDP_GatherGradOp : CDP_Op<"gather_grad"> {
  let summary = "gather backward: scatter-add into zeros of the data's shape";
  let description = "Entries at `padding_idx` receive nothing.";
  let arguments = (ins CDP_F32Tensor:$grad, CDP_I64Tensor:$indices,
                       DenseI64ArrayAttr:$data_shape,
                       DefaultValuedAttr<I64Attr, "0">:$axis,
                       OptionalAttr<I64Attr>:$padding_idx);
  let results = (outs CDP_F32Tensor:$output);
}

def CDP_GatherElementsGradOp : CDP_Op<"gather_elements_grad"> {
  let summary = "GatherElements backward: scatter-add into zeros of the data's shape";
  let arguments = (ins CDP_F32Tensor:$grad, CDP_I64Tensor:$indices,
                       DenseI64ArrayAttr:$data_shape,
                       DefaultValuedAttr<I64Attr, "0">:$axis);
  let results = (outs CDP_F32Tensor:$output);
}

def CDP_GatherNDGradOp : CDP_Op<"gather_nd_grad"> {
  let summary = "GatherND backward: scatter-add into zeros of the data's shape";
  let arguments = (ins CDP_F32Tensor:$grad, CDP_I64Tensor:$indices,
                       DenseI64ArrayAttr:$data_shape,
                       DefaultValuedAttr<I64Attr, "0">:$batch_dims);
  let results = (outs CDP_F32Tensor:$output);
}

def CDP_SoftmaxCrossEntropyLossGradOp : CDP_Op<"softmax_cross_entropy_loss_grad"> {
  let summary = "softmax cross-entropy backward with respect to the scores";
  let description = [{
    `classes_last` as the loss's. `round_result` as for `cdp.add`; under it
    the result may be a tensor of that format (cdp-narrow-results: the
    logits' gradient, which the LM head's two products read). With
    `from_scores` the second operand holds the loss's scores, not its
    log-probabilities: each row's log-softmax is recomputed from them with
    the loss's own arithmetic, the same bits
    (cdp-recompute-log-probabilities); those scores may be 2-byte as the
    loss's may.
  }];
  let arguments = (ins CDP_F32Tensor:$grad, CDP_ProductOperand:$log_prob,
                       CDP_I64Tensor:$labels, Optional<CDP_F32Tensor>:$weights,
                       DefaultValuedStrAttr<StrAttr, "mean">:$reduction,
                       OptionalAttr<I64Attr>:$ignore_index,
                       OptionalAttr<StrAttr>:$round_result,
                       DefaultValuedAttr<BoolAttr, "false">:$classes_last,
                       DefaultValuedAttr<BoolAttr, "false">:$from_scores);
  let results = (outs CDP_ProductOperand:$output);
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
  let hasVerifier = 1;
}

def CDP_NllLossGradOp : CDP_Op<"nll_loss_grad"> {
  let summary = "negative log-likelihood backward with respect to the input";
  let arguments = (ins CDP_F32Tensor:$grad, CDP_I64Tensor:$target,
                       Optional<CDP_F32Tensor>:$weight,
                       DenseI64ArrayAttr:$input_shape,
                       DefaultValuedStrAttr<StrAttr, "mean">:$reduction,
                       OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs CDP_F32Tensor:$output);
}

def CDP_GradientOp : CDP_BaseOp<"gradient"> {
  let summary = "the loss gradient of a parameter, as autodiff leaves it";
  let description = [{
    Marks `grad` as the full gradient of the loss with respect to the
    parameter `name` (contributions of every use summed). The optimizer pass
    turns it into an update; it is also what `cdp-run --dump-grads` reports.
  }];
  let arguments = (ins StrAttr:$name, CDP_F32Tensor:$grad);
  let assemblyFormat = "$name $grad attr-dict `:` type($grad)";
}

def CDP_UpdateOp : CDP_BaseOp<"update", [AllTypesMatch<["param", "grad"]>]> {
  let summary = "an optimizer step on one parameter, in place";
  let description = [{
    `optimizer` is `sgd` (PyTorch semantics: `d = g + wd * p`; with
    momentum, `buf = momentum * buf + d`, the first step setting
    `buf = d`; `p -= lr * buf`), `adam` (PyTorch's Adam with L2 weight
    decay added to the gradient and bias correction) or `adamw` (PyTorch's
    AdamW: `p *= 1 - lr * wd`, then the Adam step on `g`). The k-th update
    (k from 0) uses the learning rate `lr_schedule` gives: `constant`,
    `step` (`lr * lr_gamma^floor(k / lr_period)`, PyTorch's StepLR) or
    `cosine` (`lr_min + (lr - lr_min)(1 + cos(pi k / lr_period)) / 2`,
    CosineAnnealingLR) or `linear` (`lr * (lr_start + (lr_end - lr_start)
    min(k, lr_period) / lr_period)`, LinearLR); with `lr_warmup` W > 0 the
    first W updates rise linearly from `lr * lr_warmup_start` (`lr * (s + (1
    - s) k / W)`) and the schedule starts after them (SequentialLR). The
    optimizer state
    lives with the parameter; weight decay acts on the version being updated.
  }];
  let arguments = (ins StrAttr:$name, CDP_F32Tensor:$param, CDP_F32Tensor:$grad,
                       Optional<CDP_F32Tensor>:$loss_scale,
                       StrAttr:$optimizer, F32Attr:$lr,
                       DefaultValuedAttr<F32Attr, "0.0f">:$momentum,
                       DefaultValuedAttr<F32Attr, "0.0f">:$weight_decay,
                       DefaultValuedAttr<F32Attr, "0.9f">:$beta1,
                       DefaultValuedAttr<F32Attr, "0.999f">:$beta2,
                       DefaultValuedAttr<F32Attr, "1e-8f">:$epsilon,
                       // The schedule's, present only where it uses them
                       // (absent: constant, no warmup).
                       OptionalAttr<StrAttr>:$lr_schedule,
                       OptionalAttr<I64Attr>:$lr_period,
                       OptionalAttr<F32Attr>:$lr_gamma,
                       OptionalAttr<F32Attr>:$lr_min,
                       OptionalAttr<F32Attr>:$lr_start,
                       OptionalAttr<F32Attr>:$lr_end,
                       OptionalAttr<I64Attr>:$lr_warmup,
                       OptionalAttr<F32Attr>:$lr_warmup_start);
  let assemblyFormat = [{
    $name $param `,` $grad (`unless_overflow` `(` $loss_scale^ `:` type($loss_scale) `)`)?
    attr-dict `:` type($param)
  }];
  let hasVerifier = 1;
}

def CDP_LossScaleOp : CDP_BaseOp<"loss_scale", [Pure]> {
  let summary = "the backward's seed under dynamic loss scaling: the current scale";
  let description = [{
    PyTorch's `GradScaler.scale(loss)`: the backward starts from the loss
    scale `S` (element 0 of `state`, the `cdp.loss_scale` buffer; see
    `cdp.unscale_grads`) instead of 1, so every gradient is `S` times the
    true one and small fp16 gradients do not flush to zero.

    ```mlir
    %seed = cdp.loss_scale %state : tensor<3xf32> -> tensor<f32>
    ```
  }];
  let arguments = (ins CDP_F32Tensor:$state);
  let results = (outs CDP_F32Tensor:$seed);
  let assemblyFormat = "$state attr-dict `:` type($state) `->` type($seed)";
  let hasVerifier = 1;
}

def CDP_UnscaleGradsOp : CDP_BaseOp<"unscale_grads"> {
  let summary = "divide the step's gradients by the loss scale in place, and adjust the scale";
  let description = [{
    PyTorch's `GradScaler.unscale_` and `update` with `state` the loss-scale
    buffer `[S, clean steps, overflow]`: every gradient is multiplied by
    `1 / S`; if any is infinite or NaN, `overflow` becomes 1 (the updates
    that name `state` then leave their parameter and optimizer state
    unchanged: the step is skipped), `S` is multiplied by `backoff_factor`
    and the clean steps restart from 0; otherwise `overflow` is 0 and after
    `growth_interval` clean steps in a row `S` is multiplied by
    `growth_factor`. The optimizer pass places it before the clip and the
    updates.

    ```mlir
    cdp.unscale_grads %state, %g1, %g2 {growth_interval = 2000 : i64} : tensor<3xf32>, tensor<4xf32>, tensor<4x4xf32>
    ```
  }];
  let arguments = (ins CDP_F32Tensor:$state, Variadic<CDP_F32Tensor>:$grads,
                       DefaultValuedAttr<F32Attr, "2.0f">:$growth_factor,
                       DefaultValuedAttr<F32Attr, "0.5f">:$backoff_factor,
                       DefaultValuedAttr<I64Attr, "2000">:$growth_interval);
  let assemblyFormat = "$state `,` $grads attr-dict `:` type($state) `,` type($grads)";
  let hasVerifier = 1;
}

def CDP_ClipGradNormOp : CDP_BaseOp<"clip_grad_norm"> {
  let summary = "scale the step's gradients in place to a global L2 norm of at most max_norm";
  let description = [{
    PyTorch's `torch.nn.utils.clip_grad_norm_`: with `n` the L2 norm of all
    the `grads` together, each is multiplied by `max_norm / (n + 1e-6)` when
    that is below 1. The optimizer pass places it before the updates; where
    the gradients it reads live (one device, the reduced means, a stage's
    accumulators with the norm summed over the stages, or under cdp each
    device's own gradient before its reduction) is the schedule's decision.
  }];
  let arguments = (ins Variadic<CDP_F32Tensor>:$grads, F32Attr:$max_norm);
  let assemblyFormat = "$grads attr-dict `:` type($grads)";
  let hasVerifier = 1;
}

def CDP_AssignOp : CDP_BaseOp<"assign", [AllTypesMatch<["buffer", "value"]>]> {
  let summary = "write a new value into a buffer (BatchNorm running statistics)";
  let arguments = (ins StrAttr:$name, CDP_F32Tensor:$buffer, CDP_F32Tensor:$value);
  let assemblyFormat = "$name $buffer `,` $value attr-dict `:` type($buffer)";
}

#endif // CDP_DIALECT_GRAPH_GRAPHOPS_TD
