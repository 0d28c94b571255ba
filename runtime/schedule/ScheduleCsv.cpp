//===- ScheduleCsv.cpp - pipeline schedules as CSV tables -----------------===//
//
// The format (docs/user-guide.md, "Writing a schedule"):
//
//   # cdp schedule: stages=2 micro-batches=2 rule=synchronous
//   time,device 0,device 1
//   0,0F0 0SEND_F0,
//   1,0F1 0SEND_F1,1RECV_F0 1F0
//   ...
//
// A cell holds the device's actions at that time step, separated by
// spaces, in PyTorch pipelining's notation: stage (0-based), kind,
// micro-batch. Sends and receives between devices are written out and
// checked; the plan derives its messages from the computations.
//
//===----------------------------------------------------------------------===//

#include "Dependencies.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <sys/stat.h>

namespace cdp::pipeline {

std::string actionToken(const Action &action) {
  std::string token =
      std::to_string(action.stage - 1) + static_cast<char>(action.kind);
  if (action.computes())
    token += std::to_string(action.microBatch);
  return token;
}

namespace {

/// A message between devices: kind 'F' carries stage `stage`'s forward
/// output to stage + 1, 'B' its input gradient to stage - 1.
struct Message {
  bool send;
  char kind;
  int64_t stage, microBatch;
};

std::string messageToken(const Message &message) {
  return std::to_string(message.stage - 1) +
         (message.send ? "SEND_" : "RECV_") + message.kind +
         std::to_string(message.microBatch);
}

/// Whether stages a and b run on different devices.
bool apart(const ScheduleTable &table, int64_t a, int64_t b) {
  return table.deviceOf[a - 1] != table.deviceOf[b - 1];
}

/// The receives before and the sends after `action` on its device.
void messagesAround(const ScheduleTable &table, const Action &action,
                    std::vector<Message> &before, std::vector<Message> &after) {
  int64_t s = action.stage, S = table.stages, k = action.microBatch;
  if (action.kind == ActionKind::Forward) {
    if (s > 1 && apart(table, s - 1, s))
      before.push_back({false, 'F', s, k});
    if (s < S && apart(table, s, s + 1))
      after.push_back({true, 'F', s, k});
  }
  if (action.kind == ActionKind::Backward ||
      action.kind == ActionKind::InputGrad) {
    if (s < S && apart(table, s, s + 1))
      before.push_back({false, 'B', s, k});
    if (s > 1 && apart(table, s - 1, s))
      after.push_back({true, 'B', s, k});
  }
}

} // namespace

std::string writeScheduleCsv(const ScheduleTable &table) {
  std::ostringstream os;
  os << "# cdp schedule: stages=" << table.stages
     << " micro-batches=" << table.microBatches
     << " rule=" << ruleName(table.rule);
  if (table.period > 0)
    os << " cycle=" << table.period;
  os << "\ntime";
  for (int64_t d = 0; d < table.devices; ++d)
    os << ",device " << d;
  os << "\n";
  for (size_t t = 0; t < table.rows.size(); ++t) {
    os << t;
    for (const std::vector<Action> &cell : table.rows[t]) {
      std::vector<std::string> tokens;
      for (const Action &action : cell) {
        std::vector<Message> before, after;
        messagesAround(table, action, before, after);
        for (const Message &message : before)
          tokens.push_back(messageToken(message));
        tokens.push_back(actionToken(action));
        for (const Message &message : after)
          tokens.push_back(messageToken(message));
      }
      os << ",";
      for (size_t i = 0; i < tokens.size(); ++i)
        os << (i ? " " : "") << tokens[i];
    }
    os << "\n";
  }
  return os.str();
}

namespace {

/// A token where the CSV has it.
struct Token {
  bool isMessage = false;
  Action action{1, ActionKind::Forward, 0};
  Message message{false, 'F', 1, 0};
  int64_t row = 0, device = 0;
};

/// A fault at a time step and device, as the reader reports it.
struct CsvFault {
  int64_t row, device;
  std::string message;
};

/// "line L, column C (time step T, device D): ...": the header is line 1
/// and the column names line 2; time step T is line T + 3, device D
/// column D + 2.
std::string describe(int64_t row, int64_t device, const std::string &message) {
  return "line " + std::to_string(row + 3) + ", column " +
         std::to_string(device + 2) + " (time step " + std::to_string(row) +
         ", device " + std::to_string(device) + "): " + message;
}

std::vector<std::string> splitFields(const std::string &line) {
  std::vector<std::string> fields;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, ','))
    fields.push_back(field);
  if (!line.empty() && line.back() == ',')
    fields.push_back("");
  return fields;
}

