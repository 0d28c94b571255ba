//===- Feeds.cpp - the data a run feeds its inputs ------------------------===//
//
// --feed arrays and --data sets bound to the plan's inputs, checked, and
// their rows staged into the devices micro-batch by micro-batch.
//
//===----------------------------------------------------------------------===//

#include "Run.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>

namespace cdp::runtime::training {

namespace {

/// An input seen along its batch axis: `outer` blocks before it, `inner`
/// elements after it, `length` entries of the source along it.
struct RowGeometry {
  int64_t outer = 1, inner = 1, length = 0;
};

RowGeometry rowGeometry(const Array &source, const TensorView &target,
                        int64_t batchAxis) {
  RowGeometry g;
  for (int64_t d = 0; d < batchAxis; ++d)
    g.outer *= target.shape[d];
  for (size_t d = batchAxis + 1; d < target.shape.size(); ++d)
    g.inner *= target.shape[d];
  g.length = source.numel() / (g.outer * g.inner);
  return g;
}

/// Copies `source`'s entries `entries`, in that order along the batch axis,
/// into `target` (the whole source where there is no batch axis): a
/// streamed source in one read per run of consecutive entries, one in
/// memory an entry at a time.
void copyEntries(const Array &source, const TensorView &target,
                 int64_t batchAxis, const std::vector<int64_t> &entries) {
  char *out = static_cast<char *>(target.data);
  if (batchAxis < 0) {
    source.readElements(0, target.numel(), out);
    return;
  }
  RowGeometry g = rowGeometry(source, target, batchAxis);
  int64_t width = plan::dtypeSize(target.dtype),
          rows = static_cast<int64_t>(entries.size());
  if (source.source) {
    for (int64_t o = 0; o < g.outer; ++o)
      for (int64_t j = 0; j < rows;) {
        int64_t run = 1;
        while (j + run < rows && entries[j + run] == entries[j] + run)
          ++run;
        source.readElements((o * g.length + entries[j]) * g.inner,
                            run * g.inner,
                            out + (o * rows + j) * g.inner * width);
        j += run;
      }
    return;
  }
  // A large micro-batch is copied by every thread of the process: on a GPU
  // the copy into the staging memory is on the step's critical path.
  bool large = g.outer * rows * g.inner * width > (int64_t(1) << 20);
#pragma omp parallel for collapse(2) if (large)
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t j = 0; j < rows; ++j)
      source.readElements((o * g.length + entries[j]) * g.inner, g.inner,
                          out + (o * rows + j) * g.inner * width);
}

} // namespace

/// Copies slot rows of `source` into the input tensor: along the batch axis,
/// entry j of the slot is source entry (first + j) modulo its length (of
/// `order`, --data's epoch; with `shuffled`, --shuffle's of row first + j).
void copyRows(const Array &source, const TensorView &target, int64_t batchAxis,
              int64_t first, const std::vector<int64_t> *order,
              EpochOrders *shuffled) {
  std::vector<int64_t> entries;
  if (batchAxis >= 0) {
    int64_t rows = target.shape[batchAxis],
            length = rowGeometry(source, target, batchAxis).length;
    entries =
        shuffled ? shuffled->samples(first, rows) : std::vector<int64_t>(rows);
    for (int64_t j = 0; j < rows; ++j) {
      int64_t entry = shuffled ? entries[j] : (first + j) % length;
      entries[j] = order ? (*order)[entry] : entry;
    }
  }
  copyEntries(source, target, batchAxis, entries);
}

static void checkFeed(const std::string &flag, const std::string &name,
                      const std::string &file, const Array &array,
                      const TensorView &target, int64_t batchAxis) {
  auto shapeText = [](const std::vector<int64_t> &shape) {
    std::string text = "[";
    for (size_t i = 0; i < shape.size(); ++i)
      text += (i ? "," : "") + std::to_string(shape[i]);
    return text + "]";
  };
  if (array.dtype != target.dtype)
    fail(flag + " " + name + "=" + file +
         ": element type differs from the input's (" +
         std::string(target.dtype == plan::F32   ? "float32"
                     : target.dtype == plan::I64 ? "int64"
                                                 : "bool") +
         ")");
  bool fits = array.shape.size() == target.shape.size();
  for (size_t d = 0; fits && d < target.shape.size(); ++d)
    fits = array.shape[d] == target.shape[d] ||
           (static_cast<int64_t>(d) == batchAxis && array.shape[d] >= 1);
  if (!fits)
    fail(flag + " " + name + "=" + file + ": shape " + shapeText(array.shape) +
         " does not fit the input's " + shapeText(target.shape) +
         (batchAxis >= 0 ? " (any length along batch axis " +
                               std::to_string(batchAxis) + ")"
                         : ""));
}

