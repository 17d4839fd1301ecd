#pragma once
// A checkpoint's layer file (layer-<i>.tensors): one model layer's parameters and optimizer
// state as a tensor file (core/tensor_file.h), data only. Plain C++ (no LibTorch):
// `checkpoint inspect` and the fuzzers read it; checkpoint.h converts it to and from tensors.
//
// Tensors are named "param.<k>" for the layer's k-th parameter, in the layer's parameter order,
// then "momentum.<k>" for the optimizer's first state of parameter k (sgd's momentum buffer,
// adam's first moment), of the same shape and dtype, absent until that parameter's first
// optimizer step, then "variance.<k>" for adam's second moment the same way, then
// "optimizer_steps" (int64 [1], the layer's step count, or [params], each parameter's where they
// differ: one no backward reached skips a step; adam's bias corrections), then "buffer.<k>" for
// the layer's k-th buffer (BatchNorm's running statistics), in the layer's buffer order (absent
// in checkpoints written before buffers were kept: the model's own are used).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/tensor_file.h"

namespace pt::runtime {

// A layer's tensors by part: records in a file (LayerFile), tensors where the runtime writes one.
template <class T>
struct LayerParts {
  std::vector<T> params;
  std::vector<std::optional<T>> momentum;  // [k]: parameter k's buffer, if any
  std::vector<std::optional<T>> variance;  // [k]: adam's second moment, if any
  std::optional<T> optimizer_steps;        // adam's step count
  std::vector<T> buffers;
};
using LayerFile = LayerParts<TensorRecord>;

// Each tensor's name in a layer file, in the file's order, with the part of `f` it is.
template <class T>
std::vector<std::pair<std::string, const T*>> in_file_order(const LayerParts<T>& f);

std::string layer_file_bytes(const LayerFile& f);
// Parses and checks the naming rules above; FormatError names `source` and the tensor.
LayerFile parse_layer_file(const std::string& bytes, const std::string& source);
// The same of a file's records without data (TensorFileReader::records), named `source`.
LayerFile layer_file_of(const std::vector<TensorRecord>& records, const std::string& source);
// The same, checked against the file's size, from its header only: the records hold no data.
LayerFile read_layer_file_header(const std::string& path);

// ---- template definition

namespace layer_file_names {
inline constexpr const char* kParam = "param.";
inline constexpr const char* kMomentum = "momentum.";
inline constexpr const char* kVariance = "variance.";
inline constexpr const char* kSteps = "optimizer_steps";
inline constexpr const char* kBuffer = "buffer.";
inline std::string name_of(const std::string& prefix, size_t k) { return prefix + std::to_string(k); }
}  // namespace layer_file_names

template <class T>
std::vector<std::pair<std::string, const T*>> in_file_order(const LayerParts<T>& f) {
  using namespace layer_file_names;
  PT_CHECK(f.momentum.size() == f.params.size(), f.momentum.size(), " momentum slots for ", f.params.size(),
           " parameters");
  PT_CHECK(f.variance.empty() || f.variance.size() == f.params.size(), f.variance.size(), " variance slots for ",
           f.params.size(), " parameters");
  std::vector<std::pair<std::string, const T*>> all;
  for (size_t k = 0; k < f.params.size(); ++k) all.emplace_back(name_of(kParam, k), &f.params[k]);
  for (const auto& [states, prefix] : {std::pair{&f.momentum, kMomentum}, std::pair{&f.variance, kVariance}})
    for (size_t k = 0; k < states->size(); ++k)
      if ((*states)[k]) all.emplace_back(name_of(prefix, k), &*(*states)[k]);
  if (f.optimizer_steps) all.emplace_back(kSteps, &*f.optimizer_steps);
  for (size_t k = 0; k < f.buffers.size(); ++k) all.emplace_back(name_of(kBuffer, k), &f.buffers[k]);
  return all;
}

}  // namespace pt::runtime
