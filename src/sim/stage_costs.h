#pragma once
// Per-stage costs of a schedule's stages from a profile, for one whole minibatch of the
// profile's batch size computed in the schedule's microbatches: m times a microbatch's time at
// its own size, from the layers' timings (profile::compute_forward_ms; linear where the profile
// has none). The simulator charges each microbatch 1/m of it.
#include <cstdint>
#include <vector>

#include "profile/profile.h"
#include "schedule/schedule.h"

namespace pt::sim {

struct StageCost {
  double forward_ms = 0;
  double backward_ms = 0;        // full backward (input + weight gradients)
  double input_gradient_share = profile::kInputGradientShare;  // of it, a split B's (profile::input_gradient_share)
  double step_ms = 0;            // the optimizer step and stash copy, once per Step
  int64_t stash_bytes = 0;       // kept for the backward by its layers (profile::stash_bytes)
  int64_t fixed_stash_bytes = 0; // of which kept whatever the batch (profile::Layer::fixed_stash_bytes)
  int64_t boundary_bytes = 0;    // sent to stage s + 1 (and its gradient back)
  int64_t input_bytes = 0;       // received from stage s - 1 (what a recomputing stage keeps)
  int64_t parameter_bytes = 0;
  std::vector<profile::GradientBucket> buckets;  // profile::gradient_buckets
};

// Stage s's boundary carries every output of a layer in stages <= s read by a layer in a
// stage > s (for a chain, the last layer's output; skip tensors ride through intermediate
// stages). Throws ConfigError when the schedule's layers do not fit the profile.
// bucket_bytes 0: one bucket, ready at the end of the backward.
std::vector<StageCost> stage_costs(const schedule::Schedule& s, const profile::Profile& p, int64_t bucket_bytes = 0);

// The layers' time of compute action `a` of `s` (F, B or W; the host's time per action comes on
// top): its stage's cost scaled to one microbatch, a recomputing stage's forward again before its
// backward, a split backward's share.
double compute_ms(const schedule::Schedule& s, const schedule::Action& a, const StageCost& c);

}  // namespace pt::sim