std::string trim(std::string text) {
  size_t begin = text.find_first_not_of(" \t\r\"");
  size_t end = text.find_last_not_of(" \t\r\"");
  return begin == std::string::npos ? "" : text.substr(begin, end - begin + 1);
}

/// Parses one token: "0F1", "1B-1", "2I0", "2W0", "0U", "0SEND_F1", ...
std::optional<Token> parseToken(const std::string &text, int64_t row,
                                int64_t device, std::string &error) {
  static const std::regex pattern(
      "([0-9]{1,6})(SEND_F|RECV_F|SEND_B|RECV_B|F|B|I|W|U)(-?[0-9]{1,6})?");
  std::smatch match;
  if (!std::regex_match(text, match, pattern)) {
    error = "'" + text +
            "' is not an action (stage, kind, micro-batch: 0F1, 1B0, 2I3, "
            "2W3, 0U, 0SEND_F1, 1RECV_F1, 1SEND_B0, 0RECV_B0)";
    return std::nullopt;
  }
  std::string kind = match[2];
  bool update = kind == "U";
  if (update == match[3].matched) {
    error = "'" + text + "': " +
            (update ? "an update takes no micro-batch"
                    : "the action needs a micro-batch");
    return std::nullopt;
  }
  Token token;
  token.row = row;
  token.device = device;
  int64_t stage = std::stoll(match[1]) + 1,
          k = update ? 0 : std::stoll(match[3]);
  if (kind.size() > 1) {
    token.isMessage = true;
    token.message = {kind.compare(0, 4, "SEND") == 0, kind.back(), stage, k};
  } else {
    token.action = {stage, static_cast<ActionKind>(kind[0]), k};
  }
  return token;
}

struct ParsedCsv {
  int64_t stages = 0, microBatches = 0, period = 0;
  WeightRule rule = WeightRule::Synchronous;
  /// cells[t][d]: the tokens in order.
  std::vector<std::vector<std::vector<Token>>> cells;
  int64_t devices = 0;
};

/// The header line: "# cdp schedule: stages=S micro-batches=M rule=R".
std::optional<std::string> parseHeader(const std::string &line,
                                       ParsedCsv &csv) {
  static const std::regex pattern(
      "# *cdp schedule: *stages=([0-9]{1,6}) +micro-batches=([0-9]{1,6}) +"
      "rule=(synchronous|1-stale)( +cycle=([0-9]{1,6}))? *\r?");
  std::smatch match;
  if (!std::regex_match(line, match, pattern))
    return std::string("line 1: expected the header '# cdp schedule: "
                       "stages=S micro-batches=M rule=synchronous' (or "
                       "rule=1-stale cycle=C)");
  csv.stages = std::stoll(match[1]);
  csv.microBatches = std::stoll(match[2]);
  csv.rule =
      match[3] == "1-stale" ? WeightRule::OneStale : WeightRule::Synchronous;
  csv.period = match[5].matched ? std::stoll(match[5]) : 0;
  if ((csv.rule == WeightRule::OneStale) != (csv.period > 0))
    return std::string("line 1: a 1-stale schedule names its cycle (the "
                       "time steps from one step's start to the next's, "
                       "cycle=C, C > 0); a synchronous one does not");
  return std::nullopt;
}

