// Timing a whole model as a stage meets it (sequence_timing.h).
#include "profile/sequence_timing.h"

#include <algorithm>

#include "core/host_allocator.h"
#include "core/median.h"
#include "core/memory_limit.h"
#include "model/flat_parameters.h"
#include "model/optimizer.h"
#include "profile/layer_memory.h"

namespace pt::profile {

LaterCopies later_tie_copies(const model::LayeredModel& model) {
  LaterCopies out;
  for (const auto& g : model.tie_groups())
    for (size_t k = 1; k < g.members.size(); ++k) out.insert({g.members[k].layer, g.members[k].param});
  return out;
}

std::vector<torch::Tensor> stepped_weights(const torch::nn::Sequential& layer, int i, const LaterCopies& later) {
  std::vector<torch::Tensor> out;
  auto params = layer->parameters();
  for (size_t k = 0; k < params.size(); ++k)
    if (params[k].requires_grad() && !later.count({i, static_cast<int>(k)})) out.push_back(params[k]);
  return out;
}

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

}  // namespace pt::profile
