#include "runtime/checkpoint_manifest.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/input_limits.h"
#include "core/json_doc.h"

namespace pt::runtime {

namespace fs = std::filesystem;

namespace {
constexpr const char* kKind = "checkpoint";
// Version 1 stored layers as TorchScript archives (torch::save), which can run code when
// loaded; version 2 stores tensor files (layer_file.h), which are data only.
constexpr int kVersion = 2;
constexpr const char* kPrefix = "step-";
}  // namespace

std::string DataIdentity::describe() const {
  char crc[9];
  std::snprintf(crc, sizeof crc, "%08x", crc32);
  return str(name, " (", train_samples, " training samples, CRC-32 ", crc, ")");
}

std::string manifest_to_json(const CheckpointManifest& m) {
  json files = json::array();
  for (const auto& f : m.files)
    files.push_back({{"name", f.name}, {"layer", f.layer}, {"bytes", f.bytes}, {"crc32", f.crc32}});
  json doc = {{"format", format_tag(kKind, kVersion)},
              {"run_id", m.run_id},
              {"model", m.model},
              {"model_sha256", m.model_sha256},
              {"layers", m.layers},
              {"step", m.step},
              {"batch_size", m.batch_size},
              {"seed", m.seed},
              {"shuffle", m.shuffle},
              {"schedule", m.schedule},
              {"plan", m.plan},
              {"workers", m.workers},
              {"sgd", {{"lr", m.lr}, {"momentum", m.momentum}, {"weight_decay", m.weight_decay},
                       {"weight_decay_on", m.weight_decay_on}}},
              {"optimizer", m.optimizer},
              {"files", files}};
  if (!m.replica_buffers.empty()) {
    json replicas = json::array();
    for (const auto& f : m.replica_buffers)
      replicas.push_back({{"name", f.name}, {"layer", f.layer}, {"replica", f.replica}, {"bytes", f.bytes},
                          {"crc32", f.crc32}});
    doc["replica_buffers"] = replicas;
  }
  if (m.eps >= 0) {  // unknown (an older file's) stays unknown
    doc["sgd"]["betas"] = json::array({m.beta1, m.beta2});
    doc["sgd"]["eps"] = m.eps;
    doc["sgd"]["clip_grad_norm"] = m.clip_grad_norm;
  }
  if (!m.zero_grad.empty()) doc["sgd"]["zero_grad"] = m.zero_grad;
  if (!m.precision.empty()) doc["precision"] = m.precision;
  if (m.label_smoothing >= 0) doc["label_smoothing"] = m.label_smoothing;
  if (m.microbatches > 0) doc["microbatches"] = m.microbatches;
  if (m.deferred_batch_norm >= 0) doc["deferred_batch_norm"] = m.deferred_batch_norm == 1;
  if (!m.weight_lag.empty()) doc["weight_lag"] = m.weight_lag;
  if (std::isfinite(m.first_loss)) doc["first_loss"] = m.first_loss;
  if (!m.lr_schedule.empty()) {  // unknown (an older file's) stays unknown
    doc["sgd"]["lr_schedule"] = m.lr_schedule;
    doc["sgd"]["warmup_steps"] = m.warmup_steps;
    doc["sgd"]["schedule_steps"] = m.schedule_steps;
    doc["sgd"]["min_lr"] = m.min_lr;
  }
  if (m.data.train_samples >= 0)
    doc["data"] = {{"name", m.data.name}, {"train_samples", m.data.train_samples}, {"crc32", m.data.crc32}};
  if (!m.ties.empty()) {
    json ties = json::array();
    for (const auto& group : m.ties) {
      json members = json::array();
      for (const auto& [layer, param] : group) members.push_back(json::array({layer, param}));
      ties.push_back(members);
    }
    doc["ties"] = ties;
  }
  return doc.dump(2) + "\n";
}

CheckpointManifest manifest_from_json(const std::string& text, const std::string& source) {
  json doc = parse_json(text, source);
  JsonField root(doc, source, "");
  if (doc.is_object() && doc.value("format", json()) == format_tag(kKind, 1))
    throw FormatError(str(source, ": ", format_tag(kKind, 1), " is the old checkpoint format, whose layer files are ",
                          "TorchScript archives that can run code when loaded; this pipetrain reads only ",
                          format_tag(kKind, kVersion), " (data only). Retrain, or resume it with the pipetrain that ",
                          "wrote it and save again with this one"));
  expect_format(root, kKind, kVersion);
  CheckpointManifest m;
  m.run_id = root["run_id"].as_string();
  if (m.run_id.empty() || m.run_id.size() > 64 ||
      m.run_id.find_first_not_of("0123456789abcdef") != std::string::npos)
    root["run_id"].fail("must be 1 to 64 lowercase hexadecimal digits");
  m.model = root["model"].as_string();
  if (root.has("model_sha256")) {  // written since issue 35
    m.model_sha256 = root["model_sha256"].as_string();
    if (!m.model_sha256.empty() &&
        (m.model_sha256.size() != 64 || m.model_sha256.find_first_not_of("0123456789abcdef") != std::string::npos))
      root["model_sha256"].fail("must be 64 lowercase hexadecimal digits, or empty");
  }
  m.layers = static_cast<int>(root["layers"].as_int_in(1, 100000));
  m.step = root["step"].as_int_at_least(0);
  m.batch_size = root["batch_size"].as_int_at_least(1);
  m.seed = static_cast<uint64_t>(root["seed"].as_int_at_least(0));
  if (root.has("shuffle")) m.shuffle = root["shuffle"].as_bool();
  // What a resume's notes print ("written by 1f1b on plan 2-1"): a schedule's name and a plan's shape.
  // (The names are the schedule library's, which this torch-free format does not link: their form.)
  m.schedule = root["schedule"].as_string();
  if (m.schedule.empty() || m.schedule.size() > 32 ||
      m.schedule.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos)
    root["schedule"].fail(str("must name a schedule (1f1b, zb-v, file), got '", printable(m.schedule), "'"));
  m.plan = root["plan"].as_string();
  bool shape = !m.plan.empty() && m.plan.front() != '-' && m.plan.back() != '-' &&
               m.plan.find("--") == std::string::npos && m.plan.find_first_not_of("0123456789-") == std::string::npos;
  if (!shape) root["plan"].fail(str("must be a plan's shape (replicas per stage: 2-1-1), got '", printable(m.plan), "'"));
  m.workers = static_cast<int>(root["workers"].as_int_in(1, 1 << 20));
  JsonField sgd = root["sgd"];
  m.lr = sgd["lr"].as_non_negative();
  m.momentum = sgd["momentum"].as_non_negative();
  m.weight_decay = sgd["weight_decay"].as_non_negative();
  if (sgd.has("weight_decay_on")) {  // written since --weight-decay-on
    m.weight_decay_on = sgd["weight_decay_on"].as_string();
    if (m.weight_decay_on != "all" && m.weight_decay_on != "matrices")
      sgd["weight_decay_on"].fail(str("must be all or matrices, got '", m.weight_decay_on, "'"));
  }
  if (root.has("optimizer")) {  // written since adam: older checkpoints are sgd's
    m.optimizer = root["optimizer"].as_string();
    if (m.optimizer != "sgd" && m.optimizer != "adam" && m.optimizer != "adamw")  // model::optimizer_kinds()
      root["optimizer"].fail(str("must be sgd, adam or adamw, got '", m.optimizer, "'"));
  }
  if (sgd.has("eps")) {  // written since the resume notes on betas, eps and clipping
    JsonField betas = sgd["betas"];
    if (betas.size() != 2) betas.fail(str("must hold two numbers, got ", betas.size()));
    m.beta1 = betas[0].as_non_negative(), m.beta2 = betas[1].as_non_negative();
    m.eps = sgd["eps"].as_non_negative();
    m.clip_grad_norm = sgd["clip_grad_norm"].as_non_negative();
  }
  if (sgd.has("zero_grad")) {  // written since --zero-grad
    m.zero_grad = sgd["zero_grad"].as_string();
    if (m.zero_grad != "none" && m.zero_grad != "zeros")  // model::zero_grad_modes()
      sgd["zero_grad"].fail(str("must be none or zeros, got '", printable(m.zero_grad), "'"));
  }
  if (root.has("label_smoothing")) m.label_smoothing = root["label_smoothing"].as_non_negative();
  if (root.has("precision")) {
    m.precision = root["precision"].as_string();
    if (m.precision != "fp32" && m.precision != "bf16")
      root["precision"].fail(str("must be fp32 or bf16, got '", m.precision, "'"));
  }
  if (root.has("microbatches")) m.microbatches = static_cast<int>(root["microbatches"].as_int_in(1, 1 << 30));
  if (root.has("deferred_batch_norm")) m.deferred_batch_norm = root["deferred_batch_norm"].as_bool() ? 1 : 0;
  if (root.has("weight_lag")) m.weight_lag = root["weight_lag"].as_string();
  if (root.has("first_loss")) {  // written since a resume judges the whole run's divergence
    m.first_loss = root["first_loss"].as_number();
  }
  if (sgd.has("lr_schedule")) {  // written since the resume notes on the learning rate
    m.lr_schedule = sgd["lr_schedule"].as_string();
    if (m.lr_schedule != "constant" && m.lr_schedule != "cosine" && m.lr_schedule != "linear")
      sgd["lr_schedule"].fail(str("must be constant, cosine or linear, got '", printable(m.lr_schedule), "'"));
    m.warmup_steps = sgd["warmup_steps"].as_int_at_least(0);
    m.schedule_steps = sgd["schedule_steps"].as_int_at_least(0);
    if (sgd.has("min_lr")) m.min_lr = sgd["min_lr"].as_non_negative();
  }
  JsonField files = root["files"];
  if (files.size() != static_cast<size_t>(m.layers))
    files.fail(str("lists ", files.size(), " files but field 'layers' is ", m.layers, " (a file a layer)"));
  // Only plain names inside the checkpoint directory: a manifest must not point elsewhere.
  auto file_of = [](JsonField f) {
    CheckpointFile cf;
    cf.name = f["name"].as_string();
    if (cf.name.empty() || cf.name.find('/') != std::string::npos || cf.name == "." || cf.name == "..")
      f["name"].fail("must be a file name inside the checkpoint directory");
    cf.bytes = f["bytes"].as_int_at_least(0);
    cf.crc32 = static_cast<uint32_t>(f["crc32"].as_int_in(0, 0xffffffffLL));
    return cf;
  };
  for (size_t i = 0; i < files.size(); ++i) {
    CheckpointFile cf = file_of(files[i]);
    int64_t layer = files[i]["layer"].as_int_at_least(0);
    if (layer != static_cast<int64_t>(i)) files[i]["layer"].fail(str("must be ", i, " (files are in layer order)"));
    cf.layer = static_cast<int>(i);
    // The name is the layer's: two names swapped with their CRCs loaded each layer's state into the other.
    if (cf.name != layer_file_name(cf.layer)) files[i]["name"].fail(str("must be ", layer_file_name(cf.layer)));
    m.files.push_back(cf);
  }
  if (root.has("replica_buffers")) {  // written since 2026-12-06
    JsonField replicas = root["replica_buffers"];
    for (size_t i = 0; i < replicas.size(); ++i) {
      CheckpointFile cf = file_of(replicas[i]);
      cf.layer = static_cast<int>(replicas[i]["layer"].as_int_in(0, m.layers - 1));
      cf.replica = static_cast<int>(replicas[i]["replica"].as_int_in(1, 1 << 20));
      if (cf.name != replica_file_name(cf.layer, cf.replica))
        replicas[i]["name"].fail(str("must be ", replica_file_name(cf.layer, cf.replica)));
      m.replica_buffers.push_back(cf);
    }
  }
  if (root.has("data")) {  // written since issue 70 (resuming on other data)
    JsonField d = root["data"];
    m.data.name = d["name"].as_string();
    m.data.train_samples = d["train_samples"].as_int_at_least(0);
    m.data.crc32 = static_cast<uint32_t>(d["crc32"].as_int_in(0, 0xffffffffLL));
  }
  if (root.has("ties")) {  // written since the tied-parameter count of checkpoint inspect
    JsonField ties = root["ties"];
    std::set<std::pair<int, int>> tied;  // a parameter is in one group, once (a self-tie miscounted them)
    for (size_t g = 0; g < ties.size(); ++g) {
      JsonField group = ties[g];
      if (group.size() < 2) group.fail("must list two or more [layer, parameter] pairs");
      std::vector<std::pair<int, int>> members;
      for (size_t k = 0; k < group.size(); ++k) {
        JsonField pair = group[k];
        if (pair.size() != 2) pair.fail("must be [layer, parameter]");
        members.emplace_back(static_cast<int>(pair[size_t{0}].as_int_in(0, m.layers - 1)),
                             static_cast<int>(pair[size_t{1}].as_int_in(0, 1 << 20)));
        if (!tied.insert(members.back()).second)
          pair.fail(str("names layer ", members.back().first, "'s parameter ", members.back().second,
                        " a second time (each tied parameter is listed once)"));
      }
      m.ties.push_back(std::move(members));
    }
  }
  return m;
}

std::string new_run_id() {
  std::random_device rd;
  uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

uint32_t crc32_of_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError(str(path, ": cannot open file"));
  uLong crc = ::crc32(0L, Z_NULL, 0);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(in.gcount()));
  }
  if (in.bad()) throw FormatError(str(path, ": read failed"));
  return static_cast<uint32_t>(crc);
}