std::optional<std::string> parseColumns(const std::string &line,
                                        ParsedCsv &csv) {
  std::vector<std::string> names = splitFields(line);
  if (names.size() < 2 || trim(names[0]) != "time")
    return std::string("line 2: expected the column names 'time,device "
                       "0,device 1,...'");
  for (size_t d = 1; d < names.size(); ++d)
    if (trim(names[d]) != "device " + std::to_string(d - 1))
      return "line 2, column " + std::to_string(d + 1) + ": expected 'device " +
             std::to_string(d - 1) + "', found '" + trim(names[d]) + "'";
  csv.devices = names.size() - 1;
  return std::nullopt;
}

std::optional<std::string> parseRows(std::istream &in, ParsedCsv &csv) {
  std::string line;
  for (int64_t row = 0; std::getline(in, line); ++row) {
    if (trim(line).empty()) {
      --row;
      continue;
    }
    std::vector<std::string> fields = splitFields(line);
    std::string lineName = "line " + std::to_string(row + 3);
    if (static_cast<int64_t>(fields.size()) != csv.devices + 1)
      return lineName + ": " + std::to_string(fields.size()) +
             " fields where the header names " +
             std::to_string(csv.devices + 1);
    if (trim(fields[0]) != std::to_string(row))
      return lineName + ", column 1: the time step is '" + trim(fields[0]) +
             "' where " + std::to_string(row) + " comes next";
    csv.cells.emplace_back(csv.devices);
    for (int64_t d = 0; d < csv.devices; ++d) {
      std::istringstream tokens(trim(fields[d + 1]));
      std::string text, error;
      while (tokens >> text) {
        std::optional<Token> token = parseToken(text, row, d, error);
        if (!token)
          return describe(row, d, error);
        csv.cells.back()[d].push_back(*token);
      }
    }
  }
  if (csv.cells.empty())
    return std::string("the schedule has no time steps");
  return std::nullopt;
}

/// Every stage's device, from where its actions are; a stage in two
/// columns or none is a fault.
std::optional<std::string> placeStages(const ParsedCsv &csv,
                                       ScheduleTable &table) {
  std::vector<int64_t> device(csv.stages + 1, -1);
  for (const auto &row : csv.cells)
    for (const auto &cell : row)
      for (const Token &token : cell) {
        int64_t s = token.isMessage ? token.message.stage : token.action.stage;
        if (s < 1 || s > csv.stages)
          return describe(token.row, token.device,
                          "stage " + std::to_string(s - 1) +
                              " does not exist: the schedule has " +
                              std::to_string(csv.stages) + " (0 to " +
                              std::to_string(csv.stages - 1) + ")");
        if (token.isMessage)
          continue;
        if (device[s] >= 0 && device[s] != token.device)
          return describe(
              token.row, token.device,
              "stage " + std::to_string(s - 1) + " also runs on device " +
                  std::to_string(device[s]) + "; a stage runs on one device");
        device[s] = token.device;
      }
  for (int64_t s = 1; s <= csv.stages; ++s) {
    if (device[s] < 0)
      return "stage " + std::to_string(s - 1) + " never runs";
    table.deviceOf[s - 1] = device[s];
  }
  for (const auto &row : csv.cells)
    for (const auto &cell : row)
      for (const Token &token : cell)
        if (!token.isMessage)
          table.add(token.row, token.action);
  table.rows.resize(csv.cells.size(),
                    std::vector<std::vector<Action>>(table.devices));
  return std::nullopt;
}

/// A message's identity: (send stage, kind, micro-batch modulo M); a
/// forward output goes from `stage` to stage + 1, an input gradient from
/// stage + 1 to stage.
using MessageKey = std::tuple<int64_t, char, int64_t>;

MessageKey keyOfMessage(const Message &message, int64_t M) {
  int64_t sender = message.stage;
  if (!message.send)
    sender += message.kind == 'F' ? -1 : 1;
  return {sender, message.kind, ((message.microBatch % M) + M) % M};
}