/// Fills input `id` with the rows `copy` writes, staged into the device.
void stageRows(Executor &executor, int id, const Array &source,
               int64_t batchAxis, int64_t first,
               const std::vector<int64_t> *order, EpochOrders *shuffled) {
  executor.stageInWhole(id, [&](const TensorView &host) {
    copyRows(source, host, batchAxis, first, order, shuffled);
  });
}

/// Fills input `id` with `source`'s entries `rows` along the batch axis,
/// in that order.
void stageRowList(Executor &executor, int id, const Array &source,
                  int64_t batchAxis, const std::vector<int64_t> &rows) {
  executor.stageInWhole(id, [&](const TensorView &host) {
    copyEntries(source, host, batchAxis, rows);
  });
}

/// The training order of epoch `epoch`: every sample once, shuffled by
/// --seed and the epoch.
std::vector<int64_t> shuffledOrder(uint64_t seed, int64_t epoch, int64_t n) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed * 1000003ull + epoch);
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(order[i],
              order[std::uniform_int_distribution<int64_t>(0, i)(rng)]);
  return order;
}

/// --feed: each file bound to the plan input it names.
/// `value` as the message prints it: nan, inf or -inf.
std::string nonFiniteName(float value) {
  return std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf";
}

/// Fed float32 data must be finite: a NaN would train into a NaN model.
static void checkFinite(const std::string &flag, const std::string &name,
                        const std::string &file, const Array &array) {
  if (array.dtype != plan::F32)
    return;
  forEachChunk(array, [&](int64_t first, int64_t count, const char *bytes) {
    for (int64_t i = 0; i < count; ++i) {
      float value;
      std::memcpy(&value, bytes + 4 * i, 4);
      if (!std::isfinite(value))
        fail(flag + " " + name + "=" + file + ": element " +
             std::to_string(first + i) + " is " + nonFiniteName(value) +
             "; the data must be finite (--allow-nonfinite trains on it "
             "anyway)");
    }
  });
}

/// The arrays `given` names (--feed or --eval-feed, `flag`), each checked
/// against its input; every input must be given when any is.
static std::map<int, Array>
readFeeds(Run &run,
          const std::vector<std::pair<std::string, std::string>> &given,
          const std::string &flag) {
  const plan::Plan &plan = run.plan;
  std::map<std::string, int> inputByName;
  for (int id : plan.inputs())
    inputByName[plan.tensors(id).name()] = id;
  std::map<int, Array> feeds;
  for (auto &[name, file] : given) {
    auto it = inputByName.find(name);
    if (it != inputByName.end() && feeds.count(it->second))
      fail(flag + " names input '" + name + "' twice");
    if (it == inputByName.end()) {
      std::string names;
      for (auto &[n, id] : inputByName)
        names += (names.empty() ? "" : ", ") + n;
      fail(flag + " names '" + name +
           "', which is not an input of the plan (inputs: " + names + ")");
    }
    Array array;
    try {
      Conversion into{run.local().view(it->second).dtype, run.options.feedScale,
                      run.options.feedOffset};
      array = readFeedArray(file, into);
    } catch (const RuntimeError &e) {
      fail(flag + " " + name + "=" + e.what());
    }
    // Streamed .npy feeds hold no memory; a .pb is read whole.
    if (static_cast<int64_t>(array.bytes.size()) > run.options.maxTensorBytes)
      fail(flag + " " + name + "=" + file + ": " +
           std::to_string(array.bytes.size()) +
           " bytes, more than --max-tensor-bytes");
    const plan::Tensor &t = plan.tensors(it->second);
    // A folder's shards are joined along their first axis: the samples'
    // only where the input's batch axis is 0.
    if (std::filesystem::is_directory(file) && t.batch_axis() != 0)
      fail(flag + " " + name + "=" + file +
           ": a folder of shards joins them along their first axis, and "
           "this input's batch axis is " +
           std::to_string(t.batch_axis()) + "; give one .npy file");
    checkFeed(flag, name, file, array, run.local().view(it->second),
              t.batch_axis());
    if (!run.options.allowNonfinite)
      checkFinite(flag, name, file, array);
    feeds[it->second] = std::move(array);
  }
  for (auto &[name, id] : inputByName)
    if (!given.empty() && !feeds.count(id))
      fail("input '" + name + "' is not fed (add " + flag + " " + name +
           "=FILE)");
  return feeds;
}

