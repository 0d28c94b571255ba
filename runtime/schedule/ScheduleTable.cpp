//===- ScheduleTable.cpp - the pipelines' schedules as tables -------------===//

#include "cdp/Schedule/ScheduleTable.h"

#include "Dependencies.h"
#include "cdp/Schedule/Pipeline.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

namespace cdp::pipeline {

const char *ruleName(WeightRule rule) {
  return rule == WeightRule::OneStale ? "1-stale" : "synchronous";
}

ScheduleTable::ScheduleTable(int64_t stages, int64_t devices,
                             int64_t microBatches, WeightRule rule)
    : stages(stages), devices(devices), microBatches(microBatches), rule(rule),
      deviceOf(stages, 0) {}

void ScheduleTable::add(int64_t time, Action action) {
  if (static_cast<int64_t>(rows.size()) <= time)
    rows.resize(time + 1, std::vector<std::vector<Action>>(devices));
  rows[time][deviceOf[action.stage - 1]].push_back(action);
}

int64_t ScheduleTable::cycle() const {
  if (period > 0)
    return period;
  int64_t cycle = 0;
  for (size_t t = 0; t < rows.size(); ++t)
    for (const std::vector<Action> &cell : rows[t])
      for (const Action &action : cell)
        if (action.computes())
          cycle = std::max<int64_t>(cycle, t + 1);
  return cycle;
}

std::vector<TimedAction> stageActions(const ScheduleTable &table, int64_t s) {
  std::vector<TimedAction> actions;
  int64_t device = table.deviceOf[s - 1];
  for (size_t t = 0; t < table.rows.size(); ++t)
    for (const Action &action : table.rows[t][device])
      if (action.stage == s)
        actions.push_back({action, static_cast<int64_t>(t)});
  return actions;
}

bool readsPreviousVersion(const ScheduleTable &table,
                          const std::vector<TimedAction> &stage, size_t i) {
  if (table.rule != WeightRule::OneStale)
    return false;
  bool afterUpdate = false;
  for (size_t j = 0; j < i; ++j)
    afterUpdate |= stage[j].action.kind == ActionKind::Update;
  const Action &action = stage[i].action;
  if (action.kind == ActionKind::Forward)
    return afterUpdate;
  // A backward reads what its forward read: W(t - 2) for the previous
  // step's (the previous version until the update), W(t - 1) for this
  // step's (the latest before the update, the previous after it).
  return action.microBatch < 0 || afterUpdate;
}

namespace {

/// Whether the action ends its micro-batch's stay in the stash: a full
/// backward, or the W of a split one.
bool endsStash(ActionKind kind) {
  return kind == ActionKind::Backward || kind == ActionKind::WeightGrad;
}

} // namespace

int64_t tableStashSlots(const ScheduleTable &table, int64_t s) {
  int64_t M = table.microBatches;
  std::vector<TimedAction> actions = stageActions(table, s);
  // Three steps run back to back: micro-batch k of step t is t·M + k; the
  // previous step's work (negative k) is skipped in step 0. Each end of a
  // stay records who is in flight then. (Vectors: a 64-stage table has
  // thousands of such moments per stage.)
  std::vector<std::vector<int64_t>> inFlightSets;
  std::vector<int64_t> inFlight;
  for (int64_t t = 0; t < 3; ++t)
    for (const TimedAction &timed : actions) {
      int64_t global = t * M + timed.action.microBatch;
      if (global < 0 || !timed.action.computes())
        continue;
      if (timed.action.kind == ActionKind::Forward) {
        inFlight.push_back(global);
      } else if (endsStash(timed.action.kind)) {
        inFlightSets.push_back(inFlight);
        auto it = std::find(inFlight.begin(), inFlight.end(), global);
        if (it != inFlight.end())
          inFlight.erase(it);
      }
    }
  size_t most = 1;
  for (const std::vector<int64_t> &set : inFlightSets)
    most = std::max(most, set.size());
  std::vector<char> used;
  for (int64_t slots = most;; ++slots) {
    bool clash = false;
    for (const std::vector<int64_t> &set : inFlightSets) {
      used.assign(slots, 0);
      for (int64_t global : set) {
        char &taken = used[(global % M) % slots];
        clash |= taken;
        taken = 1;
      }
    }
    if (!clash)
      return slots;
  }
}

ScheduleTable timeOrders(ScheduleTable table,
                         const std::vector<std::vector<Action>> &orders) {
  int64_t D = table.devices;
  std::map<WorkKey, int64_t> ends;
  std::vector<size_t> next(D, 0);
  std::vector<int64_t> free(D, 0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int64_t d = 0; d < D; ++d)
      for (; next[d] < orders[d].size(); ++next[d]) {
        const Action &action = orders[d][next[d]];
        int64_t start = free[d];
        bool ready = true;
        for (const WorkKey &key :
             needsOf(action, table.stages, table.microBatches)) {
          auto it = ends.find(key);
          ready = ready && it != ends.end();
          if (ready)
            start = std::max(start, it->second);
        }
        if (!ready)
          break;
        table.add(start, action);
        progress = true;
        if (action.computes())
          ends[keyOf(action, table.microBatches)] = free[d] = start + 1;
      }
  }
  return table;
}