/// Sends and receives are exactly those the computations need: one receive
/// on the reader's device before each computation that reads another
/// device's work, one send after the work on the writer's device.
std::optional<CsvFault> checkMessages(const ParsedCsv &csv,
                                      const ScheduleTable &table) {
  std::map<std::pair<bool, MessageKey>, const Token *> written;
  int64_t M = csv.microBatches;
  for (int64_t d = 0; d < csv.devices; ++d) {
    std::set<std::pair<bool, MessageKey>> done;
    std::set<WorkKey> computed;
    for (const auto &row : csv.cells)
      for (const Token &token : row[d]) {
        if (token.isMessage) {
          std::vector<Message> before, after;
          Action work{token.message.stage,
                      token.message.kind == 'F' ? ActionKind::Forward
                                                : ActionKind::InputGrad,
                      token.message.microBatch};
          messagesAround(table, work, before, after);
          const std::vector<Message> &legal =
              token.message.send ? after : before;
          bool known =
              std::any_of(legal.begin(), legal.end(), [&](const Message &m) {
                return m.send == token.message.send &&
                       m.kind == token.message.kind;
              });
          if (!known || table.deviceOf[token.message.stage - 1] != d)
            return CsvFault{token.row, token.device,
                            messageToken(token.message) +
                                ": no such message (a stage sends its "
                                "forward output to the next stage and its "
                                "input gradient to the previous one, when "
                                "they run on other devices)"};
          MessageKey key = keyOfMessage(token.message, M);
          if (!written.emplace(std::make_pair(token.message.send, key), &token)
                   .second)
            return CsvFault{token.row, token.device,
                            messageToken(token.message) + " is written twice"};
          if (token.message.send &&
              !computed.count({token.message.stage,
                               token.message.kind == 'F' ? 'F' : 'I',
                               std::get<2>(key)}))
            return CsvFault{token.row, token.device,
                            messageToken(token.message) +
                                " sends work its device has not done yet"};
          done.insert({token.message.send, key});
          continue;
        }
        std::vector<Message> before, after;
        messagesAround(table, token.action, before, after);
        for (const Message &message : before)
          if (!done.count({false, keyOfMessage(message, M)}))
            return CsvFault{token.row, token.device,
                            actionToken(token.action) +
                                " reads work of another device, which is "
                                "not received before it (add " +
                                messageToken(message) + ")"};
        computed.insert(keyOf(token.action, M));
      }
  }
  for (const auto &[key, token] : written)
    if (!written.count({!key.first, key.second}))
      return CsvFault{token->row, token->device,
                      messageToken(token->message) + (key.first
                                                          ? " is never received"
                                                          : " is never sent")};
  return std::nullopt;
}

/// Runs the devices' columns in order over three steps and the drain,
/// with sends buffered and receives blocking, as the plan runs them; a
/// device that can never go on is a fault at the receive it waits at.
std::optional<CsvFault> checkHangs(const ParsedCsv &csv) {
  int64_t M = csv.microBatches, steps = 3;
  struct Item {
    const Token *token;
    int64_t global; ///< the micro-batch over the run
  };
  std::vector<std::vector<Item>> streams(csv.devices);
  for (int64_t d = 0; d < csv.devices; ++d)
    for (int64_t t = 0; t <= steps; ++t)
      for (const auto &row : csv.cells)
        for (const Token &token : row[d]) {
          int64_t k = token.isMessage ? token.message.microBatch
                                      : token.action.microBatch;
          int64_t global = t * M + k;
          bool update = !token.isMessage && !token.action.computes();
          if (global < 0 || (t == steps && (k >= 0 || update)))
            continue;
          streams[d].push_back({&token, global});
        }
  std::set<MessageKey> sent;
  std::vector<size_t> next(csv.devices, 0);
  auto globalKey = [&](const Item &item) {
    MessageKey key = keyOfMessage(item.token->message, M);
    std::get<2>(key) = item.global;
    return key;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t d = 0; d < csv.devices; ++d)
      for (; next[d] < streams[d].size(); ++next[d], progress = true) {
        const Item &item = streams[d][next[d]];
        if (!item.token->isMessage)
          continue;
        if (item.token->message.send)
          sent.insert(globalKey(item));
        else if (!sent.count(globalKey(item)))
          break;
      }
  }
  for (int64_t d = 0; d < csv.devices; ++d)
    if (next[d] < streams[d].size()) {
      const Token &token = *streams[d][next[d]].token;
      return CsvFault{token.row, token.device,
                      "the schedule would hang: device " + std::to_string(d) +
                          " waits at " + messageToken(token.message) +
                          " for a send that never comes, because the "
                          "devices it waits for wait too (sends buffered, "
                          "receives blocking)"};
    }
  return std::nullopt;
}

} // namespace

