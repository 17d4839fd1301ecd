#include "model/own_data.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include <zlib.h>

#include "core/error.h"
#include "core/input_limits.h"
#include "core/json_doc.h"
#include "model/shard_store.h"
#include "model/token_stream.h"

namespace pt::model {

namespace {

std::string shape_of(const torch::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

std::string dtype_of(const torch::Tensor& t) { return std::string(c10::toString(t.scalar_type())); }

using Shard = std::map<std::string, torch::Tensor>;

Shard parse_shard(const std::string& bytes, const std::string& path) {
  c10::IValue value;
  try {
    value = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const c10::Error& e) {
    // LibTorch 1.13's unpickler lacks SETITEM, which pickle uses for a dict of one entry.
    bool one_entry = std::string(e.what_without_backtrace()).find("Unknown opcode") != std::string::npos;
    throw FormatError(str(path, ": not a file torch.save wrote", one_entry ? " of a dict of two or more tensors" : "",
                          " (torch.save({'x': ..., 'y': ...}, path)): ", e.what_without_backtrace()));
  }
  if (!value.isGenericDict())
    throw FormatError(str(path, ": holds a ", value.tagKind(), "; expected a dict of tensors {'x': ..., 'y': ...}"));
  Shard shard;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString()) throw FormatError(str(path, ": a key is a ", entry.key().tagKind(), ", not a string"));
    std::string key = entry.key().toStringRef();
    if (key != "x" && key != "y" && key != "x_test" && key != "y_test")
      throw FormatError(str(path, ": unknown key '", key, "' (x, y, x_test, y_test)"));
    if (!entry.value().isTensor()) throw FormatError(str(path, ": '", key, "' is a ", entry.value().tagKind(), ", not a tensor"));
    shard[key] = entry.value().toTensor().contiguous();
  }
  for (const char* key : {"x", "y"})
    if (!shard.count(key)) throw FormatError(str(path, ": no '", key, "' (a dict of tensors: x, y, optionally x_test, y_test)"));
  if (shard.count("x_test") != shard.count("y_test"))
    throw FormatError(str(path, ": '", shard.count("x_test") ? "x_test" : "y_test", "' without its partner"));
  return shard;
}

Shard read_shard(const std::string& path) {
  check_input_size(path, InputKind::data);
  return parse_shard(read_regular_file(path, input_limit(InputKind::data)), path);
}

std::vector<std::string> shard_files(const std::string& dir) {
  std::vector<std::string> files;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name.size() > 3 && name.compare(name.size() - 3, 3, ".pt") == 0) files.push_back(dir + "/" + name);
    }
    ::closedir(d);
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) throw FormatError(str("--data: ", dir, " holds no *.pt shards"));
  return files;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// "H, W" of [N, C, H, W] from dimension `from` on.
std::string dims_after(const torch::Tensor& t, int64_t from) {
  std::string out;
  for (int64_t d = from; d < t.dim(); ++d) out += str(d > from ? ", " : "", t.size(d));
  return out;
}

