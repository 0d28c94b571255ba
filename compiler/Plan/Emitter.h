//===- Emitter.h - the plan emitter (internal) ----------------*- C++ -*-===//
//
// What the emitter's files share: the Emitter (one plan tensor per SSA
// value, one instruction per op), the data-parallel tables, and the
// pipelines' tables, stash layout and per-device lowering state.
//
//===----------------------------------------------------------------------===//

#ifndef CDP_COMPILER_PLAN_EMITTER_H
#define CDP_COMPILER_PLAN_EMITTER_H

#include "cdp/Plan/EmitPlan.h"
#include "cdp/Plan/ShardLayout.h"

#include "SparseExchange.h"

#include "cdp/Dialect/Graph/GraphOps.h"
#include "cdp/Dialect/Sched/SchedOps.h"
#include "cdp/Plan/ArenaPacking.h"
#include "cdp/Plan/DropUnnamedTensors.h"
#include "cdp/Plan/PlanCheck.h"
#include "cdp/Plan/PlanIO.h"
#include "cdp/Plan/PlanInstantiate.h"
#include "cdp/Schedule/Pipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <array>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

namespace cdp::emit {

using namespace mlir;

/// The plan's element type of an MLIR element type.
plan::DType dtypeOf(Type element);
/// The bytes of an elements attribute, row-major, little-endian.
FailureOr<std::string> elementsBytes(ElementsAttr attr);
/// An op's location as errors and the plan print it.
std::string locationName(Location loc);
/// fp16: the loss-scale buffer a stage's updates name, last on the sharded
/// update that replaces them (`loss_scale` 1).
void addLossScale(const std::vector<plan::Instruction> &updates,
                  plan::Instruction &out);
/// The rule of a stage's `update` instructions onto the instruction that
/// replaces them: their attributes, with each one's weight decay in
/// `weight_decays` (parameter groups without decay).
void copyUpdateRule(const std::vector<plan::Instruction> &updates,
                    plan::Instruction &out);

struct PipelineTables;
struct StashLayout;

/// A device to lower into before its instructions become a template, made
/// on the plan's arena: addTemplate's swap then moves the instructions (a
/// swap across arenas copies every one).
class ScratchDevice {
public:
  explicit ScratchDevice(plan::Plan &plan) {
    if (google::protobuf::Arena *arena = plan.GetArena())
      device = google::protobuf::Arena::CreateMessage<plan::Device>(arena);
    else
      device = (owned = std::make_unique<plan::Device>()).get();
  }
  plan::Device &operator*() { return *device; }
  plan::Device *operator->() { return device; }

private:
  std::unique_ptr<plan::Device> owned;
  plan::Device *device;
};

/// dp and cdp: what every slot's program shares.
struct DataParallelTables {
  int64_t N = 1, L = 1;
  bool chain = false;
  /// Per stage: the parameters, their gradients, reduced buffers, updates.
  struct Trained {
    int param, grad, reduced;
    UpdateOp update;
  };
  std::vector<std::vector<Trained>> byStage;
  std::vector<std::array<int, 2>> chainBuffers;
  /// ZeRO stage of the updates (sched.wait_reduction's `zero`), and with 2
  /// per stage the tensor holding the device's shard of the mean gradients.
  int64_t zero = 0;
  std::vector<int> gradShards;
  /// ZeRO stage 3, per stage: the SHARD tensor of its parameters, and what
  /// its gather writes (the parameters, then the padding if any).
  std::vector<int> paramShards;
  std::vector<std::vector<int>> gathered;
  /// CDP-ZeRO (cdp --zero 3): paramShards hold each stage's master copy on
  /// its owner; per stage the owner, the arena tensor the stage travels in
  /// and the owner's buffer for the mean gradients.
  bool cdpZero = false;
  std::vector<int64_t> owners;
  std::vector<int> regions, means;
  /// ZeRO stages 2 and 3 with clipping: the device's share of the squared
  /// norm, summed over the devices in place.
  int normShare = -1, overflowShare = -1;
  /// The step's gradient clipping, if any (sched.clip_means or clip_own
  /// say where it runs).
  ClipGradNormOp clip;
  /// Dynamic loss scaling's unscaling, if any (in sched.clip_means, or
  /// cdp's sched.clip_own).
  UnscaleGradsOp unscale;
  /// cdp with loss scaling: the device's own overflow flag, which rides in
  /// every stage's reduction; per stage the reduced flag (above 0 where any
  /// device overflowed); the first trained stage, whose wait adjusts the
  /// scale for the step.
  int ownOverflow = -1;
  std::vector<int> stageOverflow;
  int64_t firstTrained = 0;
  /// cdp fp16 where slots apply stages' means of different steps (v2):
  /// each stage's updates set the skip flag from their own mean.
  bool marksStages = false;
  /// cdp with loss scaling: each slot's overflow flag rides in its
  /// reductions (the all-reduce's and the chain's).
  bool flagsRide = false;
  /// laysa: the stages' top-k exchanges (no reduced buffers then).
  bool sparse = false;
  sparse::Exchange exchange;
};
/// What the devices running one stage in the same place of every replica
/// share: the first replica's stash copies and compute templates, which
/// the other replicas' runs name with their peers offset (the plan's
/// replica_devices).
struct SharedStageDevice {
  /// (slot, tensor) -> the slot's copy of a stashed tensor; (-1, tensor)
  /// the device's copy of any other.
  std::unordered_map<int64_t, int> copies;
  /// Compute templates built, by what sets them apart (see addComputeRun).
  std::map<std::vector<int64_t>, int> computeTemplates;
};

struct DeviceLowering;
class SlotLowering;

/// The runs lowering one sched.stage_device appended to its device.
struct LoweredStageDevice {
  int64_t index = 0, firstRun = 0, runCount = 0;
  /// The stage device's micro-batches per step.
  int64_t microBatches = 0;
};

class Emitter {
public:
  Emitter(func::FuncOp func, plan::Plan &plan) : func(func), plan(plan) {}