uint32_t crc32_of(const void* data, size_t size, uint32_t before) {
  uLong crc = before;
  const auto* p = static_cast<const Bytef*>(data);
  for (size_t off = 0; off < size;) {
    uInt n = static_cast<uInt>(std::min<size_t>(size - off, 1u << 30));
    crc = ::crc32(crc, p + off, n);
    off += n;
  }
  return static_cast<uint32_t>(crc);
}

std::string layer_file_name(int layer) { return "layer-" + std::to_string(layer) + ".tensors"; }

std::string replica_file_name(int layer, int replica) {
  return "layer-" + std::to_string(layer) + ".replica-" + std::to_string(replica) + ".tensors";
}

std::string checkpoint_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%08lld", kPrefix, static_cast<long long>(step));
  return buf;
}

int64_t checkpoint_step_of(const std::string& name) {
  std::string prefix = kPrefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  int64_t step = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (int64_t{1} << 50)) return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::string newest_checkpoint(const std::string& dir, int64_t before) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  int64_t best = -1;
  std::string out;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    int64_t step = checkpoint_step_of(entry.path().filename().string());
    // A step directory appears by rename only after its manifest is written (checkpoint.cpp).
    if (step > best && step < before && fs::exists(entry.path() / "manifest.json", ec)) {
      best = step;
      out = entry.path().string();
    }
  }
  return out;
}

