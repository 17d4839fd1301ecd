#pragma once
// Tie groups (layers sharing one parameter, profile.h) whose layers lie on two or more stages:
// under a synchronous schedule the workers of those stages sum the copies' gradients before
// their step (runtime/tied_gradients.h), an all-reduce of the tie's bytes over all of them each
// minibatch, which the cost engine and the simulator price; an asynchronous schedule steps each
// stage on its own weight version and cannot keep the copies one parameter, so it is refused.
#include <cstdint>
#include <string>
#include <vector>

#include "profile/profile.h"

namespace pt::plan {

struct Cluster;
struct Plan;

struct SplitTie {
  size_t group = 0;          // its index in the ties given
  std::vector<int> stages;   // the stages holding its layers, ascending (two or more)
  std::vector<int> workers;  // every replica of those stages, ascending: who exchanges
  // One worker holding every copy (a V schedule's first and last chunk) has one tensor and
  // exchanges nothing.
  bool exchanges() const { return workers.size() > 1; }
};

// The groups of `ties` (layer lists) that the stages (their layers, their workers) split.
std::vector<SplitTie> split_ties(const std::vector<std::vector<int>>& ties,
                                 const std::vector<std::vector<int>>& stage_layers,
                                 const std::vector<std::vector<int>>& stage_workers);
// The same for a plan's stages and the profile's ties (which carry the bytes).
std::vector<SplitTie> split_ties(const Plan& plan, const profile::Profile& profile);

// The exchange's time per minibatch: a ring all-reduce of `bytes` over the split tie's workers
// on `cluster`'s links (the runtime runs it as transport.allreduce_sum over them).
double tie_exchange_ms(const SplitTie& t, int64_t bytes, const Cluster& cluster);

// Per stage of `plan`, the exchanges of the split ties it holds, ms per minibatch: they run after
// its backward and before its step, so nothing hides them.
std::vector<double> tie_exchange_ms_by_stage(const Plan& plan, const profile::Profile& profile, const Cluster& cluster);

// "layers 0 ('wte') and 11 ('head') on stages 0 and 3", for notes and errors; names may be
// empty (then the indices alone).
std::string describe_split_tie(const SplitTie& t, const std::vector<int>& layers,
                               const std::vector<std::string>& layer_names);
// What `plan` and `train` note of a split tie: its layers and stages, who sums its gradient, the
// bytes each step and (ms >= 0) how long the exchange takes.
std::string split_tie_note(const SplitTie& t, const std::vector<int>& layers, int64_t bytes,
                           const std::vector<std::string>& layer_names, double ms = -1);
// The same for each of the profile's ties the stages (as a schedule places them) split.
std::vector<std::string> split_tie_notes(const profile::Profile& profile, const std::vector<std::vector<int>>& stage_layers,
                                         const std::vector<std::vector<int>>& stage_workers, const Cluster& cluster);

}  // namespace pt::plan
