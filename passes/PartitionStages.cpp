//===- PartitionStages.cpp - contiguous cost-balanced stages --------------===//

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Dialect/Graph/StorageBytes.h"
#include "cdp/Passes/ForwardLayers.h"
#include "cdp/Passes/Passes.h"
#include "cdp/Passes/SharedStorage.h"
#include "cdp/Schedule/ScheduleTable.h"
#include "cdp/Schedule/Strategy.h"
#include "cdp/Support/Profile.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"

#include <functional>

#include <cmath>
#include <limits>

namespace cdp {
#define GEN_PASS_DEF_PARTITIONSTAGES
#include "cdp/Passes/Passes.h.inc"
} // namespace cdp

using namespace mlir;
using namespace cdp;

namespace {

int64_t elements(Value value) {
  return cast<RankedTensorType>(value.getType()).getNumElements();
}

/// Whether `op`'s result lies over its input's storage (a reshape, a
/// squeeze of a value the graph computed), as cdp-plan-memory lays it out:
/// it moves nothing, and the estimates count the input's bytes, not the
/// view's. A view of a parameter or of the graph's input is a copy.
bool isView(Operation *op) { return storageSharedWith(*op) != nullptr; }

/// Multiply-adds for the products, elements written for the rest (none
/// for a view).
double costOf(Operation *op) {
  if (isView(op))
    return 0;
  auto shape = [](Value v) {
    return cast<RankedTensorType>(v.getType()).getShape();
  };
  if (auto gemm = dyn_cast<GemmOp>(op)) {
    auto a = shape(gemm.getA());
    return double(elements(gemm.getOutput())) *
           (gemm.getTransA() ? a[0] : a[1]);
  }
  if (auto matmul = dyn_cast<MatMulOp>(op)) {
    auto a = shape(matmul.getA());
    return double(elements(matmul.getOutput())) *
           (matmul.getTransA() ? a[a.size() - 2] : a.back());
  }
  if (auto conv = dyn_cast<ConvOp>(op)) {
    auto w = shape(conv.getWeight());
    return double(elements(conv.getOutput())) * w[1] * w[2] * w[3];
  }
  double total = 0;
  for (Value result : op->getResults())
    total += elements(result);
  return total;
}

std::string nodeName(Operation *op) {
  if (auto name = dyn_cast<NameLoc>(op->getLoc()))
    return name.getName().str();
  return "";
}

int64_t bytesOf(Value value) {
  return storageBytes(cast<RankedTensorType>(value.getType()));
}

/// The ops a cut places, each with the parameter-only ops that go with it
/// (the stage of their first consumer: a Linear's transposed weight goes
/// with its MatMul): the stage each takes, and what the estimate counts
/// with each placed op (their weights and results).
struct CutOps {
  CutOps(ArrayRef<Operation *> ops, ArrayRef<Operation *> parameterOnly)
      : members(ops.size()) {
    for (auto [i, op] : llvm::enumerate(ops)) {
      position[op] = i;
      members[i].push_back(op);
    }
    // Consumers come after producers: walk back so a chain of
    // parameter-only ops finds its placed consumer.
    for (Operation *op : llvm::reverse(parameterOnly)) {
      size_t first = ops.size();
      for (Operation *user : op->getUsers())
        if (auto it = position.find(user); it != position.end())
          first = std::min(first, it->second);
      if (first == ops.size())
        first = 0; // read by no placed op: stage 1, as placed
      position[op] = first;
      members[first].push_back(op);
    }
  }
  size_t size() const { return members.size(); }

