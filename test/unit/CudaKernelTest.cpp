//===- CudaKernelTest.cpp - every CUDA kernel against the CPU's ----------===//
//
// Each case runs one instruction on the CPU backend and on the GPU with the
// same inputs and compares every output (float32 within the case's
// tolerance, absolute + relative; integers and masks exactly). Without a
// visible GPU every test reports itself skipped, naming the reason.
//
//===----------------------------------------------------------------------===//

#include "cdp/Plan/PlanIO.h"
#include "cdp/Runtime/Communicator.h"
#include "cdp/Runtime/Device.h"
#include "cdp/Runtime/Kernel.h"
#include "device/Cublas.h"
#include "device/CudaDevice.h"
#include "kernels/NarrowFloat.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <tuple>

using namespace cdp;
using namespace cdp::runtime;

namespace {

/// How a tensor's values are drawn.
/// Bfloat16 and Float16: normal values rounded to that format, as the
/// operands of a product marked narrow_operands hold. Nought: zeros (a
/// loss-scale buffer whose step did not overflow). Integers: -8 to 8, whose
/// products' sums are exact in float32 in any order.
enum class Fill {
  Normal,
  Positive,
  Unit,
  Labels,
  Mask,
  Zero,
  Bfloat16,
  Float16,
  Nought,
  Integers,
  MaskedRows // normal, but rows (last axis) 1, 4, ... all -inf, 2, 5, ... NaN
};

struct Spec {
  std::vector<int64_t> shape;
  plan::DType dtype = plan::F32;
  Fill fill = Fill::Normal;
  int64_t range = 0; ///< Labels: values in [0, range)
};

struct Case {
  std::string name, op;
  std::vector<Spec> inputs, outputs;
  std::vector<plan::Attribute> attributes;
  double tolerance = 1e-5;
  int runs = 1; ///< stateful kernels (updates) run several times
};

Spec f32(std::vector<int64_t> shape, Fill fill = Fill::Normal) {
  return {std::move(shape), plan::F32, fill, 0};
}
/// 2-byte values a plan stores under --precision (cdp.pack_narrow's).
Spec stored(std::vector<int64_t> shape, plan::DType dtype) {
  return {std::move(shape), dtype,
          dtype == plan::BF16 ? Fill::Bfloat16 : Fill::Float16, 0};
}
Spec labels(std::vector<int64_t> shape, int64_t range) {
  return {std::move(shape), plan::I64, Fill::Labels, range};
}
Spec i64(std::vector<int64_t> shape) {
  return {std::move(shape), plan::I64, Fill::Zero, 0};
}
Spec mask(std::vector<int64_t> shape) {
  return {std::move(shape), plan::BOOL, Fill::Mask, 0};
}

plan::Attribute attr(const std::string &name, int64_t value) {
  plan::Attribute a;
  a.set_name(name);
  a.set_i(value);
  return a;
}
plan::Attribute real(const std::string &name, double value) {
  plan::Attribute a;
  a.set_name(name);
  a.set_f(value);
  return a;
}
plan::Attribute text(const std::string &name, const std::string &value) {
  plan::Attribute a;
  a.set_name(name);
  a.set_s(value);
  return a;
}
plan::Attribute ints(const std::string &name, std::vector<int64_t> values) {
  plan::Attribute a;
  a.set_name(name);
  for (int64_t v : values)
    a.mutable_ints()->add_values(v);
  return a;
}
plan::Attribute reals(const std::string &name, std::vector<double> values) {
  plan::Attribute a;
  a.set_name(name);
  for (double v : values)
    a.mutable_floats()->add_values(v);
  return a;
}

/// The ops transformer exports bring (where, comparisons and logic, the
/// math they add, the indexing ops, host-staged on the GPU).
std::vector<Case> transformerCases() {
  std::vector<Case> cases = {
      {"where",
       "where",
       {mask({2, 1, 4}), f32({2, 3, 4}), f32({3, 1})},
       {f32({2, 3, 4})}},
      {"where_int",
       "where",
       {mask({5}), labels({5}, 9), labels({1}, 9)},
       {i64({5})}},
      {"min", "min", {f32({4, 3}), f32({3})}, {f32({4, 3})}},
      {"max", "max", {f32({4, 3}), f32({3})}, {f32({4, 3})}},
      {"less_int", "less", {labels({2, 4}, 5), labels({4}, 5)}, {mask({2, 4})}},
      {"greater_or_equal",
       "greater_or_equal",
       {f32({6}), f32({1})},
       {mask({6})}},
      {"and", "and", {mask({3, 4}), mask({4})}, {mask({3, 4})}},
      {"not", "not", {mask({7})}, {mask({7})}},
      {"is_nan", "is_nan", {f32({7})}, {mask({7})}},
      {"gather_elements",
       "gather_elements",
       {f32({3, 4}), labels({2, 4}, 3)},
       {f32({2, 4})},
       {attr("axis", 0)}},
      {"gather_nd",
       "gather_nd",
       {f32({3, 4, 2}), labels({5, 1}, 3)},
       {f32({5, 4, 2})}},
      {"cum_sum", "cum_sum", {f32({3, 4})}, {f32({3, 4})}, {attr("axis", 1)}},
      {"trilu", "trilu", {f32({2, 3, 4})}, {f32({2, 3, 4})}, {attr("k", 1)}},
  };
  for (const char *op : {"sin", "cos", "abs", "exp"})
    cases.push_back({op, op, {f32({33})}, {f32({33})}});
  for (const char *op : {"reciprocal", "log"})
    cases.push_back({op, op, {f32({33}, Fill::Positive)}, {f32({33})}});
  for (const char *kind : {"sin", "cos", "abs", "exp", "reciprocal", "log"})
    cases.push_back({std::string("unary_grad_") + kind,
                     "unary_grad",
                     {f32({33}), f32({33}, Fill::Positive)},
                     {f32({33})},
                     {text("kind", kind)}});
  return cases;
}

std::vector<Case> elementwiseCases() {
  std::vector<Case> cases = {
      {"add_broadcast", "add", {f32({4, 3}), f32({3})}, {f32({4, 3})}},
      {"sub_middle", "sub", {f32({2, 3, 4}), f32({2, 1, 4})}, {f32({2, 3, 4})}},
      {"mul", "mul", {f32({5, 7}), f32({5, 7})}, {f32({5, 7})}},
      {"div", "div", {f32({6}), f32({6}, Fill::Positive)}, {f32({6})}},
      // round_result: the cdp.round_to after the op, as it writes.
      {"mul_round_bf16",
       "mul",
       {f32({33}), f32({33})},
       {f32({33})},
       {text("round_result", "bf16")}},
      // A 2-byte operand widened as read, the result stored in 2 bytes
      // (GPT-2's scaling of q and k; compared bit for bit).
      {"mul_bf16_operand_and_result",
       "mul",
       {stored({2, 3, 8}, plan::BF16), f32({1})},
       {stored({2, 3, 8}, plan::BF16)},
       {text("round_result", "bf16")}},
      // The residual add: a 2-byte operand read widened, no rounding.
      {"add_bf16_operand",
       "add",
       {stored({3, 8}, plan::BF16), f32({3, 8})},
       {f32({3, 8})}},
      {"mul_f16_operand_float32_result",
       "mul",
       {stored({4, 5}, plan::F16), f32({5})},
       {f32({4, 5})},
       {text("round_result", "f16")}},
      {"add_broadcast_round_f16",
       "add",
       {f32({3, 1}), f32({4})},
       {f32({3, 4})},
       {text("round_result", "f16")}},
      {"pow_square", "pow", {f32({9}), f32({1}, Fill::Zero)}, {f32({9})}},
      {"add_int", "add", {labels({4}, 9), labels({4}, 9)}, {i64({4})}},
      {"cast_to_int", "cast", {f32({7})}, {i64({7})}},
      {"cast_to_float", "cast", {labels({7}, 50)}, {f32({7})}},
      {"reduce_to", "reduce_to", {f32({4, 3, 5})}, {f32({3, 1})}},
      // A gradient stored in 2 bytes (cdp-narrow-results), summed widened.
      {"reduce_to_bf16_stored",
       "reduce_to",
       {stored({64, 48}, plan::BF16)},
       {f32({48})}},
      // A bias's gradient under autocast, rounded as it is written
      // (cdp-fuse-roundings); bf16 sums in double are exact in any order.
      {"reduce_to_rounded",
       "reduce_to",
       {stored({64, 48}, plan::BF16)},
       {f32({48})},
       {text("round_result", "bf16")},
       0.0},
      {"reduce_to_f16_stored",
       "reduce_to",
       {stored({4, 3, 5}, plan::F16)},
       {f32({3, 1})}},
      {"expand", "expand", {f32({3, 1})}, {f32({2, 3, 4})}},
  };
  for (const char *op :
       {"relu", "erf", "tanh", "sigmoid", "hard_swish", "silu"})
    cases.push_back({op, op, {f32({33})}, {f32({33})}});
  cases.push_back({"sqrt", "sqrt", {f32({33}, Fill::Positive)}, {f32({33})}});
  cases.push_back({"clip",
                   "clip",
                   {f32({33})},
                   {f32({33})},
                   {real("min", -0.5), real("max", 0.7)}});
  cases.push_back({"hard_sigmoid", "hard_sigmoid", {f32({33})}, {f32({33})}});
  cases.push_back({"gelu", "gelu", {f32({33})}, {f32({33})}});
  cases.push_back({"gelu_tanh",
                   "gelu",
                   {f32({33})},
                   {f32({33})},
                   {text("approximate", "tanh")}});
  // round_result: the backends' GELUs may differ in a float's last bits,
  // which can tip a rounding by one bf16 step (0.8 %); relu's gradient is
  // exact in both, so its rounded values must be equal.
  cases.push_back({"gelu_tanh_round_result",
                   "gelu",
                   {f32({33})},
                   {f32({33})},
                   {text("approximate", "tanh"), text("round_result", "bf16")},
                   1e-2});
  cases.push_back({"unary_grad_relu_stored",
                   "unary_grad",
                   {f32({40}), f32({40})},
                   {stored({40}, plan::BF16)},
                   {text("kind", "relu"), text("round_result", "bf16")}});
  // The saved value read from the backward's 2-byte copy
  // (cdp-read-narrow-operands: GELU's gradient reads the packed c_fc result).
  cases.push_back({"unary_grad_gelu_tanh_saved_stored",
                   "unary_grad",
                   {f32({40}), stored({40}, plan::BF16)},
                   {stored({40}, plan::BF16)},
                   {text("kind", "gelu_tanh"), text("round_result", "bf16")}});
  cases.push_back({"unary_grad_gelu_saved_stored_f16",
                   "unary_grad",
                   {f32({40}), stored({40}, plan::F16)},
                   {f32({40})},
                   {text("kind", "gelu")}});
  // GELU reading the backward's 2-byte copy of its input.
  cases.push_back({"gelu_bf16_input",
                   "gelu",
                   {stored({40}, plan::BF16)},
                   {f32({40})},
                   {text("approximate", "tanh"), text("round_result", "bf16")},
                   1e-2});
  // And its result stored in 2 bytes (compared bit for bit: a last-bit
  // difference of tanh between the backends could flip a rounding).
  cases.push_back(
      {"gelu_bf16_stored_result",
       "gelu",
       {stored({40}, plan::BF16)},
       {stored({40}, plan::BF16)},
       {text("approximate", "tanh"), text("round_result", "bf16")}});
  // The incoming gradient stored in 2 bytes (a product's rounded result).
  cases.push_back({"unary_grad_gelu_tanh_bf16_grad",
                   "unary_grad",
                   {stored({40}, plan::BF16), f32({40})},
                   {f32({40})},
                   {text("kind", "gelu_tanh"), text("round_result", "bf16")},
                   1e-5});
  cases.push_back({"unary_grad_relu_round_result",
                   "unary_grad",
                   {f32({40}), f32({40})},
                   {f32({40})},
                   {text("kind", "relu"), text("round_result", "bf16")},
                   0});
  for (const char *kind : {"relu", "gelu", "gelu_tanh", "erf", "hard_swish",
                           "tanh", "sigmoid", "silu"})
    cases.push_back({std::string("grad_") + kind,
                     "unary_grad",
                     {f32({40}), f32({40}, Fill::Unit)},
                     {f32({40})},
                     {text("kind", kind)}});
  cases.push_back({"grad_sqrt",
                   "unary_grad",
                   {f32({40}), f32({40}, Fill::Positive)},
                   {f32({40})},
                   {text("kind", "sqrt")}});
  cases.push_back({"grad_clip",
                   "unary_grad",
                   {f32({40}), f32({40})},
                   {f32({40})},
                   {text("kind", "clip"), reals("params", {-0.5, 0.5})}});
  cases.push_back(
      {"dropout",
       "dropout",
       {f32({1000})},
       {f32({1000}), mask({1000})},
       {real("ratio", 0.3), attr("training_mode", 1), attr("seed", 11)}});
  cases.push_back({"dropout_grad",
                   "dropout_grad",
                   {f32({100}), mask({100})},
                   {f32({100})},
                   {real("ratio", 0.3)}});
  cases.push_back({"dropout_round_bf16",
                   "dropout",
                   {f32({1000})},
                   {f32({1000}), mask({1000})},
                   {real("ratio", 0.3), attr("training_mode", 1),
                    attr("seed", 11), text("round_result", "bf16")}});
  cases.push_back({"dropout_grad_bf16_stored_result",
                   "dropout_grad",
                   {f32({100}), mask({100})},
                   {stored({100}, plan::BF16)},
                   {real("ratio", 0.3), text("round_result", "bf16")}});
  // A 2-byte input widened as read, the output stored in 2 bytes (the
  // residual branch under bf16; compared bit for bit, masks too).
  cases.push_back({"dropout_bf16_input_and_output",
                   "dropout",
                   {stored({1000}, plan::BF16)},
                   {stored({1000}, plan::BF16), mask({1000})},
                   {real("ratio", 0.3), attr("training_mode", 1),
                    attr("seed", 11), text("round_result", "bf16")}});
  cases.push_back({"dropout_grad_round_f16",
                   "dropout_grad",
                   {f32({100}), mask({100})},
                   {f32({100})},
                   {real("ratio", 0.3), text("round_result", "f16")}});
  return cases;
}

std::vector<Case> shapeCases() {
  return {
      {"reshape", "reshape", {f32({2, 6})}, {f32({3, 4})}},
      {"transpose",
       "transpose",
       {f32({2, 3, 4})},
       {f32({4, 2, 3})},
       {ints("perm", {2, 0, 1})}},
      // 2-byte values (cdp-narrow-results carries them through the heads'
      // transposes): copied as 2-byte elements, not bytes.
      {"transpose_bf16_stored",
       "transpose",
       {stored({2, 3, 4}, plan::BF16)},
       {stored({4, 2, 3}, plan::BF16)},
       {ints("perm", {2, 0, 1})}},
      {"slice_f16_stored",
       "slice",
       {stored({6, 8}, plan::F16)},
       {stored({2, 3}, plan::F16)},
       {ints("starts", {1, 2}), ints("ends", {5, 8}), ints("axes", {0, 1}),
        ints("steps", {2, 2})}},
      {"concat",
       "concat",
       {f32({2, 3, 2}), f32({2, 1, 2})},
       {f32({2, 4, 2})},
       {attr("axis", 1)}},
      {"split",
       "split",
       {f32({2, 5, 2})},
       {f32({2, 2, 2}), f32({2, 3, 2})},
       {attr("axis", 1)}},
      {"slice",
       "slice",
       {f32({6, 8})},
       {f32({2, 3})},
       {ints("starts", {1, 7}), ints("ends", {5, 1}), ints("axes", {0, -1}),
        ints("steps", {2, -2})}},
      {"slice_grad",
       "slice_grad",
       {f32({2, 3})},
       {f32({6, 8})},
       {ints("starts", {1, 7}), ints("ends", {5, 1}), ints("axes", {0, -1}),
        ints("steps", {2, -2})}},
      {"pad",
       "pad",
       {f32({2, 3})},
       {f32({4, 6})},
       {ints("pads", {1, 2, 1, 1}), real("value", 0.5)}},
      {"pad_bf16_stored",
       "pad",
       {stored({2, 3}, plan::BF16)},
       {stored({4, 6}, plan::BF16)},
       {ints("pads", {1, 2, 1, 1})}},
      {"gather",
       "gather",
       {f32({5, 4}), labels({3}, 5)},
       {f32({3, 4})},
       {attr("axis", 0)}},
      {"gather_grad",
       "gather_grad",
       {f32({6, 4}), labels({6}, 5)},
       {f32({5, 4})},
       {attr("axis", 0)}},
      // Rows inside an outer dimension, indices of two dimensions.
      {"gather_axis1",
       "gather",
       {f32({2, 5, 3}), labels({2, 2}, 5)},
       {f32({2, 2, 2, 3})},
       {attr("axis", 1)}},
      // 600 positions over 7 rows (runs across tiles and blocks), summed
      // in position order as the CPU sums: the same bits (tolerance 0).
      {"gather_grad_repeated_rows",
       "gather_grad",
       {f32({600, 4}), labels({600}, 7)},
       {f32({7, 4})},
       {attr("axis", 0)},
       0.0},
      {"gather_grad_padding_row",
       "gather_grad",
       {f32({600, 4}), labels({600}, 7)},
       {f32({7, 4})},
       {attr("axis", 0), attr("padding_idx", 3)},
       0.0},
      {"gather_grad_axis1",
       "gather_grad",
       {f32({2, 2, 2, 3}), labels({2, 2}, 5)},
       {f32({2, 5, 3})},
       {attr("axis", 1)}},
      // Rows of 6 bytes: copied byte by byte.
      {"gather_bf16_odd_rows",
       "gather",
       {stored({5, 3}, plan::BF16), labels({4}, 5)},
       {stored({4, 3}, plan::BF16)},
       {attr("axis", 0)}},
      {"reduce_sum",
       "reduce_sum",
       {f32({3, 4, 5})},
       {f32({3, 1, 1})},
       {ints("axes", {1, 2})}},
      {"reduce_mean",
       "reduce_mean",
       {f32({3, 4, 5})},
       {f32({1, 4, 1})},
       {ints("axes", {0, -1})}},
      {"shape", "shape", {f32({3, 4, 5})}, {i64({2})}, {attr("start", 1)}},
  };
}

std::vector<Case> linalgCases() {
  return {
      {"gemm_bias",
       "gemm",
       {f32({7, 5}), f32({6, 5}), f32({6})},
       {f32({7, 6})},
       {attr("trans_b", 1), real("alpha", 0.5), real("beta", 2.0)},
       1e-5},
      {"gemm_trans_a",
       "gemm",
       {f32({5, 7}), f32({5, 6})},
       {f32({7, 6})},
       {attr("trans_a", 1)},
       1e-5},
      // A bias (beta 1) cuBLASLt's epilogue adds as it writes the result.
      {"gemm_bias_epilogue",
       "gemm",
       {f32({33, 20}), f32({20, 24}), f32({24})},
       {f32({33, 24})},
       {real("alpha", 0.5)},
       1e-5},
      {"gemm_bias_epilogue_trans_a_b",
       "gemm",
       {f32({20, 33}), f32({24, 20}), f32({1, 24})},
       {f32({33, 24})},
       {attr("trans_a", 1), attr("trans_b", 1)},
       1e-5},
      // activation "relu" (cdp-fuse-relu): with a bias, cuBLASLt's
      // RELU_BIAS epilogue; without one, a kernel after cuBLAS.
      {"gemm_relu_bias",
       "gemm",
       {f32({33, 20}), f32({24, 20}), f32({24})},
       {f32({33, 24})},
       {attr("trans_b", 1), text("activation", "relu")},
       1e-5},
      {"gemm_relu",
       "gemm",
       {f32({20, 33}), f32({20, 24})},
       {f32({33, 24})},
       {attr("trans_a", 1), text("activation", "relu")},
       1e-5},
      {"matmul_batched",
       "matmul",
       {f32({2, 3, 4, 5}), f32({5, 6})},
       {f32({2, 3, 4, 6})},
       {},
       1e-5},
      {"matmul_broadcast",
       "matmul",
       {f32({2, 1, 4, 5}), f32({3, 5, 6})},
       {f32({2, 3, 4, 6})},
       {},
       1e-5},
      {"matmul_trans_a_b",
       "matmul",
       {f32({2, 1, 5, 4}), f32({3, 6, 5})},
       {f32({2, 3, 4, 6})},
       {attr("trans_a", 1), attr("trans_b", 1)},
       1e-5},
      {"matmul_small_trans_b",
       "matmul",
       {f32({32, 6, 8}), f32({32, 6, 8})},
       {f32({32, 6, 6})},
       {attr("trans_b", 1)},
       1e-5},
      // Marked narrow_operands: the GPU multiplies 2-byte copies on tensor
      // cores with float32 sums, the CPU the float32 values; the products
      // are exact, so only the order of the sums differs.
      {"gemm_bf16",
       "gemm",
       {f32({64, 48}, Fill::Bfloat16), f32({40, 48}, Fill::Bfloat16),
        f32({40})},
       {f32({64, 40})},
       {attr("trans_b", 1), real("alpha", 0.5), real("beta", 2.0),
        text("narrow_operands", "bf16")},
       1e-4},
      {"matmul_bf16_stacked",
       "matmul",
       {f32({2, 3, 16, 24}, Fill::Bfloat16), f32({24, 40}, Fill::Bfloat16)},
       {f32({2, 3, 16, 40})},
       {text("narrow_operands", "bf16")},
       1e-4},
      {"matmul_bf16_broadcast",
       "matmul",
       {f32({2, 1, 16, 24}, Fill::Bfloat16), f32({3, 24, 40}, Fill::Bfloat16)},
       {f32({2, 3, 16, 40})},
       {text("narrow_operands", "bf16")},
       1e-4},
      {"matmul_f16_trans_a_b",
       "matmul",
       {f32({2, 1, 24, 16}, Fill::Float16), f32({3, 40, 24}, Fill::Float16)},
       {f32({2, 3, 16, 40})},
       {attr("trans_a", 1), attr("trans_b", 1), text("narrow_operands", "f16")},
       1e-4},
      // Operands the plan stores in 2 bytes (cdp-read-narrow-operands): read
      // in place, as one matrix for every product, or gathered where
      // broadcasting repeats them; beside a float32 operand converted.
      {"gemm_bf16_stored",
       "gemm",
       {stored({64, 48}, plan::BF16), f32({40, 48}, Fill::Bfloat16), f32({40})},
       {f32({64, 40})},
       {attr("trans_b", 1), text("narrow_operands", "bf16")},
       1e-4},
      {"matmul_bf16_stored_one_for_all",
       "matmul",
       {stored({2, 3, 24, 16}, plan::BF16), stored({24, 40}, plan::BF16)},
       {f32({2, 3, 16, 40})},
       {attr("trans_a", 1), text("narrow_operands", "bf16")},
       1e-4},
      // round_result: the product's values rounded as it writes them.
      // Integer operands make the float32 sums exact in any order, so the
      // rounded results are equal bit for bit (many sums need rounding).
      {"gemm_bf16_round_result",
       "gemm",
       {{{64, 48}, plan::BF16, Fill::Integers},
        f32({40, 48}, Fill::Integers),
        f32({40}, Fill::Integers)},
       {f32({64, 40})},
       {attr("trans_b", 1), text("narrow_operands", "bf16"),
        text("round_result", "bf16")},
       0},
      // The rounded result stored in 2 bytes (cdp-narrow-results): cuBLAS
      // writes it, C converted into it first; exact integer sums again.
      {"gemm_bf16_stored_result",
       "gemm",
       {{{64, 48}, plan::BF16, Fill::Integers},
        f32({40, 48}, Fill::Integers),
        f32({40}, Fill::Integers)},
       {stored({64, 40}, plan::BF16)},
       {attr("trans_b", 1), text("narrow_operands", "bf16"),
        text("round_result", "bf16")},
       0},
      {"matmul_bf16_stored_result",
       "matmul",
       {f32({2, 3, 16, 48}, Fill::Integers),
        {{48, 40}, plan::BF16, Fill::Integers}},
       {stored({2, 3, 16, 40}, plan::BF16)},
       {text("narrow_operands", "bf16"), text("round_result", "bf16")},
       0},
      {"matmul_round_result",
       "matmul",
       {f32({2, 3, 16, 48}, Fill::Integers), f32({3, 48, 40}, Fill::Integers)},
       {f32({2, 3, 16, 40})},
       {text("round_result", "bf16")},
       0},
      {"matmul_f16_stored_gathered",
       "matmul",
       {stored({2, 1, 24, 16}, plan::F16), stored({3, 40, 24}, plan::F16)},
       {f32({2, 3, 16, 40})},
       {attr("trans_a", 1), attr("trans_b", 1), text("narrow_operands", "f16")},
       1e-4},
  };
}

std::vector<plan::Attribute> convAttributes(int64_t pad, int64_t stride,
                                            int64_t group) {
  return {ints("pads", {pad, pad, pad, pad}), ints("strides", {stride, stride}),
          ints("dilations", {1, 1}), attr("group", group)};
}

std::vector<Case> convolutionCases() {
  return {
      {"conv_bias",
       "conv",
       {f32({2, 3, 9, 9}), f32({4, 3, 3, 3}), f32({4})},
       {f32({2, 4, 9, 9})},
       convAttributes(1, 1, 1),
       1e-5},
      {"conv_grouped_strided",
       "conv",
       {f32({2, 4, 9, 9}), f32({6, 2, 3, 3})},
       {f32({2, 6, 4, 4})},
       convAttributes(0, 2, 2),
       1e-5},
      {"conv_grad_input",
       "conv_grad_input",
       {f32({2, 4, 9, 9}), f32({4, 3, 3, 3})},
       {f32({2, 3, 9, 9})},
       convAttributes(1, 1, 1),
       1e-5},
      {"conv_grad_weight",
       "conv_grad_weight",
       {f32({2, 6, 4, 4}), f32({2, 4, 9, 9})},
       {f32({6, 2, 3, 3})},
       convAttributes(0, 2, 2),
       1e-5},
      // Our deterministic kernel's filters (1x1, 3x3, 5x5, 7x7): 4096
      // positions summed in 4 parts, padding, a stride, a dilation.
      {"conv_grad_weight_padded_parts",
       "conv_grad_weight",
       {f32({16, 8, 16, 16}), f32({16, 8, 16, 16})},
       {f32({8, 8, 3, 3})},
       convAttributes(1, 1, 1),
       1e-4},
      {"conv_grad_weight_5x5",
       "conv_grad_weight",
       {f32({2, 6, 5, 5}), f32({2, 3, 9, 9})},
       {f32({6, 3, 5, 5})},
       convAttributes(0, 1, 1),
       1e-5},
      {"conv_grad_weight_1x1_strided",
       "conv_grad_weight",
       {f32({2, 4, 5, 5}), f32({2, 3, 9, 9})},
       {f32({4, 3, 1, 1})},
       convAttributes(0, 2, 1),
       1e-5},
      {"conv_grad_weight_dilated",
       "conv_grad_weight",
       {f32({2, 4, 9, 9}), f32({2, 3, 9, 9})},
       {f32({4, 3, 3, 3})},
       {ints("pads", {2, 2, 2, 2}), ints("strides", {1, 1}),
        ints("dilations", {2, 2}), attr("group", 1)},
       1e-5},
      // A 2x2 filter stays with cuDNN.
      {"conv_grad_weight_2x2",
       "conv_grad_weight",
       {f32({2, 4, 8, 8}), f32({2, 3, 9, 9})},
       {f32({4, 3, 2, 2})},
       convAttributes(0, 1, 1),
       1e-5},
  };
}

std::vector<plan::Attribute> poolAttributes() {
  return {ints("kernel_shape", {3, 3}), ints("pads", {1, 1, 1, 1}),
          ints("strides", {2, 2})};
}

std::vector<Case> normalizationCases() {
  std::vector<plan::Attribute> norm = {
      real("epsilon", 1e-5), real("momentum", 0.9), attr("training_mode", 1),
      attr("unbiased_running_var", 1)};
  std::vector<plan::Attribute> withRelu = norm;
  withRelu.push_back(text("activation", "relu"));
  // Autocast's batch norm in a bf16 plan (cdp-fuse-roundings, then
  // cdp-fuse-relu): the ReLU, then the rounding; one bf16 step apart at
  // most where the float32 values differ in their last bits.
  std::vector<plan::Attribute> roundedRelu = withRelu, rounded = norm;
  roundedRelu.push_back(text("round_result", "bf16"));
  rounded.push_back(text("round_result", "bf16"));
  return {
      {"batch_norm_relu_round_bf16",
       "batch_norm",
       {f32({4, 3, 5, 5}), f32({3}), f32({3}), f32({3}),
        f32({3}, Fill::Positive)},
       {f32({4, 3, 5, 5}), f32({3}), f32({3})},
       roundedRelu,
       1e-2},
      {"batch_norm_grad_round_bf16",
       "batch_norm_grad",
       {f32({4, 3, 5, 5}), f32({4, 3, 5, 5}), f32({3}), f32({3}),
        f32({3}, Fill::Positive)},
       {f32({4, 3, 5, 5}), f32({3}), f32({3})},
       rounded,
       1e-2},
      {"batch_norm",
       "batch_norm",
       {f32({4, 3, 5, 5}), f32({3}), f32({3}), f32({3}),
        f32({3}, Fill::Positive)},
       {f32({4, 3, 5, 5}), f32({3}), f32({3})},
       norm},
      // cdp-fuse-relu's: the ReLU applied by the element-wise pass.
      {"batch_norm_relu",
       "batch_norm",
       {f32({4, 3, 5, 5}), f32({3}), f32({3}), f32({3}),
        f32({3}, Fill::Positive)},
       {f32({4, 3, 5, 5}), f32({3}), f32({3})},
       withRelu},
      {"batch_norm_grad",
       "batch_norm_grad",
       {f32({4, 3, 5, 5}), f32({4, 3, 5, 5}), f32({3}), f32({3}),
        f32({3}, Fill::Positive)},
       {f32({4, 3, 5, 5}), f32({3}), f32({3})},
       norm},
      {"layer_norm",
       "layer_norm",
       {f32({6, 8, 32}), f32({32}), f32({32})},
       {f32({6, 8, 32}), f32({6, 8, 1}), f32({6, 8, 1})},
       {attr("axis", -1), real("epsilon", 1e-5)}},
      // The output rounded and stored in 2 bytes (cdp-narrow-results: read
      // only by the next product's pack); one bf16 step apart at most.
      {"layer_norm_bf16_stored_output",
       "layer_norm",
       {f32({6, 8, 32}), f32({32}), f32({32})},
       {stored({6, 8, 32}, plan::BF16), f32({6, 8, 1}), f32({6, 8, 1})},
       {attr("axis", -1), real("epsilon", 1e-5), text("round_result", "bf16")},
       1e-2},
      // RMSNorm: no mean subtracted (the mean result all zeros), no bias.
      {"layer_norm_rms",
       "layer_norm",
       {f32({6, 8, 32}), f32({32})},
       {f32({6, 8, 32}), f32({6, 8, 1}), f32({6, 8, 1})},
       {attr("axis", -1), real("epsilon", 1e-6), attr("rms", 1)}},
      // Its gradient reads no mean (the operand here is not zeros: a kernel
      // reading it would differ from the CPU's).
      {"layer_norm_grad_rms",
       "layer_norm_grad",
       {f32({6, 8, 32}), f32({6, 8, 32}), f32({32}), f32({6, 8, 1}),
        f32({6, 8, 1}, Fill::Positive)},
       {f32({6, 8, 32}), f32({32}), f32({32})},
       {attr("axis", -1), attr("rms", 1)}},
      // The rotary embedding: tables broadcast over the batch and heads (a
      // last axis of 1 for sin), forward and adjoint.
      {"rotary",
       "rotary",
       {f32({2, 3, 8, 16}), f32({1, 1, 8, 16}), f32({8, 1})},
       {f32({2, 3, 8, 16})},
       {}},
      {"rotary_adjoint",
       "rotary",
       {f32({2, 3, 8, 16}), f32({1, 1, 8, 16}), f32({1, 3, 8, 16})},
       {f32({2, 3, 8, 16})},
       {attr("adjoint", 1)}},
      // Laid out for (B, S, H, D) (cdp-fold-attention-transposes: the
      // tables (1, S, 1, D)); the adjoint under bf16 autocast rounds each
      // product to bf16 before the sum.
      {"rotary_bshd_tables",
       "rotary",
       {f32({2, 8, 3, 16}), f32({1, 8, 1, 16}), f32({1, 8, 1, 16})},
       {f32({2, 8, 3, 16})},
       {}},
      {"rotary_adjoint_bf16",
       "rotary",
       {f32({2, 8, 3, 16}, Fill::Bfloat16), f32({1, 8, 1, 16}),
        f32({1, 8, 1, 16})},
       {f32({2, 8, 3, 16})},
       {attr("adjoint", 1), text("narrow_operands", "bf16")}},
      {"layer_norm_grad",
       "layer_norm_grad",
       {f32({6, 8, 32}), f32({6, 8, 32}), f32({32}), f32({6, 8, 1}),
        f32({6, 8, 1}, Fill::Positive)},
       {f32({6, 8, 32}), f32({32}), f32({32})},
       {attr("axis", -1)}},
      // 50 rows: the parameters' sums in three parts of 17, 17 and 16.
      {"layer_norm_grad_uneven_parts",
       "layer_norm_grad",
       {f32({5, 10, 32}), f32({5, 10, 32}), f32({32}), f32({5, 10, 1}),
        f32({5, 10, 1}, Fill::Positive)},
       {f32({5, 10, 32}), f32({32}), f32({32})},
       {attr("axis", -1)}},
      // dx added to an addend (cdp-fuse-gradient-sums: the residual
      // stream's gradient).
      {"layer_norm_grad_addend",
       "layer_norm_grad",
       {f32({6, 8, 32}), f32({6, 8, 32}), f32({32}), f32({6, 8, 1}),
        f32({6, 8, 1}, Fill::Positive), f32({6, 8, 32})},
       {f32({6, 8, 32}), f32({32}), f32({32})},
       {attr("axis", -1)}},
      // The incoming gradient stored in 2 bytes (the next product's rounded
      // input gradient), widened as read.
      {"layer_norm_grad_bf16_grad",
       "layer_norm_grad",
       {stored({6, 8, 32}, plan::BF16), f32({6, 8, 32}), f32({32}),
        f32({6, 8, 1}), f32({6, 8, 1}, Fill::Positive)},
       {f32({6, 8, 32}), f32({32}), f32({32})},
       {attr("axis", -1)}},
      {"softmax",
       "softmax",
       {f32({4, 7, 3})},
       {f32({4, 7, 3})},
       {attr("axis", 1)}},
      {"softmax_bias",
       "softmax",
       {f32({2, 3, 5, 7}), f32({2, 1, 5, 7})},
       {f32({2, 3, 5, 7})}},
      {"softmax_bias_axis1",
       "softmax",
       {f32({4, 7, 3}), f32({7, 1})},
       {f32({4, 7, 3})},
       {attr("axis", 1)}},
      {"softmax_zero_nan_rows",
       "softmax",
       {f32({6, 7}, Fill::MaskedRows)},
       {f32({6, 7})},
       {attr("zero_nan_rows", 1)}},
      // cdp.attention: the GPU's chunked products and row kernels against
      // the CPU's slice loop; random stats for the backward are fine, both
      // recompute the same probabilities from them.
      {"attention_bias",
       "attention",
       {f32({2, 3, 8, 16}, Fill::Unit), f32({2, 3, 16, 12}, Fill::Unit),
        f32({2, 3, 12, 8}), f32({2, 1, 8, 12})},
       {f32({2, 3, 8, 8}), f32({2, 3, 8, 2})},
       {attr("zero_nan_rows", 1)},
       1e-4},
      // A scale of the scores (cdp-fold-attention-scale): the first
      // product's alpha, and the operand gradients' products'.
      {"attention_scaled",
       "attention",
       {f32({2, 3, 8, 16}, Fill::Unit), f32({2, 3, 16, 12}, Fill::Unit),
        f32({2, 3, 12, 8}), f32({2, 1, 8, 12})},
       {f32({2, 3, 8, 8}), f32({2, 3, 8, 2})},
       {attr("zero_nan_rows", 1), real("scale", 0.3)},
       1e-4},
      {"attention_grad_scaled_bias",
       "attention_grad",
       {f32({2, 3, 8, 8}), f32({2, 3, 8, 16}, Fill::Unit),
        f32({2, 3, 16, 12}, Fill::Unit), f32({2, 3, 12, 8}),
        f32({2, 3, 8, 2}, Fill::Unit), f32({1, 3, 8, 12})},
       {f32({2, 3, 8, 16}), f32({2, 3, 16, 12}), f32({2, 3, 12, 8}),
        f32({1, 3, 8, 12})},
       {attr("with_bias_grad", 1), real("scale", 0.3)},
       1e-4},
      {"attention_bf16",
       "attention",
       {f32({2, 3, 8, 16}, Fill::Bfloat16), f32({2, 3, 16, 12}, Fill::Bfloat16),
        f32({2, 3, 12, 8}, Fill::Bfloat16)},
       {f32({2, 3, 8, 8}), f32({2, 3, 8, 2})},
       {text("narrow_operands", "bf16"), text("round_result", "bf16")},
       2e-2},
      // q, k and v the plan stores in 2 bytes (cdp-read-narrow-operands),
      // read in place on the GPU.
      {"attention_bf16_stored",
       "attention",
       {stored({2, 3, 8, 16}, plan::BF16), stored({2, 3, 16, 12}, plan::BF16),
        stored({2, 3, 12, 8}, plan::BF16), f32({2, 1, 8, 12})},
       {f32({2, 3, 8, 8}), f32({2, 3, 8, 2})},
       {text("narrow_operands", "bf16")},
       2e-2},
      {"attention_grad_bf16_stored",
       "attention_grad",
       {f32({2, 3, 8, 8}, Fill::Bfloat16), stored({2, 3, 8, 16}, plan::BF16),
        stored({2, 3, 16, 12}, plan::BF16), stored({2, 3, 12, 8}, plan::BF16),
        f32({2, 3, 8, 2}, Fill::Unit)},
       {f32({2, 3, 8, 16}), f32({2, 3, 16, 12}), f32({2, 3, 12, 8})},
       {text("narrow_operands", "bf16")},
       2e-2},
      // The incoming gradient stored in 2 bytes too (cdp-narrow-results:
      // the output projection's rounded input gradient).
      {"attention_grad_bf16_stored_grad",
       "attention_grad",
       {stored({2, 3, 8, 8}, plan::BF16), stored({2, 3, 8, 16}, plan::BF16),
        stored({2, 3, 16, 12}, plan::BF16), stored({2, 3, 12, 8}, plan::BF16),
        f32({2, 3, 8, 2}, Fill::Unit)},
       {f32({2, 3, 8, 16}), f32({2, 3, 16, 12}), f32({2, 3, 12, 8})},
       {text("narrow_operands", "bf16")},
       2e-2},
      // The result and the gradients of q, k and v stored in 2 bytes
      // (cdp-narrow-results): cuBLAS writes bf16 from its float32 sums.
      {"attention_bf16_stored_result",
       "attention",
       {stored({2, 3, 8, 16}, plan::BF16), stored({2, 3, 16, 12}, plan::BF16),
        stored({2, 3, 12, 8}, plan::BF16)},
       {stored({2, 3, 8, 8}, plan::BF16), f32({2, 3, 8, 2})},
       {text("narrow_operands", "bf16"), text("round_result", "bf16")},
       2e-2},
      {"attention_grad_bf16_stored_gradients",
       "attention_grad",
       {stored({2, 3, 8, 8}, plan::BF16), stored({2, 3, 8, 16}, plan::BF16),
        stored({2, 3, 16, 12}, plan::BF16), stored({2, 3, 12, 8}, plan::BF16),
        f32({2, 3, 8, 2}, Fill::Unit)},
       {stored({2, 3, 8, 16}, plan::BF16), stored({2, 3, 16, 12}, plan::BF16),
        stored({2, 3, 12, 8}, plan::BF16)},
       {text("narrow_operands", "bf16")},
       2e-2},
      {"attention_grad_bias",
       "attention_grad",
       {f32({2, 3, 8, 8}), f32({2, 3, 8, 16}, Fill::Unit),
        f32({2, 3, 16, 12}, Fill::Unit), f32({2, 3, 12, 8}),
        f32({2, 3, 8, 2}, Fill::Unit), f32({1, 3, 8, 12})},
       {f32({2, 3, 8, 16}), f32({2, 3, 16, 12}), f32({2, 3, 12, 8}),
        f32({1, 3, 8, 12})},
       {attr("with_bias_grad", 1)},
       1e-4},
      {"attention_grad_bf16",
       "attention_grad",
       {f32({2, 3, 8, 8}, Fill::Bfloat16), f32({2, 3, 8, 16}, Fill::Bfloat16),
        f32({2, 3, 16, 12}, Fill::Bfloat16), f32({2, 3, 12, 8}, Fill::Bfloat16),
        f32({2, 3, 8, 2}, Fill::Unit)},
       {f32({2, 3, 8, 16}), f32({2, 3, 16, 12}), f32({2, 3, 12, 8})},
       {text("narrow_operands", "bf16")},
       2e-2},
      // Layout "bshd" (cdp-fold-attention-transposes): q, the keys and v
      // as (B, S, H, D), each head's matrix read in place (rows H * D
      // apart; the keys transposed), the result and the gradients written
      // so; a chunk per batch row.
      {"attention_bshd_bias",
       "attention",
       {f32({2, 8, 3, 16}, Fill::Unit), f32({2, 12, 3, 16}, Fill::Unit),
        f32({2, 12, 3, 8}), f32({2, 1, 8, 12})},
       {f32({2, 8, 3, 8}), f32({2, 3, 8, 2})},
       {text("layout", "bshd"), attr("zero_nan_rows", 1), real("scale", 0.3)},
       1e-4},
      {"attention_grad_bshd_bias",
       "attention_grad",
       {f32({2, 8, 3, 8}), f32({2, 8, 3, 16}, Fill::Unit),
        f32({2, 12, 3, 16}, Fill::Unit), f32({2, 12, 3, 8}),
        f32({2, 3, 8, 2}, Fill::Unit), f32({1, 3, 8, 12})},
       {f32({2, 8, 3, 16}), f32({2, 12, 3, 16}), f32({2, 12, 3, 8}),
        f32({1, 3, 8, 12})},
       {text("layout", "bshd"), attr("with_bias_grad", 1), real("scale", 0.3)},
       1e-4},
      {"attention_bshd_bf16",
       "attention",
       {f32({2, 8, 3, 16}, Fill::Bfloat16), f32({2, 12, 3, 16}, Fill::Bfloat16),
        f32({2, 12, 3, 8}, Fill::Bfloat16)},
       {f32({2, 8, 3, 8}), f32({2, 3, 8, 2})},
       {text("layout", "bshd"), text("narrow_operands", "bf16"),
        text("round_result", "bf16")},
       2e-2},
      {"attention_grad_bshd_bf16",
       "attention_grad",
       {f32({2, 8, 3, 8}, Fill::Bfloat16), f32({2, 8, 3, 16}, Fill::Bfloat16),
        f32({2, 12, 3, 16}, Fill::Bfloat16), f32({2, 12, 3, 8}, Fill::Bfloat16),
        f32({2, 3, 8, 2}, Fill::Unit)},
       {f32({2, 8, 3, 16}), f32({2, 12, 3, 16}), f32({2, 12, 3, 8})},
       {text("layout", "bshd"), text("narrow_operands", "bf16")},
       2e-2},
      {"attention_bshd_bf16_stored",
       "attention",
       {stored({2, 8, 3, 16}, plan::BF16), stored({2, 12, 3, 16}, plan::BF16),
        stored({2, 12, 3, 8}, plan::BF16), f32({2, 1, 8, 12})},
       {stored({2, 8, 3, 8}, plan::BF16), f32({2, 3, 8, 2})},
       {text("layout", "bshd"), text("narrow_operands", "bf16"),
        text("round_result", "bf16")},
       2e-2},
      {"attention_grad_bshd_bf16_stored",
       "attention_grad",
       {stored({2, 8, 3, 8}, plan::BF16), stored({2, 8, 3, 16}, plan::BF16),
        stored({2, 12, 3, 16}, plan::BF16), stored({2, 12, 3, 8}, plan::BF16),
        f32({2, 3, 8, 2}, Fill::Unit)},
       {stored({2, 8, 3, 16}, plan::BF16), stored({2, 12, 3, 16}, plan::BF16),
        stored({2, 12, 3, 8}, plan::BF16)},
       {text("layout", "bshd"), text("narrow_operands", "bf16")},
       2e-2},
      // Grouped-query attention (cdp-fold-repeated-heads): 4 query heads
      // read 2 key/value heads (h / 2); the GPU runs each product that
      // reads them once per member of a group. The backward writes the
      // keys' and v's gradients per query head.
      {"attention_grouped_bias",
       "attention",
       {f32({2, 4, 8, 16}, Fill::Unit), f32({2, 2, 16, 12}, Fill::Unit),
        f32({2, 2, 12, 8}), f32({2, 1, 8, 12})},
       {f32({2, 4, 8, 8}), f32({2, 4, 8, 2})},
       {attr("zero_nan_rows", 1), real("scale", 0.3)},
       1e-4},
      {"attention_grad_grouped",
       "attention_grad",
       {f32({2, 4, 8, 8}), f32({2, 4, 8, 16}, Fill::Unit),
        f32({2, 2, 16, 12}, Fill::Unit), f32({2, 2, 12, 8}),
        f32({2, 4, 8, 2}, Fill::Unit)},
       {f32({2, 4, 8, 16}), f32({2, 4, 16, 12}), f32({2, 4, 12, 8})},
       {real("scale", 0.3)},
       1e-4},
      // float32 operands of bf16 values: the kv slices copied into the
      // chunk's 2-byte block once per group.
      {"attention_grad_grouped_bf16",
       "attention_grad",
       {f32({2, 4, 8, 8}, Fill::Bfloat16), f32({2, 4, 8, 16}, Fill::Bfloat16),
        f32({2, 2, 16, 12}, Fill::Bfloat16), f32({2, 2, 12, 8}, Fill::Bfloat16),
        f32({2, 4, 8, 2}, Fill::Unit)},
       {f32({2, 4, 8, 16}), f32({2, 4, 16, 12}), f32({2, 4, 12, 8})},
       {text("narrow_operands", "bf16")},
       2e-2},
      {"attention_bshd_grouped_bf16_stored",
       "attention",
       {stored({2, 8, 4, 16}, plan::BF16), stored({2, 12, 2, 16}, plan::BF16),
        stored({2, 12, 2, 8}, plan::BF16), f32({2, 1, 8, 12})},
       {stored({2, 8, 4, 8}, plan::BF16), f32({2, 4, 8, 2})},
       {text("layout", "bshd"), text("narrow_operands", "bf16"),
        text("round_result", "bf16")},
       2e-2},
      {"attention_grad_bshd_grouped",
       "attention_grad",
       {f32({2, 8, 4, 8}), f32({2, 8, 4, 16}, Fill::Unit),
        f32({2, 12, 2, 16}, Fill::Unit), f32({2, 12, 2, 8}),
        f32({2, 4, 8, 2}, Fill::Unit), f32({1, 4, 8, 12})},
       {f32({2, 8, 4, 16}), f32({2, 12, 4, 16}), f32({2, 12, 4, 8}),
        f32({1, 4, 8, 12})},
       {text("layout", "bshd"), attr("with_bias_grad", 1), real("scale", 0.3)},
       1e-4},
      {"log_softmax", "log_softmax", {f32({4, 7})}, {f32({4, 7})}},
      {"softmax_grad",
       "softmax_grad",
       {f32({4, 7}), f32({4, 7}, Fill::Unit)},
       {f32({4, 7})}},
      // Integers: the sums are exact in any order, so the stored bits agree.
      {"softmax_grad_stored",
       "softmax_grad",
       {f32({4, 7}, Fill::Integers), f32({4, 7}, Fill::Integers)},
       {stored({4, 7}, plan::F16)},
       {text("round_result", "f16")}},
      {"softmax_grad_round_result",
       "softmax_grad",
       {f32({4, 7}), f32({4, 7}, Fill::Unit)},
       {f32({4, 7})},
       {text("round_result", "f16")},
       1e-2},
      {"max_pool",
       "max_pool",
       {f32({2, 3, 9, 9})},
       {f32({2, 3, 5, 5})},
       poolAttributes()},
      {"max_pool_indices",
       "max_pool_indices",
       {f32({2, 3, 9, 9})},
       {i64({2, 3, 5, 5})},
       poolAttributes()},
      {"max_pool_grad",
       "max_pool_grad",
       {f32({2, 3, 5, 5}), f32({2, 3, 9, 9})},
       {f32({2, 3, 9, 9})},
       poolAttributes()},
      {"average_pool",
       "average_pool",
       {f32({2, 3, 9, 9})},
       {f32({2, 3, 5, 5})},
       poolAttributes()},
      {"average_pool_grad",
       "average_pool_grad",
       {f32({2, 3, 5, 5})},
       {f32({2, 3, 9, 9})},
       poolAttributes()},
      {"global_average_pool",
       "global_average_pool",
       {f32({2, 3, 4, 5})},
       {f32({2, 3, 1, 1})}},
  };
}

std::vector<Case> lossAndUpdateCases() {
  return {
      {"softmax_cross_entropy",
       "softmax_cross_entropy_loss",
       {f32({8, 10}), labels({8}, 10)},
       {f32({}), f32({8, 10})}},
      {"softmax_cross_entropy_ignore",
       "softmax_cross_entropy_loss",
       {f32({8, 10, 3}), labels({8, 3}, 10)},
       {f32({}), f32({8, 10, 3})},
       {attr("ignore_index", 2)}},
      {"softmax_cross_entropy_grad",
       "softmax_cross_entropy_loss_grad",
       {f32({}), f32({8, 10}), labels({8}, 10)},
       {f32({8, 10})}},
      // Scores (N, C, d): a row's classes `d` apart.
      {"softmax_cross_entropy_grad_spatial",
       "softmax_cross_entropy_loss_grad",
       {f32({}), f32({2, 4, 3}), labels({2, 3}, 4)},
       {f32({2, 4, 3})}},
      {"softmax_cross_entropy_classes_last",
       "softmax_cross_entropy_loss",
       {f32({2, 5, 300}), labels({2, 5}, 300)},
       {f32({}), f32({2, 5, 300})},
       {attr("classes_last", 1)}},
      {"softmax_cross_entropy_grad_classes_last",
       "softmax_cross_entropy_loss_grad",
       {f32({}), f32({2, 5, 300}), labels({2, 5}, 300)},
       {f32({2, 5, 300})},
       {attr("classes_last", 1)}},
      // The logits' gradient stored in 2 bytes (cdp-narrow-results).
      {"softmax_cross_entropy_grad_stored",
       "softmax_cross_entropy_loss_grad",
       {f32({}), f32({2, 5, 300}), labels({2, 5}, 300)},
       {stored({2, 5, 300}, plan::BF16)},
       {attr("classes_last", 1), text("round_result", "bf16")}},
      // Without log-probabilities: the loss computes the labels' alone and
      // its gradient recomputes the rows (cdp-recompute-log-probabilities).
      {"softmax_cross_entropy_without_log_prob",
       "softmax_cross_entropy_loss",
       {f32({2, 5, 300}), labels({2, 5}, 300)},
       {f32({})},
       {attr("classes_last", 1), attr("ignore_index", 7)}},
      {"softmax_cross_entropy_grad_from_scores",
       "softmax_cross_entropy_loss_grad",
       {f32({}), f32({2, 5, 300}), labels({2, 5}, 300)},
       {stored({2, 5, 300}, plan::BF16)},
       {attr("classes_last", 1), attr("from_scores", 1),
        text("round_result", "bf16")}},
      // The logits stored in 2 bytes (cdp-narrow-results), read widened.
      {"softmax_cross_entropy_bf16_scores",
       "softmax_cross_entropy_loss",
       {stored({2, 5, 300}, plan::BF16), labels({2, 5}, 300)},
       {f32({})},
       {attr("classes_last", 1)}},
      {"softmax_cross_entropy_grad_from_bf16_scores",
       "softmax_cross_entropy_loss_grad",
       {f32({}), stored({2, 5, 300}, plan::BF16), labels({2, 5}, 300)},
       {f32({2, 5, 300})},
       {attr("classes_last", 1), attr("from_scores", 1)}},
      {"softmax_cross_entropy_grad_from_scores_classes_apart",
       "softmax_cross_entropy_loss_grad",
       {f32({}), f32({8, 10, 3}), labels({8, 3}, 10)},
       {f32({8, 10, 3})},
       {attr("from_scores", 1), attr("ignore_index", 2)}},
      {"softmax_cross_entropy_grad_round_result",
       "softmax_cross_entropy_loss_grad",
       {f32({}), f32({8, 10}), labels({8}, 10)},
       {f32({8, 10})},
       {text("round_result", "bf16")},
       1e-2},
      {"nll_loss_sum",
       "nll_loss",
       {f32({8, 10}), labels({8}, 10)},
       {f32({})},
       {text("reduction", "sum")}},
      {"nll_loss_grad",
       "nll_loss_grad",
       {f32({}), labels({8}, 10)},
       {f32({8, 10})}},
      {"update_momentum",
       "update",
       {f32({50}), f32({50})},
       {},
       {text("optimizer", "sgd"), real("lr", 0.1), real("momentum", 0.9),
        real("weight_decay", 0.01)},
       1e-6,
       3},
      {"update_adam",
       "update",
       {f32({50}), f32({50})},
       {},
       {text("optimizer", "adam"), real("lr", 0.01)},
       1e-6,
       3},
      {"update_adamw_cosine",
       "update",
       {f32({50}), f32({50})},
       {},
       {text("optimizer", "adamw"), real("lr", 0.01), real("weight_decay", 0.1),
        text("lr_schedule", "cosine"), attr("lr_period", 4)},
       1e-6,
       3},
      // laysa's absorb: W, g, the mirror (or the residual) updated in place,
      // through the momentum buffer with weight decay over 3 steps.
      {"sparse_absorb_mirror",
       "sparse_absorb",
       {f32({300}), f32({300}), f32({300})},
       {},
       {text("optimizer", "sgd"), real("lr", 0.1), real("momentum", 0.9),
        real("weight_decay", 0.01), text("form", "mirror")},
       0.0,
       3},
      {"sparse_absorb_residual",
       "sparse_absorb",
       {f32({300}), f32({300}), f32({300})},
       {},
       {text("optimizer", "sgd"), real("lr", 0.1), text("form", "residual"),
        text("lr_schedule", "cosine"), attr("lr_period", 4)},
       0.0,
       3},
      {"accumulate",
       "accumulate",
       {f32({20})},
       {f32({20})},
       {attr("slots", 4), attr("reset", 0)}},
      {"squared_norm", "squared_norm", {f32({50}), f32({3, 7})}, {f32({})}},
      // Normal values: a norm of about 8.4 against 1, so the clip scales.
      {"clip_grad_norm",
       "clip_grad_norm",
       {f32({50}), f32({3, 7})},
       {},
       {real("max_norm", 1.0)}},
      // Gradients over several slices of 65536 elements (a block each).
      {"squared_norm_slices",
       "squared_norm",
       {f32({70000}), f32({5}), f32({300})},
       {f32({})}},
      {"clip_grad_norm_slices",
       "clip_grad_norm",
       {f32({70000}), f32({5}), f32({300})},
       {},
       {real("max_norm", 1.0)}},
      {"clip_grad_norm_shares",
       "clip_grad_norm",
       {f32({}, Fill::Positive), f32({}, Fill::Positive), f32({40})},
       {},
       {attr("partials", 2), real("max_norm", 0.5)}},
      // Dynamic loss scaling: the buffer [scale, clean steps, overflow]
      // drawn positive (so an update naming it skips, as on the CPU).
      {"loss_scale", "loss_scale", {f32({3}, Fill::Positive)}, {f32({})}},
      {"unscale_grads",
       "unscale_grads",
       {f32({3}, Fill::Positive), f32({50}), f32({3, 7})},
       {},
       {attr("growth_interval", 2000)},
       1e-6,
       2},
      // A pipeline stage's flag (finite values here: 0), and the unscaling
      // with every stage's flags drawn positive, so the step is marked.
      {"found_inf", "found_inf", {f32({50}), f32({3, 7})}, {f32({})}},
      // Gradients over several slices of 65536 elements (a block each).
      {"unscale_grads_slices",
       "unscale_grads",
       {f32({3}, Fill::Positive), f32({70000}), f32({5})},
       {},
       {attr("growth_interval", 2000)},
       1e-6,
       2},
      {"found_inf_slices", "found_inf", {f32({70000}), f32({5})}, {f32({})}},
      {"unscale_grads_flags",
       "unscale_grads",
       {f32({3}, Fill::Positive), f32({}, Fill::Zero), f32({}, Fill::Positive),
        f32({40})},
       {},
       {attr("growth_interval", 2000), attr("flags", 2)},
       1e-6,
       2},
      {"unscale_grads_own",
       "unscale_grads",
       {f32({3}, Fill::Positive), f32({40})},
       {},
       {attr("adjust", 0)},
       1e-6,
       2},
      // cdp v2's mark: the skip flag from a stage's mean flag only.
      {"unscale_grads_mark",
       "unscale_grads",
       {f32({3}, Fill::Positive), f32({}, Fill::Positive)},
       {},
       {attr("adjust", 2), attr("flags", 1)},
       1e-6,
       2},
      {"update_skipped_on_overflow",
       "update",
       {f32({50}), f32({50}), f32({3}, Fill::Positive)},
       {},
       {text("optimizer", "sgd"), real("lr", 0.1), real("momentum", 0.9)},
       1e-6,
       2},
      // Not overflowed: the device counts the updates and computes the
      // first-step rule and Adam's bias corrections itself (3 steps).
      {"update_momentum_scaled",
       "update",
       {f32({50}), f32({50}), f32({3}, Fill::Nought)},
       {},
       {text("optimizer", "sgd"), real("lr", 0.1), real("momentum", 0.9)},
       1e-6,
       3},
      {"update_adam_scaled",
       "update",
       {f32({50}), f32({50}), f32({3}, Fill::Nought)},
       {},
       {text("optimizer", "adam"), real("lr", 0.01)},
       1e-6,
       3},
  };
}

std::vector<Case> allCases() {
  std::vector<Case> all;
  for (auto group :
       {elementwiseCases(), shapeCases(), linalgCases(), convolutionCases(),
        normalizationCases(), lossAndUpdateCases(), transformerCases()})
    all.insert(all.end(), group.begin(), group.end());
  return all;
}

/// Fill::MaskedRows' element `i` of rows of `length`: row 1 (mod 3) all
/// -inf (an attention query with no key), row 2 one NaN, row 0 its first
/// element -inf (a masked key).
float maskedRowValue(float drawn, int64_t i, int64_t length) {
  int64_t row = i / length, column = i % length;
  if (row % 3 == 1 || (row % 3 == 0 && column == 0))
    return -std::numeric_limits<float>::infinity();
  if (row % 3 == 2 && column == length / 2)
    return std::numeric_limits<float>::quiet_NaN();
  return drawn;
}

/// A tensor's bytes on the host, drawn per its spec.
std::vector<char> draw(const Spec &spec, std::mt19937 &random) {
  int64_t n = 1;
  for (int64_t d : spec.shape)
    n *= d;
  std::vector<char> bytes(n * plan::dtypeSize(spec.dtype));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.05f, 0.95f);
  for (int64_t i = 0; i < n; ++i) {
    if (spec.dtype == plan::I64) {
      int64_t v = spec.range ? static_cast<int64_t>(random() % spec.range) : 0;
      std::memcpy(bytes.data() + 8 * i, &v, 8);
    } else if (spec.dtype == plan::BOOL) {
      bytes[i] = random() % 3 != 0;
    } else if (spec.dtype == plan::BF16 || spec.dtype == plan::F16) {
      float v = spec.fill == Fill::Integers
                    ? static_cast<float>(static_cast<int>(random() % 17) - 8)
                    : normal(random);
      uint16_t bits = spec.dtype == plan::BF16
                          ? bfloat16BitsOf(roundToBfloat16(v))
                          : float16BitsOf(roundToFloat16(v));
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    } else {
      float v = spec.fill == Fill::Zero       ? 2.0f // pow's exponent
                : spec.fill == Fill::Nought   ? 0.0f
                : spec.fill == Fill::Positive ? 0.5f + std::abs(normal(random))
                : spec.fill == Fill::Unit     ? unit(random)
                : spec.fill == Fill::Bfloat16 ? roundToBfloat16(normal(random))
                : spec.fill == Fill::Float16  ? roundToFloat16(normal(random))
                : spec.fill == Fill::Integers
                    ? static_cast<float>(static_cast<int>(random() % 17) - 8)
                    : normal(random);
      if (spec.fill == Fill::MaskedRows)
        v = maskedRowValue(v, i, spec.shape.back());
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    }
  }
  return bytes;
}

