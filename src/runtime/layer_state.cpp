// A stage replica's layer state to and from its layer file (checkpoint.h).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "runtime/checkpoint.h"
#include "runtime/layer_file.h"

namespace pt::runtime {

namespace {

struct DtypeName {
  torch::ScalarType type;
  const char* name;
};
constexpr DtypeName kDtypes[] = {{torch::kFloat64, "float64"}, {torch::kFloat32, "float32"}, {torch::kFloat16, "float16"},
                                 {torch::kBFloat16, "bfloat16"}, {torch::kInt64, "int64"}, {torch::kInt32, "int32"},
                                 {torch::kInt16, "int16"},       {torch::kInt8, "int8"},   {torch::kUInt8, "uint8"},
                                 {torch::kBool, "bool"}};

// A tensor's record in a layer file: its dtype and shape (the data stays in the tensor).
TensorRecord head_of(const torch::Tensor& t) {
  TensorRecord r;
  for (const auto& d : kDtypes)
    if (d.type == t.scalar_type()) r.dtype = d.name;
  PT_CHECK(!r.dtype.empty(), "no tensor-file dtype for ", t.scalar_type());
  r.shape.assign(t.sizes().begin(), t.sizes().end());
  return r;
}

torch::Tensor read_tensor(const TensorFileReader& file, const TensorRecord& r, const torch::Tensor& into = {}) {
  for (const auto& d : kDtypes)
    if (r.dtype == d.name) {
      bool in_place = into.defined() && into.is_contiguous() && into.device().is_cpu() &&
                      into.scalar_type() == d.type && into.sizes().equals(r.shape);
      auto t = in_place ? into : torch::empty(r.shape, torch::TensorOptions().dtype(d.type));
      file.read(r.name, t.data_ptr());
      return t;
    }
  PT_CHECK(false, "unknown dtype ", r.dtype);
  return {};
}

}  // namespace

void write_layer_state(const std::string& path, const LayerState& s) {
  // Views where the state is already contiguous on the CPU, as the runtime keeps it: no copy.
  auto plain = [](const torch::Tensor& t) { return t.detach().to(torch::kCPU).contiguous(); };
  LayerParts<torch::Tensor> parts;
  for (const auto& p : s.params) parts.params.push_back(plain(p));
  for (const auto& m : s.momentum) parts.momentum.push_back(m.defined() ? std::optional(plain(m)) : std::nullopt);
  parts.momentum.resize(parts.params.size());
  for (const auto& v : s.variance) parts.variance.push_back(v.defined() ? std::optional(plain(v)) : std::nullopt);
  if (!parts.variance.empty()) parts.variance.resize(parts.params.size());
  // One count where the layer's parameters agree (nearly always), else one per parameter.
  const auto& steps = s.optimizer_steps;
  if (!steps.empty())
    parts.optimizer_steps = std::all_of(steps.begin(), steps.end(), [&](int64_t c) { return c == steps[0]; })
                                ? torch::full({1}, steps[0], torch::kInt64)
                                : torch::tensor(steps, torch::kInt64);
  for (const auto& b : s.buffers) parts.buffers.push_back(plain(b));
  std::vector<TensorRecord> heads;
  std::vector<const void*> bytes;
  for (const auto& [name, tensor] : in_file_order(parts)) {
    heads.push_back(head_of(*tensor));
    heads.back().name = name;
    bytes.push_back(tensor->data_ptr());
  }
  write_tensor_file_atomic(path, heads, bytes);
}

LayerState read_layer_state(const std::string& path, const LayerState* into) {
  TensorFileReader file(path);
  LayerFile f = layer_file_of(file.records(), path);
  auto at = [&](const std::vector<torch::Tensor> LayerState::*part, size_t k) {
    return into && k < (into->*part).size() ? (into->*part)[k] : torch::Tensor();
  };
  LayerState s;
  for (size_t k = 0; k < f.params.size(); ++k) s.params.push_back(read_tensor(file, f.params[k], at(&LayerState::params, k)));
  for (size_t k = 0; k < f.momentum.size(); ++k)
    s.momentum.push_back(f.momentum[k] ? read_tensor(file, *f.momentum[k], at(&LayerState::momentum, k)) : torch::Tensor());
  for (size_t k = 0; k < f.variance.size(); ++k)
    s.variance.push_back(f.variance[k] ? read_tensor(file, *f.variance[k], at(&LayerState::variance, k)) : torch::Tensor());
  if (f.optimizer_steps) {
    torch::Tensor steps = read_tensor(file, *f.optimizer_steps);
    s.optimizer_steps.assign(steps.data_ptr<int64_t>(), steps.data_ptr<int64_t>() + steps.numel());
  }
  for (size_t k = 0; k < f.buffers.size(); ++k) s.buffers.push_back(read_tensor(file, f.buffers[k], at(&LayerState::buffers, k)));
  return s;
}

Checkpointer::Checkpointer(CheckpointOptions options, CheckpointManifest base, const schedule::Schedule& typical)
    : options_(std::move(options)),
      base_(std::move(base)),
      stage_workers_(typical.stage_workers),
      stage_layers_(typical.stage_layers) {}

std::string first_non_finite(const LayerState& s) {
  for (const auto& [tensors, kind] : {std::pair{&s.params, "param"}, std::pair{&s.momentum, "momentum"},
                                      std::pair{&s.variance, "variance"}, std::pair{&s.buffers, "buffer"}})
    for (size_t k = 0; k < tensors->size(); ++k) {
      const torch::Tensor& t = (*tensors)[k];
      if (!t.defined() || !t.is_floating_point()) continue;
      // A piece at a time: isfinite over a whole tensor makes its |t| and two masks, 1.5x a
      // float tensor (a 64 MiB weight added 96 MiB to a worker's peak at each checkpoint).
      constexpr int64_t kPiece = 1 << 18;
      torch::Tensor flat = t.reshape({-1});
      for (int64_t at = 0; at < flat.numel(); at += kPiece)
        if (!torch::isfinite(flat.narrow(0, at, std::min(kPiece, flat.numel() - at))).all().item<bool>())
          return str(kind, ".", k);
    }
  return "";
}

}  // namespace pt::runtime