ScheduleTable flushedTable(Strategy strategy, int64_t S, int64_t M) {
  ScheduleTable table(S, S, M, WeightRule::Synchronous);
  std::vector<std::vector<StageOp>> orders;
  for (int64_t s = 1; s <= S; ++s) {
    table.deviceOf[s - 1] = s - 1;
    orders.push_back(stageOrder(strategy, s, S, M, 1));
  }
  std::vector<std::vector<int64_t>> at = timing(orders);
  for (int64_t s = 1; s <= S; ++s)
    for (size_t i = 0; i < orders[s - 1].size(); ++i) {
      const StageOp &op = orders[s - 1][i];
      table.add(at[s - 1][i], {s, static_cast<ActionKind>(op.kind),
                               op.kind == 'U' ? 0 : op.microBatch - 1});
    }
  return table;
}

std::vector<int64_t> stashSlotsPerStage(Strategy strategy, int64_t S, int64_t M,
                                        int64_t V) {
  std::vector<int64_t> slots(S + 1, 1);
  if (traitsOf(strategy).cyclic) {
    for (int64_t s = 1; s <= S; ++s)
      slots[s] = stashSlots(strategy, s, S, M);
    return slots;
  }
  ScheduleTable table = strategyTable(strategy, S, M, V);
  for (int64_t s = 1; s <= S; ++s)
    slots[s] = tableStashSlots(table, s);
  return slots;
}

ScheduleTable strategyTable(Strategy strategy, int64_t S, int64_t M,
                            int64_t V) {
  return traitsOf(strategy).table(S, M, V);
}

} // namespace cdp::pipeline

