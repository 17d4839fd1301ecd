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
                          const torch::Tensor& targets, Layer& l, EighthBatch& eighth) {
  model::install_memory_meter();
  auto account = std::make_shared<model::MemoryAccount>();
  torch::Tensor out;
  {
    model::ChargeTo charge(account);
    torch::Tensor output;
    out = layer_forward(model, module, input, targets, output);
  }
  l.stash_bytes = account->live();
  l.stash_measured = true;
  int64_t workspace = account->peak() - l.stash_bytes;
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
  out = torch::Tensor();
  // An eighth of the batch again, near a microbatch's size: what a forward keeps and a backward
  // needs beyond an eighth of them is theirs whatever the batch (Layer::fixed_stash_bytes,
  // Layer::fixed_workspace_bytes): bf16's weight casts; an LSTM's weight gradients summed over its
  // steps. At half the batch, mnist-cnn's convolutions read a fixed part that microbatches of 4
  // did not hold (its first worker modelled 30% over). What a first call at a shape caches
  // (mnist-cnn's worker read 13% over the model in one run of three) is none, nor is allocation
  // rounding: under 1% and 4 KiB is none.
  eighth.output = torch::Tensor();
  const int64_t small = eighth.samples;
  if (small < 1 || !eighth.input.defined()) {
    if (input.requires_grad()) measure_split_memory(model, module, input, targets, l);
    return;
  }
  // Its stash and its workspace at that batch, charged to `at_small`. Once uncharged first: a
  // first call at a shape caches what later calls reuse, and read as a fixed part.
  auto at_small = std::make_shared<model::MemoryAccount>();
  int64_t stash_at_small = 0, workspace_at_small = 0;
  try {
    for (bool charged : {false, true}) {
      model::ChargeTo charge(charged ? at_small : nullptr);
      torch::Tensor output;
      // A leaf of its own, as the whole batch's input is.
      torch::Tensor part = eighth.input.detach().requires_grad_(input.requires_grad());
      torch::Tensor kept =
          layer_forward(model, module, part, targets.defined() ? targets.narrow(0, 0, small) : targets, output);
      eighth.output = output.detach();
      stash_at_small = at_small->live();
      workspace_at_small = at_small->peak() - stash_at_small;
      if (!kept.requires_grad()) continue;
      at_small->reset_peak();
      int64_t before = at_small->live();
      kept.backward(torch::ones_like(kept));
      workspace_at_small = std::max(workspace_at_small, at_small->peak() - before);
    }
  } catch (const std::exception&) {  // a layer whose first dimension is not the batch: none measured
    eighth.output = torch::Tensor();
    if (input.requires_grad()) measure_split_memory(model, module, input, targets, l);
    return;
  }
  const double n = static_cast<double>(eighth.batch), h = static_cast<double>(small);
  // What a line through (h, at h) and (n, at n) leaves at 0 samples, where it is a part worth counting.
  auto fixed_of = [&](int64_t at_n, int64_t at_h) -> int64_t {
    double fixed = static_cast<double>(at_n) - static_cast<double>(at_n - at_h) / (n - h) * n;
    return fixed > std::max(4096.0, 0.01 * static_cast<double>(at_n)) ? std::min(at_n, static_cast<int64_t>(std::llround(fixed)))
                                                                     : 0;
  };
  // Under fp32 no stash is kept whatever the batch (a first call's caches read as one).
  if (model.precision() != model::Precision::kFloat32) l.fixed_stash_bytes = fixed_of(l.stash_bytes, stash_at_small);
  l.fixed_workspace_bytes = fixed_of(l.workspace_bytes, std::max<int64_t>(0, workspace_at_small - l.parameter_bytes));
  if (input.requires_grad()) measure_split_memory(model, module, input, targets, l);
}

}  // namespace pt::profile
