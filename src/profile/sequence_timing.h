#pragma once
// How the profiler times a whole model as a stage meets it (profiler.cpp): every layer's forward
// and backward one after another at each microbatch size, and the model's step on one flat
// buffer. Internal to src/profile.
#include <chrono>
#include <set>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "model/layered_model.h"
#include "profile/profile.h"
#include "profile/profiler.h"

namespace pt::profile {

inline double now_ms() {
  using namespace std::chrono;
  return std::chrono::duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

// The copies of tied parameters at every layer but the first holding each, as (layer, index into
// the layer's parameters): built one layer at a time (a model file read per layer), the copies
// are tensors of their own, and a step over both charged the tie twice (a llama's embedding and
// head: 0.12 ms each, 64% over the model's weights).
using LaterCopies = std::set<std::pair<int, int>>;
LaterCopies later_tie_copies(const model::LayeredModel& model);

// The weights layer `i` steps: those that train, a tied one at its first layer only.
std::vector<torch::Tensor> stepped_weights(const torch::nn::Sequential& layer, int i, const LaterCopies& later);

// The runtime's own work on weights per minibatch: the optimizer's step on flat buffers and one
// copy of the weights (a stash), as StageReplica does them.
struct StepTimes {
  double step_ms = 0;  // the copy and the optimizer's update
  double copy_ms = 0;  // of it, the copy
};

// The layers time_in_sequence runs: every one, those the model does not hold built for it, where
// their weights, gradients and the steps' two copies take at most ProfilerOptions::sequence_share
// of the memory this process may use (core/memory_limit.h); none otherwise (a model larger than the machine is timed one layer at
// a time, each alone).
std::vector<torch::nn::Sequential> layers_for_sequence(const model::LayeredModel& model,
                                                       const ProfilerOptions& profiler_options);

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
                               const ProfilerOptions& profiler_options);

}  // namespace pt::profile