namespace cdp::pipeline {

namespace {

/// An action where the table has it.
struct Placed {
  Action action;
  int64_t row, device;
  size_t cell; ///< its index in the cell
};

TableFault faultAt(const Placed &at, std::string message) {
  return {at.row, at.device, std::move(message)};
}

/// Every action of the table, row by row, device by device.
std::vector<Placed> placedActions(const ScheduleTable &table) {
  std::vector<Placed> placed;
  for (size_t t = 0; t < table.rows.size(); ++t)
    for (size_t d = 0; d < table.rows[t].size(); ++d)
      for (size_t i = 0; i < table.rows[t][d].size(); ++i)
        placed.push_back({table.rows[t][d][i], static_cast<int64_t>(t),
                          static_cast<int64_t>(d), i});
  return placed;
}

std::optional<std::string> microBatchFault(const ScheduleTable &table,
                                           const Action &action) {
  int64_t k = action.microBatch, M = table.microBatches;
  if (k >= M || k < -M)
    return "micro-batch " + std::to_string(k) +
           " is out of range: a step has " + std::to_string(M) + " (0 to " +
           std::to_string(M - 1) + ")";
  if (k < 0 && table.rule == WeightRule::Synchronous)
    return "a negative micro-batch (the previous step's work) needs the "
           "1-stale rule";
  if (k < 0 && action.kind == ActionKind::Forward)
    return "a step runs only its own forwards (a negative micro-batch is the "
           "previous step's)";
  return std::nullopt;
}

std::string stageName(int64_t s) { return "stage " + std::to_string(s - 1); }

/// 1-stale: a device's part of a step fits in the period, so that steps
/// repeating every period never give it two actions at one time step.
std::optional<TableFault> periodFault(const ScheduleTable &table,
                                      const std::vector<Placed> &placed) {
  if (table.period == 0)
    return std::nullopt;
  std::vector<int64_t> first(table.devices, -1);
  for (const Placed &at : placed) {
    if (!at.action.computes())
      continue;
    if (first[at.device] < 0)
      first[at.device] = at.row;
    if (at.row - first[at.device] >= table.period)
      return faultAt(at, actionToken(at.action) + " is " +
                             std::to_string(at.row - first[at.device]) +
                             " time steps after its device's first action, "
                             "past the cycle of " +
                             std::to_string(table.period) +
                             ", where the next step's begins");
  }
  return std::nullopt;
}

} // namespace

std::optional<TableFault> checkActions(const ScheduleTable &table) {
  int64_t S = table.stages, M = table.microBatches;
  std::map<WorkKey, Placed> made;
  std::map<std::pair<int64_t, int64_t>, bool> fullBackward;
  std::vector<int> updates(S + 1, 0);
  std::vector<Placed> placed = placedActions(table);
  for (const Placed &at : placed) {
    const Action &action = at.action;
    std::string token = actionToken(action);
    if (action.stage < 1 || action.stage > S)
      return faultAt(at, token + ": the model has " + std::to_string(S) +
                             " stages (0 to " + std::to_string(S - 1) + ")");
    if (table.deviceOf[action.stage - 1] != at.device)
      return faultAt(at, token + ": " + stageName(action.stage) +
                             " runs on device " +
                             std::to_string(table.deviceOf[action.stage - 1]));
    if (!action.computes()) {
      if (++updates[action.stage] > 1)
        return faultAt(at, token + ": " + stageName(action.stage) +
                               " updates twice in a step");
      continue;
    }
    if (std::optional<std::string> fault = microBatchFault(table, action))
      return faultAt(at, token + ": " + *fault);
    for (size_t i = 0; i < at.cell; ++i)
      if (table.rows[at.row][at.device][i].computes())
        return faultAt(at, token + " shares the time step with " +
                               actionToken(table.rows[at.row][at.device][i]) +
                               ": a device computes one action per time step");
    auto [it, added] = made.emplace(keyOf(action, M), at);
    if (!added)
      return faultAt(at, token + " repeats the work of " +
                             actionToken(it->second.action) + " (time step " +
                             std::to_string(it->second.row) + ")");
    if (action.kind != ActionKind::Forward &&
        action.kind != ActionKind::WeightGrad)
      fullBackward[{action.stage, std::get<2>(keyOf(action, M))}] =
          action.kind == ActionKind::Backward;
  }
  int64_t lastRow = std::max<int64_t>(table.rows.size(), 1) - 1;
  for (int64_t s = 1; s <= S; ++s) {
    TableFault missing{lastRow, table.deviceOf[s - 1], ""};
    for (int64_t k = 0; k < M; ++k) {
      std::string mb = " of micro-batch " + std::to_string(k);
      if (!made.count({s, 'F', k}))
        missing.message = stageName(s) + " never runs the forward" + mb;
      else if (!made.count({s, 'I', k}))
        missing.message =
            stageName(s) + " never runs the backward (B or I)" + mb;
      else if (fullBackward[{s, k}] == made.count({s, 'W', k}))
        missing.message = stageName(s) +
                          (fullBackward[{s, k}] ? " runs both B and W"
                                                : " runs I but never W") +
                          mb;
      if (!missing.message.empty())
        return missing;
    }
    if (updates[s] == 0)
      return TableFault{lastRow, table.deviceOf[s - 1],
                        stageName(s) + " never updates (add " +
                            actionToken({s, ActionKind::Update, 0}) + ")"};
  }
  return periodFault(table, placed);
}

namespace {

/// Where the update rule faults an action of a stage given where the
/// stage's update is.
std::optional<std::string> ruleFault(const ScheduleTable &table,
                                     const Placed &at, const Placed &update) {
  const Action &action = at.action;
  if (action.kind == ActionKind::Forward || !action.computes())
    return std::nullopt;
  bool beforeUpdate =
      std::make_pair(at.row, at.cell) < std::make_pair(update.row, update.cell);
  std::string where =
      " (the update is at time step " + std::to_string(update.row) + ")";
  if (table.rule == WeightRule::Synchronous)
    return beforeUpdate ? std::nullopt
                        : std::optional<std::string>(
                              " runs after its stage's update" + where +
                              ": under the synchronous rule a stage updates "
                              "after all of its backward work");
  if (action.microBatch < 0 && !beforeUpdate)
    return " is the previous step's and must run before the update" + where;
  if (action.microBatch >= 0 && beforeUpdate)
    return " is this step's and must run after the update" + where +
           ", which applies the previous step's gradients";
  return std::nullopt;
}

} // namespace

std::optional<TableFault> checkOrder(const ScheduleTable &table) {
  int64_t S = table.stages, M = table.microBatches, cycle = table.cycle();
  std::vector<Placed> placed = placedActions(table);
  std::map<WorkKey, Placed> made;
  std::map<int64_t, Placed> updateOf;
  for (const Placed &at : placed) {
    if (at.action.computes())
      made.emplace(keyOf(at.action, M), at);
    else
      updateOf.emplace(at.action.stage, at);
  }
  auto absolute = [&](const Placed &at) {
    return at.row + (at.action.microBatch < 0 ? cycle : 0);
  };
  for (const Placed &at : placed) {
    if (!at.action.computes())
      continue;
    for (const WorkKey &need : needsOf(at.action, S, M)) {
      const Placed &before = made.at(need);
      if (absolute(before) < absolute(at))
        continue;
      std::string where = " at time step " + std::to_string(before.row);
      if (before.device != at.device)
        where += " on device " + std::to_string(before.device);
      return faultAt(at, actionToken(at.action) + " needs " +
                             actionToken(before.action) + where +
                             ", which must come earlier");
    }
    if (std::optional<std::string> fault =
            ruleFault(table, at, updateOf.at(at.action.stage)))
      return faultAt(at, actionToken(at.action) + *fault);
  }
  return std::nullopt;
}

std::optional<TableFault> checkTable(const ScheduleTable &table) {
  if (std::optional<TableFault> fault = checkActions(table))
    return fault;
  return checkOrder(table);
}

} // namespace cdp::pipeline