  LogicalResult run(const EmitOptions &options);

private:
  friend class SlotLowering;
  bool moveValues = false; ///< EmitOptions::moveValues
  void setPlanHeader(const EmitOptions &options);
  void addInputs();
  LogicalResult addTrainingStream(plan::Device &device);
  LogicalResult setParamData(plan::Tensor &tensor, ElementsAttr value);
  void addOutputs();
  void scheduleSingleDevice(const EmitOptions &options, plan::Device &device);
  LogicalResult addEvalStream(plan::Device &device);
  int addTensor(Value value, plan::TensorKind kind, StringRef name);
  LogicalResult addInstruction(Operation *op, plan::Device &device,
                               bool forEval);
  LogicalResult emitDataParallel(int64_t arenaBytes);
  LogicalResult addReducedTensors(DataParallelTables &tables);
  LogicalResult prepareExchange(DataParallelTables &tables);
  int64_t addShardGroups(sched::StepProgramOp program,
                         DataParallelTables &tables, int64_t arenaBytes);
  void joinSlotPieces(int firstPiece);
  LogicalResult lowerSlotStep(sched::SlotDeviceOp op, Operation &step,
                              plan::Device &out,
                              const DataParallelTables &tables);
  std::vector<int64_t> slotStepKey(sched::SlotDeviceOp op, Operation &step,
                                   const DataParallelTables &tables);
  plan::Instruction *lowerUnscale(plan::Device &device, UnscaleGradsOp unscale,
                                  ArrayRef<int> grads,
                                  ArrayRef<int> flags = {});
  plan::Instruction *lowerClip(plan::Device &device, ClipGradNormOp clip,
                               ArrayRef<int> grads,
                               ArrayRef<int> partials = {});
  LogicalResult lowerSlotCompute(plan::Device &device,
                                 sched::SlotComputeOp compute, int64_t offset,
                                 int64_t d, int64_t L);
  void accumulateMicroBatches(plan::Device &device, int64_t slots);
  LogicalResult emitPipeline(const EmitOptions &options);
  std::vector<std::pair<size_t, size_t>>
  sharedTransients(int64_t s, ArrayRef<std::pair<Operation *, int64_t>> inPlace,
                   const llvm::DenseMap<int, size_t> &rangeOf,
                   const std::vector<LiveRange> &ranges, int64_t lastStage);
  void preparePipeline(sched::StepProgramOp program, PipelineTables &tables);
  void addAccumulators(int64_t S, PipelineTables &tables);
  void splitBackwards(PipelineTables &tables,
                      const llvm::DenseSet<Value> &weights);
  StashLayout layoutStash(int64_t s, int64_t slots, bool split,
                          const PipelineTables &tables);
  int mapped(DeviceLowering &lowering, int64_t slot, int id,
             const PipelineTables &tables);
  plan::Instruction *message(plan::Instruction *instruction, bool isSend,
                             int id, int64_t peer, int value,
                             int64_t microBatch, const std::string &location,
                             const PipelineTables &tables);
  LogicalResult lowerStageDevice(sched::StageDeviceOp op,
                                 const PipelineTables &tables);
  int addTemplate(plan::Device &scratch, int64_t timeStep, int64_t microBatch,
                  int64_t messageBatch, int64_t stepMicroBatch,
                  int64_t peerOffset = 0);
  int64_t sharedReplicaDevices(sched::StepProgramOp program);
  void spellReplicas(ArrayRef<LoweredStageDevice> lowered, int64_t replicas,
                     std::set<int> &merged);
  int replicaTemplate(int first, int64_t r);
  LogicalResult lowerInto(DeviceLowering &lowering, plan::Device &scratch,
                          llvm::function_ref<LogicalResult()> lower);
  LogicalResult addBlockRun(DeviceLowering &lowering,
                            llvm::function_ref<LogicalResult()> lower);
  LogicalResult addComputeRun(DeviceLowering &lowering,
                              sched::ComputeOp compute,
                              const PipelineTables &tables);
  void markStashSlots(DeviceLowering &lowering);
  LogicalResult lowerUpdateStep(DeviceLowering &lowering, Operation *op,
                                const PipelineTables &tables);
  LogicalResult lowerReplicaShardUpdate(DeviceLowering &lowering,
                                        sched::ApplyShardUpdateOp shard,
                                        const PipelineTables &tables);
  void lowerExchange(DeviceLowering &lowering,
                     sched::ExchangeGradientsOp exchange,
                     const PipelineTables &tables);
  std::vector<int> stageGradients(const DeviceLowering &lowering,
                                  const PipelineTables &tables);
  template <typename StagesOp>
  std::vector<int> shareAmongStages(DeviceLowering &lowering, StagesOp op,
                                    const char *opName, ArrayRef<int> grads,
                                    ArrayRef<int> shareOf, StringRef what,
                                    const PipelineTables &tables);
  LogicalResult lowerClipStages(DeviceLowering &lowering,
                                sched::ClipStagesOp clip,
                                const PipelineTables &tables);
  LogicalResult lowerUnscaleStages(DeviceLowering &lowering,
                                   sched::UnscaleStagesOp unscale,
                                   const PipelineTables &tables);
  LogicalResult lowerCompute(DeviceLowering &lowering, sched::ComputeOp compute,
                             const PipelineTables &tables);
  LogicalResult sendResults(DeviceLowering &lowering, sched::ComputeOp compute,
                            Operation *op, int64_t tagBatch,
                            std::set<int> &sent, const PipelineTables &tables);
  LogicalResult convertAttribute(Operation *op, NamedAttribute attribute,
                                 plan::Attribute &out);
  const std::string &locationOf(Operation *op);