/// The instruction a case runs: its op, a location naming it, its
/// attributes.
plan::Instruction instructionOf(const Case &c) {
  plan::Instruction instruction;
  instruction.set_op(c.op);
  instruction.set_location("/test/" + c.name);
  for (const plan::Attribute &a : c.attributes)
    *instruction.add_attributes() = a;
  return instruction;
}

/// Values for a case's tensors, drawn from `seed`: its inputs, then its
/// outputs.
std::vector<std::vector<char>> drawAll(const Case &c, unsigned seed) {
  std::mt19937 random(seed);
  std::vector<std::vector<char>> values;
  for (const Spec &spec : c.inputs)
    values.push_back(draw(spec, random));
  for (const Spec &spec : c.outputs)
    values.push_back(draw(spec, random));
  return values;
}

/// Fails at the first float32 element of `got` farther from `want`'s than
/// `tolerance` x (1 + |want|), naming it after `what`.
void expectClose(const std::vector<char> &want, const std::vector<char> &got,
                 double tolerance, const std::string &what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size() / 4; ++i) {
    float a, b;
    std::memcpy(&a, want.data() + 4 * i, 4);
    std::memcpy(&b, got.data() + 4 * i, 4);
    ASSERT_NEAR(a, b, tolerance * (1.0 + std::abs(a)))
        << what << " element " << i;
  }
}

