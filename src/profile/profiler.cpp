#include "profile/profiler.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>
#include <unistd.h>

#include "core/error.h"
#include "core/memory_limit.h"
#include "core/median.h"
#include "core/host_allocator.h"
#include "model/flat_parameters.h"
#include "model/optimizer.h"
#include "model/split_backward.h"
#include "profile/alike_key.h"
#include "profile/layer_memory.h"
#include "profile/profile_fits_model.h"
#include "profile/sequence_timing.h"

namespace pt::profile {

namespace {

// The runtime's own work on one layer's weights per minibatch (Layer::optimizer_ms): the
// optimizer's step on flat buffers (SGD with momentum, or Adam's: 2-3x its passes over the
// weights) and one copy of the weights (a stash), as StageReplica does them; on copies, so the
// model's weights stay as they are. The copy is timed on its own too (Layer::stash_copy_ms).
StepTimes measure_step_ms(const std::vector<torch::Tensor>& params, const ProfilerOptions& profiler_options) {
  if (params.empty()) return {};
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> copies;
  for (const auto& p : params) copies.push_back(p.detach().clone().requires_grad_(p.requires_grad()));
  model::FlatParameters flat(copies);
  model::OptimizerOptions options;
  options.kind = profiler_options.optimizer;
  model::Optimizer optimizer(flat, options);
  std::vector<torch::Tensor> stash;
  std::vector<double> times, copy_times;
  for (int r = 0; r < profiler_options.warmup + profiler_options.repeats; ++r) {
    double t0 = now_ms();
    stash = flat.copy_weights(std::move(stash));
    double t1 = now_ms();
    // No backward ran: every parameter as one had reached (the optimizer skips the others, and
    // timed a scan of zeros for the step).
    flat.reached().fill_(1);
    optimizer.step(1.0, r);
    if (r >= profiler_options.warmup) times.push_back(now_ms() - t0), copy_times.push_back(t1 - t0);
  }
  double step = median(times);
  return {step, std::min(step, median(copy_times))};
}

// The layer's median forward and backward times on `input` (with the loss after it where
// `targets` is defined), after o.warmup untimed runs; `out` gets its output. The parameters'
// gradients stay defined (zeros plus the runs'), as the memory measurement wants them.
Timing time_layer(model::LayeredModel& model, torch::nn::Sequential& module, const torch::Tensor& input,
                  const torch::Tensor& targets, const ProfilerOptions& profiler_options, torch::Tensor& out) {
  std::vector<double> fwd, bwd;
  torch::Tensor top;  // what the backward starts from
  // Gradients accumulate into a defined .grad, as in the runtime (its flat buffers): the
  // backward's time includes adding them up.
  for (auto& param : module->parameters()) param.mutable_grad() = torch::zeros_like(param);
  for (int r = 0; r < profiler_options.warmup + profiler_options.repeats; ++r) {
    if (input.requires_grad()) input.mutable_grad() = torch::Tensor();
    double t0 = now_ms();
    top = layer_forward(model, module, input, targets, out);
    double t1 = now_ms();
    auto grad = torch::ones_like(top);
    double t2 = now_ms();
    if (top.requires_grad()) top.backward(grad);
    double t3 = now_ms();
    if (r >= profiler_options.warmup) {
      fwd.push_back(t1 - t0);
      bwd.push_back(t3 - t2);
    }
  }
  if (input.requires_grad()) input.mutable_grad() = torch::Tensor();
  return {input.size(0), median(fwd), median(bwd)};
}

// Of the layer's backward, the share its input gradient alone takes (Layer::input_gradient_ms):
// a split B (model/split_backward.h) and a whole backward timed in turn on the same input, the
// median of each over `repeats`. 0 where the backward does not split (a weight used twice).
double input_gradient_share(model::LayeredModel& model, torch::nn::Sequential& module, const torch::Tensor& input,
                            const torch::Tensor& targets, const ProfilerOptions& profiler_options) {
  std::vector<torch::Tensor> weights;
  for (const auto& p : module->parameters())
    if (p.requires_grad()) weights.push_back(p);
  std::vector<double> split_ms, whole_ms;
  for (int r = 0; r < profiler_options.warmup + profiler_options.repeats; ++r) {
    torch::Tensor output;
    torch::Tensor top = layer_forward(model, module, input, targets, output);
    if (!top.requires_grad()) return 0;
    torch::Tensor grad = torch::ones_like(top), input_grad;
    model::WeightBackward w;
    double t0 = now_ms();
    if (!model::input_gradient(top, grad, input, weights, &input_grad, &w)) return 0;
    double t1 = now_ms();
    model::weight_gradients(w);
    top = layer_forward(model, module, input, targets, output);
    double t2 = now_ms();
    top.backward(grad);
    double t3 = now_ms();
    if (r >= profiler_options.warmup) split_ms.push_back(t1 - t0), whole_ms.push_back(t3 - t2);
  }
  input.mutable_grad() = torch::Tensor();
  double whole = median(whole_ms);
  return whole > 0 ? std::min(1.0, median(split_ms) / whole) : 0;
}

// The model's ties that train (`trains`) or the frozen ones.
std::vector<Tie> ties_of(const model::LayeredModel& model, bool trains) {
  std::vector<Tie> out;
  for (const auto& g : model.tie_groups())
    if (g.trains == trains) out.push_back({g.layers(), g.bytes});
  return out;
}

}  // namespace

std::vector<int64_t> timed_batch_sizes(int64_t batch, const ProfilerOptions& profiler_options) {
  std::vector<int64_t> out;
  if (profiler_options.batch_sizes.empty()) {
    for (int64_t d = 16; d >= 2; d /= 2)
      if (batch / d >= 1 && (out.empty() || out.back() != batch / d)) out.push_back(batch / d);
  } else {
    for (int64_t b : profiler_options.batch_sizes)
      if (b >= 1 && b < batch) out.push_back(b);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }
  out.push_back(batch);
  return out;
}

Profile measure_profile(model::LayeredModel& model, const torch::Tensor& batch, const ProfilerOptions& profiler_options,
                        const torch::Tensor& targets) {
  PT_CHECK(profiler_options.repeats >= 1 && profiler_options.warmup >= 0);
  Profile p;
  p.model = model.name();
  p.batch_size = batch.size(0);
  p.device = "cpu";
  p.precision = model::to_string(model.precision());
  p.optimizer = profiler_options.optimizer;
  // The zoo's models hold none; counting builds every layer not held (a gloo launcher splitting an
  // 8-layer MLP built its 1.6 GB one layer at a time, its peak RSS then over its ranks').
  p.batch_norms = model.file_sha256().empty() ? 0 : model.deferrable_batch_norms();
  p.input_bytes = static_cast<int64_t>(batch.nbytes());
  model.train(true);
  torch::Tensor x = batch;
  // The smaller batches' own inputs, each the first samples of the batch through the layers so far.
  std::vector<int64_t> sizes = timed_batch_sizes(p.batch_size, profiler_options);
  sizes.pop_back();  // the batch itself is x
  std::vector<torch::Tensor> xs;
  for (int64_t b : sizes) xs.push_back(batch.narrow(0, 0, b));
  auto on_the_wire = [&](const torch::Tensor& t, int layer) {  // what the next stage receives (precision.h)
    model::Precision wire = model.wire_precision(layer);
    return model::from_wire(model::to_wire(t.detach(), wire), wire);
  };
  // An eighth of the batch through the layers, for their memory's fixed parts (layer_memory.h); a
  // copy, as a layer may write into its input.
  EighthBatch eighth;
  eighth.batch = p.batch_size, eighth.samples = p.batch_size / 8;
  if (eighth.samples >= 1) eighth.input = batch.narrow(0, 0, eighth.samples).clone();
  std::vector<torch::nn::Sequential> layers = layers_for_sequence(model, profiler_options);
  const bool in_sequence = !layers.empty();
  const LaterCopies later = later_tie_copies(model);
  SequenceTimes sequence;
  if (in_sequence)
    sequence = time_in_sequence(model, layers, batch, targets, timed_batch_sizes(p.batch_size, profiler_options), later,
                                profiler_options);
  // The whole step's time, shared by the layers in proportion to the weights each updates (a
  // step is passes over the weights; a weight two layers share is counted at its first).
  std::vector<double> step_share(model.num_layers(), 0);
  if (in_sequence) {
    std::set<const void*> seen;
    double total = 0;
    for (int i = 0; i < model.num_layers(); ++i) {
      for (const auto& param : stepped_weights(layers[i], i, later))
        if (seen.insert(param.unsafeGetTensorImpl()).second) step_share[i] += static_cast<double>(param.nbytes());
      total += step_share[i];
    }
    for (double& share : step_share) share = total > 0 ? share / total : 0;
  }
  p.timed = in_sequence ? "in sequence" : "alone";
  p.timing_spread = sequence.spread;
  std::vector<std::string> keys;
  for (int i = 0; i < model.num_layers(); ++i) {
    const auto& layer = model.layer(i);
    // A layer the model does not hold is built for its measurement and dropped after it: a model
    // larger than this machine's memory is profiled one layer at a time.
    torch::nn::Sequential module = in_sequence ? layers[i] : model.holds(i) ? layer.module : model.make_layer(i);
    torch::Tensor input = x.detach();
    if (i > 0 && input.is_floating_point()) input.requires_grad_(true);
    torch::Tensor out;
    // The last stage computes the loss after the last layer: its time and memory are the layer's.
    torch::Tensor loss_targets = i + 1 == model.num_layers() ? targets : torch::Tensor();
    Layer l;
    Timing main;
    const double layer_start = now_ms();
    if (in_sequence) {
      l.timings = sequence.layers[i];
      main = l.timings.back();
      if (sizes.empty()) l.timings.clear();
      layer_forward(model, module, input, loss_targets, out);
    } else {
      for (size_t k = 0; k < sizes.size(); ++k) {
        torch::Tensor in = xs[k].detach(), small;
        if (i > 0 && in.is_floating_point()) in.requires_grad_(true);
        l.timings.push_back(time_layer(model, module, in,
                                       loss_targets.defined() ? loss_targets.narrow(0, 0, sizes[k]) : torch::Tensor(),
                                       profiler_options, small));
        xs[k] = on_the_wire(small, i);
      }
      main = time_layer(model, module, input, loss_targets, profiler_options, out);
      if (!l.timings.empty()) l.timings.push_back(main);
      if (profiler_options.on_progress) profiler_options.on_progress("layer", i + 1, model.num_layers(), now_ms() - layer_start);
    }
    StepTimes step = in_sequence ? sequence.step : measure_step_ms(stepped_weights(module, i, later), profiler_options);
    double share = in_sequence ? step_share[i] : 1.0;
    l.optimizer_ms = step.step_ms * share;
    l.stash_copy_ms = step.copy_ms * share;
    l.name = layer.name;
    l.forward_ms = main.forward_ms;
    l.backward_ms = main.backward_ms;
    if (input.requires_grad())
      l.input_gradient_ms = l.backward_ms * input_gradient_share(model, module, input, loss_targets, profiler_options);
    l.activation_bytes = model::wire_bytes(out, model.wire_precision(i));  // what crosses to the next stage
    LayerBytes bytes = layer_bytes(module);
    l.parameter_bytes = bytes.parameters;
    l.buffer_bytes = bytes.buffers;
    torch::Tensor next = on_the_wire(out, i);
    out = torch::Tensor();  // the timed runs' graph goes before the stash is measured
    if (input.requires_grad()) input.mutable_grad() = torch::Tensor();  // each microbatch makes its own
    measure_layer_memory(model, module, input, loss_targets, l, eighth);
    eighth.input = eighth.output.defined() ? on_the_wire(eighth.output, i) : torch::Tensor();
    if (input.requires_grad()) input.mutable_grad() = torch::Tensor();
    for (auto& param : module->parameters()) param.mutable_grad() = torch::Tensor();
    l.inputs = layer.inputs;
    keys.push_back(alike_key(module, input, next, l, i));
    p.layers.push_back(std::move(l));
    x = next;
    if (!model.holds(i)) {  // the layer built for its measurement goes, and the memory with it
      if (in_sequence) layers[i] = torch::nn::Sequential(nullptr);
      module = torch::nn::Sequential(nullptr);
      release_freed_host_memory();
    }
  }
  p.ties = ties_of(model, true);
  p.frozen_ties = ties_of(model, false);
  time_alike(p, keys);
  return p;
}

Profile layer_graph(const model::LayeredModel& model) {
  Profile p;
  p.model = model.name();
  for (int i = 0; i < model.num_layers(); ++i) {
    Layer l;
    l.name = model.layer(i).name;
    l.inputs = model.layer(i).inputs;
    p.layers.push_back(std::move(l));
  }
  p.ties = ties_of(model, true);
  p.frozen_ties = ties_of(model, false);
  return p;
}

}  // namespace pt::profile