  /// Where each placed and parameter-only op counts.
  llvm::DenseMap<Operation *, size_t> position;
  /// members[i]: the i-th placed op and the parameter-only ops with it.
  std::vector<SmallVector<Operation *, 1>> members;
  /// The placed ops alone, in order.
  SmallVector<Operation *> placed() const {
    return llvm::to_vector(
        llvm::map_range(members, [](const auto &m) { return m.front(); }));
  }
};

/// Activation bytes of the stages a cut can make, as --device-memory's
/// estimate counts them: without recomputation every forward result is
/// stashed per micro-batch in flight; with it (cdp-recompute) a stage
/// stashes what leaves it and what the mode keeps inside (layer: each
/// layer's input; selective: all but element-wise, softmax, norm and
/// activation-by-activation products), and the backward recomputes the
/// rest of one micro-batch's forward at a time.
class ActivationEstimate {
public:
  ActivationEstimate(const CutOps &cut, StringRef mode, const WeightFlow &flow)
      : recompute(mode != "none") {
    size_t n = cut.size();
    results.assign(n + 1, 0);
    kept.assign(n + 1, 0);
    crossing.assign(n + 1, 0);
    std::vector<double> delta(n + 2, 0), keptAt;
    std::vector<bool> layerStart;
    std::vector<int64_t> layer;
    if (mode == "layer")
      layer = layersOf(cut.placed(), flow, 0);
    // The last op reading `value` or a view of it (n: a reader outside).
    std::function<size_t(Value, size_t)> lastReader = [&](Value value,
                                                          size_t last) {
      for (Operation *user : value.getUsers()) {
        auto it = cut.position.find(user);
        if (it == cut.position.end())
          return n;
        last = std::max(last, it->second);
        if (isView(user))
          last = lastReader(user->getResult(0), last);
      }
      return last;
    };
    for (size_t i = 0; i < n; ++i) {
      double bytes = 0, inside = 0;
      for (Operation *op : cut.members[i]) {
        // A view's bytes are its input's, live until the view's readers.
        if (isView(op))
          continue;
        double written = 0;
        for (Value result : op->getResults()) {
          written += bytesOf(result);
          size_t last = lastReader(result, i);
          delta[i + 1] += bytesOf(result); // live across cuts i+1 .. last
          delta[last + 1] -= bytesOf(result);
        }
        bytes += written;
        if (mode == "selective" && !flow.cheapToRecompute(op))
          inside += written;
      }
      results[i + 1] = results[i] + bytes;
      keptAt.push_back(inside);
      layerStart.push_back(!layer.empty() && i > 0 && layer[i] != layer[i - 1]);
    }
    for (size_t j = 1; j <= n; ++j)
      crossing[j] = crossing[j - 1] + delta[j];
    for (size_t i = 0; i < n; ++i)
      kept[i + 1] = kept[i] + keptAt[i] + (layerStart[i] ? crossing[i] : 0);
  }