/// One backend's run of a case: its tensors and kernel.
struct Bound {
  Device &device;
  std::vector<void *> memory;
  std::unique_ptr<Kernel> kernel;

  Bound(Device &device, Backend backend, const plan::Instruction &instruction,
        const Case &c, const std::vector<std::vector<char>> &values,
        Communicator *communicator = nullptr)
      : device(device) {
    KernelArgs args;
    args.instruction = &instruction;
    args.runsOn = &device;
    args.communicator = communicator;
    if (communicator) // the device's index in the run: its rank in one process
      args.device = communicator->rank();
    size_t k = 0;
    for (const Spec &spec : c.inputs)
      args.inputs.push_back(place(spec, values[k++]));
    for (const Spec &spec : c.outputs)
      args.outputs.push_back(place(spec, values[k++]));
    const KernelFactory *factory =
        KernelRegistry::instance().lookup(c.op, backend);
    if (!factory)
      throw RuntimeError("no kernel for " + c.op);
    kernel = (*factory)(args);
  }
  ~Bound() {
    kernel.reset();
    for (void *m : memory)
      device.release(m);
  }
  TensorView place(const Spec &spec, const std::vector<char> &bytes) {
    void *m = device.allocate(std::max<size_t>(bytes.size(), 1));
    device.upload(m, bytes.data(), bytes.size());
    memory.push_back(m);
    return TensorView{m, spec.shape, spec.dtype, device.space()};
  }
  void run(int64_t step) {
    StepContext context;
    context.step = step;
    context.seed = 3;
    context.queue = device.queue();
    kernel->run(context);
    device.finishStep(step);
  }
  std::vector<char> read(size_t index, size_t bytes) {
    std::vector<char> out(bytes);
    device.download(out.data(), memory[index], bytes);
    return out;
  }
};

class CudaKernelTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaKernelTest, MatchesCpu) {
  std::unique_ptr<Device> gpu;
  try {
    gpu = createDevice(Backend::CUDA, 0);
  } catch (const RuntimeError &e) {
    GTEST_SKIP() << "no GPU: " << e.what();
  }
  const Case &c = GetParam();
  plan::Instruction instruction = instructionOf(c);
  std::vector<std::vector<char>> values = drawAll(c, 42);
  std::unique_ptr<Device> cpuDevice = createDevice(Backend::CPU, 0);
  Bound cpu(*cpuDevice, Backend::CPU, instruction, c, values);
  Bound cuda(*gpu, Backend::CUDA, instruction, c, values);
  // Every tensor a kernel may write: outputs, an update's parameter and
  // the gradients a clip scales in place.
  std::vector<size_t> checked;
  for (size_t k = c.inputs.size(); k < values.size(); ++k)
    checked.push_back(k);
  if (c.op == "update")
    checked.push_back(0);
  if (c.op == "sparse_absorb") // the error feedback, in place
    checked.push_back(2);
  if (c.op == "clip_grad_norm" || c.op == "unscale_grads")
    for (size_t k = 0; k < c.inputs.size(); ++k)
      checked.push_back(k); // in place (unscale_grads: the buffer too)
  for (int r = 0; r < c.runs; ++r) {
    cpu.run(r + 1);
    cuda.run(r + 1);
    for (size_t k : checked) {
      const Spec &spec =
          k < c.inputs.size() ? c.inputs[k] : c.outputs[k - c.inputs.size()];
      std::vector<char> want = cpu.read(k, values[k].size()),
                        got = cuda.read(k, values[k].size());
      if (spec.dtype != plan::F32) {
        EXPECT_EQ(want, got) << "tensor " << k << " after run " << r + 1;
        continue;
      }
      ASSERT_NO_FATAL_FAILURE(expectClose(want, got, c.tolerance,
                                          "tensor " + std::to_string(k) +
                                              " after run " +
                                              std::to_string(r + 1)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaKernelTest, ::testing::ValuesIn(allCases()),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           return info.param.name;
                         });

// --cuda-graphs: every kernel that says it launches the same work every
// step (Kernel::sameEveryStep) can be captured into a CUDA graph, and the
// graph replayed as many times as the case runs leaves every tensor as
// running the kernel did, bit for bit.
TEST(CudaStepReplay, RecordedKernelsEqualRunningThem) {
  std::unique_ptr<Device> gpu;
  try {
    gpu = createDevice(Backend::CUDA, 0);
  } catch (const RuntimeError &e) {
    GTEST_SKIP() << "no GPU: " << e.what();
  }
  int recorded = 0;
  for (const Case &c : allCases()) {
    plan::Instruction instruction = instructionOf(c);
    std::vector<std::vector<char>> values = drawAll(c, 42);
    Bound eager(*gpu, Backend::CUDA, instruction, c, values);
    if (!eager.kernel->sameEveryStep())
      continue;
    Bound replayed(*gpu, Backend::CUDA, instruction, c, values);
    replayed.run(1); // as StepReplay does: one run before the recording
    eager.run(1);
    StepContext context;
    context.step = 2;
    context.queue = gpu->queue();
    std::unique_ptr<Recording> recording =
        gpu->record([&] { replayed.kernel->run(context); });
    ASSERT_TRUE(recording) << c.name << " could not be recorded";
    for (int r = 1; r < c.runs + 1; ++r) {
      eager.run(r + 1);
      ASSERT_TRUE(recording->replay()) << c.name;
      gpu->finishStep(r + 1);
    }
    for (size_t k = 0; k < values.size(); ++k)
      EXPECT_EQ(eager.read(k, values[k].size()),
                replayed.read(k, values[k].size()))
          << c.name << ": tensor " << k;
    ++recorded;
  }
  EXPECT_GT(recorded, 100);
}

/// A case's kernel on `gpu` with drawn values, for what it allocates.
std::unique_ptr<Bound> bindOn(Device &gpu, const Case &c,
                              plan::Instruction &instruction) {
  instruction = instructionOf(c);
  return std::make_unique<Bound>(gpu, Backend::CUDA, instruction, c,
                                 drawAll(c, 1));
}

// The memory report's workspace on a GPU: cuBLAS's workspace (ours, 4 or
// 32 MiB), the 2-byte operands of a narrow product (the largest one's, in
// a block the device's kernels share) and a kernel's scratch count; an
// optimizer's moments are its state, counted apart, not as workspace.
TEST(CudaDeviceMemory, WorkspaceCountsWhatKernelsAllocate) {
  std::unique_ptr<Device> gpu;
  try {
    gpu = createDevice(Backend::CUDA, 0);
  } catch (const RuntimeError &e) {
    GTEST_SKIP() << "no GPU: " << e.what();
  }
  int64_t base = gpu->workspaceBytes();
  EXPECT_TRUE(base == 4 << 20 || base == 32 << 20) << base;
  Case narrow{"gemm_bf16",
              "gemm",
              {f32({64, 48}, Fill::Bfloat16), f32({40, 48}, Fill::Bfloat16)},
              {f32({64, 40})},
              {attr("trans_b", 1), text("narrow_operands", "bf16")}};
  plan::Instruction first, second, third;
  auto product = bindOn(*gpu, narrow, first);
  // A's 3072 values (B's copy begins at a multiple of 128), B's 1920.
  EXPECT_EQ(gpu->workspaceBytes() - base, 2 * (3072 + 1920));
  narrow.inputs = {f32({8, 4}, Fill::Bfloat16), f32({4, 4}, Fill::Bfloat16)};
  narrow.outputs = {f32({8, 4})};
  narrow.attributes = {text("narrow_operands", "bf16")};
  auto smaller = bindOn(*gpu, narrow, second);
  EXPECT_EQ(gpu->workspaceBytes() - base, 2 * (3072 + 1920)); // shared
  Case adam{"update_adam",
            "update",
            {f32({50}), f32({50})},
            {},
            {text("optimizer", "adam"), real("lr", 0.01)}};
  auto update = bindOn(*gpu, adam, third);
  EXPECT_EQ(gpu->workspaceBytes() - base, 2 * (3072 + 1920));
  EXPECT_EQ(update->kernel->state().tensors.size(), 2u); // its moments
}

// ZeRO stage 3's sharded update on the GPU (its shard, gradient shard and
// moments in device memory) against the CPU's: device 1 of 2 holds the
// last 29 of the stage's 57 elements (a piece of each of its 3 tensors,
// each with its own weight decay) and one element of padding; AdamW with
// the learning rate warmed up, and SGD with momentum under a loss scale
// that did not overflow (the device counts the updates), over 3 steps.
TEST(CudaShardUpdate, StageThreeMatchesTheCpu) {
  std::unique_ptr<Device> gpu;
  try {
    gpu = createDevice(Backend::CUDA, 0);
  } catch (const RuntimeError &e) {
    GTEST_SKIP() << "no GPU: " << e.what();
  }
  std::unique_ptr<Device> cpuDevice = createDevice(Backend::CPU, 0);
  LocalFabric fabric(2);
  Communicator *rank1 = &fabric.endpoint(1);
  std::vector<plan::Attribute> stage = {
      attr("zero", 3), ints("sizes", {30, 7, 20}),
      reals("weight_decays", {0.01, 0.0, 0.05})};
  Case adamw{"shard_adamw",
             "shard_update",
             {f32({29}), f32({29})},
             {},
             {text("optimizer", "adamw"), real("lr", 0.01),
              attr("lr_warmup", 2), real("lr_warmup_start", 0.5)}};
  Case momentum{"shard_momentum",
                "shard_update",
                {f32({29}), f32({29}), f32({3}, Fill::Nought)},
                {},
                {text("optimizer", "sgd"), real("lr", 0.1),
                 real("momentum", 0.9), attr("loss_scale", 1)}};
  for (Case c : {adamw, momentum}) {
    c.attributes.insert(c.attributes.end(), stage.begin(), stage.end());
    plan::Instruction instruction = instructionOf(c);
    std::vector<std::vector<char>> values = drawAll(c, 9);
    Bound cpu(*cpuDevice, Backend::CPU, instruction, c, values, rank1);
    Bound cuda(*gpu, Backend::CUDA, instruction, c, values, rank1);
    for (int step = 1; step <= 3; ++step) {
      cpu.run(step);
      cuda.run(step);
      ASSERT_NO_FATAL_FAILURE(
          expectClose(cpu.read(0, 29 * 4), cuda.read(0, 29 * 4), 1e-6,
                      c.name + " after step " + std::to_string(step)));
    }
    KernelState cpuState = cpu.kernel->state(),
                cudaState = cuda.kernel->state();
    EXPECT_EQ(*cudaState.counter, 3) << c.name;
    EXPECT_EQ(*cpuState.counter, *cudaState.counter) << c.name;
    ASSERT_EQ(cudaState.spans.size(), 3u) << c.name;
    EXPECT_EQ(cudaState.tensors.size(), cpuState.tensors.size()) << c.name;
  }
}

/// `steps` steps of every device's kernel, each device in a thread of its
/// own (they meet in their exchanges); then each device's first inputs, as
/// many and as large as `like`'s tensors.
std::vector<std::vector<char>>
runTogether(std::vector<std::unique_ptr<Bound>> &bound, int steps,
            const std::vector<std::vector<char>> &like) {
  std::vector<std::thread> threads;
  for (size_t d = 0; d < bound.size(); ++d)
    threads.emplace_back([&, d] {
      for (int step = 1; step <= steps; ++step)
        bound[d]->run(step);
    });
  for (std::thread &t : threads)
    t.join();
  std::vector<std::vector<char>> result;
  for (std::unique_ptr<Bound> &device : bound)
    for (size_t k = 0; k < like.size(); ++k)
      result.push_back(device->read(k, like[k].size()));
  return result;
}

// ZeRO stage 2's sharded update on 2 devices sharing the GPU (their
// gather through the devices' links) against the CPU's on 2 host devices:
// the same stage (3 tensors, 57 elements, shards of 29), each device its own
// shard of the mean gradients, SGD with momentum and per-tensor weight
// decay, 2 steps run by each device in a thread of its own; every device
// ends with the whole stage updated.
TEST(CudaShardUpdate, StageTwoGathersThroughTheLinks) {
  std::vector<std::unique_ptr<Device>> gpus, cpus;
  try {
    for (int d = 0; d < 2; ++d)
      gpus.push_back(createDevice(Backend::CUDA, 0));
  } catch (const RuntimeError &e) {
    GTEST_SKIP() << "no GPU: " << e.what();
  }
  for (int d = 0; d < 2; ++d)
    cpus.push_back(createDevice(Backend::CPU, d));
  Case c{"shard_update_zero2",
         "shard_update",
         {f32({30}), f32({7}), f32({20}), f32({29})},
         {},
         {attr("zero", 2), reals("weight_decays", {0.01, 0.0, 0.05}),
          text("optimizer", "sgd"), real("lr", 0.1), real("momentum", 0.9)}};
  plan::Instruction instruction = instructionOf(c);
  std::mt19937 random(13);
  std::vector<std::vector<char>> stage;
  for (size_t k = 0; k < 3; ++k)
    stage.push_back(draw(c.inputs[k], random));
  auto trained = [&](std::vector<std::unique_ptr<Device>> &devices,
                     Backend backend) {
    LocalFabric fabric(2);
    std::vector<std::unique_ptr<Bound>> bound;
    for (int d = 0; d < 2; ++d) {
      std::vector<std::vector<char>> values = stage;
      values.push_back(draw(c.inputs[3], random)); // its gradient shard
      bound.push_back(std::make_unique<Bound>(*devices[d], backend, instruction,
                                              c, values, &fabric.endpoint(d)));
    }
    return runTogether(bound, 2, stage);
  };
  random.seed(21);
  std::vector<std::vector<char>> want = trained(cpus, Backend::CPU);
  random.seed(21); // the same gradient shards
  std::vector<std::vector<char>> got = trained(gpus, Backend::CUDA);
  for (size_t t = 0; t < want.size(); ++t)
    ASSERT_NO_FATAL_FAILURE(expectClose(want[t], got[t], 1e-6,
                                        "device " + std::to_string(t / 3) +
                                            " tensor " +
                                            std::to_string(t % 3)));
}

// ZeRO stage 1 over a pipeline stage's 3 replicas sharing the GPU (their
// updated shards as device messages through the devices' links) against the
// CPU's on 3 host devices: a stage of 3 tensors (57 elements, shards of 19),
// each replica its own gradient sums (so that a shard landing in another's
// place shows), AdamW with per-tensor weight decay, 2 steps run by each
// device in a thread of its own; every replica ends with the same stage.
TEST(CudaReplicaShardUpdate, MatchesTheCpu) {
  std::vector<std::unique_ptr<Device>> gpus, cpus;
  try {
    for (int d = 0; d < 3; ++d)
      gpus.push_back(createDevice(Backend::CUDA, 0));
  } catch (const RuntimeError &e) {
    GTEST_SKIP() << "no GPU: " << e.what();
  }
  for (int d = 0; d < 3; ++d)
    cpus.push_back(createDevice(Backend::CPU, d));
  std::vector<Case> cases;
  std::vector<plan::Instruction> instructions;
  for (int d = 0; d < 3; ++d) {
    cases.push_back(
        {"replica_shard_update",
         "replica_shard_update",
         {f32({30}), f32({7}), f32({20}), f32({30}), f32({7}), f32({20})},
         {},
         {attr("replica", d), ints("peers", {0, 1, 2}),
          reals("weight_decays", {0.01, 0.0, 0.05}), text("optimizer", "adamw"),
          real("lr", 0.01)}});
    instructions.push_back(instructionOf(cases[d]));
  }
  std::mt19937 random(17);
  std::vector<std::vector<char>> stage;
  for (size_t k = 0; k < 3; ++k)
    stage.push_back(draw(cases[0].inputs[k], random));
  auto trained = [&](std::vector<std::unique_ptr<Device>> &devices,
                     Backend backend) {
    LocalFabric fabric(3);
    std::vector<std::unique_ptr<Bound>> bound;
    for (int d = 0; d < 3; ++d) {
      std::vector<std::vector<char>> values = stage;
      for (size_t k = 3; k < 6; ++k) // this replica's gradient sums
        values.push_back(draw(cases[d].inputs[k], random));
      bound.push_back(std::make_unique<Bound>(*devices[d], backend,
                                              instructions[d], cases[d], values,
                                              &fabric.endpoint(d)));
    }
    return runTogether(bound, 2, stage);
  };
  random.seed(23);
  std::vector<std::vector<char>> want = trained(cpus, Backend::CPU);
  random.seed(23); // the same gradient sums
  std::vector<std::vector<char>> got = trained(gpus, Backend::CUDA);
  for (size_t t = 0; t < want.size(); ++t) {
    std::string what =
        "device " + std::to_string(t / 3) + " tensor " + std::to_string(t % 3);
    ASSERT_NO_FATAL_FAILURE(expectClose(want[t], got[t], 1e-6, what));
    EXPECT_EQ(got[t], got[t % 3]) << what << ": the replicas differ";
  }
}

// A gemm's bias added by cuBLASLt's epilogue against the same product
// with the bias written into the result first (cuBLAS's beta 1): float32
// within 1e-5; bf16 products of integers, whose sums are exact, bit for
// bit, their result in float32 or stored in 2 bytes; a ReLU after the bias
// (RELU_BIAS) against the kernel after cuBLAS. Every case with beta 1 takes
// the epilogue (cuBLASLt has an algorithm for each); beta 2 does not.
TEST(CudaGemmEpilogue, EqualsTheBiasWrittenFirst) {
  std::unique_ptr<Device> gpu;
  try {
    gpu = createDevice(Backend::CUDA, 0);
  } catch (const RuntimeError &e) {
    GTEST_SKIP() << "no GPU: " << e.what();
  }
  std::vector<Case> cases;
  for (const Case &c : linalgCases())
    if (c.op == "gemm" && c.inputs.size() == 3)
      cases.push_back(c);
  ASSERT_GE(cases.size(), 8u);
  for (const Case &c : cases) {
    plan::Instruction instruction = instructionOf(c);
    std::vector<std::vector<char>> values = drawAll(c, 31);
    int64_t before = CudaDevice::epiloguesChosen();
    Bound withEpilogue(*gpu, Backend::CUDA, instruction, c, values);
    bool addsBias = true; // beta 1 (the default)
    for (const plan::Attribute &a : c.attributes)
      addsBias = addsBias && (a.name() != "beta" || a.f() == 1.0);
    EXPECT_EQ(CudaDevice::epiloguesChosen() - before, addsBias ? 1 : 0)
        << c.name;
    CudaDevice::allowEpilogues(false);
    Bound without(*gpu, Backend::CUDA, instruction, c, values);
    CudaDevice::allowEpilogues(true);
    withEpilogue.run(1);
    without.run(1);
    size_t result = c.inputs.size(), bytes = values[result].size();
    ASSERT_NO_FATAL_FAILURE(expectClose(without.read(result, bytes),
                                        withEpilogue.read(result, bytes),
                                        c.tolerance == 0 ? 0 : 1e-5, c.name));
  }
}

// A pipeline stage's load on the GPU: the data source writes into page-
// locked buffers used in turn, copied up on the stream; three loads in a
// row, each read back after its step, hold what the source wrote for it
// (a buffer reused before its copy finished would show the next one's).
TEST(CudaLoad, CopiesWhatTheSourceWroteEachStep) {
  std::unique_ptr<Device> gpu;
  try {
    gpu = createDevice(Backend::CUDA, 0);
  } catch (const RuntimeError &e) {
    GTEST_SKIP() << "no GPU: " << e.what();
  }
  Case c{"load", "load", {}, {f32({1000})}, {attr("micro_batch", 1)}};
  plan::Instruction instruction = instructionOf(c);
  Bound bound(*gpu, Backend::CUDA, instruction, c, drawAll(c, 3));
  Loader loader = [](int input, int64_t step, int64_t microBatch,
                     const TensorView &target) {
    for (int64_t i = 0; i < target.numel(); ++i)
      target.f32()[i] =
          static_cast<float>(step * 10000 + microBatch * 1000 + i);
  };
  for (int64_t step = 1; step <= 3; ++step) {
    StepContext context;
    context.step = step;
    context.loader = &loader;
    context.queue = gpu->queue();
    bound.kernel->run(context);
    gpu->finishStep(step);
    std::vector<char> got = bound.read(0, 4000);
    for (int64_t i = 0; i < 1000; i += 333) {
      float value;
      std::memcpy(&value, got.data() + 4 * i, 4);
      EXPECT_EQ(value, static_cast<float>(step * 10000 + 1000 + i))
          << "step " << step << " element " << i;
    }
  }
}

// A stage's updates in one launch (UpdateKernel::takeOver, as the executor
// offers adjacent updates): three tensors (the first of two slices of 65536
// elements), each with its own weight decay, AdamW and SGD with momentum
// over a warmed-up learning rate, 3 steps: the same bits as one launch per
// parameter on the GPU, and the CPU's values within 1e-6.
TEST(CudaMultiTensorUpdate, EqualsOneLaunchPerParameter) {
  std::unique_ptr<Device> gpu;
  try {
    gpu = createDevice(Backend::CUDA, 0);
  } catch (const RuntimeError &e) {
    GTEST_SKIP() << "no GPU: " << e.what();
  }
  std::unique_ptr<Device> cpuDevice = createDevice(Backend::CPU, 0);
  const std::vector<int64_t> sizes = {65536 + 700, 5, 300};
  const std::vector<double> decays = {0.01, 0.0, 0.05};
  for (const char *optimizer : {"adamw", "sgd"}) {
    std::vector<Case> cases;
    std::vector<plan::Instruction> instructions;
    std::vector<std::vector<std::vector<char>>> values;
    for (size_t k = 0; k < sizes.size(); ++k) {
      cases.push_back({std::string("update_") + optimizer,
                       "update",
                       {f32({sizes[k]}), f32({sizes[k]})},
                       {},
                       {text("optimizer", optimizer), real("lr", 0.1),
                        real("momentum", 0.9), real("weight_decay", decays[k]),
                        attr("lr_warmup", 2), real("lr_warmup_start", 0.5)}});
      instructions.push_back(instructionOf(cases[k]));
      values.push_back(drawAll(cases[k], 5 + k));
    }
    auto bindAll = [&](Device &device, Backend backend) {
      std::vector<std::unique_ptr<Bound>> bound;
      for (size_t k = 0; k < sizes.size(); ++k)
        bound.push_back(std::make_unique<Bound>(
            device, backend, instructions[k], cases[k], values[k]));
      return bound;
    };
    auto cpu = bindAll(*cpuDevice, Backend::CPU);
    auto apart = bindAll(*gpu, Backend::CUDA);
    auto together = bindAll(*gpu, Backend::CUDA);
    Kernel *following[] = {together[1]->kernel.get(),
                           together[2]->kernel.get()};
    ASSERT_EQ(together[0]->kernel->takeOver(following, 2), 2u);
    for (int step = 1; step <= 3; ++step) {
      for (auto *run : {&cpu, &apart, &together})
        for (auto &bound : *run)
          bound->run(step);
      for (size_t k = 0; k < sizes.size(); ++k) {
        std::string what = std::string(optimizer) + " tensor " +
                           std::to_string(k) + " after step " +
                           std::to_string(step);
        size_t bytes = values[k][0].size();
        std::vector<char> oneByOne = apart[k]->read(0, bytes),
                          fused = together[k]->read(0, bytes);
        EXPECT_EQ(oneByOne, fused) << what;
        ASSERT_NO_FATAL_FAILURE(
            expectClose(cpu[k]->read(0, bytes), fused, 1e-6, what));
      }
    }
    EXPECT_EQ(*together[2]->kernel->state().counter, 3) << optimizer;
  }
}

// laysa's selection and its application on the GPU against the CPU's, bit
// for bit (the same float operations, unfused): a stage of three tensors
// (1000 elements choosing 37, 64 choosing 10, 7 sent whole), values drawn
// as small integers so that many magnitudes tie at the threshold (the
// lowest indices win). Two devices' selections, made by each backend, are
// gathered and applied to device 0's stage; the mirror form and the
// residual baseline (whose selection clears what it sends).
TEST(CudaSparseExchange, SelectAndApplyMatchTheCpu) {
  std::unique_ptr<Device> gpu;
  try {
    gpu = createDevice(Backend::CUDA, 0);
  } catch (const RuntimeError &e) {
    GTEST_SKIP() << "no GPU: " << e.what();
  }
  std::unique_ptr<Device> cpuDevice = createDevice(Backend::CPU, 0);
  const std::vector<int64_t> sizes = {1000, 64, 7}, counts = {37, 10, 7};
  const int64_t chosen = 54, indexed = 47; // all counts; the sparse ones'
  for (const char *form : {"mirror", "residual"}) {
    std::vector<Spec> stage;
    for (int twice = 0; twice < 2; ++twice)
      for (int64_t n : sizes)
        stage.push_back(f32({n}, Fill::Integers));
    Case select{std::string("sparse_select_") + form,
                "sparse_select",
                stage,
                {f32({chosen}), {{indexed}, plan::I32}},
                {ints("counts", counts), text("form", form)}};
    plan::Instruction selectInstruction = instructionOf(select);
    // Each backend's selections of both devices, and the stages after.
    auto selectBoth = [&](Device &device, Backend backend) {
      std::vector<std::vector<char>> result(2), index(2), after(2);
      for (int d = 0; d < 2; ++d) {
        Bound bound(device, backend, selectInstruction, select,
                    drawAll(select, 30 + d));
        bound.run(1);
        result[d] = bound.read(6, chosen * 4);
        index[d] = bound.read(7, indexed * 4);
        for (size_t k = 3; k < 6; ++k) {
          std::vector<char> state = bound.read(k, sizes[k - 3] * 4);
          after[d].insert(after[d].end(), state.begin(), state.end());
        }
      }
      return std::make_tuple(result, index, after);
    };
    auto [cpuValues, cpuIndices, cpuStates] =
        selectBoth(*cpuDevice, Backend::CPU);
    auto [gpuValues, gpuIndices, gpuStates] = selectBoth(*gpu, Backend::CUDA);
    for (int d = 0; d < 2; ++d) {
      EXPECT_EQ(cpuValues[d], gpuValues[d]) << form << " device " << d;
      EXPECT_EQ(cpuIndices[d], gpuIndices[d]) << form << " device " << d;
      EXPECT_EQ(cpuStates[d], gpuStates[d]) << form << " device " << d;
    }
    // Device 0's stage with both devices' (the CPU's) selections gathered.
    std::vector<Spec> inputs(stage.begin(), stage.begin() + 6);
    inputs.push_back(f32({2 * chosen}));
    inputs.push_back({{2 * indexed}, plan::I32});
    Case apply{
        std::string("sparse_apply_") + form,
        "sparse_apply",
        inputs,
        {},
        {ints("counts", counts), text("form", form), attr("devices", 2)}};
    std::vector<std::vector<char>> values = drawAll(select, 30);
    values.resize(6);
    values.push_back(cpuValues[0]);
    values.back().insert(values.back().end(), cpuValues[1].begin(),
                         cpuValues[1].end());
    values.push_back(cpuIndices[0]);
    values.back().insert(values.back().end(), cpuIndices[1].begin(),
                         cpuIndices[1].end());
    plan::Instruction applyInstruction = instructionOf(apply);
    Bound cpu(*cpuDevice, Backend::CPU, applyInstruction, apply, values);
    Bound cuda(*gpu, Backend::CUDA, applyInstruction, apply, values);
    cpu.run(1);
    cuda.run(1);
    for (size_t k = 0; k < 6; ++k)
      EXPECT_EQ(cpu.read(k, sizes[k % 3] * 4), cuda.read(k, sizes[k % 3] * 4))
          << form << " tensor " << k << " after the apply";
    EXPECT_NE(cpu.read(0, 4000), values[0]) << "the apply changed nothing";
  }
}

TEST(CudaKernelErrors, LabelOutOfRangeFailsTheStep) {
  std::unique_ptr<Device> gpu;
  try {
    gpu = createDevice(Backend::CUDA, 0);
  } catch (const RuntimeError &e) {
    GTEST_SKIP() << "no GPU: " << e.what();
  }
  Case c{"bad_label",
         "softmax_cross_entropy_loss",
         {f32({4, 10}), labels({4}, 1)},
         {f32({}), f32({4, 10})}};
  plan::Instruction instruction;
  instruction.set_op(c.op);
  std::mt19937 random(1);
  std::vector<std::vector<char>> values;
  for (const Spec &spec : c.inputs)
    values.push_back(draw(spec, random));
  for (const Spec &spec : c.outputs)
    values.push_back(draw(spec, random));
  int64_t bad = 10; // 10 classes: 0..9
  std::memcpy(values[1].data() + 8, &bad, 8);
  Bound cuda(*gpu, Backend::CUDA, instruction, c, values);
  try {
    cuda.run(7);
    FAIL() << "a label out of range went unnoticed";
  } catch (const RuntimeError &e) {
    EXPECT_NE(std::string(e.what()).find("label is out of range"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("step 7"), std::string::npos)
        << e.what();
  }
  // The status word was cleared: with the label fixed, the next step runs.
  int64_t good = 3;
  std::memcpy(values[1].data() + 8, &good, 8);
  gpu->upload(cuda.memory[1], values[1].data(), values[1].size());
  EXPECT_NO_THROW(cuda.run(8));
}

/// Devices sharing one GPU exchange on it (StreamLink over CudaStreamOps):
/// a reduction's mean is the host fabric's bits on every device, a message
/// arrives as it was when sent, and the CUDA kernels of send, recv and the
/// reductions take that route (the CPU kernel on the GPU's tensors, not a
/// host-staged one) where the communicator carries device memory.
TEST(CudaDeviceLink, DevicesSharingAGpuExchangeOnIt) {
  std::vector<std::unique_ptr<Device>> gpus;
  try {
    for (int d = 0; d < 3; ++d)
      gpus.push_back(createDevice(Backend::CUDA, 0));
  } catch (const RuntimeError &e) {
    GTEST_SKIP() << "no GPU: " << e.what();
  }
  const int64_t n = 1000;
  std::vector<std::vector<float>> parts(3, std::vector<float>(n));
  std::mt19937 random(3);
  std::normal_distribution<float> normal;
  for (std::vector<float> &part : parts)
    for (float &v : part)
      v = normal(random);
  LocalFabric host(3), onGpu(3);
  std::vector<float> expected(n);
  for (int d = 0; d < 3; ++d)
    host.endpoint(d).reduceStart(1, {{plan::F32, parts[d].data(), n}}, 0);
  ASSERT_TRUE(
      host.endpoint(0).reduceWait(1, {{plan::F32, expected.data(), n}}));
  std::vector<float *> grads;
  for (int d = 0; d < 3; ++d) {
    grads.push_back(static_cast<float *>(gpus[d]->allocate(n * 4)));
    gpus[d]->upload(grads[d], parts[d].data(), n * 4);
    gpus[d]->queue();
    onGpu.endpoint(d).reduceStart(
        1,
        {ConstBuffer(plan::F32, grads[d], 400, gpus[d]->link()),
         ConstBuffer(plan::F32, grads[d] + 400, n - 400, gpus[d]->link())},
        0);
    gpus[d]->fill(grads[d], 0, n * 4); // the next step's gradients
  }
  for (int d = 2; d >= 0; --d) {
    gpus[d]->queue();
    ASSERT_TRUE(onGpu.endpoint(d).reduceWait(
        1, {{plan::F32, grads[d], n, gpus[d]->link()}}));
    std::vector<float> got(n);
    gpus[d]->download(got.data(), grads[d], n * 4);
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), n * 4), 0)
        << "device " << d;
  }
  // A message: sent, overwritten by the sender, received as sent.
  gpus[0]->upload(grads[0], parts[0].data(), n * 4);
  gpus[0]->queue();
  onGpu.endpoint(0).send(1, 5, {plan::F32, grads[0], n, gpus[0]->link()}, 0);
  gpus[0]->fill(grads[0], 0, n * 4);
  gpus[1]->queue();
  ASSERT_TRUE(
      onGpu.endpoint(1).recv(0, 5, {plan::F32, grads[1], n, gpus[1]->link()}));
  std::vector<float> got(n);
  gpus[1]->download(got.data(), grads[1], n * 4);
  EXPECT_EQ(got, parts[0]);
  // ZeRO's reduce-scatter (chunks of 334: the last padded) and all-gather
  // on the GPU: the host fabric's bits. Collectives block until every
  // device joins: a thread each.
  std::vector<std::vector<float>> chunks(3, std::vector<float>(334)),
      hostChunks = chunks, gathered(3, std::vector<float>(n)),
      hostGathered = gathered;
  auto collectives = [&](LocalFabric &fabric, bool gpu,
                         std::vector<std::vector<float>> &chunkOut,
                         std::vector<std::vector<float>> &gatherOut) {
    std::vector<std::thread> threads;
    for (int d = 0; d < 3; ++d)
      threads.emplace_back([&, d] {
        DeviceLink *link = gpu ? gpus[d]->link() : nullptr;
        float *in = gpu ? grads[d] : parts[d].data();
        std::vector<float> hostChunk(334), hostAll(n);
        float *chunk = gpu ? static_cast<float *>(gpus[d]->allocate(334 * 4))
                           : hostChunk.data();
        float *all = gpu ? static_cast<float *>(gpus[d]->allocate(n * 4))
                         : hostAll.data();
        if (gpu) {
          gpus[d]->upload(in, parts[d].data(), n * 4);
          gpus[d]->queue();
        }
        EXPECT_TRUE(fabric.endpoint(d).reduceScatter(
            2, {ConstBuffer(plan::F32, in, n, link)},
            {plan::F32, chunk, 334, link}, ReduceOp::Mean, 0));
        EXPECT_TRUE(fabric.endpoint(d).allGather(
            3, ConstBuffer(plan::F32, chunk, 334, link),
            std::vector<Buffer>{{plan::F32, all, n, link}}, 0));
        if (gpu) {
          gpus[d]->download(chunkOut[d].data(), chunk, 334 * 4);
          gpus[d]->download(gatherOut[d].data(), all, n * 4);
          gpus[d]->release(chunk);
          gpus[d]->release(all);
        } else {
          chunkOut[d] = hostChunk;
          gatherOut[d] = hostAll;
        }
      });
    for (std::thread &thread : threads)
      thread.join();
  };
  LocalFabric hostCollectives(3), gpuCollectives(3);
  collectives(hostCollectives, false, hostChunks, hostGathered);
  collectives(gpuCollectives, true, chunks, gathered);
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(std::memcmp(chunks[d].data(), hostChunks[d].data(), 334 * 4), 0)
        << "device " << d;
    EXPECT_EQ(std::memcmp(gathered[d].data(), hostGathered[d].data(), n * 4), 0)
        << "device " << d;
  }
  // The kernels' route.
  plan::Instruction instruction;
  instruction.set_op("reduce_wait");
  KernelArgs args;
  args.instruction = &instruction;
  args.outputs = {TensorView{grads[0], {n}, plan::F32, MemorySpace::Device}};
  args.communicator = &onGpu.endpoint(0);
  args.runsOn = gpus[0].get();
  std::unique_ptr<Kernel> kernel =
      (*KernelRegistry::instance().lookup("reduce_wait", Backend::CUDA))(args);
  EXPECT_NE(dynamic_cast<FunctionKernel *>(kernel.get()), nullptr)
      << "reduce_wait staged through the host";
  for (int d = 0; d < 3; ++d)
    gpus[d]->release(grads[d]);
}

} // namespace