CsvResult readScheduleCsv(const std::string &text, int64_t S, int64_t M) {
  CsvResult result;
  ParsedCsv csv;
  std::istringstream in(text);
  std::string header, columns;
  std::getline(in, header);
  std::getline(in, columns);
  std::optional<std::string> error = parseHeader(header, csv);
  if (!error && (csv.stages != S || csv.microBatches != M))
    error = "line 1: the schedule is for " + std::to_string(csv.stages) +
            " stages and " + std::to_string(csv.microBatches) +
            " micro-batches; the model is compiled for " + std::to_string(S) +
            " and " + std::to_string(M) + " (--stages, --micro-batches)";
  if (!error)
    error = parseColumns(columns, csv);
  if (!error)
    error = parseRows(in, csv);
  ScheduleTable table(S, csv.devices, M, csv.rule);
  table.period = csv.period;
  if (!error)
    error = placeStages(csv, table);
  if (error) {
    result.error = *error;
    return result;
  }
  if (std::optional<TableFault> fault = checkActions(table)) {
    result.error = describe(fault->row, fault->device, fault->message);
    return result;
  }
  std::optional<CsvFault> fault = checkMessages(csv, table);
  if (!fault)
    fault = checkHangs(csv);
  if (fault) {
    result.error = describe(fault->row, fault->device, fault->message);
    return result;
  }
  if (std::optional<TableFault> order = checkOrder(table)) {
    result.error = describe(order->row, order->device, order->message);
    return result;
  }
  result.table = std::move(table);
  return result;
}

namespace {

/// The strategies whose own tables follow `rule`, for messages.
std::string namesFollowing(WeightRule rule) {
  return rule == WeightRule::OneStale
             ? strategyNames(
                   [](const StrategyTraits &t) {
                     return t.table && t.weightVersions == 2;
                   },
                   " or ")
             : strategyNames(
                   [](const StrategyTraits &t) {
                     return t.table && t.weightVersions == 1;
                   },
                   " or ");
}

} // namespace

CsvResult readScheduleFile(const std::string &path, int64_t S, int64_t M,
                           Strategy strategy) {
  // A device never ends (/dev/zero read until memory ran out) and a FIFO
  // blocks without a writer: only a regular file is read.
  struct stat info;
  if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    CsvResult refused;
    refused.error = path + ": not a regular file (a FIFO, device or folder); "
                           "give the schedule's CSV file";
    return refused;
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) {
    CsvResult failed;
    failed.error = path + ": cannot read the schedule: " + std::strerror(errno);
    return failed;
  }
  CsvResult read = readScheduleCsv(text.str(), S, M);
  if (!read.table) {
    read.error = path + ": " + read.error;
    return read;
  }
  bool oneStale = read.table->rule == WeightRule::OneStale;
  const StrategyTraits &traits = traitsOf(strategy);
  if (oneStale != (traits.weightVersions == 2)) {
    read.error = path + ": line 1: the schedule's rule is " +
                 ruleName(read.table->rule) + " but --strategy " + traits.name +
                 " follows the " + (oneStale ? "synchronous" : "1-stale") +
                 " rule (use " + namesFollowing(read.table->rule) + ")";
    read.table.reset();
  }
  return read;
}

} // namespace cdp::pipeline