  /// Bytes the stage of ops [begin, end) keeps per stashed micro-batch:
  /// every result, or with recomputation what leaves the stage and what
  /// the mode keeps inside it.
  double stashed(size_t begin, size_t end) const {
    double all = results[end] - results[begin];
    if (!recompute)
      return all;
    return std::min(all, crossing[end] + kept[end] - kept[begin + 1]);
  }
  /// The rest of one micro-batch's results, which the backward recomputes
  /// (held at once, at most).
  double working(size_t begin, size_t end) const {
    return results[end] - results[begin] - stashed(begin, end);
  }

private:
  bool recompute;
  std::vector<double> results, kept, crossing;
};

/// The contiguous cut of n ops into `count` stages that minimises the
/// largest `objective(begin, end, stage)` of a stage (ops [begin, end),
/// stage 1-based), by dynamic programming over cut positions; `from`
/// records each stage's first op. Returns that largest value (infinity
/// when no cut has every stage finite).
template <typename Objective>
double minMaxCut(size_t n, int64_t count, Objective objective,
                 SmallVector<SmallVector<size_t>> &from) {
  const double infinity = std::numeric_limits<double>::infinity();
  SmallVector<SmallVector<double>> best(count + 1,
                                        SmallVector<double>(n + 1, infinity));
  from.assign(count + 1, SmallVector<size_t>(n + 1, 0));
  best[0][0] = 0;
  for (int64_t s = 1; s <= count; ++s)
    for (size_t j = s; j + (count - s) <= n; ++j)
      for (size_t i = s - 1; i < j; ++i) {
        if (best[s - 1][i] == infinity)
          continue;
        double value = std::max(best[s - 1][i], objective(i, j, s));
        if (value < best[s][j]) {
          best[s][j] = value;
          from[s][j] = i;
        }
      }
  return best[count][n];
}

/// Writes the stages `from` describes into stageOf.
void applyCut(const SmallVector<SmallVector<size_t>> &from, size_t n,
              int64_t count, SmallVector<int64_t> &stageOf) {
  for (size_t j = n, s = count; s > 0; j = from[s][j], --s)
    for (size_t i = from[s][j]; i < j; ++i)
      stageOf[i] = s;
}

/// Whether ops [0, n) (costs by `prefix`) cut into at most `count`
/// contiguous stages of cost at most `limit` each.
bool fitsStages(ArrayRef<double> prefix, int64_t count, double limit) {
  size_t n = prefix.size() - 1;
  int64_t used = 0;
  for (size_t b = 0; b < n; ++used) {
    size_t e = b;
    while (e < n && prefix[e + 1] - prefix[b] <= limit)
      ++e;
    if (e == b)
      return false; // one op alone is over the limit
    b = e;
  }
  return used <= count;
}

/// The cost-model cut of n ops into `count` stages: first the smallest
/// possible largest stage M (binary search over the greedy check above; a
/// pipeline's step is bounded by its slowest stage), then, stage by stage,
/// the cut nearest an even share of the work still to place among those
/// that keep this stage and every later one within M. The second part
/// matters where one op dominates: M is then that op's stage, and cutting
/// the rest greedily at fixed shares of the total left the stage after it
/// nearly empty.
void balancedCut(ArrayRef<double> prefix, int64_t count,
                 SmallVector<int64_t> &stageOf) {
  size_t n = prefix.size() - 1;
  double lo = 0, hi = prefix[n];
  for (size_t i = 0; i < n; ++i)
    lo = std::max(lo, prefix[i + 1] - prefix[i]);
  for (int k = 0; k < 100 && hi - lo > 1e-12 * std::max(1.0, hi); ++k) {
    double middle = (lo + hi) / 2;
    (fitsStages(prefix, count, middle) ? hi : lo) = middle;
  }
  double limit = hi;
  // need[i]: the fewest stages that cover ops [i, n) within the limit.
  SmallVector<int64_t> need(n + 1, 0);
  for (size_t i = n, e = n; i-- > 0;) {
    while (prefix[e] - prefix[i] > limit)
      --e;
    need[i] = 1 + need[std::max(e, i + 1)];
  }
  size_t b = 0;
  for (int64_t s = 1; s <= count; ++s) {
    int64_t later = count - s;
    double target = prefix[b] + (prefix[n] - prefix[b]) / (later + 1);
    size_t cut = n;
    for (size_t e = b + 1; e + later <= n; ++e) {
      if (prefix[e] - prefix[b] > limit)
        break;
      if (later > 0 ? need[e] > later : e != n)
        continue;
      if (cut == n ||
          std::abs(prefix[e] - target) < std::abs(prefix[cut] - target))
        cut = e;
    }
    for (size_t i = b; i < cut; ++i)
      stageOf[i] = s;
    b = cut;
  }
}

struct PartitionStagesPass
    : public cdp::impl::PartitionStagesBase<PartitionStagesPass> {
  using PartitionStagesBase::PartitionStagesBase;

  /// The cost of every op: the analytic model, or with `profile` the
  /// measured milliseconds of its ONNX node shared among the node's ops.
  LogicalResult opCosts(func::FuncOp func, ArrayRef<Operation *> ops,
                        SmallVector<double> &costs) {
    costs.clear();
    if (profile.empty()) {
      for (Operation *op : ops)
        costs.push_back(costOf(op));
      return success();
    }
    std::vector<ProfileEntry> entries;
    std::string error;
    if (!readProfile(profile, entries, error)) {
      func.emitError("--profile ") << profile << ": " << error;
      return failure();
    }
    llvm::StringMap<double> milliseconds;
    for (const ProfileEntry &entry : entries)
      milliseconds[entry.location] += entry.ms;
    llvm::StringMap<int> opsOfNode;
    for (Operation *op : ops)
      ++opsOfNode[nodeName(op)];
    for (Operation *op : ops) {
      std::string name = nodeName(op);
      auto it = milliseconds.find(name);
      if (it == milliseconds.end()) {
        func.emitError("--profile ")
            << profile << " has no time for node '" << name
            << "'; profile this model with cdp-run --profile";
        return failure();
      }
      costs.push_back(it->second / opsOfNode[name]);
    }
    return success();
  }

  /// The contiguous partition of `ops` into `count` stages with the least
  /// largest stage cost among those whose stages all fit the memory cap
  /// (dynamic programming over cut positions), or an error naming the
  /// smallest cap any partition into `count` stages needs.
  LogicalResult partitionUnderCap(func::FuncOp func, const CutOps &cut,
                                  ArrayRef<double> costs, int64_t count,
                                  SmallVector<int64_t> &stageOf) {
    auto strategyAttr = sched::StrategyAttr::ofModule(getOperation());
    if (!strategyAttr)
      return failure();
    std::optional<Strategy> kind = strategyAttr.getValue();
    if (!inScope(StrategyScope::OneStagePerDevice, *kind))
      return func.emitError("the memory estimate takes a pipeline strategy "
                            "with one stage per device (")
             << scopeNames(StrategyScope::OneStagePerDevice) << "), got '"
             << strategyName(*kind) << "'";
    if (recompute != "none" && recompute != "stage" && recompute != "layer" &&
        recompute != "selective")
      return func.emitError("recompute must be none, stage, layer or "
                            "selective, got '")
             << recompute.getValue() << "'";
    // The stash slots each stage keeps, as the step program sizes them.
    std::vector<int64_t> slots =
        pipeline::stashSlotsPerStage(*kind, count, microBatches);
    size_t n = cut.size();
    SmallVector<double> costPrefix(n + 1, 0), paramPrefix(n + 1, 0);
    llvm::DenseSet<Value> counted;
    for (size_t i = 0; i < n; ++i) {
      double params = 0;
      for (Operation *op : cut.members[i])
        for (Value operand : op->getOperands())
          if (auto param = operand.getDefiningOp<ParamOp>())
            if (!param.getBuffer() && counted.insert(operand).second)
              params += bytesOf(operand);
      costPrefix[i + 1] = costPrefix[i] + costs[i];
      paramPrefix[i + 1] = paramPrefix[i] + params;
    }
    ActivationEstimate activations(cut, recompute,
                                   WeightFlow(func.getBody().front()));
    // Weights (one or two versions), a micro-batch's gradient and the
    // step's accumulator, optimizer state; the stash as the emitter sizes
    // it (both from the strategy's descriptor).
    double perParamByte = weightVersions(*kind) + 2 + optimizerCopies;
    // Ops [begin, end) as stage s (1-based).
    auto memory = [&](size_t begin, size_t end, int64_t s) {
      int64_t stash = slots[s];
      return perParamByte * (paramPrefix[end] - paramPrefix[begin]) +
             stash * activations.stashed(begin, end) +
             activations.working(begin, end);
    };
    auto cost = [&](size_t begin, size_t end) {
      return costPrefix[end] - costPrefix[begin];
    };
    const double infinity = std::numeric_limits<double>::infinity();
    SmallVector<SmallVector<size_t>> from;
    double cap = static_cast<double>(deviceMemory);
    double largestCost = minMaxCut(
        n, count,
        [&](size_t b, size_t e, int64_t s) {
          return memory(b, e, s) <= cap ? cost(b, e) : infinity;
        },
        from);
    if (largestCost == infinity) {
      SmallVector<SmallVector<size_t>> unused;
      double smallest = minMaxCut(n, count, memory, unused);
      func.emitError("no partition into ")
          << count << " stages fits --device-memory "
          << static_cast<int64_t>(deviceMemory)
          << " bytes per device; the smallest cap that would is "
          << static_cast<int64_t>(std::ceil(smallest))
          << " bytes (estimate: weights x versions, gradients, optimizer "
             "state and "
          << strategyName(*kind) << "'s stashed activations"
          << (recompute == "none"
                  ? std::string()
                  : " as --recompute " + recompute.getValue() +
                        " keeps them, and one micro-batch's recomputed "
                        "forward")
          << "; or use more stages)";
      return failure();
    }
    applyCut(from, n, count, stageOf);
    return success();
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation().lookupSymbol<func::FuncOp>("main");
    if (!func) {
      getOperation().emitError("no func.func @main");
      return signalPassFailure();
    }
    SmallVector<Operation *> ops, parameterOnly;
    splitParameterOnly(func, ops, parameterOnly);
    CutOps cut(ops, parameterOnly);
    int64_t withParams = 0;
    for (Operation *op : ops) {
      if (llvm::any_of(op->getOperands(), [](Value v) {
            auto param = v.getDefiningOp<ParamOp>();
            return param && !param.getBuffer();
          }))
        ++withParams;
    }
    if (ops.empty()) {
      func.emitError("the model has no ops to place on stages");
      return signalPassFailure();
    }
    int64_t count = stages;
    if (!boundaries.empty()) {
      if (count && count != static_cast<int64_t>(boundaries.size()) + 1) {
        func.emitError("--stages ")
            << count << " does not match the " << boundaries.size() + 1
            << " stages that --stage-boundaries cuts";
        return signalPassFailure();
      }
      count = boundaries.size() + 1;
    }
    if (count == 0)
      count = std::max<int64_t>(1, std::min<int64_t>(4, withParams));
    if (count > static_cast<int64_t>(ops.size())) {
      func.emitError("cannot cut ")
          << ops.size() << " ops into " << count << " stages";
      return signalPassFailure();
    }

    SmallVector<double> costs;
    if (failed(opCosts(func, ops, costs)))
      return signalPassFailure();
    SmallVector<int64_t> stageOf(ops.size(), 1);
    if (!boundaries.empty()) {
      llvm::StringMap<size_t> position;
      for (auto [i, op] : llvm::enumerate(ops))
        if (std::string name = nodeName(op); !name.empty())
          position[name] = i; // the last op a node made
      SmallVector<size_t> cuts;
      for (const std::string &name : boundaries) {
        auto it = position.find(name);
        if (it == position.end()) {
          func.emitError("--stage-boundaries names '")
              << name << "', which is not a node of the model";
          return signalPassFailure();
        }
        cuts.push_back(it->second);
      }
      if (!llvm::is_sorted(cuts) ||
          std::adjacent_find(cuts.begin(), cuts.end()) != cuts.end() ||
          cuts.back() + 1 >= ops.size()) {
        func.emitError("--stage-boundaries must name distinct nodes in graph "
                       "order, none of them the last");
        return signalPassFailure();
      }
      int64_t stage = 1;
      for (size_t i = 0, c = 0; i < ops.size(); ++i) {
        stageOf[i] = stage;
        if (c < cuts.size() && i == cuts[c]) {
          ++stage;
          ++c;
        }
      }
    } else if (deviceMemory > 0) {
      if (failed(partitionUnderCap(func, cut, costs, count, stageOf)))
        return signalPassFailure();
    } else {
      SmallVector<double> prefix(1, 0.0);
      for (double cost : costs)
        prefix.push_back(prefix.back() + cost);
      balancedCut(prefix, count, stageOf);
    }
    // A parameter-only op goes with its first consumer (CutOps), so a
    // Linear's transposed weight sits with its bias and its MatMul.
    OpBuilder builder(func.getContext());
    for (auto [members, stage] : llvm::zip(cut.members, stageOf))
      for (Operation *op : members)
        op->setAttr("cdp.stage", builder.getI64IntegerAttr(stage));
    func->setAttr("cdp.stages", builder.getI64IntegerAttr(count));
    // What the cut weighed, per stage, so that tools can show the balance.
    SmallVector<double> stageCosts(count, 0.0);
    for (auto [cost, stage] : llvm::zip(costs, stageOf))
      stageCosts[stage - 1] += cost;
    func->setAttr("cdp.stage_costs", builder.getDenseF64ArrayAttr(stageCosts));
    func->setAttr("cdp.stage_cost_unit",
                  builder.getStringAttr(profile.empty() ? "model" : "ms"));
  }

  /// Splits the ops to place into those that read an input of the model
  /// (directly or through other ops) and those computed from parameters and
  /// constants alone, such as the Transpose of a Linear weight. The importer
  /// may order the latter anywhere, so they take no part in the cut.
  static void splitParameterOnly(func::FuncOp func,
                                 SmallVector<Operation *> &ops,
                                 SmallVector<Operation *> &parameterOnly) {
    llvm::DenseSet<Operation *> fromParameters;
    for (Operation &op : func.getBody().front().without_terminator()) {
      if (isa<ParamOp, ConstantOp>(op)) {
        fromParameters.insert(&op);
        continue;
      }
      bool onlyParameters = llvm::all_of(op.getOperands(), [&](Value v) {
        Operation *producer = v.getDefiningOp();
        return producer && fromParameters.contains(producer);
      });
      if (onlyParameters && op.getNumOperands() > 0) {
        fromParameters.insert(&op);
        parameterOnly.push_back(&op);
      } else {
        ops.push_back(&op);
      }
    }
    if (ops.empty()) // nothing reads an input: place everything by cost
      std::swap(ops, parameterOnly);
  }
};

} // namespace