namespace {

/// Registration needs no GPU, so this runs everywhere the backend is built:
/// a plan the CPU backend runs must not meet "no CUDA kernel" on a GPU.
TEST(CudaKernelCoverage, EveryCpuOpHasACudaKernel) {
  KernelRegistry &registry = KernelRegistry::instance();
  std::vector<std::string> missing;
  for (const std::string &op : registry.ops(Backend::CPU))
    if (!registry.lookup(op, Backend::CUDA))
      missing.push_back(op);
  std::string list;
  for (const std::string &op : missing)
    list += " " + op;
  EXPECT_TRUE(missing.empty()) << "CPU ops without a CUDA kernel:" << list;
}

/// cuBLAS is loaded when the first GPU device is made, not linked: loading
/// needs no GPU, so this checks here that the library is found and every
/// entry point the backend calls resolves (a misspelt symbol would
/// otherwise fail only on a GPU machine).
TEST(CublasLoad, ResolvesEveryEntryPoint) {
  const CublasApi &api = cublas();
  EXPECT_TRUE(api.create && api.destroy && api.setStream && api.setMathMode &&
              api.setWorkspace && api.sgemm && api.sgemmBatched &&
              api.gemmStridedBatchedEx);
  EXPECT_EQ(std::string(cublasLibraryName()).rfind("libcublas.so.", 0), 0u);
}

} // namespace
