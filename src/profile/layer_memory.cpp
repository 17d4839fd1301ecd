// A layer's forward as the profiler runs it, and its memory as the meter counts it (layer_memory.h).
#include "profile/layer_memory.h"

#include <algorithm>
#include <cmath>

#include "model/memory_meter.h"
#include "model/precision.h"
#include "model/split_backward.h"

namespace pt::profile {

torch::Tensor layer_forward(model::LayeredModel& model, torch::nn::Sequential& module, const torch::Tensor& input,
                            const torch::Tensor& targets, torch::Tensor& out) {
  {
    model::ComputeScope scope(model.precision());
    out = module->forward(input);
  }
  return targets.defined() ? model.loss(out, targets) : out;
}

namespace {

// Layer::split_bytes: what a forward and a split B leave for W, the output's gradient (held
// as received) not counted, and Layer::split_workspace_bytes: the most B holds beyond the stash
// while it runs; 0 where the backward does not split (a weight used twice).
void measure_split_memory(model::LayeredModel& model, torch::nn::Sequential& module, const torch::Tensor& input,
                          const torch::Tensor& targets, Layer& l) {
  auto account = std::make_shared<model::MemoryAccount>();
  torch::Tensor top;
  {
    model::ChargeTo charge(account);
    torch::Tensor output;  // the loss's input, on the last layer: its graph keeps what it needs
    top = layer_forward(model, module, input, targets, output);
  }
  if (!top.requires_grad()) return;
  torch::Tensor grad = torch::ones_like(top);
  std::vector<torch::Tensor> weights;
  for (const auto& p : module->parameters())
    if (p.requires_grad()) weights.push_back(p);
  torch::Tensor input_grad;
  model::WeightBackward w;
  {
    model::ChargeTo charge(account);
    int64_t stash = account->live();
    account->reset_peak();
    if (!model::input_gradient(top, grad, input, weights, &input_grad, &w)) return;
    input_grad = torch::Tensor();  // sent on
    l.split_bytes = account->live();
    l.split_workspace_bytes = account->peak() - stash;
    model::weight_gradients(w);
  }
}

}  // namespace

void measure_layer_memory(model::LayeredModel& model, torch::nn::Sequential& module, const torch::Tensor& input,
                          const torch::Tensor& targets, Layer& l) {
  model::install_memory_meter();
  auto account = std::make_shared<model::MemoryAccount>();
  torch::Tensor out;
  {
    model::ChargeTo charge(account);
    torch::Tensor output;
    out = layer_forward(model, module, input, targets, output);
  }
  l.stash_bytes = account->live();
  int64_t workspace = account->peak() - l.stash_bytes;
  // Half the batch again: what it keeps beyond half the stash is kept whatever the batch
  // (Layer::fixed_stash_bytes): bf16's weight casts. Under fp32 nothing is, and what a first call
  // at a shape caches (mnist-cnn's worker read 13% over the model in one run of three) is none.
  // Allocation rounding is no such part either: under 1% and 4 KiB is none.
  int64_t half = input.dim() > 0 && model.precision() != model::Precision::kFloat32 ? input.size(0) / 2 : 0;
  if (half >= 1) {
    auto at_half = std::make_shared<model::MemoryAccount>();
    torch::Tensor kept;
    bool measured = true;
    try {
      model::ChargeTo charge(at_half);
      torch::Tensor output;
      kept = layer_forward(model, module, input.narrow(0, 0, half), targets.defined() ? targets.narrow(0, 0, half) : targets,
                     output);
    } catch (const std::exception&) {  // a layer whose first dimension is not the batch: none measured
      measured = false;
    }
    double n = static_cast<double>(input.size(0)), h = static_cast<double>(half);
    double per_sample = static_cast<double>(l.stash_bytes - at_half->live()) / (n - h);
    double fixed = static_cast<double>(l.stash_bytes) - per_sample * n;
    if (measured && fixed > std::max(4096.0, 0.01 * static_cast<double>(l.stash_bytes)))
      l.fixed_stash_bytes = std::min(l.stash_bytes, static_cast<int64_t>(std::llround(fixed)));
  }
  if (out.requires_grad()) {
    torch::Tensor grad = torch::ones_like(out);
    account->reset_peak();
    int64_t before = account->live();
    {
      model::ChargeTo charge(account);
      out.backward(grad);
    }
    workspace = std::max(workspace, account->peak() - before);
  }
  l.workspace_bytes = std::max<int64_t>(0, workspace - l.parameter_bytes);
  if (input.requires_grad()) measure_split_memory(model, module, input, targets, l);
}

}  // namespace pt::profile
