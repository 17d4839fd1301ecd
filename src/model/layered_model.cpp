#include "model/layered_model.h"

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
  return output.argmax(-1).eq(target).sum().item<int64_t>();
}

int64_t LayeredModel::targets_per_sample() const {
  return task_ == Task::kLanguageModel ? sample_shape_.at(0) : 1;
}

std::vector<torch::Tensor> LayeredModel::layer_parameters(int i) const {
  return layers_.at(i).module->parameters();
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

void LayeredModel::train(bool on) {
  for (auto& l : layers_) l.module->train(on);
}

}  // namespace pt::model