namespace {
// read_regular_file with its error as a FormatError (checkpoint errors are format errors).
std::string read_checked(const std::string& path, InputKind kind) {
  try {
    check_input_size(path, kind);
    return read_regular_file(path, input_limit(kind));
  } catch (const FormatError&) {
    throw;
  } catch (const Error& e) {
    throw FormatError(e.what());
  }
}
}  // namespace

CheckpointManifest read_verified_manifest(const std::string& checkpoint) {
  std::string path = (fs::path(checkpoint) / "manifest.json").string();
  if (!fs::exists(path)) throw FormatError(str(checkpoint, ": not a checkpoint (no manifest.json)"));
  CheckpointManifest m = manifest_from_json(read_checked(path, InputKind::manifest), path);
  // A step-N folder holds step N: an edited step resumed at the wrong place (and the newer good
  // checkpoints past it were deleted as later than the run).
  fs::path folder = fs::path(checkpoint).lexically_normal();
  int64_t named = checkpoint_step_of((folder.filename().empty() ? folder.parent_path() : folder).filename().string());
  if (named >= 0 && named != m.step)
    throw FormatError(str(path, ": field \"step\" is ", m.step, " but the folder is step ", named));
  std::vector<CheckpointFile> all = m.files;
  all.insert(all.end(), m.replica_buffers.begin(), m.replica_buffers.end());
  for (const auto& f : all) {
    std::string file = (fs::path(checkpoint) / f.name).string();
    std::error_code ec;
    if (!fs::exists(file, ec)) throw FormatError(str(file, ": missing (listed in ", path, ")"));
    // pipetrain writes no links: one would make the checkpoint read a file outside it.
    if (fs::is_symlink(file, ec)) throw FormatError(str(file, ": is a symbolic link; checkpoint files must be regular files"));
    // The size first: a file that is not what the manifest says is never read into memory.
    auto size = fs::is_regular_file(file, ec) ? static_cast<int64_t>(fs::file_size(file, ec)) : -1;
    if (size != f.bytes)
      throw FormatError(str(file, ": ", size < 0 ? std::string("not a regular file") : str(size, " bytes"),
                            " but the manifest says a file of ", f.bytes, " bytes (truncated?)"));
    if (f.bytes > input_limit(InputKind::layer_file)) check_input_size(file, InputKind::layer_file);
    uint32_t crc = crc32_of_file(file);  // read in pieces: verifying holds no file in memory
    if (crc != f.crc32) throw FormatError(str(file, ": checksum ", crc, " does not match the manifest's ", f.crc32));
  }
  return m;
}

std::string lr_course(const std::string& schedule, int64_t steps, double min_lr) {
  if (schedule.empty() || schedule == "constant") return schedule;  // the others decay
  return str(schedule, min_lr > 0 ? str(" to ", min_lr) : "", " over ", steps, " steps");
}

}  // namespace pt::runtime
