#pragma once
// One layer of a model file (pipetrain export) as a torch::nn::Module, for scripted_model.cpp.
#include <functional>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include <torch/csrc/jit/passes/inliner.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "core/error.h"
#include "model/deferred_batch_norm.h"
#include "model/random_draws.h"

namespace pt::model {

// Plain interpretation, op by op as eager PyTorch runs them: the graph executor's autodiff and
// specialisations would train a different computation from the user's eager PyTorch (the
// encoder-decoder on 6 stages ended 8e-8 from it), re-optimise per shape, and cost each process
// 0.3-0.5 s of CPU optimising graphs on their first runs. LibTorch keeps the switch per thread,
// so every thread that runs a layer sets it (setting it where the file was loaded left the
// pipeline's stage threads optimising).
inline void interpret_plainly() { torch::jit::setGraphExecutorOptimize(false); }

// One layer of the file as a torch::nn::Module: the script module's parameters and buffers are
// registered as this module's (the same tensors), so the optimizer, weight stashing and
// checkpoints, which work on parameters(), update what the script module computes with.
class ScriptedLayerImpl : public torch::nn::Module, public DeferrableLayer, public RandomDrawing {
 public:
  explicit ScriptedLayerImpl(torch::jit::Module module)
      : module_(std::move(module)), draws_random_(script_draws_random(module_)) {
    for (const auto& p : once(module_.named_parameters(/*recurse=*/true))) {
      parameter_names_.push_back(free_name(p.name));
      register_parameter(parameter_names_.back(), p.value, p.value.requires_grad());
    }
    for (const auto& b : once(module_.named_buffers(/*recurse=*/true))) register_buffer(free_name(b.name), b.value);
    for (const auto& sub : module_.named_modules())
      if (!sub.value.is_training()) held_in_eval_.push_back(sub.value);
  }

  bool draws_random() const override { return draws_random_; }

  torch::Tensor forward(torch::Tensor x) {
    interpret_plainly();
    return module_.forward({std::move(x)}).toTensor();
  }

  // The modules the file holds in evaluation mode stay so while the layer trains, as eager
  // PyTorch keeps them: a fine-tuned backbone's frozen BatchNorm (its statistics fixed), a
  // dropout switched off, or every module of a model exported in evaluation mode. The script
  // module's train(true) put each back in training mode: the frozen BatchNorm normalised by its
  // batches and moved its statistics.
  void train(bool on) override {
    torch::nn::Module::train(on);
    module_.train(on);
    if (on)
      for (auto& m : held_in_eval_) m.train(false);
  }

  // Makes parameter `k` (in named_parameters order) the tensor `t`, in the script module that
  // computes with it and in this module: a tie group's copies in two layers of one worker, read
  // apart from a file of separate layers, become one tensor.
  void share_parameter(size_t k, const torch::Tensor& t) {
    std::vector<torch::jit::NameTensor> list = once(module_.named_parameters(/*recurse=*/true));
    PT_CHECK(k < list.size(), k, " of ", list.size());
    std::string path = list[k].name;
    torch::jit::Module owner = module_;
    for (size_t dot; (dot = path.find('.')) != std::string::npos; path = path.substr(dot + 1))
      owner = owner.attr(path.substr(0, dot)).toModule();
    owner.register_parameter(path, t, /*is_buffer=*/false);
    parameters_[parameter_names_.at(k)] = t;
  }

  // python/pipetrain/batch_norm.py's modules: those holding a pt_microbatches buffer.
  std::vector<DeferredBatchNorm> deferred_batch_norms() override {
    std::vector<DeferredBatchNorm> out;
    std::set<const void*> seen;  // one held at two paths is one set of sums, folded once
    for (const auto& sub : module_.named_modules()) {
      torch::jit::Module m = sub.value;
      if (!m.hasattr("pt_microbatches") || !seen.insert(m.attr("pt_sum").toTensor().unsafeGetTensorImpl()).second)
        continue;
      auto type = m.type();
      if (!type->hasConstant("momentum_value") || !type->hasConstant("cumulative"))
        throw FormatError(str("layer module '", sub.name, "' holds pt_microbatches but not the constants of a deferrable "
                              "BatchNorm (momentum_value, cumulative): export the model again with `pipetrain export`"));
      auto buffer = [&](const char* name) { return m.attr(name).toTensor(); };
      DeferredBatchNorm n;
      n.mode = buffer("pt_microbatches");
      n.seen = buffer("pt_seen");
      n.count = buffer("pt_count");
      n.sum = buffer("pt_sum");
      n.sum_sq = buffer("pt_sum_sq");
      n.running_mean = buffer("running_mean");
      n.running_var = buffer("running_var");
      n.num_batches_tracked = buffer("num_batches_tracked");
      n.momentum = type->getConstant("momentum_value").toDouble();
      n.cumulative = type->getConstant("cumulative").toBool();
      out.push_back(std::move(n));
    }
    return out;
  }

  std::vector<std::string> parameter_names() const {
    std::vector<std::string> out;
    for (const auto& p : once(module_.named_parameters(/*recurse=*/true))) out.push_back(p.name);
    return out;
  }

  // The operations its forward runs, each kind with its count: what tells two layers of equal
  // shapes apart (profile::time_alike). Not the code's text, whose names and the order of its
  // lines differ between a model's identical blocks.
  void pretty_print(std::ostream& stream) const override {
    auto graph = module_.get_method("forward").graph()->copy();
    torch::jit::Inline(*graph);
    std::map<std::string, int> kinds;
    std::function<void(torch::jit::Block*)> count = [&](torch::jit::Block* block) {
      for (torch::jit::Node* node : block->nodes()) {
        ++kinds[node->kind().toQualString()];
        for (torch::jit::Block* inner : node->blocks()) count(inner);
      }
    };
    count(graph->block());
    stream << "ScriptedLayer(";
    for (const auto& [kind, n] : kinds) stream << kind << " " << n << ", ";
    stream << ")";
  }

  std::shared_ptr<torch::nn::Module> clone(const c10::optional<torch::Device>& device) const override {
    auto copy = std::make_shared<ScriptedLayerImpl>(module_.deepcopy());
    if (device) copy->to(*device);
    return copy;
  }

 private:
  // Each tensor at the first path that holds it, as Python's named_parameters() lists them:
  // LibTorch lists a module an nn.Sequential holds twice under both paths (the layer was refused
  // as holding more parameters than its pipetrain.json lists).
  template <typename List>
  static std::vector<torch::jit::NameTensor> once(const List& list) {
    std::vector<torch::jit::NameTensor> out;
    std::set<const void*> seen;
    for (const auto& t : list)
      if (seen.insert(t.value.unsafeGetTensorImpl()).second) out.push_back(t);
    return out;
  }
  // A path as a torch::nn::Module name, which may not hold dots: each dot becomes '_', and a
  // name another path already became ('proj.weight' and 'proj_weight') gets a number after it
  // (the two were one name, and the file could not be loaded).
  std::string free_name(const std::string& path) const {
    std::string name = path;
    for (char& c : name)
      if (c == '.') c = '_';
    std::string out = name;
    for (int k = 1; named_parameters(false).contains(out) || named_buffers(false).contains(out); ++k)
      out = str(name, "_", k);
    return out;
  }
  torch::jit::Module module_;
  std::vector<std::string> parameter_names_;  // this module's names of the file's parameters, in their order
  std::vector<torch::jit::Module> held_in_eval_;  // as the file holds them (train)
  bool draws_random_;
};
TORCH_MODULE(ScriptedLayer);

}  // namespace pt::model
