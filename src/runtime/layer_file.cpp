#include "runtime/layer_file.h"

#include "core/error.h"

namespace pt::runtime {

namespace {
constexpr const char* kParam = "param.";
constexpr const char* kMomentum = "momentum.";
constexpr const char* kBuffer = "buffer.";

std::string name_of(const std::string& prefix, size_t k) { return prefix + std::to_string(k); }
}  // namespace

std::string layer_file_bytes(const LayerFile& f) {
  PT_CHECK(f.momentum.size() == f.params.size(), f.momentum.size(), " momentum slots for ", f.params.size(),
           " parameters");
  std::vector<TensorRecord> all;
  for (size_t k = 0; k < f.params.size(); ++k) {
    all.push_back(f.params[k]);
    all.back().name = name_of(kParam, k);
  }
  for (size_t k = 0; k < f.momentum.size(); ++k) {
    if (!f.momentum[k]) continue;
    all.push_back(*f.momentum[k]);
    all.back().name = name_of(kMomentum, k);
  }
  for (size_t k = 0; k < f.buffers.size(); ++k) {
    all.push_back(f.buffers[k]);
    all.back().name = name_of(kBuffer, k);
  }
  return tensor_file_bytes(all);
}

namespace {

LayerFile layer_file_of(const std::vector<TensorRecord>& all, const std::string& source) {
  LayerFile f;
  size_t i = 0;
  for (; i < all.size() && all[i].name == name_of(kParam, f.params.size()); ++i) f.params.push_back(all[i]);
  f.momentum.resize(f.params.size());
  size_t next = 0;  // momentum buffers come in parameter order, each at most once
  for (; i < all.size() && all[i].name.rfind(kBuffer, 0) != 0; ++i) {
    const TensorRecord& r = all[i];
    size_t k = next;
    while (k < f.params.size() && r.name != name_of(kMomentum, k)) ++k;
    if (k == f.params.size())
      throw FormatError(str(source, ": tensor ", i, " is named '", r.name, "'; expected param.<k> for k = 0, 1, ... then ",
                            "momentum.<k> in increasing k for k < ", f.params.size()));
    const TensorRecord& p = f.params[k];
    if (r.dtype != p.dtype || r.shape != p.shape)
      throw FormatError(str(source, ": '", r.name, "' is ", r.dtype, " ", shape_text(r.shape), " but its parameter is ",
                            p.dtype, " ", shape_text(p.shape)));
    f.momentum[k] = r;
    next = k + 1;
  }
  for (; i < all.size(); ++i) {
    if (all[i].name != name_of(kBuffer, f.buffers.size()))
      throw FormatError(str(source, ": tensor ", i, " is named '", all[i].name, "'; expected ",
                            name_of(kBuffer, f.buffers.size()), " (buffers come last, numbered from 0)"));
    f.buffers.push_back(all[i]);
  }
  return f;
}

}  // namespace

LayerFile parse_layer_file(const std::string& bytes, const std::string& source) {
  return layer_file_of(parse_tensor_file(bytes, source), source);
}

LayerFile read_layer_file_header(const std::string& path) { return layer_file_of(read_tensor_file_header(path), path); }

}  // namespace pt::runtime
