#include "runtime/layer_file.h"

#include <algorithm>

#include "core/error.h"

namespace pt::runtime {

using namespace layer_file_names;

std::string layer_file_bytes(const LayerFile& f) {
  std::vector<TensorRecord> all;
  for (const auto& [name, record] : in_file_order(f)) {
    all.push_back(*record);
    all.back().name = name;
  }
  return tensor_file_bytes(all);
}

LayerFile layer_file_of(const std::vector<TensorRecord>& all, const std::string& source) {
  LayerFile f;
  size_t i = 0;
  for (; i < all.size() && all[i].name == name_of(kParam, f.params.size()); ++i) f.params.push_back(all[i]);
  f.momentum.resize(f.params.size());
  // Each state's buffers come in parameter order, each at most once: momentum's, then variance's.
  for (const auto& [states, prefix] : {std::pair{&f.momentum, kMomentum}, std::pair{&f.variance, kVariance}}) {
    states->resize(f.params.size());
    for (size_t next = 0; i < all.size() && all[i].name.rfind(prefix, 0) == 0; ++i) {
      const TensorRecord& r = all[i];
      size_t k = next;
      while (k < f.params.size() && r.name != name_of(prefix, k)) ++k;
      if (k == f.params.size())
        throw FormatError(str(source, ": tensor ", i, " is named '", r.name, "'; expected ", prefix,
                              "<k> in increasing k for k < ", f.params.size()));
      const TensorRecord& p = f.params[k];
      if (r.dtype != p.dtype || r.shape != p.shape)
        throw FormatError(str(source, ": '", r.name, "' is ", r.dtype, " ", shape_text(r.shape),
                              " but its parameter is ", p.dtype, " ", shape_text(p.shape)));
      (*states)[k] = r;
      next = k + 1;
    }
  }
  bool any_variance = std::any_of(f.variance.begin(), f.variance.end(), [](const auto& v) { return v.has_value(); });
  if (!any_variance) f.variance.clear();
  if (i < all.size() && all[i].name == kSteps) {
    auto n = static_cast<int64_t>(f.params.size());
    if (all[i].dtype != "int64" || (all[i].shape != std::vector<int64_t>{1} && all[i].shape != std::vector<int64_t>{n}))
      throw FormatError(str(source, ": '", kSteps, "' is ", all[i].dtype, " ", shape_text(all[i].shape),
                            ", expected int64 [1] or [", n, "] (one count per parameter)"));
    f.optimizer_steps = all[i++];
  }
  for (; i < all.size() && all[i].name.rfind(kBuffer, 0) != 0; ++i)
    throw FormatError(str(source, ": tensor ", i, " is named '", all[i].name, "'; expected param.<k> for k = 0, 1, ... ",
                          "then momentum.<k>, then variance.<k> in increasing k for k < ", f.params.size(),
                          ", then optimizer_steps, then buffer.<k>"));
  for (; i < all.size(); ++i) {
    if (all[i].name != name_of(kBuffer, f.buffers.size()))
      throw FormatError(str(source, ": tensor ", i, " is named '", all[i].name, "'; expected ",
                            name_of(kBuffer, f.buffers.size()), " (buffers come last, numbered from 0)"));
    f.buffers.push_back(all[i]);
  }
  return f;
}

LayerFile parse_layer_file(const std::string& bytes, const std::string& source) {
  return layer_file_of(parse_tensor_file(bytes, source), source);
}

LayerFile read_layer_file_header(const std::string& path) { return layer_file_of(read_tensor_file_header(path), path); }

}  // namespace pt::runtime
