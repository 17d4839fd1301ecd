#include "model/layered_model.h"

#include <set>

#include "core/error.h"

namespace pt::model {

LayeredModel::LayeredModel(std::string name, Task task, std::vector<int64_t> sample_shape,
                           bool integer_input)
    : name_(std::move(name)), task_(task), sample_shape_(std::move(sample_shape)),
      integer_input_(integer_input) {}

void LayeredModel::add(std::string name, torch::nn::Sequential module) {
  std::vector<int> inputs;
  if (!layers_.empty()) inputs.push_back(num_layers() - 1);
  layers_.push_back({std::move(name), std::move(module), std::move(inputs)});
}

torch::Tensor LayeredModel::forward(torch::Tensor x, int first, int last) {
  if (last < 0) last = num_layers();
  PT_CHECK(first >= 0 && first <= last && last <= num_layers(), first, "..", last);
  for (int i = first; i < last; ++i) x = layers_[i].module->forward(x);
  return x;
}

torch::Tensor LayeredModel::loss(const torch::Tensor& output, const torch::Tensor& target) const {
  // Emulated compute: cheap, defined (zero) and differentiable, whatever the output's size.
  if (task_ == Task::kEmulated) return output.mean();
  if (custom_loss_) return custom_loss_(output, target);
  if (task_ == Task::kRegression) {
    if (output.sizes() != target.sizes())
      throw Error(pt::str("loss mse: the model's output is ", output.sizes(), " but the target is ", target.sizes()));
    return torch::nn::functional::mse_loss(output, target);
  }
  if (task_ == Task::kLanguageModel)
    return torch::nn::functional::cross_entropy(output.reshape({-1, output.size(-1)}), target.reshape({-1}));
  return torch::nn::functional::cross_entropy(output, target);
}

int64_t LayeredModel::correct(const torch::Tensor& output, const torch::Tensor& target) const {
  if (!has_accuracy()) return 0;
  // Classes lie along dimension 1 for cross-entropy ([N, C, H, W] per pixel), the last for an LM.
  int64_t dim = task_ == Task::kClassification ? 1 : -1;
  if (output.dim() < 2 || output.argmax(dim).sizes() != target.sizes()) return 0;
  return output.argmax(dim).eq(target).sum().item<int64_t>();
}

int64_t LayeredModel::targets_per_sample() const {
  return task_ == Task::kLanguageModel ? sample_shape_.at(0) : 1;
}

std::vector<torch::Tensor> LayeredModel::layer_parameters(int i) const {
  return layers_.at(i).module->parameters();
}

std::vector<torch::Tensor> LayeredModel::unique_parameters() const {
  std::vector<torch::Tensor> out;
  std::set<const c10::TensorImpl*> seen;
  for (auto& p : parameters())
    if (seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
  return out;
}

std::vector<torch::Tensor> LayeredModel::parameters(int first, int last) const {
  if (last < 0) last = num_layers();
  std::vector<torch::Tensor> out;
  for (int i = first; i < last; ++i)
    for (auto& p : layer_parameters(i)) out.push_back(p);
  return out;
}

int64_t LayeredModel::parameter_bytes(int i) const {
  int64_t bytes = 0;
  for (const auto& p : layer_parameters(i)) bytes += p.numel() * static_cast<int64_t>(p.element_size());
  return bytes;
}

std::vector<int> TieGroup::layers() const {
  std::vector<int> out;
  for (const auto& m : members) out.push_back(m.layer);
  return out;
}

std::vector<TieGroup> LayeredModel::tie_groups() const {
  // Keyed by the tensor's own storage and view: a parameter's TensorImpl may differ between two
  // registrations of it (a TorchScript module hands out new handles), its memory does not.
  struct Seen {
    const char* lo;
    const char* hi;
    std::vector<int64_t> sizes, strides;
    TieMember first;
  };
  std::vector<Seen> seen;
  std::vector<TieGroup> groups;
  std::vector<int> group_of;  // seen index -> group index, -1: none yet
  for (int l = 0; l < num_layers(); ++l) {
    auto params = layer_parameters(l);
    for (int k = 0; k < static_cast<int>(params.size()); ++k) {
      const auto& p = params[k];
      if (p.numel() == 0) continue;
      const char* lo = static_cast<const char*>(p.data_ptr());
      const char* hi = lo + p.numel() * p.element_size();
      bool matched = false;
      for (size_t s = 0; s < seen.size() && !matched; ++s) {
        const char *slo = seen[s].lo, *shi = seen[s].hi;
        if (hi <= slo || shi <= lo) continue;  // disjoint
        if (lo != slo || p.sizes().vec() != seen[s].sizes || p.strides().vec() != seen[s].strides)
          throw FormatError(str(name_, ": parameter ", k, " of layer ", l, " ('", layers_[l].name,
                                "') overlaps parameter ", seen[s].first.param, " of layer ", seen[s].first.layer,
                                " ('", layers_[seen[s].first.layer].name,
                                "') without being the same tensor: pipetrain ties whole parameters only"));
        matched = true;
        if (seen[s].first.layer == l) break;  // used twice inside one layer: one parameter
        if (group_of[s] < 0) {
          group_of[s] = static_cast<int>(groups.size());
          groups.push_back({{seen[s].first}, p.numel() * static_cast<int64_t>(p.element_size())});
        }
        auto& members = groups[group_of[s]].members;
        if (members.back().layer != l) members.push_back({l, k});
      }
      if (!matched) {
        seen.push_back({lo, hi, p.sizes().vec(), p.strides().vec(), {l, k}});
        group_of.push_back(-1);
      }
    }
  }
  return groups;
}

int64_t LayeredModel::defer_batch_norm(int first, int last, int64_t microbatches) {
  static const std::string kFlag = "pt_microbatches";
  torch::NoGradGuard no_grad;
  int64_t found = 0;
  for (int l = first; l < last; ++l)
    for (auto& b : layers_.at(l).module->named_buffers()) {
      const std::string& name = b.key();
      if (name.size() >= kFlag.size() && name.compare(name.size() - kFlag.size(), kFlag.size(), kFlag) == 0) {
        b.value().fill_(microbatches);
        ++found;
      }
    }
  return found;
}

void LayeredModel::train(bool on) {
  for (auto& l : layers_) l.module->train(on);
}

}  // namespace pt::model