/// The samples `feeds` hold along their inputs' batch axes, which must
/// agree (refused in one line naming `flag` otherwise), and the plan's
/// batch along them; {-1, -1} when no input has a batch axis.
std::pair<int64_t, int64_t> feedSamples(const Run &run,
                                        const std::map<int, Array> &feeds,
                                        const std::string &flag) {
  int64_t samples = -1, batch = -1;
  for (auto &[id, array] : feeds) {
    const plan::Tensor &t = run.plan.tensors(id);
    if (t.batch_axis() < 0)
      continue;
    int64_t count = array.shape[t.batch_axis()];
    if (samples >= 0 && count != samples)
      fail(flag +
           ": the inputs hold different numbers of samples along "
           "their batch axes (" +
           std::to_string(samples) + " and " + std::to_string(count) + ")");
    samples = count;
    batch = t.shape(t.batch_axis());
  }
  return {samples, batch};
}

/// --partial-batch against the feeds' samples and the rows a step takes
/// (once the steps are counted).
void bindPartialBatch(Run &run) {
  const std::string &mode = run.options.partialBatch;
  int64_t rows = run.perStep, samples = run.feedSamples;
  if (samples <= 0 || samples % rows == 0 || mode == "wrap")
    return;
  if (mode == "error")
    fail("--feed: " + std::to_string(samples) +
         " samples are not a whole number of steps of " + std::to_string(rows) +
         " (--partial-batch drop uses the whole steps of each epoch, wrap "
         "carries the rest into the next)");
  if (samples < rows)
    fail("--partial-batch drop: " + std::to_string(samples) +
         " samples hold no whole step of " + std::to_string(rows));
  run.feedEpochRows = samples / rows * rows;
}

/// Training feeds pair row i of every input: their lengths must agree
/// (each wrapping modulo its own length would pair other rows).
void bindFeeds(Run &run) {
  run.feeds = readFeeds(run, run.options.feeds, "--feed");
  if (run.plan.inference())
    return; // inference checks its own feeds (runInference)
  auto [samples, batch] = feedSamples(run, run.feeds, "--feed");
  if (run.options.shuffle && samples > 0)
    run.feedOrder = std::make_unique<EpochOrders>(run.options.seed, samples);
  run.feedSamples = std::max<int64_t>(samples, 0);
}

/// --eval-feed's arrays: the same number of samples along every input's
/// batch axis. A last partial batch is evaluated padded and masked where
/// the loss is cdp-compile's own (a mean of per-sample terms); a model's
/// own loss (which may weigh samples unequally) needs whole batches.
void bindEvalFeeds(Run &run) {
  run.evalFeeds = readFeeds(run, run.options.evalFeeds, "--eval-feed");
  auto [samples, batch] = feedSamples(run, run.evalFeeds, "--eval-feed");
  if (samples >= 0 && samples % batch != 0 && !masksPartialBatch(run))
    fail("--eval-feed: " + std::to_string(samples) +
         " held-out samples are not a whole number of the plan's batches of " +
         std::to_string(batch) +
         " (the test loss is a mean per batch: every sample must sit in a "
         "full one)");
  run.evalSamples = std::max<int64_t>(samples, 0);
}

/// --data: the IDX data set, checked against the plan's image input.
void loadDataset(Run &run) {
  const RunOptions &options = run.options;
  const plan::Plan &plan = run.plan;
  if (options.data.empty())
    return;
  std::string dir = dataFolder(options);
  if (plan.labels() < 0)
    fail("--data needs a plan compiled with a loss on labels "
         "(--loss softmax-cross-entropy)");
  for (int id : plan.inputs())
    if (id != plan.labels())
      run.imageInput = run.imageInput < 0 ? id : -2;
  if (run.imageInput < 0)
    fail("--data needs a plan with exactly one input besides the labels");
  run.train = readIdxSplit(dir, "train", options.maxTensorBytes);
  if (options.eval) {
    run.test = readIdxSplit(dir, "t10k", options.maxTensorBytes);
    if (run.test.images.shape[1] != run.train.images.shape[1])
      fail("--data: the test split's images have " +
           std::to_string(run.test.images.shape[1]) +
           " pixels, the training split's " +
           std::to_string(run.train.images.shape[1]));
  }
  const TensorView &image = run.local().view(run.imageInput);
  int64_t pixels = image.numel() / image.shape[0];
  if (pixels != run.train.images.shape[1] ||
      plan.tensors(run.imageInput).batch_axis() != 0)
    fail("--data: the model's input '" + plan.tensors(run.imageInput).name() +
         "' takes " + std::to_string(pixels) +
         " values per sample along axis 0; the "
         "data set has " +
         std::to_string(run.train.images.shape[1]) + " pixels per image");
}

} // namespace cdp::runtime::training