// What the model computes on two samples: the targets are checked against it.
torch::Tensor probe_output(LayeredModel& model, const torch::Tensor& x, const std::string& source) {
  torch::NoGradGuard no_grad;
  model.train(false);
  torch::Tensor out;
  try {
    out = model.forward(x.narrow(0, 0, std::min<int64_t>(2, x.size(0))));
  } catch (const c10::Error& e) {
    model.train(true);
    throw FormatError(str(source, ": the model fails on 'x' of shape ", shape_of(x), ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {  // TorchScript's interpreter raises its own kind, its traceback in what()
    model.train(true);
    std::string why = e.what();
    size_t last = why.find_last_not_of("\n");
    size_t line = why.rfind('\n', last == std::string::npos ? 0 : last);
    throw FormatError(str(source, ": the model fails on 'x' of shape ", shape_of(x), ": ",
                          line == std::string::npos ? why : why.substr(line + 1)));
  }
  model.train(true);
  return out;
}

// A NaN or an infinity in float data trained on until the loss turned NaN, and the run then
// blamed the learning rate: the first sample holding one is named instead. In blocks of rows,
// so that a large file does not need a mask of its own size.
void check_finite(const torch::Tensor& t, const std::string& key, const std::string& source) {
  if (!t.is_floating_point() || t.numel() == 0) return;
  constexpr int64_t kRows = 4096;
  for (int64_t first = 0; first < t.size(0); first += kRows) {
    torch::Tensor block = t.narrow(0, first, std::min(kRows, t.size(0) - first));
    torch::Tensor bad = block.isfinite().logical_not().reshape({block.size(0), -1}).any(1);
    if (!bad.any().item<bool>()) continue;
    int64_t row = bad.to(torch::kInt64).argmax().item<int64_t>();
    torch::Tensor sample = block[row].reshape({-1});
    float value = sample.index({sample.isfinite().logical_not()})[0].item<float>();
    throw FormatError(str(source, ": '", key, "' holds ", value, " (sample ", first + row,
                          "): a NaN or an infinity in the data makes the loss NaN; clean or drop such samples"));
  }
}

// The inputs against what the model takes (before any forward, which would fail inside a layer).
void check_inputs(const torch::Tensor& x, const std::string& xk, const LayeredModel& model, const std::string& source) {
  torch::Dtype want = model.integer_input() ? torch::kInt64 : torch::kFloat32;
  if (x.scalar_type() != want)
    throw FormatError(str(source, ": '", xk, "' is ", dtype_of(x), "; ", model.name(), " takes ",
                          c10::toString(want), model.integer_input() ? " token ids" : " (x.float())"));
  std::vector<int64_t> sample(x.sizes().begin() + std::min<int64_t>(1, x.dim()), x.sizes().end());
  if (x.dim() < 1 || sample != model.sample_shape()) {
    std::ostringstream want_shape;
    want_shape << "[N";
    for (int64_t d : model.sample_shape()) want_shape << ", " << d;
    throw FormatError(str(source, ": '", xk, "' has shape ", shape_of(x), "; ", model.name(), " takes ",
                          want_shape.str(), "]"));
  }
  if (x.size(0) == 0) throw FormatError(str(source, ": '", xk, "' holds no samples"));
  check_finite(x, xk, source);
}

// The last line of an error (a TorchScript traceback ends with the cause).
std::string last_line(const std::string& s) {
  size_t end = s.find_last_not_of(" \n");
  if (end == std::string::npos) return s;
  size_t start = s.rfind('\n', end);
  return s.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

// Token ids against what the model takes: the sample holding the largest id is run through it.
// An id beyond an embedding's rows failed only when its minibatch came, after hours of training
// or at the final evaluation, in a traceback naming neither the file nor the id.
void check_token_ids(LayeredModel& model, const torch::Tensor& x, const std::string& xk, const std::string& source) {
  if (!model.integer_input()) return;
  int64_t lo = x.min().item<int64_t>(), hi = x.max().item<int64_t>();
  if (lo < 0) throw FormatError(str(source, ": '", xk, "' holds token id ", lo, "; ids are >= 0"));
  int64_t row = x.eq(hi).reshape({x.size(0), -1}).any(1).to(torch::kInt64).argmax().item<int64_t>();
  torch::NoGradGuard no_grad;
  model.train(false);
  try {
    model.forward(x.narrow(0, row, 1));
  } catch (const std::exception& e) {
    model.train(true);
    throw FormatError(str(source, ": '", xk, "' holds token id ", hi, " (sample ", row, "), which the model refuses: ",
                          last_line(e.what()), " (ids 0..", hi, ": is the vocabulary larger than the model's?)"));
  }
  model.train(true);
}

// The targets against x and what the model outputs.
void check_targets(const torch::Tensor& x, const torch::Tensor& y, const std::string& xk, const std::string& yk,
                   const LayeredModel& model, const torch::Tensor& out, const std::string& source) {
  if (y.dim() < 1 || y.size(0) != x.size(0))
    throw FormatError(str(source, ": '", yk, "' has shape ", shape_of(y), " but '", xk, "' holds ", x.size(0), " samples"));
  Task task = model.task();
  if (task == Task::kRegression) {
    if (y.scalar_type() != torch::kFloat32)
      throw FormatError(str(source, ": '", yk, "' is ", dtype_of(y), "; --loss mse needs float32 targets"));
    if (y.sizes().slice(1) != out.sizes().slice(1))
      throw FormatError(str(source, ": '", yk, "' has shape ", shape_of(y), " but the model outputs ", shape_of(out)));
    check_finite(y, yk, source);
    return;
  }
  if (model.has_own_loss()) {
    // The file's own loss decides what targets fit: it runs on the probe's output and the
    // first targets, and its error is the data's.
    try {
      torch::NoGradGuard no_grad;
      model.loss(out, y.narrow(0, 0, out.size(0)));
    } catch (const std::exception& e) {
      throw FormatError(str(source, ": the model file's own loss refuses '", yk, "' (", shape_of(y), ", ", dtype_of(y),
                            ") against the output ", shape_of(out), ": ", first_line(e.what())));
    }
    return;
  }
  if (y.scalar_type() != torch::kInt64)
    throw FormatError(str(source, ": '", yk, "' is ", dtype_of(y), "; class ids are int64 (y.long())"));
  bool lm = task == Task::kLanguageModel;
  // Cross-entropy as PyTorch's: output [N, C, d1..dk] and class ids [N, d1..dk] (one per pixel
  // or token; k = 0 for a class per sample).
  bool fits = lm ? y.sizes() == x.sizes() : out.dim() >= 2 && y.sizes().slice(1) == out.sizes().slice(2);
  // A language model's output [N, T, V] with token targets [N, T] is what --loss lm takes: said,
  // where cross-entropy's own rule left the user with [N, V] to guess from.
  bool looks_like_lm = !lm && model.integer_input() && out.dim() == 3 && y.sizes() == x.sizes();
  if (!fits)
    throw FormatError(str(
        source, ": '", yk, "' has shape ", shape_of(y), "; ",
        lm ? "--loss lm needs one next token per input token, the shape of '" + xk + "'"
           : str("the model outputs ", shape_of(out), ", so cross-entropy needs class ids of shape [N",
                 out.dim() > 2 ? ", " : "", dims_after(out, 2), "]"),
        looks_like_lm ? str(" (a language model's next tokens, the shape of '", xk, "': give --loss lm; '", yk,
                            "' must be '", xk, "' shifted by one token, y[:, t] = the token after x[:, t])")
                      : std::string()));
  int64_t classes = lm ? out.size(-1) : out.size(1);
  int64_t lo = y.min().item<int64_t>(), hi = y.max().item<int64_t>();
  if (lo < 0 || hi >= classes)
    throw FormatError(str(source, ": '", yk, "' holds ", lo < 0 ? lo : hi, " but the model outputs ", classes,
                          lm ? " token scores (ids 0.." : " classes (ids 0..", classes - 1, ")"));
}

}  // namespace

bool is_own_data(const std::string& data) {
  if (data == "fashion-mnist" || data == "text" || data == "synthetic") return false;
  struct stat st;
  return (data.size() > 3 && data.compare(data.size() - 3, 3, ".pt") == 0) || data.find('/') != std::string::npos ||
         ::stat(data.c_str(), &st) == 0;
}

namespace {

// The runtime scales each microbatch's loss by 1/m, so a minibatch's loss is the mean of its
// microbatches': the whole minibatch's only for a loss that averages over its samples. A file's
// own loss that sums them, or averages over the targets it does not ignore, trained another
// model once split (8x the gradient of a padded batch, 1/m of a summed one), exit 0. Tried on
// the first samples, in eval mode (each sample's output its own), whole and in two halves.
std::string loss_not_a_mean(LayeredModel& model, const torch::Tensor& x, const torch::Tensor& y) {
  int64_t n = std::min<int64_t>(8, x.size(0)) / 2 * 2, h = n / 2;
  if (!model.has_own_loss() || n < 2) return "";
  torch::NoGradGuard no_grad;
  model.train(false);
  double whole = 0, halves = 0;
  try {
    torch::Tensor out = model.forward(x.narrow(0, 0, n));
    whole = model.loss(out, y.narrow(0, 0, n)).item<double>();
    halves = (model.loss(out.narrow(0, 0, h), y.narrow(0, 0, h)).item<double>() +
              model.loss(out.narrow(0, h, h), y.narrow(0, h, h)).item<double>()) / 2;
  } catch (const std::exception&) {  // the checks before name what fails
    model.train(true);
    return "";
  }
  model.train(true);
  if (std::abs(whole - halves) <= 1e-4 * std::max({1.0, std::abs(whole), std::abs(halves)})) return "";
  return str("its loss on the first ", n, " samples is ", whole, ", but the mean of its losses on their two halves is ",
             halves);
}

// Every check of one shard against the model; `out` is what the model outputs (probed once).
void check_shard(const Shard& s, LayeredModel& model, torch::Tensor& out, const std::string& file) {
  check_inputs(s.at("x"), "x", model, file);
  if (s.count("x_test")) check_inputs(s.at("x_test"), "x_test", model, file);
  check_token_ids(model, s.at("x"), "x", file);
  if (s.count("x_test")) check_token_ids(model, s.at("x_test"), "x_test", file);
  if (!out.defined()) out = probe_output(model, s.at("x"), file);
  check_targets(s.at("x"), s.at("y"), "x", "y", model, out, file);
  if (s.count("x_test")) check_targets(s.at("x_test"), s.at("y_test"), "x_test", "y_test", model, out, file);
}

void set_sizes(DataSplit& split, const LayeredModel& model, const torch::Tensor& out) {
  if (model.task() == Task::kLanguageModel) split.vocab = out.size(-1);
  else if (model.task() == Task::kClassification) split.classes = out.size(1);
}

// A directory of shards: each is read and checked once now, then only its size and CRC are
// kept; training reads the shards again as minibatches need them (shard_store.h). The test set
// (x_test, y_test of the shards that have them; without any, the last shard) is held in memory.
DataSplit load_shards(const std::string& dir, LayeredModel& model) {
  std::vector<std::string> files = shard_files(dir);
  std::vector<int64_t> sizes;
  std::vector<uint32_t> crcs;
  std::vector<torch::Tensor> x_test, y_test;
  torch::Tensor out;
  std::string not_a_mean;
  for (const auto& file : files) {
    check_input_size(file, InputKind::data);
    std::string bytes = read_regular_file(file, input_limit(InputKind::data));
    Shard s = parse_shard(bytes, file);
    check_shard(s, model, out, file);
    if (sizes.empty()) not_a_mean = loss_not_a_mean(model, s["x"], s["y"]);
    sizes.push_back(s["x"].size(0));
    crcs.push_back(static_cast<uint32_t>(
        ::crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size()))));
    if (s.count("x_test")) {
      x_test.push_back(s["x_test"]);
      y_test.push_back(s["y_test"]);
    }
  }
  DataSplit split;
  split.name = "shards:" + dir;
  if (x_test.empty()) {
    if (files.size() < 2)
      throw FormatError(str(dir, ": one shard and no x_test: add x_test and y_test, or a second shard (the last one "
                            "is held out for testing when no shard has x_test)"));
    Shard last = read_shard(files.back());
    split.test = {last["x"], last["y"]};
    files.pop_back();
    sizes.pop_back();
    crcs.pop_back();
  } else {
    split.test = {torch::cat(x_test), torch::cat(y_test)};
  }
  auto load = [](const std::string& file) {
    Shard s = read_shard(file);
    return std::make_pair(s["x"], s["y"]);
  };
  split.train.on_disk = std::make_shared<ShardStore>(files, sizes, crcs, load);
  split.loss_not_a_mean = not_a_mean;
  set_sizes(split, model, out);
  return split;
}

}  // namespace

namespace {

// The test set of a token stream, held in memory for the evaluations: its first windows.
constexpr int64_t kMostTestWindows = 1024;

// --data FILE.bin: a language model's tokenized corpus (token_stream.h). The test set is
// `eval_path` (--eval-data), else val.bin beside it (nanoGPT's pair), else the last tenth of its
// windows; at most kMostTestWindows of them, in memory.
DataSplit load_token_stream(const std::string& path, LayeredModel& model, const std::string& dtype,
                            const std::string& eval_path) {
  std::vector<int64_t> shape = model.sample_shape();
  if (model.task() != Task::kLanguageModel && model.integer_input() && shape.size() == 1)
    throw UsageError(str("--data ", path, ": a file of token ids trains a language model; give --loss lm"));
  if (model.task() != Task::kLanguageModel || !model.integer_input() || shape.size() != 1)
    throw UsageError(str("--data ", path, ": a file of token ids trains a language model that takes [N, T] token ids ",
                         "(a model file exported with --input-dtype int64, trained with --loss lm); ", model.name(),
                         " is not one"));
  int64_t seq = shape[0];
  TokenFile train = scan_token_file(path, dtype);
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  std::string val = eval_path.empty() ? dir + "/val.bin" : eval_path;
  struct stat a, b;
  if (!eval_path.empty() && ::stat(eval_path.c_str(), &b) != 0)
    throw UsageError(str("--eval-data: ", eval_path, " does not exist"));
  bool separate = ::stat(val.c_str(), &b) == 0 && ::stat(path.c_str(), &a) == 0 && (a.st_ino != b.st_ino || a.st_dev != b.st_dev);
  TokenFile test = separate ? scan_token_file(val, dtype, eval_path.empty() ? "val.bin beside --data" : "--eval-data") : train;
  int64_t n = TokenStream::windows(train.tokens, seq);
  int64_t held = separate ? 0 : n / 10;
  if (n - held < 1 || (separate ? TokenStream::windows(test.tokens, seq) : held) < 1)
    throw FormatError(str(separate && n >= 1 ? val : path, ": ", separate && n >= 1 ? test.tokens : train.tokens,
                          " tokens make too few windows of ", seq + 1, " (the model's ", seq,
                          " tokens and the next) to train", separate ? "" : " and hold a tenth out for testing"));
  DataSplit split;
  split.name = "tokens:" + path;
  auto train_stream = std::make_shared<TokenStream>(train, seq, 0, n - held);
  int64_t test_first = separate ? 0 : n - held;
  int64_t test_n = std::min(kMostTestWindows, separate ? TokenStream::windows(test.tokens, seq) : held);
  TokenStream test_stream(test, seq, test_first, test_n);
  std::vector<int64_t> rows(static_cast<size_t>(test_n));
  for (int64_t i = 0; i < test_n; ++i) rows[static_cast<size_t>(i)] = i;
  split.test = {test_stream.gather(rows, false), test_stream.gather(rows, true)};
  // Ids against the vocabulary the model outputs, and its embedding: the window of the largest.
  // The vocabulary is read from a forward of id 0, which every embedding holds: the test's own
  // first windows, holding an id past it, failed the lookup in a TorchScript traceback.
  torch::Tensor first = split.test.inputs.narrow(0, 0, std::min<int64_t>(1, split.test.inputs.size(0)));
  torch::Tensor out = probe_output(model, torch::zeros_like(first), separate ? val : path);
  int64_t vocab = out.size(-1);
  for (const TokenFile* f : {&train, &test})
    if (f->max_id >= vocab)
      throw FormatError(str(f->path, ": token ", f->max_at, " is id ", f->max_id, ", past the model's vocabulary of ",
                            vocab, " (ids 0..", vocab - 1, "; is it ", f->token_bytes == 2 ? "uint32" : "uint16",
                            " data, --token-dtype?)"));
  split.train.on_disk = train_stream;
  check_token_ids(model, train_stream->gather({std::min(train.max_at / seq, n - held - 1)}, false), "tokens", path);
  split.vocab = vocab;
  return split;
}

}  // namespace

DataSplit load_own_data(const std::string& path, LayeredModel& model, const std::string& token_dtype,
                        const std::string& eval_path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw UsageError(str("--data: ", path, " does not exist"));
  bool tokens = path.size() > 4 && path.compare(path.size() - 4, 4, ".bin") == 0;
  if (!eval_path.empty() && !tokens)
    throw UsageError(str("--eval-data: for a token file (--data FILE.bin); ", path, "'s test set is its own (x_test and ",
                         "y_test, or the part held out)"));
  if (tokens) return load_token_stream(path, model, token_dtype, eval_path);
  if (S_ISDIR(st.st_mode)) return load_shards(path, model);
  Shard s = read_shard(path);
  torch::Tensor out;
  check_shard(s, model, out, path);
  std::string not_a_mean = loss_not_a_mean(model, s.at("x"), s.at("y"));
  std::map<std::string, std::vector<torch::Tensor>> parts;
  for (auto& [key, t] : s) parts[key].push_back(t);
  DataSplit split;
  split.name = "file:" + path;
  split.train = {torch::cat(parts["x"]), torch::cat(parts["y"])};
  if (parts.count("x_test")) {
    split.test = {torch::cat(parts["x_test"]), torch::cat(parts["y_test"])};
  } else {
    int64_t n = split.train.size(), test_n = n / 10;
    if (test_n < 1) throw FormatError(str(path, ": ", n, " samples and no x_test: too few to hold a tenth out for testing"));
    split.test = {split.train.inputs.narrow(0, n - test_n, test_n), split.train.targets.narrow(0, n - test_n, test_n)};
    split.train = {split.train.inputs.narrow(0, 0, n - test_n), split.train.targets.narrow(0, 0, n - test_n)};
  }
  split.loss_not_a_mean = not_a_mean;
  set_sizes(split, model, out);
  return split;
}

}  // namespace pt::model
