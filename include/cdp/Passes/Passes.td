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
    `cdp.softmax_cross_entropy_loss`; with `mse` the new argument is float32
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
  ];
  let dependentDialects = ["cdp::CDPDialect"];
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
    biased, as ONNX).

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
  ];
  let dependentDialects = ["cdp::CDPDialect"];
}

def InsertOptimizer : Pass<"cdp-insert-optimizer", "mlir::ModuleOp"> {
  let summary = "Turns each parameter gradient into an optimizer update";
  let description = [{
    After every `cdp.gradient` of a step, appends one `cdp.update` per
    parameter at the end of `@main`, once every use of the old value is done.
    SGD and momentum follow PyTorch (dampening 0, first step sets the buffer
    to the gradient); Adam is PyTorch's with L2 weight decay.
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", "\"sgd\"", "sgd, momentum or adam">,
    Option<"lr", "lr", "double", "0.01", "Learning rate">,
    Option<"momentum", "momentum", "double", "-1", "Momentum (default 0 for sgd, 0.9 for momentum)">,
    Option<"weightDecay", "weight-decay", "double", "0", "L2 weight decay added to the gradient">,
    Option<"beta1", "beta1", "double", "0.9", "Adam beta1">,
    Option<"beta2", "beta2", "double", "0.999", "Adam beta2">,
    Option<"epsilon", "epsilon", "double", "1e-8", "Adam epsilon">,
  ];
  let dependentDialects = ["cdp::CDPDialect"];
}

def PartitionStages : Pass<"cdp-partition-stages", "mlir::ModuleOp"> {
  let summary = "Cuts the forward graph into contiguous, cost-balanced stages";
  let description = [{
    Gives every forward op of `@main` a `cdp.stage` (1..L) such that stages
    are contiguous in op order. With `boundaries`, the cuts fall after the
    named ONNX nodes; otherwise a cost model (multiply-adds of gemm, matmul
    and conv, elements for everything else) balances the cumulative cost,
    cutting where the running total first reaches k/L of it. Parameters and
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
  ];
}

def PlanMemory : Pass<"cdp-plan-memory", "mlir::ModuleOp"> {
  let summary = "Assigns every step-local tensor a static offset in the device arena";
  let description = [{
    Computes the live range of every value of `@main` in op order (graph
    inputs live for the whole step; values returned, or held by
    `cdp.gradient` for `--dump-grads`, live to its end) and places them in
    one arena with first-fit reuse, 64-byte aligned. An op's results never
    share memory with its operands. Parameters, buffers and constants are
    persistent and not placed.

    The decisions stay on the IR: `cdp.offsets` on each op (one offset per
    result), `cdp.offset` on each argument, `cdp.arena_bytes` on `@main`.

    ```mlir
    %0 = cdp.relu %arg0 {cdp.offsets = array<i64: 64>} : tensor<16xf32>
    %1 = cdp.relu %0 {cdp.offsets = array<i64: 128>} : tensor<16xf32>
    %2 = cdp.relu %1 {cdp.offsets = array<i64: 64>} : tensor<16xf32>   // reuses %0's
    ```
  }];
}

#endif // CDP_PASSES_TD
