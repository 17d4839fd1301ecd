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

namespace pt::profile {

namespace {

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}


// The copies of tied parameters at every layer but the first holding each, as (layer, index into
// the layer's parameters): built one layer at a time (a model file read per layer), the copies
// are tensors of their own, and a step over both charged the tie twice (a llama's embedding and
// head: 0.12 ms each, 64% over the model's weights).
using LaterCopies = std::set<std::pair<int, int>>;
LaterCopies later_tie_copies(const model::LayeredModel& model) {
  LaterCopies out;
  for (const auto& g : model.tie_groups())
    for (size_t k = 1; k < g.members.size(); ++k) out.insert({g.members[k].layer, g.members[k].param});
  return out;
}

// The weights layer `i` steps: those that train, a tied one at its first layer only.
std::vector<torch::Tensor> stepped_weights(const torch::nn::Sequential& layer, int i, const LaterCopies& later) {
  std::vector<torch::Tensor> out;
  auto params = layer->parameters();
  for (size_t k = 0; k < params.size(); ++k)
    if (params[k].requires_grad() && !later.count({i, static_cast<int>(k)})) out.push_back(params[k]);
  return out;
}

// The runtime's own work on one layer's weights per minibatch (Layer::optimizer_ms): the
// optimizer's step on flat buffers (SGD with momentum, or Adam's: 2-3x its passes over the
// weights) and one copy of the weights (a stash), as StageReplica does them; on copies, so the
// model's weights stay as they are. The copy is timed on its own too (Layer::stash_copy_ms).
struct StepTimes {
  double step_ms = 0;  // the copy and the optimizer's update
  double copy_ms = 0;  // of it, the copy
};

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

// The layers time_in_sequence runs: every one, those the model does not hold built for it, where
// their weights, gradients and the steps' two copies take at most ProfilerOptions::sequence_share
// of the memory this process may use (core/memory_limit.h); none otherwise (a model larger than the machine is timed one layer at
// a time, each alone).
std::vector<torch::nn::Sequential> layers_for_sequence(const model::LayeredModel& model,
                                                       const ProfilerOptions& profiler_options) {
  // The memory this process may use, a cgroup's limit where one is set (it read the machine's).
  const int64_t budget =
      static_cast<int64_t>(profiler_options.sequence_share * static_cast<double>(usable_memory_bytes()));
  std::vector<torch::nn::Sequential> layers;
  if (profiler_options.sequence_share <= 0) return layers;
  int64_t bytes = 0;
  for (int i = 0; i < model.num_layers() && bytes <= budget; ++i) {
    layers.push_back(model.holds(i) ? model.layer(i).module : model.make_layer(i));
    for (const auto& param : layers.back()->parameters()) bytes += 4 * param.numel() * param.element_size();
  }
  if (bytes > budget) {
    layers.clear();
    release_freed_host_memory();
  }
  return layers;
}

// Every layer's forward and backward as a stage meets them: the layers one after another on a
// microbatch, then their backwards in reverse order, each timed in its place, on the batch's
// next microbatch each repetition. A layer timed alone, again and again, runs from
// warm caches (its weights, its input, its scratch); after the other layers it does not:
// mnist-cnn's five layers at a microbatch of 16 took 6-18% longer one after another than the
// sum of each alone (bench/layers_in_sequence.cpp, across sittings), and a one-worker run
// measured the longer: it ran at 0.81-0.87 of a simulation from layers timed alone, at
// 0.99-1.01 of one timed in sequence.
// The step too is timed as a stage takes it: once per round, after the batch's backward, on one
// flat buffer of every weight (the runtime's StageReplica), a stash copy and the optimizer's
// update, the weights put back after it. Timed per layer alone, on its own warm copies
// (measure_step_ms), mnist-cnn's steps summed to 0.15 ms where the runtime's one step after the
// backward took 0.25 (one after another, per layer, they had taken 1.7x the runtime's).
// Each time kept is the mean of its rounds (typical_mean): a run's rate is its mean time, and its
// actions' means ran 1.3-2.9% over their medians (mnist-cnn, one worker, 300 steps).
struct SequenceTimes {
  std::vector<std::vector<Timing>> layers;  // per layer, one per size
  StepTimes step;                           // the whole model's step
  double spread = 0;                        // of the rounds at the batch (Profile::timing_spread)
};

SequenceTimes time_in_sequence(model::LayeredModel& model, std::vector<torch::nn::Sequential>& layers,
                               const torch::Tensor& batch, const torch::Tensor& targets,
                               const std::vector<int64_t>& sizes, const LaterCopies& later,
                               const ProfilerOptions& profiler_options) {
  const int n = model.num_layers();
  SequenceTimes out;
  out.layers.resize(n);
  // The weights that train on one flat buffer, their gradients accumulating into its gradient
  // buffer, as in the runtime (time_layer's defined .grad); a tie's once, as a stage holding both
  // its layers steps it.
  std::vector<torch::Tensor> trained;
  for (int i = 0; i < n; ++i)
    for (auto& param : stepped_weights(layers[i], i, later)) trained.push_back(param);
  model::OptimizerOptions optimizer_options;
  optimizer_options.kind = profiler_options.optimizer;
  model::FlatParameters flat(trained, [&](const torch::Tensor& p) { return optimizer_options.decays(p); });
  model::Optimizer optimizer(flat, optimizer_options);
  std::vector<torch::Tensor> stash;
  std::vector<double> steps, copies;
  // Round by round over every size, not size by size: a slow spell of the machine falls on some
  // rounds of every size, rather than on every round of one size.
  const size_t m = sizes.size();
  std::vector<std::vector<std::vector<double>>> fwd(m, std::vector<std::vector<double>>(n)), bwd = fwd;
  double timed_ms = 0;
  for (int r = 0; r < profiler_options.warmup + profiler_options.repeats ||
                  (timed_ms < profiler_options.sequence_min_ms &&
                   r < profiler_options.warmup + ProfilerOptions::kMostSequenceRounds);
       ++r) {
    const bool timed = r >= profiler_options.warmup;
    const double round_start = now_ms();
    for (size_t k = 0; k < m; ++k) {
      const int64_t b = sizes[k];
      const int64_t parts = std::max<int64_t>(1, batch.size(0) / b);
      // A size below the batch runs once untimed first: a stage's microbatch follows another of
      // its size, while here it followed the batch and the step, whose data evicted its caches.
      // Timed cold, mnist-cnn's layers took 0.93-0.96 ms a forward at 4 samples where a stage ran
      // them in 0.70-0.80, and the same size profiled alone 0.70-0.79 (a helper's audit).
      for (int pass = b < batch.size(0) ? 0 : 1; pass < 2; ++pass) {
        const bool timed_pass = timed && pass == 1;
        const int64_t at = ((r + pass) % parts) * b;
        torch::Tensor x = batch.narrow(0, at, b);
        std::vector<torch::Tensor> ins(n), tops(n);
        for (int i = 0; i < n; ++i) {
          ins[i] = x.detach();
          if (i > 0 && ins[i].is_floating_point()) ins[i].requires_grad_(true);
          torch::Tensor y = i + 1 == n && targets.defined() ? targets.narrow(0, at, b) : torch::Tensor();
          double t0 = now_ms();
          tops[i] = layer_forward(model, layers[i], ins[i], y, x);
          if (timed_pass) fwd[k][i].push_back(now_ms() - t0);
        }
        torch::Tensor grad;  // the input gradient of the layer after
        for (int i = n - 1; i >= 0; --i) {
          if (!grad.defined() || grad.sizes() != tops[i].sizes()) grad = torch::ones_like(tops[i]);
          double t0 = now_ms();
          if (tops[i].requires_grad()) tops[i].backward(grad);
          if (timed_pass) bwd[k][i].push_back(now_ms() - t0);
          grad = ins[i].requires_grad() ? ins[i].grad() : torch::Tensor();
        }
      }
    }
    if (!trained.empty()) {
      torch::NoGradGuard no_grad;
      double t0 = now_ms();
      stash = flat.copy_weights(std::move(stash));
      double t1 = now_ms();
      optimizer.step(1.0, r);
      if (timed) steps.push_back(now_ms() - t0), copies.push_back(t1 - t0);
      flat.swap_weights(stash);  // the weights as they were: the profile measures, it does not train
    }
    if (timed) timed_ms += now_ms() - round_start;
    if (profiler_options.on_progress)
      profiler_options.on_progress("round", r + 1, profiler_options.warmup + profiler_options.repeats, now_ms() - round_start);
  }
  for (size_t k = 0; k < m; ++k)
    for (int i = 0; i < n; ++i) out.layers[i].push_back({sizes[k], typical_mean(fwd[k][i]), typical_mean(bwd[k][i])});
  out.step.step_ms = typical_mean(steps);
  out.step.copy_ms = std::min(out.step.step_ms, typical_mean(copies));
  std::vector<double> rounds(n > 0 ? fwd[m - 1][0].size() : 0, 0);  // each round's layers at the batch
  for (int i = 0; i < n; ++i)
    for (size_t r = 0; r < rounds.size(); ++r) rounds[r] += fwd[m - 1][i][r] + bwd[m - 1][i][r];
  out.spread = round_spread(rounds);
  return out;  // the gradients stay defined (zeroed by the last step), as time_layer leaves them
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
    measure_layer_memory(model, module, input, loss_targets, l);
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
