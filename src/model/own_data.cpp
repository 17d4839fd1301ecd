#include "model/own_data.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include <zlib.h>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/import_read.h>

#include "core/error.h"
#include "core/input_limits.h"
#include "core/json_doc.h"
#include "model/check_forward.h"
#include "model/data_checks.h"
#include "model/shard_store.h"
#include "model/token_data.h"
#include "model/token_stream.h"
#include "model/zip_records.h"

namespace pt::model {

namespace {

using Shard = std::map<std::string, torch::Tensor>;

// A string's bytes to PyTorchStreamReader, where they lie.
class StringReader : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit StringReader(const std::string& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char*) const override {
    if (pos >= bytes_.size()) return 0;
    n = std::min<size_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::string& bytes_;
};

// What torch::pickle_load does with a vector of the bytes, from a reader of the archive's records:
// from the file, a tensor's record at a time, no copy of the file is held whole (a launcher read
// a 192 MiB file into a string, copied it into the vector, and made the tensors beside both).
Shard parse_shard(caffe2::serialize::PyTorchStreamReader&& archive, const std::string& path);

// Why the archive reader refused a file, in the user's terms where its first byte tells: torch.save's
// legacy format (torch before 1.6, or _use_new_zipfile_serialization=False) is a bare pickle, which
// begins with pickle's PROTO opcode, and LibTorch does not read it.
[[noreturn]] void not_an_archive(const std::string& path, int first_byte, const c10::Error& e) {
  if (first_byte == 0x80)
    throw FormatError(str(path, ": written in torch.save's legacy format (torch before 1.6, or "
                                "_use_new_zipfile_serialization=False), which LibTorch cannot read: load it in Python "
                                "and save it again, torch.save(torch.load(path), path)"));
  // A file of token ids is told by its name (FILE.bin): one named otherwise reached this reader.
  const char* tokens = first_byte != 'P' ? "; if it holds token ids, name it FILE.bin (token files are told by that suffix)" : "";
  throw FormatError(str(path, ": not a file torch.save wrote (torch.save({'x': ..., 'y': ...}, path)): ",
                        e.what_without_backtrace(), tokens));
}

// An IValue's kind as Python names it ('x' held a dict: "is a GenericDict").
std::string python_kind(const c10::IValue& v) {
  if (v.isGenericDict()) return "dict";
  if (v.isList()) return "list";
  if (v.isTuple()) return "tuple";
  if (v.isString()) return "str";
  if (v.isBool()) return "bool";
  if (v.isInt()) return "int";
  if (v.isDouble()) return "float";
  if (v.isNone()) return "None";
  return v.tagKind();
}

Shard parse_shard(const std::string& bytes, const std::string& path) {
  std::optional<caffe2::serialize::PyTorchStreamReader> archive;
  try {
    archive.emplace(std::make_shared<StringReader>(bytes));
  } catch (const c10::Error& e) {
    not_an_archive(path, bytes.empty() ? -1 : static_cast<unsigned char>(bytes[0]), e);
  }
  return parse_shard(std::move(*archive), path);
}

Shard parse_shard(caffe2::serialize::PyTorchStreamReader&& archive, const std::string& path) {
  c10::IValue value;
  try {
    value = torch::jit::readArchiveAndTensors("data", "", "", c10::nullopt, c10::nullopt, c10::nullopt, archive);
  } catch (const c10::Error& e) {
    // LibTorch 1.13's unpickler lacks SETITEM and APPEND, which pickle uses for a dict or a list of
    // one entry, and fails its own assertion on a dict subclass (OrderedDict): say what to save instead.
    std::string why = e.what_without_backtrace();
    if (why.find("isGenericDict") != std::string::npos)
      throw FormatError(str(path, ": holds a dict subclass (an OrderedDict?) LibTorch cannot read: save a plain dict, "
                                  "torch.save(dict(d), path)"));
    const char* one = why.find("Unknown opcode for unpickling at 0x73") != std::string::npos   ? "a dict"
                      : why.find("Unknown opcode for unpickling at 0x61") != std::string::npos ? "a list"
                                                                                               : nullptr;
    if (one)  // {'x': ...} alone is the likely mistake: say what a data file holds, not the unpickler's opcode
      throw FormatError(str(path, ": holds ", one, " of one entry (the file's own or one inside it), which LibTorch 1.13 "
                            "cannot read (its unpickler said: ", why, "); a data file is a dict of tensors, 'x' and 'y' "
                            "(optionally 'x_test' and 'y_test'): torch.save({'x': ..., 'y': ...}, path)"));
    throw FormatError(str(path, ": not a file torch.save wrote (torch.save({'x': ..., 'y': ...}, path)): ", why));
  }
  if (!value.isGenericDict())
    throw FormatError(str(path, ": holds a ", python_kind(value), "; expected a dict of tensors {'x': ..., 'y': ...}"));
  Shard shard;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString()) throw FormatError(str(path, ": a key is a ", python_kind(entry.key()), ", not a string"));
    std::string key = entry.key().toStringRef();
    if (key != "x" && key != "y" && key != "x_test" && key != "y_test")
      throw FormatError(str(path, ": unknown key '", key, "' (x, y, x_test, y_test)"));
    if (!entry.value().isTensor())
      throw FormatError(str(path, ": '", key, "' is a ", python_kind(entry.value()), ", not a tensor"));
    shard[key] = entry.value().toTensor().contiguous();
  }
  for (const char* key : {"x", "y"})
    if (!shard.count(key)) throw FormatError(str(path, ": no '", key, "' (a dict of tensors: x, y, optionally x_test, y_test)"));
  if (shard.count("x_test") != shard.count("y_test"))
    throw FormatError(str(path, ": '", shard.count("x_test") ? "x_test" : "y_test", "' without its partner"));
  return shard;
}

