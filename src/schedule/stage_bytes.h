#pragma once
// What each stage of a schedule holds, in bytes, from its profile's layers: the parameters, the
// stash of a minibatch, the tensors crossing its edges, and what a forward, a backward and a W
// hold while they run. memory.cpp counts them into each worker's memory over the schedule's
// actions.
#include <vector>

#include "profile/profile.h"
#include "schedule/schedule.h"

namespace pt::schedule {

// One stage's bytes, from its layers in the profile.
struct StageBytes {
  double params = 0, stash = 0, input = 0, output = 0;  // whole minibatch of the profile
  double buffers = 0;                                   // Layer::buffer_bytes: one copy, whatever the versions
  double fixed_stash = 0;                               // of stash, kept whatever the batch
  double stash_at(double scale) const { return fixed_stash + (stash - fixed_stash) * scale; }
  // What a split B leaves until its W, at the profile's batch and its fixed part
  // (Layer::split_bytes); negative where the runtime holds the stash until W instead: the first
  // stage (its B runs the whole backward), a layer not measured, a tie inside the stage (its
  // weight used twice: W runs a backward of its own, model/split_backward.h).
  double split = -1, fixed_split = 0;
  double split_at(double scale) const { return fixed_split + (split - fixed_split) * scale; }
  std::vector<int> layers;
};

// What a schedule's stages hold, from its layers: each microbatch's share of the profile's
// bytes, and what a forward, a backward and a W hold while they run.
struct LayerBytes {
  std::vector<StageBytes> bytes;
  double scale = 1;  // a microbatch's share of the profile's minibatch
  std::vector<double> busy, split_busy, weight_busy;
};

// Every stage's bytes at a microbatch of the schedule (1 / microbatches of the profile's batch).
LayerBytes layer_bytes(const Schedule& s, const profile::Profile& p);

}  // namespace pt::schedule
