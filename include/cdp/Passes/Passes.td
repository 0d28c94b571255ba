//===- Passes.td - cdp passes ------------------------------*- tablegen -*-===//
//
// Every cdp pass, one C++ file each in passes/. The training pipeline runs
// them in this order: attach-loss, autodiff, insert-optimizer, plan-memory.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_PASSES_TD
#define CDP_PASSES_TD

include "mlir/Pass/PassBase.td"

def AttachLoss : Pass<"cdp-attach-loss", "mlir::ModuleOp"> {
  let summary = "Adds the training loss to an imported model";
  let description = [{
    Makes `@main` compute a scalar loss and records its result index as
    `cdp.loss_index`. With `loss=softmax-cross-entropy` the first graph
    output is taken as the scores `(N, C, ...)` and a new int64 argument named
    `labels-name` (`(N, ...)`, batch axis 0) feeds a mean
    `cdp.softmax_cross_entropy_loss` over the labels that are not
    `ignore-index`; `class-axis` says where the classes are: `1` for
    `(N, C, d1, ...)`, `last` for `(N, d1, ..., C)` (Hugging Face's
    language-model logits), which the loss reads in place (`classes_last`);
    scores of rank 3 need it, ranks 2 and 4 or more default to `1`; with
    `mse` the new argument is float32
    shaped like the output and the loss is the mean squared error; with
    `none` the model computes its own loss, the output named `loss-output`.

    Before:
    ```mlir
    func.func @main(%x: tensor<8x784xf32>) -> (tensor<8x10xf32> {cdp.name = "logits"})
    ```
    After (`loss=softmax-cross-entropy`):
    ```mlir
    func.func @main(%x: tensor<8x784xf32>, %labels: tensor<8xi64> {cdp.name = "labels"})
        -> (tensor<8x10xf32> {cdp.name = "logits"}, tensor<f32> {cdp.name = "loss"})
        attributes {cdp.loss_index = 1 : i64}
    ```
  }];
  let options = [
    Option<"loss", "loss", "std::string", "\"softmax-cross-entropy\"",
           "softmax-cross-entropy, mse or none">,
    Option<"labelsName", "labels-name", "std::string", "\"labels\"",
           "Name of the labels input the loss adds">,
    Option<"lossOutput", "loss-output", "std::string", "\"\"",
           "With loss=none: the graph output that is the loss">,
    Option<"classAxis", "class-axis", "std::string", "\"\"",
           "Where the scores' classes are: 1 (N, C, d1, ...) or last "
           "(N, ..., C); needed for scores of rank 3">,
    Option<"ignoreIndex", "ignore-index", "int64_t", "-100",
           "The label that counts for nothing (torch's default, -100)">,
  ];
  let dependentDialects = ["cdp::CDPDialect"];
}

def SetStrategy : Pass<"cdp-set-strategy", "mlir::ModuleOp"> {
  let summary = "Records the training strategy on the module, as typed IR";
  let description = [{
    Sets the module's `sched.strategy` to `#sched.strategy<"name">`, the
    strategy `strategy` names (an unknown name fails the pass, listing the
    strategies). Every pass that depends on the strategy (the partitioner's
    memory estimate, the schedule builders) reads it there, so a pipeline
    names its strategy once. Each strategy pipeline (`cdp-dp`, `cdp-1f1b`,
    ...) starts with it.

    ```mlir
    module attributes {sched.strategy = #sched.strategy<"1f1b">} { ... }
    ```
  }];
  let options = [
    Option<"strategy", "strategy", "std::string", "\"single\"",
           "The strategy, as cdp-compile --strategy names it">,
  ];
  let dependentDialects = ["cdp::sched::SchedDialect"];
}