Shard read_shard(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || ::access(path.c_str(), R_OK) != 0) throw Error(str(path, ": cannot open file"));
  if (!S_ISREG(st.st_mode)) throw Error(str(path, ": not a regular file"));
  check_input_size(path, InputKind::data);
  std::optional<caffe2::serialize::PyTorchStreamReader> archive;
  try {
    archive.emplace(path);
  } catch (const c10::Error& e) {
    std::ifstream in(path, std::ios::binary);
    not_an_archive(path, in.get(), e);
  }
  return parse_shard(std::move(*archive), path);
}

// A file's CRC-32, read in blocks.
uint32_t file_crc32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(str(path, ": cannot open file"));
  std::vector<char> block(size_t{4} << 20);
  uLong crc = ::crc32(0L, Z_NULL, 0);
  while (in) {
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(block.data()), static_cast<uInt>(in.gcount()));
  }
  return static_cast<uint32_t>(crc);
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
  struct stat st;
  if (files.empty() && ::stat((dir + "/train.bin").c_str(), &st) == 0)  // nanoGPT's folder
    throw UsageError(str("--data: ", dir, " holds no *.pt shards; a folder of token ids is given by its file: --data ",
                         dir, "/train.bin (val.bin beside it tests)"));
  if (files.empty()) throw FormatError(str("--data: ", dir, " holds no *.pt shards"));
  return files;
}


}  // namespace

bool is_own_data(const std::string& data) {
  if (data == "fashion-mnist" || data == "text" || data == "synthetic") return false;
  struct stat st;
  return (data.size() > 3 && data.compare(data.size() - 3, 3, ".pt") == 0) || data.find('/') != std::string::npos ||
         ::stat(data.c_str(), &st) == 0;
}

namespace {


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

// The sizes the job's digest records.
void set_sizes(DataSplit& split, const LayeredModel& model, const torch::Tensor& out) {
  if (model.task() == Task::kLanguageModel) split.vocab = out.size(-1);
  else if (model.task() == Task::kClassification) split.classes = out.size(1);
  say_if_no_accuracy(split, model, out);
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
  // The own loss's check runs on the samples each shard offers, together: a shard that keeps all
  // its targets, first, hid the padding of those after it (0.42 off eager's weights, exit 0).
  std::vector<torch::Tensor> probe_x, probe_y;
  for (const auto& file : files) {
    check_input_size(file, InputKind::data);
    std::string bytes = read_regular_file(file, input_limit(InputKind::data));
    check_zip_records(file);  // as it is read now; a later read checks its CRC-32 against this one's
    Shard s = parse_shard(bytes, file);
    check_shard(s, model, out, file);
    if (model.has_own_loss()) {
      torch::Tensor rows = loss_check_rows(s["x"], s["y"]);
      probe_x.push_back(s["x"].index_select(0, rows));
      probe_y.push_back(s["y"].index_select(0, rows));
    }
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
    // In name order, where shard_10.pt comes before shard_9.pt: which one tests is said.
    std::cerr << "note: " << dir << ": no shard holds x_test, so the last in name order, " << files.back()
              << ", is the test set (" << split.test.size() << " samples), held out of training\n";
    files.pop_back();
    sizes.pop_back();
    crcs.pop_back();
  } else {
    split.test = {torch::cat(x_test), torch::cat(y_test)};
  }
  // A shard rewritten while training (a data pipeline's next version, same sample count) trained
  // on unchecked samples without a word: its CRC-32 must still be the one checked.
  std::map<std::string, uint32_t> checked;
  for (size_t k = 0; k < files.size(); ++k) checked[files[k]] = crcs[k];
  auto load = [checked](const std::string& file) {
    uint32_t now = file_crc32(file), then = checked.at(file);
    if (now != then)
      throw FormatError(str(file, " changed since it was checked when training began (its CRC-32 is ", now, ", was ",
                            then, "): a shard must stay as it is until the run ends"));
    Shard s = read_shard(file);
    return std::make_pair(s["x"], s["y"]);
  };
  split.train.on_disk = std::make_shared<ShardStore>(files, sizes, crcs, load);
  if (!probe_x.empty()) split.loss_not_a_mean = loss_not_a_mean(model, torch::cat(probe_x), torch::cat(probe_y));
  set_sizes(split, model, out);
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
  check_zip_records(path);  // once: its records' CRC-32s, which LibTorch does not check
  Shard s = read_shard(path);
  torch::Tensor out;
  check_shard(s, model, out, path);
  std::string not_a_mean = loss_not_a_mean(model, s.at("x"), s.at("y"));
  DataSplit split;
  split.name = "file:" + path;
  // The file's tensors themselves (a cat of each one alone copied x, the launcher's peak).
  split.train = {s.at("x"), s.at("y")};
  if (s.count("x_test")) {
    split.test = {s.at("x_test"), s.at("y_test")};
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
