//===- PlanIO.cpp - reading and writing plan artefacts --------------------===//

#include "cdp/Plan/PlanIO.h"

#include "cdp/Plan/Paths.h"
#include "cdp/Plan/PlanInstantiate.h"
#include "cdp/Plan/PlanValidate.h"
#include "cdp/Plan/PlanWeights.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace cdp::plan {

namespace {
constexpr char kMagic[8] = {'C', 'D', 'P', 'P', 'L', 'A', 'N', '\n'};
constexpr size_t kHeaderSize = 8 + 4 + 4 + 8 + 8;

template <typename T> void put(std::string &out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i)
    out.push_back(
        static_cast<char>((static_cast<uint64_t>(value) >> (8 * i)) & 0xff));
}

template <typename T> T get(const char *data) {
  uint64_t value = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    value |= static_cast<uint64_t>(static_cast<unsigned char>(data[i]))
             << (8 * i);
  return static_cast<T>(value);
}
} // namespace

uint64_t checksum(const void *data, size_t size) {
  uint64_t hash = 14695981039346656037ull; // the FNV-1a 64-bit offset basis
  const auto *bytes = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 1099511628211ull;
  }
  return hash;
}

int64_t intAttribute(const Instruction &instruction, std::string_view name,
                     int64_t fallback) {
  for (const Attribute &a : instruction.attributes())
    if (std::string_view(a.name()) == name)
      return a.i();
  return fallback;
}

int64_t listSize(const Instruction &instruction, std::string_view name,
                 int64_t fallback) {
  for (const Attribute &a : instruction.attributes())
    if (std::string_view(a.name()) == name)
      return a.ints().values_size();
  return fallback;
}

void setIntAttribute(Instruction *instruction, std::string_view name,
                     int64_t value) {
  Attribute *a = instruction->add_attributes();
  a->set_name(std::string(name));
  a->set_i(value);
}

int64_t dtypeSize(DType type) {
  switch (type) {
  case F32:
    return 4;
  case I64:
    return 8;
  case I32:
    return 4;
  case BF16:
  case F16:
    return 2;
  default:
    return 1;
  }
}

int arenaHome(const Plan &plan, int device) {
  return plan.replica_devices() > 0 ? device % plan.replica_devices() : device;
}

PlanForm formOf(const Plan &plan) {
  // readPlan refuses plans of other strategies; an emitter's plan names
  // one of them.
  return planForm(parseStrategy(plan.strategy()).value_or(Strategy::Single));
}

bool writePlan(Plan &plan, const std::string &path, std::string &error) {
  // The weights first: a plan on disk never names a file not yet written.
  if (!writeWeights(plan, path, error))
    return false;
  std::string payload;
  if (!plan.SerializeToString(&payload)) {
    error = "cannot serialize the plan (larger than 2 GiB?)";
    return false;
  }
  std::string header(kMagic, sizeof(kMagic));
  put<uint32_t>(header, kPlanFormatVersion);
  put<uint32_t>(header, 0);
  put<uint64_t>(header, payload.size());
  put<uint64_t>(header, checksum(payload.data(), payload.size()));
  // Written all at once: a failed write loses nothing.
  return writeFileAtomically(path, header + payload, error);
}

bool readPlan(const std::string &path, Plan &plan, std::string &error,
              int64_t maxBytes) {
  error = checkInputFile(path);
  if (!error.empty()) {
    error += "; give the plan file itself";
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = std::string("cannot open: ") + std::strerror(errno);
    return false;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string data = buffer.str();
  if (data.size() < kHeaderSize ||
      std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) {
    error = data.size() < sizeof(kMagic)
                ? "not a cdp plan (file too short)"
                : "not a cdp plan (no CDPPLAN header; compile one with "
                  "cdp-compile -o FILE.cdp)";
    return false;
  }
  uint32_t version = get<uint32_t>(data.data() + 8);
  if (version != kPlanFormatVersion) {
    error = "plan format version " + std::to_string(version) +
            ", this cdp-run reads version " +
            std::to_string(kPlanFormatVersion) +
            "; recompile the model with this cdp-compile";
    return false;
  }
  uint64_t size = get<uint64_t>(data.data() + 16);
  uint64_t sum = get<uint64_t>(data.data() + 24);
  if (data.size() - kHeaderSize != size) {
    error = "plan is truncated or padded: header says " + std::to_string(size) +
            " payload bytes, file has " +
            std::to_string(data.size() - kHeaderSize);
    return false;
  }
  const char *payload = data.data() + kHeaderSize;
  if (checksum(payload, size) != sum) {
    error = "plan is corrupt (checksum mismatch)";
    return false;
  }
  if (!plan.ParseFromArray(payload, static_cast<int>(size))) {
    error = "plan is corrupt (payload does not parse)";
    return false;
  }
  if (!parseStrategy(plan.strategy())) {
    error = "plan has strategy '" + plan.strategy() +
            "', which this cdp-run "
            "does not know (it runs " +
            strategyNames() + ")";
    return false;
  }
  // Format 4's runs are spelled out before the streams are checked: the
  // checks, the executor and the checkpoints see one stream per device.
  error = checkRuns(plan);
  if (!error.empty())
    return false;
  instantiate(plan);
  error = validatePlan(plan, maxBytes);
  return error.empty();
}

} // namespace cdp::plan