def Autodiff : Pass<"cdp-autodiff", "mlir::ModuleOp"> {
  let summary = "Builds the backward graph: the loss gradient of every trainable parameter";
  let description = [{
    Reverse-mode differentiation of `@main` from its loss
    (`cdp.loss_index`). Every float32 `cdp.param` that is not a `buffer`, not
    named by `freeze` and reaches the loss is trainable; for each, the sum of
    its contributions (tied weights, skip connections) ends in one
    `cdp.gradient "name"`. Gradient rules emit the dialect's gradient ops
    (`conv_grad_input`, `max_pool_grad`, `batch_norm_grad`, ...) or compose
    forward ops (`matmul` and `transpose` for MatMul, `reduce_to` for
    broadcasting). Only values that depend on a trainable parameter get a
    gradient. BatchNorm in training mode also writes its running statistics
    back with `cdp.assign` (`bn-running-var`: unbiased, as PyTorch, or
    biased, as ONNX). With `loss-scale` S > 0 (dynamic loss scaling, as
    PyTorch's `GradScaler`) the backward starts from `cdp.loss_scale` of a
    new buffer `cdp.loss_scale` = [S, 0, 0] instead of from 1;
    cdp-insert-optimizer divides the gradients by the scale again.

    ```mlir
    %y = cdp.relu %x : tensor<4xf32>
    // gets, for the gradient %dy of %y:
    %dx = cdp.unary_grad %dy, %x {kind = "relu"} : ...
    ```
  }];
  let options = [
    ListOption<"freeze", "freeze", "std::string",
               "Parameters that stay fixed">,
    Option<"bnRunningVar", "bn-running-var", "std::string", "\"unbiased\"",
           "unbiased (PyTorch) or biased (ONNX) batch variance in running_var">,
    Option<"lossScale", "loss-scale", "double", "0",
           "Dynamic loss scaling from this initial scale (0: off): the "
           "backward starts from the scale, a cdp.loss_scale buffer">,
  ];
  let dependentDialects = ["cdp::CDPDialect"];
}

def Recompute : Pass<"cdp-recompute", "mlir::ModuleOp"> {
  let summary = "Activation recomputation: forward results dropped after the forward and recomputed in the backward";
  let description = [{
    Runs on the training graph (after cdp-autodiff). A forward op whose
    result the backward reads is either kept (its result lives from the
    forward to its last backward use, as without this pass) or recomputed:
    every backward op that reads it reads a clone instead, made in the
    backward (`cdp.phase = "backward"`, the op's stage) just before the
    first backward op that needs it, from kept values and other clones. The
    forward result then dies at its last forward use. Clones compute the
    same bits from the same inputs, so training is bit-identical.

    Always kept: graph inputs, parameters and constants; results of ops
    that are not pure (dropout: its mask is random); results read outside
    their stage's forward and backward (by another stage, by a buffer write
    such as BatchNorm's running statistics, or returned). Beyond that,
    `mode`:

    - `stage`: nothing else (each stage's inputs: its forward is recomputed
      at the start of its backward).
    - `layer`: the inputs of each layer. A layer ends where the forward of
      its stage narrows to one value that depends on trained weights (a
      residual stream between blocks; masks and other values computed
      without weights may cross), at the last such point before the next op
      that computes on the data with a trained weight (a product or a norm;
      a bias add belongs to its product): a transformer block is two layers
      (attention, then the MLP), each recomputed from its input.
    - `selective`: everything but element-wise results, softmax, layer norms
      (LayerNorm, RMSNorm: a row read and written once) and the
      products of two activations (attention's QK^T and its scores times V;
      Megatron's selective recompute: cheap to redo, large to keep), each
      only where what it reads lives into the backward anyway (so that no
      other value is kept longer: a bias add is not recomputed from the
      product before it, which the backward does not read).

    `@main` gets `cdp.recompute` = the mode.

    ```mlir
    %h = cdp.gemm %x, %w1 {cdp.stage = 1 : i64} ...
    %a = cdp.gelu %h {cdp.stage = 1 : i64} ...
    // selective: the backward reads a clone of %a, not %a
    %a2 = cdp.gelu %h {cdp.phase = "backward", cdp.stage = 1 : i64} ...
    %dw2 = cdp.matmul %a2, %dy {cdp.phase = "backward", trans_a = true} ...
    ```
  }];
  let options = [
    Option<"mode", "mode", "::cdp::RecomputeMode", "::cdp::RecomputeMode::Layer",
           "What the forward keeps for the backward: stage, layer or selective",
           [{::llvm::cl::values(
               clEnumValN(::cdp::RecomputeMode::Stage, "stage",
                          "each stage's inputs"),
               clEnumValN(::cdp::RecomputeMode::Layer, "layer",
                          "each layer's inputs"),
               clEnumValN(::cdp::RecomputeMode::Selective, "selective",
                          "all but element-wise, softmax and norm results"))}]>,
  ];
}

def Autocast : Pass<"cdp-autocast", "mlir::ModuleOp"> {
  let summary = "Mixed precision: rounds to bf16 or fp16 where PyTorch's autocast computes in it";
  let description = [{
    Runs on the forward graph (with its loss when training; an inference
    plan's forward alone), before autodiff, and inserts
    `cdp.round_to` (values rounded to `precision`, kept in float32) so that
    float32 arithmetic gives what autocast computes on a GPU (its CUDA op
    lists):

    - matrix products and convolutions (`cdp.matmul`, `cdp.gemm`,
      `cdp.conv`) read their float operands rounded (weights too: the
      float32 parameters stay the master copy) and their results are
      rounded: narrow products, float32 sums. A MatMul whose only reader
      adds a rank-1 parameter (a linear layer's bias, exported as MatMul +
      Add) is rounded once, after the add, as torch's addmm. A product of
      neither the float inputs nor the weights (position tables made from
      buffers and integer positions) stays float32;
    - softmax, log-softmax, layer norm, sums, cumulative sums, exp, log,
      pow, reciprocal and the losses keep float32: they read narrow values
      as they are and their results are not rounded;
    - batch norm is narrow when its input is (float32 parameters and
      statistics inside);
    - every other op follows its operands: narrow when all its float
      operands are (scalar constants do not count, as a Python scalar does
      not promote a tensor), its results rounded, except for ops that only
      move or select values (reshape, transpose, slice, concat, gather,
      relu, max pool, where, min, max, ...), whose results are narrow
      already and marked `cdp.narrow`; a float32 tensor operand makes the op
      float32, as torch's type promotion does.

    Autodiff rounds every gradient contribution that reaches a narrow value
    (and each partial sum), as autograd keeps a bf16 tensor's gradient
    bf16; the parameters' gradients reach the optimizer in float32.
  }];
  let options = [
    Option<"precision", "precision", "std::string", "\"bf16\"",
           "bf16 or f16">,
  ];
  let dependentDialects = ["cdp::CDPDialect"];
}

def FuseGradientSums : Pass<"cdp-fuse-gradient-sums", "mlir::ModuleOp"> {
  let summary = "Lets a layer norm's gradient add the other contribution to its input's gradient";
  let description = [{
    On the training graph (after autodiff): a `cdp.add` (without
    `round_result`) of a `cdp.layer_norm_grad`'s input gradient, its only
    reader, and another float32 tensor of its type, in the same stage and
    phase and defined before the layer norm's gradient, is replaced by that
    gradient with the other tensor as its `addend`: it writes the sum (each
    dx rounded to float32 and added, the same bits) instead of dx for the
    add to read again. A pre-norm transformer's residual stream: two per
    block.
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def FuseRelu : Pass<"cdp-fuse-relu", "mlir::ModuleOp"> {
  let summary = "Lets a gemm or a batch norm apply the ReLU that reads its result";
  let description = [{
    On the training graph (after autodiff): a float32 `cdp.gemm` (without
    `narrow_operands` or `round_result`) or a training-mode
    `cdp.batch_norm` (rounded or not: the ReLU commutes with the rounding)
    whose (first) result only one `cdp.relu` of its stage reads (the
    ReLU's gradient reads the ReLU's output, as autodiff makes it) takes
    `activation = "relu"` and replaces the ReLU, whose readers read the
    op's result. One pass over the result and the pre-activation
    buffer fewer per layer; a cuBLASLt epilogue, or the batch norm's own
    kernel, on GPUs.
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def FoldIdentityDropout : Pass<"cdp-fold-identity-dropout", "mlir::ModuleOp"> {
  let summary = "Replaces a dropout that keeps every element by its input";
  let description = [{
    A `cdp.dropout` with `ratio` 0 in training mode, or outside training
    mode, whose mask nothing reads, is its input bit for bit (PyTorch's
    dropout returns its input for p = 0): it is replaced by it, on the
    forward graph before autodiff, so neither the forward's pass and mask
    nor the backward's `cdp.dropout_grad` remain (GPT-2 exported with its
    dropout rates at 0: two in every block). A dropout that drops
    something, or whose mask is read, stays.
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def FoldSoftmaxGuard : Pass<"cdp-fold-softmax-guard", "mlir::ModuleOp"> {
  let summary = "Folds the exporters' NaN guard after an attention softmax into the softmax";
  let description = [{
    torch's exporters write scaled_dot_product_attention's softmax as
    `where(isnan(softmax(x)), 0, softmax(x))`: a query whose keys are all
    masked (-inf scores: the first rows of a left-padded batch under a causal
    mask) gets zeros instead of NaN. Differentiated op by op, that guard
    passes NaN back: its gradient zeroes the row's `dy`, but `softmax_grad`
    multiplies by the NaN output. This pass replaces the chain with one
    `cdp.softmax {zero_nan_rows = true}` where the is_nan and the where read
    the softmax only there and the where's other branch is a splat 0: the
    forward is unchanged and such a row's gradient is zero, as torch's.
    Not a fusion (it runs under --no-fusion too): it decides what is trained.
    Runs on the forward graph, before autodiff.

    Before:
    ```mlir
    %s = cdp.softmax %x : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
    %n = cdp.is_nan %s : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xi1>
    %y = cdp.where %n, %zero, %s : (tensor<2x4x8x8xi1>, tensor<f32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
    ```
    After:
    ```mlir
    %y = cdp.softmax %x {zero_nan_rows = true} : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
    ```
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def FuseLayerNorm : Pass<"cdp-fuse-layer-norm", "mlir::ModuleOp"> {
  let summary = "Replaces a decomposed LayerNorm (as torch exports it below opset 17) with cdp.layer_norm";
  let description = [{
    Matches `reduce_mean` (trailing axes, kept), `sub`, `pow 2`,
    `reduce_mean`, `add eps`, `sqrt`, `div`, `mul gamma`, `add beta`, where
    every intermediate value feeds the chain only and gamma and beta are
    shaped as the normalised dimensions, and replaces it with one
    `cdp.layer_norm` with the final add's location. Runs on the forward
    graph, before autodiff, so the backward is layer_norm_grad.
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def FuseRmsNorm : Pass<"cdp-fuse-rms-norm", "mlir::ModuleOp"> {
  let summary = "Replaces a decomposed RMSNorm (Llama's, T5's) with cdp.layer_norm {rms}";
  let description = [{
    Matches `gamma * (x * r)` with `r = 1 / sqrt(reduce_mean(x^2) + eps)`
    (the inverse as `div(1, .)` or `reciprocal`; products and the sum in
    either order; trailing axes, kept; a float32-to-float32 `cast` allowed
    between the products), where every intermediate value feeds the chain
    only and gamma is shaped as the normalised dimensions, and replaces it
    with one `cdp.layer_norm` with `rms` and the final product's location.
    Runs on the forward graph, before autodiff, so the backward is
    layer_norm_grad.
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def FuseGelu : Pass<"cdp-fuse-gelu", "mlir::ModuleOp"> {
  let summary = "Replaces a decomposed GELU (erf or tanh form, as torch exports it below opset 20) with cdp.gelu";
  let description = [{
    Matches `(x * (erf(x / sqrt 2) + 1)) * 0.5` and
    `0.5 * (x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))))` (operands of
    add and mul in either order, x^3 as two multiplies or a pow), where
    every intermediate value feeds the chain only, and replaces it with one
    `cdp.gelu` (approximate "none" or "tanh") with the final multiply's
    location. Runs on the forward graph, before autodiff.
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def FuseSilu : Pass<"cdp-fuse-silu", "mlir::ModuleOp"> {
  let summary = "Replaces x * sigmoid(x) (torch's SiLU as exported) with cdp.silu";
  let description = [{
    Matches `mul(x, sigmoid(x))` (operands in either order, no
    `round_result`, float32) where the sigmoid feeds the product only, and
    replaces both with one `cdp.silu` with the product's location: the same
    forward values, a gradient that reads `x` alone. Runs on the forward
    graph after autocast and before autodiff: where autocast rounds the
    sigmoid's values (bf16, fp16) the sigmoid feeds its rounding, not the
    product, and the pair stays as exported, each result rounded.
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def FuseRotary : Pass<"cdp-fuse-rotary", "mlir::ModuleOp"> {
  let summary = "Replaces the rotate-half rotary embedding (Llama's) with cdp.rotary";
  let description = [{
    Matches `x * cos + concat(-x2, x1) * sin` with `x1`, `x2` the two
    halves of `x`'s last axis (`slice`, the negation a `mul` by -1, products
    and the sum in either order, none rounded), where every intermediate
    value feeds the chain only and `cos` and `sin` broadcast to `x` and are
    computed without a trained parameter, and replaces it with one
    `cdp.rotary` with the add's location: the same float32 roundings, so the
    same bits forward and backward. Runs on the forward graph after
    autocast (a rounding it put into the chain keeps the chain) and before
    autodiff.
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def FuseMatMulBias : Pass<"cdp-fuse-matmul-bias", "mlir::ModuleOp"> {
  let summary = "Makes a MatMul by a weight matrix and the Add of its bias one cdp.gemm";
  let description = [{
    Matches `add(matmul(a, b), bias)` (either order) where `b` has rank 2,
    `a` rank 2 or more, the product is float32 without rounding and feeds
    the add only, and `bias` is a float32 vector `[n]` or `[1, n]` of the
    product's last dimension, and replaces it with `cdp.gemm` over `a`'s
    rows with `bias` as C, between `cdp.reshape`s where `a` has rank 3 or
    more: nn.Linear on a transformer's tokens as torch exports it. Runs on
    the forward graph after autocast (which rounds a bf16 or fp16 product
    before the add, so none of those matches) and before autodiff.
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def FuseSoftmaxBias : Pass<"cdp-fuse-softmax-bias", "mlir::ModuleOp"> {
  let summary = "Gives a softmax the addend of the sum it reads (attention's mask) as its bias";
  let description = [{
    Matches `softmax(add(x, b))` where the add feeds the softmax only and
    `x` is shaped as the sum, and replaces it with `softmax(x, b)`: the
    softmax adds `b` (broadcast) as it reads `x`, the same float32 sums,
    and the batch x heads x seq^2 sum is never written. Runs on the forward
    graph, after cdp-autocast (a sum it rounds keeps its add) and before
    autodiff; the bias's gradient, where it takes one, is the softmax's
    input gradient summed to its shape.
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def FuseAttention : Pass<"cdp-fuse-attention", "mlir::ModuleOp"> {
  let summary = "Folds attention's two products and softmax into one cdp.attention";
  let description = [{
    Matches `matmul(softmax(matmul(a, b), bias), v)`, the softmax along the
    last axis, where each intermediate value feeds the next op only and
    `a`, `b` and `v` share their batch dimensions; under mixed precision
    also the form cdp-autocast leaves, the scores and the probabilities
    each rounded by a `cdp.round_to` of one format that `a`, `b` and `v`
    are exact in (`narrow_operands`). Replaces it with one `cdp.attention`,
    whose backward (`attention_grad`) recomputes the probabilities from
    per-row statistics: the (..., M, N) scores and probabilities are not
    kept from the forward to the backward (GPT-2 small at batch 8 x 512:
    150 MB a layer). Runs on the forward graph, after
    cdp-fuse-softmax-bias and before autodiff.
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def FoldRepeatedHeads : Pass<"cdp-fold-repeated-heads", "mlir::ModuleOp"> {
  let summary = "Gives grouped-query attention its key and value heads unrepeated";
  let description = [{
    Grouped-query attention (Llama 3, Mistral, TinyLlama) repeats each key
    and value head for its group of query heads before attention
    (transformers' `repeat_kv`: unsqueeze, expand, reshape), a copy `g`
    times the size of the heads, stored for the backward. `cdp.attention`
    reads keys and v with fewer heads (query head `h` reads head
    `h / g`). Where both the keys and v of a `cdp.attention` are such
    repetitions of one group size, below ops that act on every head alike
    (roundings, products by a scalar, identities, transposes keeping the
    batch and heads, reshapes keeping the last two dimensions), the pass
    rebuilds those ops on the unrepeated heads and drops the repetition.
    The attention reads the values the repetition copied, and its gradient
    rule sums each group's per-query-head gradients as the repetition's
    gradient did: the same bits in float32 plans; where a scaling stays
    between (mixed precision, a scale not a power of two) the scaling
    multiplies the group's sum instead of each gradient, a difference of
    rounding. Runs after cdp-fold-attention-scale, before
    cdp-fold-attention-transposes and autodiff.
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def FoldAttentionTransposes
    : Pass<"cdp-fold-attention-transposes", "mlir::ModuleOp"> {
  let summary = "Reads attention's heads where the projections write them";
  let description = [{
    Exporters move a projection's heads before the sequence for attention
    (`transpose(q, [0, 2, 1, 3])`, the keys `[0, 2, 3, 1]`, v as q) and
    back after it: a copy of each activation, and of its gradient in the
    backward (96 a step on GPT-2 small). Where a 4-D `cdp.attention`'s q,
    keys and v are such transposes (through element-wise ops with a scalar
    between: the exporters' scalings, autocast's roundings, which commute
    with them bit for bit), each read by the next op alone, and its result
    is read alone by the transpose back (through roundings and identity
    reshapes), the attention takes the untransposed tensors and writes the
    untransposed result: `layout = "bshd"`, each head's matrix read and
    written in place. Runs after cdp-fold-attention-scale, before autodiff.
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def FoldAttentionScale : Pass<"cdp-fold-attention-scale", "mlir::ModuleOp"> {
  let summary = "Folds the exporters' scalar scalings of attention's q and k into its scale";
  let description = [{
    Every exporter writes scaled dot-product attention's `1 / sqrt(d)` as
    a product of each of q and k by its square root (PyTorch's SDPA math
    path and both ONNX exporters' decompositions): an element-wise pass
    over each in the forward and again in the backward. Where a
    `cdp.attention`'s `a` or `b` is such a `cdp.mul` by a scalar constant
    (a one-element tensor; the other factor of the result's shape), read
    by the attention alone, the attention takes the unscaled factor and
    multiplies its `scale` by the constant. The scores are then
    `scale * (a b)`, the float32 sums scaled before any rounding, as
    PyTorch's fused attention kernels compute them; in float32 plans they
    differ from the decomposition's in float32's last bits. Under mixed
    precision autocast rounds each scaled operand to bf16, which a scale
    of the sums does not reproduce (the e2e transformer's bf16 run moved
    by more than autocast's own effect from PyTorch's): there the fold
    takes only a power of two, through the `cdp.round_to` after the
    product, the unscaled factor exact in `narrow_operands`' format, and
    changes no bit. Runs after cdp-fuse-attention, before autodiff.
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def PackNarrowStash : Pass<"cdp-pack-narrow-stash", "mlir::ModuleOp"> {
  let summary = "Keeps bf16 and fp16 values the backward reads in 2 bytes a value";
  let description = [{
    Mixed precision (after cdp-autodiff and cdp-recompute): a forward value
    that is exact in bf16 or fp16 (a `cdp.round_to` result, or one of an op
    cdp-autocast marks `cdp.narrow`) and that the backward reads is packed
    right after its forward op (`cdp.pack_narrow`, two values to a float32
    element, in the op's stage) and unpacked (`cdp.unpack_narrow`) just
    before its first backward reader of each stage, which read the unpacked
    copy. The float32 value then dies at its last forward use, and what
    lives from the forward to the backward (a pipeline's stash, the
    single device's arena) is the 2-byte copy. Under a pipeline strategy
    (`sched.strategy` on the module), whose stages run on devices of their
    own, a narrow value another stage reads (a forward value, or a rounded
    gradient sent back) is packed as well and unpacked before the first
    reader of each stage and phase that reads it, so the message between
    the stages is the 2-byte copy. Packing an exact value and unpacking it
    gives it back bit for bit, so training is bit-identical.
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def DropExactRoundings : Pass<"cdp-drop-exact-roundings", "mlir::ModuleOp"> {
  let summary = "Drops cdp.round_to ops whose input is already exact in their format";
  let description = [{
    Mixed precision (after cdp-pack-narrow-stash): autodiff rounds every
    gradient contribution that reaches a narrow value, as autograd keeps a
    bf16 tensor's gradient bf16, also where the contribution is already
    exact (a reshape, transpose or concat of rounded gradients). Such a
    `cdp.round_to` changes no value; this pass replaces it with its input.
    A value is exact as cdp-mark-narrow-products decides: a `cdp.round_to`
    or `cdp.unpack_narrow` of the format, an op cdp-autocast marked
    `cdp.narrow`, or an op that only moves or selects values computing from
    exact values alone.
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def FuseRoundings : Pass<"cdp-fuse-roundings", "mlir::ModuleOp"> {
  let summary = "Moves a cdp.round_to into the arithmetic or product before it";
  let description = [{
    Mixed precision (after cdp-drop-exact-roundings): a `cdp.round_to`
    whose input is the result of `cdp.add`, `sub`, `mul`, `div`, `pow`,
    `min`, `max`, `dropout` (its output), `dropout_grad`, `gelu`,
    `unary_grad`, `softmax_grad`, `softmax_cross_entropy_loss_grad`, `gemm`,
    `matmul`, `attention`, `batch_norm`, `batch_norm_grad` (their first
    result) or `reduce_to`, read by the rounding alone, in the same stage
    and phase, is
    replaced by that op's `round_result` (the format): the op rounds each
    value as it writes it (a product right after its sums), the same bits
    as the separate rounding, one pass over the tensor or one kernel fewer.
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def MarkNarrowProducts : Pass<"cdp-mark-narrow-products", "mlir::ModuleOp"> {
  let summary = "Marks the products whose operands are exact in bf16 or fp16";
  let description = [{
    Mixed precision (last of its passes: after cdp-autodiff, cdp-recompute
    and cdp-pack-narrow-stash, so that backward products are seen): sets
    `narrow_operands` on each `cdp.matmul` and `cdp.gemm` whose operands
    `A` and `B` are exact in one narrow format, and on each `cdp.conv`
    (input and weight), `cdp.conv_grad_input` (gradient and weight) and
    `cdp.conv_grad_weight` (gradient and input) whose two operands are. A value is exact when a
    `cdp.round_to` or `cdp.unpack_narrow` of that format computes it, when
    cdp-autocast marked its op `cdp.narrow`, or when an op that only moves
    or selects values computes it from exact values alone. A GPU then
    multiplies the operands in that format with float32 sums (tensor
    cores), as autocast's products do; the product's value is the same as
    the float32 product of the same operands up to the order of the sums.
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def ReadNarrowOperands : Pass<"cdp-read-narrow-operands", "mlir::ModuleOp"> {
  let summary = "Lets marked products read the 2-byte copies of their operands";
  let description = [{
    Mixed precision, after cdp-mark-narrow-products: an operand `A` or `B`
    of a `cdp.matmul` or `cdp.gemm` marked `narrow_operands` (or `a`, `b`
    or `v` of a `cdp.attention` or `cdp.attention_grad`) that is a
    `cdp.unpack_narrow` of that format is replaced by the unpacked tensor
    itself, and one that cdp-pack-narrow-stash also packed (a
    `cdp.pack_narrow` of that format earlier in the block, of the same
    stage and phase as the product) by the packed tensor. The product then
    reads 2 bytes a value: a GPU multiplies them as they are instead of
    converting float32 copies, and an unpacked copy no other op reads is
    erased. A `cdp.round_to` that only a pack of its format reads then is
    folded into the pack, which rounds as it stores. A `cdp.unary_grad`
    whose saved value is a `cdp.unpack_narrow` reads the packed tensor
    likewise (its kernel widens each value as it reads it). The values, and
    so every result, are the same.

    ```mlir
    %p = cdp.pack_narrow %r {format = "bf16"} : tensor<4x8xf32> -> tensor<4x8xbf16>
    %y = cdp.matmul %p, %w {narrow_operands = "bf16"} : (tensor<4x8xbf16>, tensor<8x2xf32>) -> tensor<4x2xf32>
    ```
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def NarrowResults : Pass<"cdp-narrow-results", "mlir::ModuleOp"> {
  let summary = "Stores in 2 bytes the rounded results whose readers all take 2-byte values";
  let description = [{
    Mixed precision, after cdp-read-narrow-operands: a `cdp.softmax_grad`,
    `cdp.unary_grad` or `cdp.softmax_cross_entropy_loss_grad` with
    `round_result` whose every reader, in its
    stage, is operand A or B of a product marked `narrow_operands` of that
    format, a `cdp.pack_narrow` to it or a `cdp.reduce_to` (which widens
    what it sums) gets a result of that format (2 bytes a value, the same
    values): the packs are replaced by the result, the products and
    reductions read it in place. A softmax gradient (batch x heads x
    seq^2, where attention is not fused) and GELU's gradient (read by the
    linear layer's two products and its bias's reduce_to) and the logits'
    gradient (the LM head's two products) were written in float32 and
    converted again by each product that read them. So is a `cdp.gemm` or
    `cdp.matmul` whose `round_result` and `narrow_operands` name the same
    format, where every reader takes 2-byte values: besides the readers
    above, a `cdp.gelu` rounding to it (which cdp-read-narrow-operands
    points at the backward's packed copy: an MLP's first product), an
    activation gradient's saved value, a loss's scores and its gradient's
    `from_scores` (the LM head's logits), all of whose kernels widen the
    values as they read them. And a `cdp.gelu` with `round_result` whose
    readers all take 2-byte values (the pack of GPT-2's c_proj input), and
    a `cdp.mul` with `round_result` likewise (GPT-2's scaled q and k, read
    by their packs), which also counts as a reader that takes 2-byte values,
    and a `cdp.dropout_grad` with `round_result` (a linear layer's output
    gradient, read by its two backward products and its bias's reduce_to).
    An activation's gradient rounding to the format takes its incoming
    gradient in 2 bytes too (GPT-2's c_proj input gradient, read by GELU's),
    and so do a `cdp.dropout` rounding to it, which may store its output
    in 2 bytes as well, and a `cdp.add`, which widens whatever it rounds to
    (GPT-2's residual branch: the projection's product through dropout into
    the float32 residual stream, as autocast adds a bf16 tensor to it), and
    `cdp.attention_grad`'s incoming gradient under `narrow_operands` of the
    format (the output projection's rounded input gradient), and a
    `cdp.layer_norm_grad`'s, widened (the next linear layer's rounded input
    gradient).
    So are a `cdp.attention` whose `round_result` and `narrow_operands`
    name the format (its result, through the heads' transposes to the
    output projection's product and pack) and `cdp.attention_grad`'s
    gradients of a, b and v under `narrow_operands` (already rounded to
    the format).
    The readers are followed through ops that only move values in the
    stage: a reshape (a view), a transpose, a split and a concat (copies
    of bytes of any width), whose results then hold 2-byte values too:
    GPT-2's c_attn product is stored in bf16 and split, transposed and
    scaled so. Values joined by such ops (a concat's inputs and result, in
    either direction) are stored in 2 bytes together or not at all: each
    one's op must store it so and every other reader take 2-byte values
    (the attention backward's gradients of q, k and v, scaled and
    transposed, concatenated for the input projection's backward).
    A `cdp.layer_norm`'s output (float32 under autocast) is stored in 2
    bytes, the layer norm given `round_result`, only where every reader
    rounds it to that format itself: packs and products' operands marked
    `narrow_operands` (GPT-2's layer norms before c_attn, c_fc and the LM
    head); a float32 reader (BERT's residual add) keeps it float32.
    A `cdp.round_to` whose values may be stored so becomes the
    `cdp.pack_narrow` that rounds alike (the residual stream's gradient
    rounded for a bf16 branch, read by the branch's backward products and
    its bias's reduce_to).

    A training function's outputs other than its loss (`cdp.loss_index`)
    count as readers that take 2-byte values: a narrowed output changes
    the function's result type and is marked `cdp.widened`, and cdp-run
    writes it as the float32 values it stands for (`--save-outputs`). An
    inference function's outputs stay float32.
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def RecomputeLogProbabilities
    : Pass<"cdp-recompute-log-probabilities", "mlir::ModuleOp"> {
  let summary = "The loss's gradient recomputes the log-probabilities from the scores";
  let description = [{
    On the training graph (after autodiff): a
    `cdp.softmax_cross_entropy_loss` whose log-probabilities only its
    gradients read stops writing them, and those gradients read the scores
    instead (`from_scores`), recomputing each row's log-softmax with the
    loss's own arithmetic: the same bits, and the (N, ..., C)
    log-probabilities are neither written nor kept until the backward (a
    language model's logits: GPT-2 small at batch 8 x 512 holds 823 MB
    there). The scores are kept instead, which the forward had anyway.
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def FoldTranspose : Pass<"cdp-fold-transpose", "mlir::ModuleOp"> {
  let summary = "Folds Transpose ops into the MatMul and Gemm operands that read them";
  let description = [{
    Runs twice in the fusion pipeline: on the forward graph before the cut
    (a weight's Transpose read by a product becomes a flag, so no stage
    counts or stashes a transposed copy) and on the training graph after
    autodiff (the gradients' Transposes). Composes Transposes of
    Transposes (dropping identities), folds a Transpose of the last two
    dimensions into a MatMul or Gemm operand as its trans_a / trans_b flag,
    and turns the Transpose of a MatMul result into the product of the
    swapped operands. Only ops of the same stage are joined. Transposes
    nothing reads any more are erased.
  }];
  let dependentDialects = ["cdp::CDPDialect"];
}

def InsertOptimizer : Pass<"cdp-insert-optimizer", "mlir::ModuleOp"> {
  let summary = "Turns each parameter gradient into an optimizer update";
  let description = [{
    After every `cdp.gradient` of a step, appends one `cdp.update` per
    parameter at the end of `@main`, once every use of the old value is done.
    SGD and momentum follow PyTorch (dampening 0, first step sets the buffer
    to the gradient); Adam is PyTorch's with L2 weight decay; AdamW is
    PyTorch's, the weight decay decoupled (the parameter shrinks by
    lr × decay before the Adam step). With `clip-grad-norm`, one
    `cdp.clip_grad_norm` of every gradient comes before the updates.
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", "\"sgd\"", "sgd, momentum, adam or adamw">,
    Option<"lr", "lr", "double", "0.01", "Learning rate">,
    Option<"momentum", "momentum", "double", "-1", "Momentum (default 0 for sgd, 0.9 for momentum)">,
    Option<"weightDecay", "weight-decay", "double", "0", "L2 weight decay added to the gradient">,
    Option<"beta1", "beta1", "double", "0.9", "Adam beta1">,
    Option<"beta2", "beta2", "double", "0.999", "Adam beta2">,
    Option<"epsilon", "epsilon", "double", "1e-8", "Adam epsilon">,
    Option<"lrSchedule", "lr-schedule", "std::string", "\"constant\"",
           "constant, step (StepLR), cosine (CosineAnnealingLR) or linear "
           "(LinearLR)">,
    Option<"lrPeriod", "lr-period", "int64_t", "1",
           "step: updates between decays; cosine: updates to the minimum">,
    Option<"lrGamma", "lr-gamma", "double", "0.1", "step: the decay factor">,
    Option<"lrMin", "lr-min", "double", "0", "cosine: the lowest rate">,
    Option<"lrStart", "lr-start-factor", "double", "1.0/3", "linear: the first factor">,
    Option<"lrEnd", "lr-end-factor", "double", "1.0", "linear: the last factor">,
    Option<"warmup", "warmup-steps", "int64_t", "0",
           "Updates of linear warmup before the schedule (0: none)">,
    Option<"warmupStart", "warmup-start-factor", "double", "1.0/3",
           "The warmup's first factor">,
    ListOption<"noDecay", "no-decay", "std::string",
               "Parameters (glob patterns of their names, e.g. *.bias) "
               "updated without weight decay">,
    Option<"clipGradNorm", "clip-grad-norm", "double", "0",
           "Clip the gradients to this global L2 norm before the updates "
           "(0: off)">,
    Option<"lossScaleInterval", "loss-scale-interval", "int64_t", "2000",
           "Under dynamic loss scaling (a cdp.loss_scale seed from "
           "cdp-autodiff): clean steps before the scale doubles">,
  ];
  let dependentDialects = ["cdp::CDPDialect"];
}

def PartitionStages : Pass<"cdp-partition-stages", "mlir::ModuleOp"> {
  let summary = "Cuts the forward graph into contiguous, cost-balanced stages";
  let description = [{
    Gives every forward op of `@main` a `cdp.stage` (1..L) such that stages
    are contiguous in op order. With `boundaries`, the cuts fall after the
    named ONNX nodes; otherwise a cost model (multiply-adds of gemm, matmul
    and conv, elements for everything else) balances the stages: the cut
    has the smallest possible largest stage, and within that bound each
    cut falls nearest an even share of the work still to place. `@main`
    records each stage's summed cost (`cdp.stage_costs`, in
    `cdp.stage_cost_unit`: `model` or `ms`), which cdp-compile prints.

    With `device-memory`, the cut is the contiguous partition with the
    smallest largest stage cost among those whose every stage fits the cap
    by the estimate: parameters × (weight versions + a micro-batch's gradient +
    the accumulator + optimizer copies) plus the stashed micro-batches (GPipe m; 1F1B, 2BW,
    cdp-mp min(L - s + 1, m)) × the bytes the stage's forward ops write, for
    the module's `sched.strategy`. An op computed from parameters alone
    counts with its first reader, the parameters it reads too; a view
    counts no bytes where cdp-plan-memory lays it over its input (not a
    view of a parameter or of the graph's input, which is a copy).
    When none fits, the error names the smallest cap that would. With
    `profile` (a `cdp-run --profile` file of the same model), an op's cost
    is the measured time of its ONNX node, forward and backward, shared
    among the ops the node became. Parameters and
    constants take no stage here (they belong to the stage of their first
    user); the loss belongs to the last stage. Autodiff later gives every
    backward op the stage of the forward op it differentiates.

    ```mlir
    %0 = cdp.gemm %x, %w1 {cdp.stage = 1 : i64} ...
    %1 = cdp.relu %0 {cdp.stage = 1 : i64} ...
    %2 = cdp.gemm %1, %w2 {cdp.stage = 2 : i64} ...
    ```
  }];
  let options = [
    Option<"stages", "stages", "int64_t", "0",
           "Number of stages (0: min(4, ops with parameters))">,
    ListOption<"boundaries", "boundaries", "std::string",
               "Cut after these ONNX nodes instead of using the cost model">,
    Option<"deviceMemory", "device-memory", "int64_t", "0",
           "Per-device cap in bytes on the estimated stage memory (0: none)">,
    Option<"microBatches", "micro-batches", "int64_t", "1",
           "Micro-batches per step (the stash of the memory estimate)">,
    Option<"optimizerCopies", "optimizer-copies", "int64_t", "0",
           "Optimizer state per parameter byte (momentum 1, Adam 2)">,
    Option<"recompute", "recompute", "std::string", "\"none\"",
           "The activation recomputation the memory estimate assumes "
           "(cdp-recompute's mode): none, stage, layer or selective">,
    Option<"profile", "profile", "std::string", "",
           "A cdp-run --profile JSON: op costs are the measured times of "
           "their ONNX node (forward and backward) instead of the model">,
  ];
}

def BuildSchedule : Pass<"cdp-build-schedule", "mlir::ModuleOp"> {
  let summary = "Orders a partitioned training step for data-parallel devices";
  let description = [{
    For `dp` and `cdp` (the module's `sched.strategy`) every device runs one
    micro-batch (slot) per step through all stages: F_1 .. F_L, then B_L ..
    B_1. The pass reorders the
    ops of `@main` into that order (forward ops by stage, BatchNorm buffer
    writes right after their stage's forward, backward ops by stage
    descending, updates last) and records the schedule:

    - `cdp.schedule = {strategy, devices, stages, slots}`;
    - `cdp.offsets`: the start offset s_i of every device, 0 for `dp` and
      floor(2L i / N) for `cdp` (docs/strategies/cdp.md);
    - `cdp.time` on every op: its time step within a micro-batch's cycle,
      l - 1 for F_l and 2L - l for B_l. Device i runs an op of step t at
      s_i + 2L t + `cdp.time`.

    With `zero` = 1, 2 or 3 (dp only), the schedule records it: the stages'
    updates shard the optimizer state over the devices (ZeRO stage 1), with
    2 the mean gradients too (stage 2: reduce-scatter) and with 3 the
    parameters too (stage 3: gathered where they are read).

    ```mlir
    func.func @main(...) attributes {cdp.offsets = array<i64: 0, 2, 4, 6>,
        cdp.schedule = {devices = 4, slots = 4, stages = 4,
                        strategy = #sched.strategy<"cdp">}}
    ```
  }];
  let options = [
    Option<"devices", "devices", "int64_t", "1", "Devices N (one slot each)">,
    Option<"zero", "zero", "int64_t", "0",
           "ZeRO stage (dp): 0 none, 1 shards the optimizer state, 2 "
           "also the gradients, 3 also the parameters">,
  ];
}

def DelayUpdates : Pass<"cdp-delay-updates", "mlir::ModuleOp"> {
  let summary = "Decides which weight version every (slot, stage) uses";
  let description = [{
    Records `cdp.version_delay`, one row per slot, one entry per stage:
    micro-batch (i, t) runs stage l with the weights theta_{t - d(i,l)}.
    `dp`: d = 0. `cdp` with `rule=v1`: d = 1 everywhere (steps 0 and 1 both
    use theta_0). `rule=v2`: d = 0 where (i, l) is fresh, 1 otherwise, the
    freshness coming from the time-step model (`table=timing`:
    2l - 1 > s_{N-1} - s_i) or the authors' code (`table=code`: l >= L - i).
    Also records `cdp.live_versions` per stage (2, or 1 where every slot is
    fresh and the update falls when no micro-batch is in flight). Where a
    table asks for a version that does not exist yet at the slot's time step
    (the code table with N != L can), the slot waits: `cdp.idle` holds each
    slot's wait and `cdp.offsets` is shifted by it.

    ```mlir
    // N = L = 4, v2, timing table:
    cdp.version_delay = [array<i64: 1, 1, 1, 0>, array<i64: 1, 1, 0, 0>,
                         array<i64: 1, 0, 0, 0>, array<i64: 0, 0, 0, 0>]
    ```
  }];
  let options = [
    Option<"rule", "rule", "std::string", "\"v2\"", "v1 or v2 (cdp)">,
    Option<"table", "table", "std::string", "\"timing\"", "timing or code (v2)">,
  ];
}

def StaggerCollectives : Pass<"cdp-stagger-collectives", "mlir::ModuleOp"> {
  let summary = "Places each stage's gradient reduction at the earliest time step";
  let description = [{
    The stage-l reduction of step t can start once the last micro-batch of
    the step has finished B_l: at tau*_l(t) = s_{N-1} + 2L t + 2L - l
    (for `dp`, where every s_i is 0, all devices finish B_l together).
    Records `cdp.reduce_at` (tau*_l(0) per stage; step t adds 2L t) and
    `cdp.reduce = "allreduce" | "chain"`. Under `cdp` consecutive stages
    reduce one time step apart, so reductions are spread over the step
    instead of bunched at its end.
  }];
  let options = [
    Option<"reduce", "reduce", "std::string", "\"allreduce\"", "allreduce or chain">,
  ];
}

def SparsifyGradients : Pass<"cdp-sparsify-gradients", "mlir::ModuleOp"> {
  let summary = "laysa: how many entries of each parameter's update travel each step";
  let description = [{
    After cdp-insert-optimizer: records on every `cdp.update` its
    `cdp.sparse_count`, the entries its top-k exchange sends per device and
    step: k = max(1, ceil(`density` * n)) for a parameter of n elements, or
    n (sent whole, no indices) where n < `dense-below` or k would be n. On
    @main it records `cdp.sparse` = {density, dense_below, form}: `mirror`
    (LaySA's mirror weights M = W - r) or, with `residual`, the naive
    baseline's explicit residual r. Error feedback accumulates SGD steps:
    Adam and AdamW updates, and gradient clipping, are refused.
  }];
  let options = [
    Option<"density", "density", "double", "0.01",
           "Fraction of each parameter's entries sent per step (0 < d <= 1)">,
    Option<"denseBelow", "dense-below", "int64_t", "1024",
           "Parameters with fewer elements are sent whole">,
    Option<"residual", "residual", "bool", "false",
           "The naive baseline: an explicit residual instead of the mirror">,
  ];
}

def ScheduleSlots : Pass<"cdp-schedule-slots", "mlir::ModuleOp"> {
  let summary = "Writes dp's and cdp's per-slot step programs";
  let description = [{
    After cdp-stagger-collectives: appends a `sched.step_program` with one
    `sched.slot_device` per device (its offset from `cdp.offsets`), whose
    body is the step's program: per stage that owns parameters a
    `sched.wait_reduction` (the version table's delay, from step 1 + delay
    on) before its forward, `sched.slot_compute` forward F_1..F_L at times
    0..L-1 and backward B_L..B_1 at L..2L-1, a `sched.start_reduction` after
    each trained stage's backward, and under the chain reduction the
    `sched.chain_relay`s of the mean's return trip. With ZeRO stage 3, a
    `sched.gather_params` before each forward and backward for every stage
    whose parameters it reads (its own, and a tied weight's owner's), and
    a `sched.release_params` after it. With `cdp.sparse` (laysa, from
    cdp-sparsify-gradients) there are no waits or reductions: after each
    trained stage's backward B_l (time 2L - l) a `sched.absorb_gradients`,
    at the next time step (during B_(l-1)) the stage's `sched.sparse_send`
    and one later its `sched.sparse_apply`, so the cycle is 2L + 2. The plan
    emitter lowers it op by op.
  }];
  let dependentDialects = ["cdp::sched::SchedDialect"];
}

def PlaceGatheredParams : Pass<"cdp-place-gathered-params", "mlir::ModuleOp"> {
  let summary = "ZeRO stage 3: places each gathered stage in the gather region";
  let description = [{
    After cdp-schedule-slots with `zero` = 3: sets every
    `sched.gather_params`'s `offset`, the stage's byte offset in the region
    after the device's arena where it is gathered. A stage has one offset
    (the plan's tensors have one place), aligned to 64 bytes; two stages
    that some device holds gathered at the same time (a weight tied across
    stages) get disjoint ranges, the others share, so without tied weights
    the region is one stage, padded to equal shards.
  }];
  let dependentDialects = ["cdp::sched::SchedDialect"];
}

def MaterializeSchedule : Pass<"cdp-materialize-schedule", "mlir::ModuleOp"> {
  let summary = "Writes the decided schedule out as sched dialect streams";
  let description = [{
    Turns the decisions build-schedule, delay-updates and
    stagger-collectives recorded on `@main` into a `sched.program`: for
    `steps` steps, every device's ordered stream of loads, stage runs (with
    the weight version each reads), reductions and updates, each at its time
    step. This is what `cdp-compile --emit=sched-mlir` prints, and what the
    plan's per-device instruction lists follow.

    ```mlir
    sched.device {idle = 0, index = 1, offset = 2} {
      sched.load {at = 2, slot = 1, step = 0}
      sched.run {at = 2, kind = "F", slot = 1, stage = 1, step = 0, version = 0}
      ...
      sched.reduce_start {at = 9, ready_at = 13, stage = 1, step = 0}
    ```
  }];
  let options = [
    Option<"steps", "steps", "int64_t", "3", "Steps to write out">,
  ];
  let dependentDialects = ["cdp::sched::SchedDialect"];
}

def SchedulePipeline : Pass<"cdp-schedule-pipeline", "mlir::ModuleOp"> {
  let summary = "Places a pipeline's parameters and micro-batches and writes each device's step program";
  let description = [{
    For the pipelines (the module's `sched.strategy`), after
    cdp-insert-optimizer: appends a `sched.step_program` holding every
    decision the plan emitter lowers.
    gpipe, 1f1b, 2bw, interleaved-1f1b, zb-h1 and zb-v follow their schedule
    table (built by their descriptors, runtime/schedule/strategies/), or the
    CSV `schedule` names;
    cdp-mp follows CDP's cycle.
    Parameters live on the stage that updates them; a tied weight read by
    other stages gets replicas there (`sched.place_param`). Devices are
    numbered replica-major, one per stage and replica (cdp-mp: as many per
    stage as CDP's slots need, found by edge colouring), each with its
    micro-batches and stash slots (`sched.stage_device`). Each device's body
    is the step's program: `sched.compute` (forward or backward of a
    micro-batch, its slot, time step, the step it belongs to and the weight
    version it reads), and at the update `sched.keep_previous`,
    `sched.exchange_gradients` (replicas), `sched.apply_update` and the
    tied-weight messages `sched.param_send`, `sched.param_recv` and
    `sched.param_refresh`.

    ```mlir
    sched.step_program attributes {cycle = 8 : i64, micro_batches = 4 : i64, rule = "1-stale", stages = 2 : i64, strategy = "2bw", weight_versions = 2 : i64} {
      sched.stage_device attributes {index = 0 : i64, micro_batches = array<i64: 0, 1, 2, 3>, replica = 0 : i64, slots = 2 : i64, stage = 1 : i64} {
        sched.compute {kind = #sched.work<backward>, micro_batch = 2 : i64, slot = 0 : i64, step = -1 : i64, time_step = 0 : i64, version = #sched.version<previous>}
        ...
    ```
  }];
  let options = [
    Option<"microBatches", "micro-batches", "int64_t", "1",
           "Micro-batches per step and replica">,
    Option<"replicas", "replicas", "int64_t", "1",
           "Data-parallel copies of the pipeline (not cdp-mp)">,
    Option<"cdpRule", "cdp-rule", "std::string", "\"v1\"",
           "cdp-mp: the CDP rule, v1 or v2">,
    Option<"v2Table", "v2-table", "std::string", "\"timing\"",
           "cdp-mp under v2: the freshness table, timing or code">,
    Option<"stagesPerDevice", "stages-per-device", "int64_t", "1",
           "interleaved-1f1b: stages each device runs">,
    Option<"schedule", "schedule", "std::string", "\"\"",
           "A schedule CSV to follow instead of the strategy's own">,
    Option<"zero", "zero", "int64_t", "0",
           "ZeRO stage 1 over a stage's replicas: each replica updates "
           "its shard of the stage and the shards are exchanged">,
  ];
  let dependentDialects = ["cdp::sched::SchedDialect"];
}

def BuildPipeline : Pass<"cdp-build-pipeline", "mlir::ModuleOp"> {
  let summary = "Writes a pipeline schedule (gpipe, 1f1b, 2bw) as sched streams";
  let description = [{
    For the module's `sched.strategy`, one device per stage; micro-batches
    flow forward through the stages and
    their gradients back, with a `sched.send`/`sched.recv` pair at every
    cut. Per stage s of d, with m micro-batches a step (docs/strategies/2bw.md, docs/design/pipeline.md):

    - `gpipe`: all m forwards, then all m backwards (first in, first out),
      then the update; the pipeline drains before the next step.
    - `1f1b` (PipeDream-Flush): min(d - s, m) warm-up forwards, then one
      forward and one backward alternating, then the cool-down backwards and
      the update; drained before the next step.
    - `2bw` (PipeDream-2BW): the same alternation without flushes across
      steps; stage s updates after the backward of each step's last
      micro-batch, and micro-batch k (1-indexed over the run) reads version
      max(floor((k-1)/m) - 1, 0). Needs m >= d.

    Every op takes one time step and starts as soon as its device is free
    and its inputs are there; the resulting time steps, the peak of stashed
    activations per stage (`stash_peak`), the live weight versions per stage
    and the makespan are recorded on the `sched.program`.
  }];
  let options = [
    Option<"stages", "stages", "int64_t", "4", "Pipeline depth d">,
    Option<"microBatches", "micro-batches", "int64_t", "4", "Micro-batches m per step">,
    Option<"steps", "steps", "int64_t", "1", "Steps (batches) to write out">,
  ];
  let dependentDialects = ["cdp::sched::SchedDialect"];
}

def CheckDeadlock : Pass<"cdp-check-deadlock", "mlir::ModuleOp"> {
  let summary = "Refuses a schedule whose blocking sends and receives would hang";
  let description = [{
    Simulates every `sched.device` stream with blocking receives: a
    `sched.recv` completes only once its matching `sched.send` (same
    devices, kind, slot and step) has been posted; sends are buffered, as
    pipeline runtimes post them (1F1B itself would hang if sends waited for
    their receives). When no device can move and some have not finished,
    the schedule would hang: the pass reports the op every stuck device
    waits at, and a round x device grid of what each device reached.
  }];
}

def ReuseLayerMemory : Pass<"cdp-reuse-layer-memory", "mlir::ModuleOp"> {
  let summary = "--memory-reuse layer: in-place element-wise ops and gradients released at their hand-off";
  let description = [{
    The layer-centric reuse of Layrub and LaySA, as decisions on @main that
    cdp-plan-memory and the pipelines' stage layout honour; no result bit
    changes.

    - In place: an op with the `ElementwiseInPlace` trait whose result has
      the type of an operand that it uses last (no later user, not a graph
      input, output, parameter or constant; the same of every view that
      shares the operand's block, see cdp-plan-memory) gets `cdp.in_place` = that
      operand's index: the result overwrites it. A backward op prefers the
      forward activation it reads (`dx` over `y`, the gradient aliased to
      the activation it replaces), then the incoming gradient.
    - Gradients (data-parallel step programs): a parameter's gradient is
      handed off at the time step of its stage's `sched.start_reduction`
      (an all-reduce: the contribution is copied when it starts) or
      `sched.absorb_gradients` (laysa). Its `cdp.gradient` gets
      `cdp.release_time` = that time step relative to the slot: the arena
      copy is dead after the step's last op of that time, and the step's
      update reads the reduction's or the mirror's copy. Chain and sharded
      reductions read the gradient later and keep it to the step's end.
    - Gradients (single): each `cdp.update` moves to just after the last
      op that reads its parameter or gradient (PyTorch's optimizer step in
      the backward), and its `cdp.gradient` gets `cdp.release_at_last_use`,
      so the gradient dies at its update. Not with gradient clipping, whose
      norm needs every gradient.

    @main gets `cdp.memory_reuse = "layer"`.

    ```mlir
    %5 = cdp.tanh %4 {cdp.in_place = 0 : i64} : tensor<2x16xf32>
    %9 = cdp.unary_grad %8, %5 {cdp.in_place = 1 : i64, kind = "tanh"} : ...
    cdp.gradient "w1" %11 {cdp.release_time = 6 : i64} : tensor<16x16xf32>
    ```
  }];
}

def PlanMemory : Pass<"cdp-plan-memory", "mlir::ModuleOp"> {
  let summary = "Assigns every step-local tensor a static offset in the device arena";
  let description = [{
    Computes the live range of every value of `@main` in op order (graph
    inputs live for the whole step; values held by `cdp.gradient` for
    `--dump-grads`, the loss and an inference plan's outputs live to its
    end; a training plan's other outputs end at their last reader, and
    `cdp-run --save-outputs` copies them as the last step writes them) and places them in
    one arena, 64-byte aligned: the smallest of three packings, first fit
    in op order, greedy by size (the largest values first, each into the
    tightest gap among the blocks of values live with it) and greedy by
    breadth (the values live at the busiest positions first, each so; the
    greedy ones skipped where more than 30 million pairs of values live
    together, so that the pass stays near-linear on very long graphs). An op's results never
    share memory with its operands, except views: the result of a reshape,
    flatten, squeeze, unsqueeze or identity (trait `ViewOfInput`) lies over
    its input's block when that input is computed by an op (not a graph
    input) and no `cdp.unscale_grads` or `cdp.clip_grad_norm` writes into
    either, so the backends copy nothing for it; the block lives until the
    last of its names is read. Parameters, buffers and constants are
    persistent and not placed.

    The decisions stay on the IR: `cdp.offsets` on each op (one offset per
    result), `cdp.offset` on each argument, `cdp.arena_bytes` on `@main`.

    After cdp-reuse-layer-memory: a result with `cdp.in_place` = i takes
    operand i's block (one live range for both) unless an op after it reads
    that block through a view; a value held by a
    `cdp.gradient` with `cdp.release_time` = t lives to the last op of time
    step t (or its last other use, if later; the update reads another copy),
    one with `cdp.release_at_last_use` to its last use.

    ```mlir
    %0 = cdp.relu %arg0 {cdp.offsets = array<i64: 64>} : tensor<16xf32>
    %1 = cdp.relu %0 {cdp.offsets = array<i64: 128>} : tensor<16xf32>
    %2 = cdp.relu %1 {cdp.offsets = array<i64: 64>} : tensor<16xf32>   // reuses %0's
    %3 = cdp.reshape %2 {cdp.offsets = array<i64: 64>, shape = array<i64: 4, 4>}
        : (tensor<16xf32>) -> tensor<4x4xf32>                           // a view of %2
    ```
  }];
}

#endif // CDP_PASSES_TD