  func::FuncOp func;
  plan::Plan &plan;
  llvm::DenseMap<Value, int> ids;
  /// Training instructions as first built, per op: pipelines emit every
  /// op once per micro-batch, and copying beats converting it again.
  llvm::DenseMap<Operation *, std::unique_ptr<plan::Instruction>> prototypes;
  llvm::DenseMap<Operation *, std::string> locations;
  /// dp and cdp: @main's ops of each stage's forward and backward, in op
  /// order, built once (every slot template reads them; scanning @main per
  /// stage and template was quadratic at 48 stages x 49 templates).
  std::map<std::pair<int64_t, bool>, std::vector<Operation *>> slotStageOps;
  /// Pipelines: devices per replica where every replica runs the first
  /// replica's templates (0: each device its own), and what they share by
  /// (stage, device of the first replica).
  int64_t replicaDevices = 0;
  std::map<std::pair<int64_t, int64_t>, SharedStageDevice> sharedStageDevices;
  /// Templates of update-time work (addBlockRun): they name devices as
  /// they are, where compute templates name them relative to their run.
  std::set<int> blockTemplates;
  ArrayRef<Operation *> slotStageOpsOf(int64_t stage, bool backward, int64_t L);
};

/// The pipelines (gpipe, 1f1b, 2bw, cdp-mp) lower cdp-schedule-pipeline's
/// sched.step_program: every decision (placement, programs, versions, stash
/// slots, tied-weight and replica messages) is read from it. A
/// sched.compute becomes the stage's ops for one micro-batch, in its stash
/// slot's copies of the stage's tensors; values crossing a cut travel by
/// send and recv, graph inputs are loaded where a stage reads them, and
/// parameter gradients and the loss are accumulated over the step's
/// micro-batches.
struct PipelineTables {
  int64_t S = 1, MB = 1, cycle = 1;
  std::vector<std::vector<Operation *>> forwardOps, backwardOps;
  /// zb-h1's halves of each stage's backward: the ops the gradients sent
  /// to earlier stages need (I), and the rest: parameter gradients (W).
  std::vector<std::vector<Operation *>> inputGradOps, weightGradOps;
  llvm::StringMap<UpdateOp> updateOf;
  /// runs[s][j]: the device running micro-batch j at stage s.
  std::vector<std::vector<int64_t>> runs;
  /// stageDevice[s]: the device running stage s of the first replica,
  /// where the stage's parameters, accumulators and loss live.
  std::vector<int64_t> stageDevice;
  llvm::StringMap<int> paramId;
  /// Tied weights (those with replicas), by tensor id.
  llvm::DenseSet<int> tied;
  llvm::StringMap<int> accumulator, replicaSum;
  llvm::DenseMap<int, int> previousVersion;
  int lossAccumulator = -1, lossResult = -1, originalTensors = 0;
  /// Gradient clipping: the graph's clip and, per stage, the scalar that
  /// holds the stage's share of the squared norm on every device.
  ClipGradNormOp clip;
  std::vector<int> normShare;
  /// Dynamic loss scaling: the graph's unscaling and, per stage, the
  /// scalar that holds whether the stage's gradients overflowed.
  UnscaleGradsOp unscale;
  std::vector<int> overflowFlag;
  /// With one weight version (every micro-batch of a step reads the same
  /// weights): the tensors computed from weights and constants alone.
  llvm::DenseSet<int> weightDerived;
};

/// Where a stage device keeps a micro-batch's tensors: what the stage's
/// forward makes or brings in and its backward reads is stashed, one copy
/// per slot; everything else lives within one forward or backward, one
/// copy per device after the slots.
struct StashLayout {
  std::set<int> broughtByForward;
  /// Split backwards: what the I half receives or loads and the W half
  /// reads too (stashed, and not brought in again).
  std::set<int> broughtByInputGrad;
  llvm::DenseMap<int, int64_t> stashOffset, transientOffset;
  int64_t stashBytes = 0, transientBase = 0, transientBytes = 0;
  /// With one weight version: what a stage computes from its weights alone
  /// (their rounded copies, transposes) and its backward reads, one copy
  /// for every slot after the slots' stashes (each micro-batch's forward
  /// writes the same bits there).
  llvm::DenseMap<int, int64_t> sharedOffset;
  int64_t sharedBase = 0, sharedBytes = 0;
};

/// One stage device being lowered.
struct DeviceLowering {
  sched::StageDeviceOp op;
  plan::Device *device = nullptr;
  int64_t self = 0, s = 1;
  /// The device of the first replica this one runs as (`self` without
  /// replicas sharing), and how much further its peers are.
  int64_t home = 0, peerOffset = 0;
  ArrayRef<int64_t> mine;
  StashLayout layout;
  /// Where this stage's part of the device arena starts (a device running
  /// several stages gives each its own part).
  int64_t base = 0;
  SharedStageDevice *shared = nullptr;
  /// Parameters whose gradient this step was summed over replicas.
  llvm::StringSet<> exchanged;
  /// The stash slot the instructions being built name (0: templates name
  /// slot 0's copies, and each run its own slot).
  int64_t slot = 0;
};

} // namespace cdp::emit

#endif // CDP_COMPILER_PLAN_EMITTER_H
