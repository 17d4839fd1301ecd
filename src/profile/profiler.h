#pragma once
// The profiler: measures a LayeredModel layer by layer (LibTorch) and returns a Profile.
#include <functional>
#include <string>

#include "model/layered_model.h"
#include "profile/profile.h"

namespace pt::profile {

struct ProfilerOptions {
  int warmup = 2;    // untimed repetitions first (allocator, caches)
  int repeats = 7;   // timed repetitions; kept: the median of each alone, the typical_mean in sequence
  std::string optimizer = "sgd";  // whose step optimizer_ms times: sgd, adam or adamw (model/optimizer.h)
  // The batch sizes each layer is timed at besides the batch's (Layer::timings), each below it;
  // empty: its halves down to a sixteenth (the microbatches of 2-16 a plan may split it into).
  // {the batch alone}, or a batch of 1: no timings (times scale linearly).
  std::vector<int64_t> batch_sizes{};
  // The layers are timed in sequence, as a stage runs them (Profile::timed), where the whole
  // model's weights, gradients and step copies take at most this share of the machine's memory
  // (`pipetrain profile`: a quarter); beyond it, or at 0, each layer alone, built and dropped in
  // turn. 0 by default: a worker that profiles what it trains (train --stages without --profile)
  // holds its stage alone, and must not build the rest to time it.
  double sequence_share = 0;
  // The layers timed in sequence repeat beyond `repeats`, up to kMostSequenceRounds, until their
  // timed rounds have taken this long (`pipetrain profile`: a second). This machine's speed
  // drifts from one second to the next: six profiles of mnist-cnn in a row at 7 rounds (0.2 s)
  // summed its layers at a microbatch of 16 to 4.32-5.88 ms, at 31 rounds to 4.38-4.64. 0: `repeats`.
  double sequence_min_ms = 0;
  static constexpr int kMostSequenceRounds = 31;
  // Told after each round over the layers timed in sequence ("round", its number from 1, the
  // warm-up and timed rounds planned: more may follow under sequence_min_ms) and after each layer
  // timed alone ("layer", from 1, of the model's), with the milliseconds it took: a full-size
  // AWD-LSTM takes 20 s a round here, and a profile of minutes said nothing until it ended.
  std::function<void(const std::string& what, int done, int of, double ms)> on_progress{};
};

// The batch sizes measure_profile times at a batch of `batch` (ascending, the batch last).
std::vector<int64_t> timed_batch_sizes(int64_t batch, const ProfilerOptions& options);

// `batch` is one minibatch of inputs; its first dimension is the profile's batch size.
// Forward time: the layer's forward with autograd recording, as in training. Backward time:
// backward from a gradient of the output's shape to the layer's parameters and input (the
// first layer computes no input gradient, as in training). Bytes are exact: output numel x
// element size; parameters numel x element size. Each layer is timed again at the smaller
// batches of timed_batch_sizes, on the first samples of the batch passed through the layers before
// it (a microbatch, as the runtime splits one), into Layer::timings. With the batch's `targets`, the last layer is
// measured with the model's loss after it, as the last stage runs it: its times, stash and
// workspace include the loss's (a language model's cross-entropy keeps log-probabilities in
// place of the logits, and its backward holds the logits' gradients: the zoo's small GPT, a
// vocabulary of 64, took 90 KB more in its LM head's backward for 8 sequences of 32).
Profile measure_profile(model::LayeredModel& model, const torch::Tensor& batch, const ProfilerOptions& options = {},
                        const torch::Tensor& targets = {});

// The model's layer graph (names and inputs) as a Profile with no measurements: what checks of
// a plan against a model need (plan::check_plan_fits), without running the model.
Profile layer_graph(const model::LayeredModel& model);

}  // namespace pt::profile
