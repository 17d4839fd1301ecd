#pragma once
// A checkpoint's layer file (layer-<i>.tensors): one model layer's parameters and optimizer
// state as a tensor file (core/tensor_file.h), data only. Plain C++ (no LibTorch):
// `checkpoint inspect` and the fuzzers read it; checkpoint.h converts it to and from tensors.
//
// Tensors are named "param.<k>" for the layer's k-th parameter, in the layer's parameter order,
// then "momentum.<k>" for the optimizer's first state of parameter k (sgd's momentum buffer,
// adam's first moment), of the same shape and dtype, absent until that parameter's first
// optimizer step, then "variance.<k>" for adam's second moment the same way, then under adam
// "optimizer_steps" (int64 [1]: its step count, for the bias corrections), then "buffer.<k>" for
// the layer's k-th buffer (BatchNorm's running statistics), in the layer's buffer order (absent
// in checkpoints written before buffers were kept: the model's own are used).
#include <optional>
#include <string>
#include <vector>

#include "core/tensor_file.h"

namespace pt::runtime {

struct LayerFile {
  std::vector<TensorRecord> params;
  std::vector<std::optional<TensorRecord>> momentum;  // [k]: parameter k's buffer, if any
  std::vector<std::optional<TensorRecord>> variance;  // [k]: adam's second moment, if any
  std::optional<TensorRecord> optimizer_steps;        // adam's step count
  std::vector<TensorRecord> buffers;
};

std::string layer_file_bytes(const LayerFile& f);
// Parses and checks the naming rules above; FormatError names `source` and the tensor.
LayerFile parse_layer_file(const std::string& bytes, const std::string& source);
// The same, checked against the file's size, from its header only: the records hold no data.
LayerFile read_layer_file_header(const std::string& path);

}  // namespace pt::runtime
