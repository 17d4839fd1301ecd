#include "model/dataset.h"

#include <sys/stat.h>

#include <array>
#include <fstream>
#include <memory>

#include "core/error.h"
#include "core/input_limits.h"
#include "core/json_doc.h"
#include "core/units.h"
#include "model/idx_reader.h"
#include "model/zoo.h"

namespace pt::model {

namespace {

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Debian ships the files gzip'd; a plain copy is accepted too.
std::string find_idx(const std::string& dir, const std::string& stem) {
  for (const std::string& p : {dir + "/" + stem + ".gz", dir + "/" + stem})
    if (exists(p)) return p;
  throw Error(str(dir, ": no ", stem, "(.gz) in the data directory"));
}

Dataset load_idx_pair(const std::string& dir, const std::string& prefix) {
  std::string images_path = find_idx(dir, prefix + "-images-idx3-ubyte");
  std::string labels_path = find_idx(dir, prefix + "-labels-idx1-ubyte");
  IdxArray images = read_idx(images_path, 3, "count, rows, cols");
  IdxArray labels = read_idx(labels_path, 1, "count");
  if (images.dims[0] != labels.dims[0])
    throw FormatError(str(images_path, " holds ", images.dims[0], " images but ", labels_path, " holds ",
                          labels.dims[0], " labels"));
  for (uint8_t l : labels.data)
    if (l > 9) throw FormatError(str(labels_path, ": label ", int(l), " is not a class 0..9"));
  int64_t n = images.dims[0], rows = images.dims[1], cols = images.dims[2];
  // The models are built for Fashion-MNIST's 28x28; other sizes would fail deep inside a layer.
  if (rows != 28 || cols != 28)
    throw FormatError(str(images_path, ": images are ", rows, "x", cols, ", Fashion-MNIST's are 28x28"));
  if (n == 0) throw FormatError(str(images_path, ": holds no images"));
  Dataset d;
  auto bytes = std::make_shared<std::vector<uint8_t>>(std::move(images.data));  // held by the tensor, not copied
  d.inputs = torch::from_blob(bytes->data(), {n, 1, rows, cols}, [bytes](void*) {}, torch::kUInt8);
  d.pixels = {0.2860, 0.3530};  // Fashion-MNIST training-set mean and standard deviation of [0,1] pixels
  d.targets = torch::from_blob(labels.data.data(), {n}, torch::kUInt8).to(torch::kInt64);
  return d;
}

}  // namespace

namespace {
torch::Tensor scaled(const torch::Tensor& rows, const PixelScale& pixels) {
  if (!pixels.on()) return rows;
  torch::Tensor x = rows.to(torch::kFloat32);
  return x.div_(255.0).sub_(pixels.mean).div_(pixels.std);
}
}  // namespace

void Dataset::release(bool released_targets) {
  if (on_disk) return;  // read from disk as asked: nothing held
  released_rows = size();
  torch::Tensor& t = released_targets ? targets : inputs;
  (released_targets ? released_target_bytes : released_input_bytes) += held(t);
  t = torch::Tensor();
}

namespace {
// A read of what a worker released, which its stages do not read: a bug here, said as one.
void check_held(const torch::Tensor& t, const char* what) {
  if (!t.defined())
    throw Error(str("internal: this worker released the data's ", what, ", which its stages do not read, and a read "
                    "of them came (job::release_unread_data)"));
}
}  // namespace

torch::Tensor Dataset::gather_inputs(const std::vector<int64_t>& indices) const {
  if (on_disk) return on_disk->gather(indices, false);
  check_held(inputs, "inputs");
  return scaled(inputs.index_select(0, torch::tensor(indices, torch::kInt64)), pixels);
}

// Rows of their own, as gather_inputs' are: a model may modify its input in place (x.mul_(2)),
// and an evaluation on views of the test set changed it for the next.
torch::Tensor Dataset::input_rows(int64_t first, int64_t n) const {
  check_held(inputs, "inputs");
  torch::Tensor rows = inputs.narrow(0, first, n);
  return pixels.on() ? scaled(rows, pixels) : rows.clone();
}

torch::Tensor Dataset::target_rows(int64_t first, int64_t n) const {
  check_held(targets, "targets");
  return targets.narrow(0, first, n);
}

torch::Tensor Dataset::gather_targets(const std::vector<int64_t>& indices) const {
  if (on_disk) return on_disk->gather(indices, true);
  check_held(targets, "targets");
  return targets.index_select(0, torch::tensor(indices, torch::kInt64));
}

namespace {
std::vector<int64_t> first_rows(int64_t n) {
  std::vector<int64_t> rows(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) rows[static_cast<size_t>(i)] = i;
  return rows;
}
}  // namespace

torch::Tensor Dataset::first_inputs(int64_t n) const {
  n = std::min(n, size());
  return on_disk ? on_disk->gather(first_rows(n), false) : input_rows(0, n);
}

torch::Tensor Dataset::first_targets(int64_t n) const {
  n = std::min(n, size());
  return on_disk ? on_disk->gather(first_rows(n), true) : target_rows(0, n);
}

DataSplit load_fashion_mnist(const std::string& dir) {
  if (!exists(dir))
    throw Error(str("--data-dir: ", dir, " does not exist; install Fashion-MNIST with "
                    "`apt-get install dataset-fashion-mnist` or point --data-dir at the IDX files"));
  DataSplit s;
  s.name = "fashion-mnist";
  s.train = load_idx_pair(dir, "train");
  s.test = load_idx_pair(dir, "t10k");
  s.classes = 10;
  return s;
}

DataSplit synthetic_data(const LayeredModel& model, int64_t train_samples, int64_t test_samples,
                         int64_t classes_or_vocab, uint64_t seed) {
  // Bounded so that a typo in --synthetic-samples is an error, not an out-of-memory kill.
  constexpr double kMaxBytes = 8.0 * (1 << 30);
  double per_sample = 8;  // int64 token or float32 value, and a target
  for (int64_t d : model.sample_shape()) per_sample *= static_cast<double>(d);
  // In double: the int64 sum of 2^63 - 1 samples and their test share wrapped negative ("would take
  // -9223372036854775808 bytes"), and the check passed on to LibTorch's overflow.
  const double bytes = (static_cast<double>(train_samples) + static_cast<double>(test_samples)) * per_sample;
  if (train_samples < 1 || test_samples < 1 || bytes > kMaxBytes)
    throw UsageError(str("--synthetic-samples: ", train_samples, " training and ", test_samples, " test samples of ",
                         model.name(), " would take ", human_bytes(bytes), " (must be >= 1 and fit in ",
                         human_bytes(kMaxBytes), ")"));
  torch::Generator gen = at::detail::createCPUGenerator(seed);
  // Token ids in, a class per sample out (a text classifier: --loss cross-entropy on a model file
  // of integer input), its targets a class a sample: they were a language model's, a token each.
  const bool classifies_tokens =
      model.integer_input() && model.task() == Task::kClassification && !model.has_own_loss();
  auto make = [&](int64_t n) {
    std::vector<int64_t> shape{n};
    for (int64_t d : model.sample_shape()) shape.push_back(d);
    Dataset d;
    if (model.integer_input()) {
      // A language model's ids are its vocabulary's; a classifier's, what export said it takes.
      const int64_t high = classifies_tokens && model.input_high() > 0 ? model.input_high() : classes_or_vocab;
      d.inputs = torch::randint(high, shape, gen, torch::kInt64);
      d.targets = torch::randint(classes_or_vocab, classifies_tokens ? std::vector<int64_t>{n} : shape, gen, torch::kInt64);
    } else {
      d.inputs = torch::randn(shape, gen);
      d.targets = torch::randint(classes_or_vocab, {n}, gen, torch::kInt64);
    }
    return d;
  };
  DataSplit s;
  s.name = "synthetic";
  s.train = make(train_samples);
  s.test = make(test_samples);
  (model.integer_input() && !classifies_tokens ? s.vocab : s.classes) = classes_or_vocab;
  return s;
}

DataSplit load_text(const std::string& path, int64_t seq_len) {
  if (!exists(path))
    throw Error(str("--text: ", path, " does not exist", path == kDefaultTextFile
                    ? "; install it with `apt-get install fortunes` or give --text FILE" : ""));
  if (seq_len < 1 || seq_len > kMaxSeqLen) throw UsageError(str("--seq-len: must be in 1..", kMaxSeqLen, ", got ", seq_len));
  std::string text = read_input(path, InputKind::data);
  int64_t windows = static_cast<int64_t>(text.size()) / (seq_len + 1);
  if (windows < 10)
    throw FormatError(str(path, ": ", text.size(), " bytes is too short for ", seq_len,
                          "-character samples (need at least ", 10 * (seq_len + 1), ")"));
  std::array<int64_t, 256> id;
  id.fill(-1);
  for (unsigned char c : text) id[c] = 0;
  int64_t vocab = 0;
  for (auto& v : id)
    if (v == 0) v = vocab++;
  auto tokens = torch::empty({windows, seq_len + 1}, torch::kInt64);
  auto* t = tokens.data_ptr<int64_t>();
  for (int64_t i = 0; i < windows * (seq_len + 1); ++i) t[i] = id[static_cast<unsigned char>(text[i])];
  int64_t test_n = std::max<int64_t>(1, windows / 10);
  int64_t train_n = windows - test_n;
  auto x = tokens.narrow(1, 0, seq_len), y = tokens.narrow(1, 1, seq_len);
  DataSplit s;
  s.name = "text:" + path;
  s.train = {x.narrow(0, 0, train_n).contiguous(), y.narrow(0, 0, train_n).contiguous()};
  s.test = {x.narrow(0, train_n, test_n).contiguous(), y.narrow(0, train_n, test_n).contiguous()};
  s.vocab = vocab;
  return s;
}

}  // namespace pt::model
