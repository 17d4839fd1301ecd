#pragma once
// The simulator: replays a validated schedule on a virtual clock, without threads or tensors
// (DESIGN.md, "sim"), and returns the same Trace the runtime produces.
//
// The model, chosen to match how the runtime runs a schedule:
//  - each worker runs its compute (F, B, W) one at a time in list order; F/B/W of a microbatch
//    take the stage's profiled time x (microbatch size / batch size); a split backward (zb-h1)
//    takes half the backward for B and half for W (the profile does not separate them; the
//    zero-bubble paper assumes T_B ~ T_W);
//  - a send starts when the worker reaches it (right after the compute that made its data)
//    and its directed link is free, and takes bytes / bandwidth of the innermost cluster level
//    holding both workers; it overlaps the sender's compute. Receives are posted ahead (the
//    runtime's helper threads), so they cost nothing on the worker; the compute that needs
//    the data waits for it;
//  - AllReduce starts when every replica reaches it and takes a ring all-reduce,
//    2 (n - 1) / n x parameter bytes / bandwidth of the innermost level holding all replicas;
//    the replicas wait for it;
//  - Step takes no time (optimizer cost is not profiled).
#include "plan/cluster.h"
#include "profile/profile.h"
#include "schedule/schedule.h"
#include "schedule/trace.h"

namespace pt::sim {

// Throws ConfigError when the cluster has fewer workers than the schedule or the layers do not
// fit the profile.
schedule::Trace simulate(const schedule::Schedule& s, const profile::Profile& p, const plan::Cluster& cluster);

// Ring all-reduce of `bytes` among `workers` in ms (0 for one worker).
double ring_allreduce_ms(const plan::Cluster& cluster, const std::vector<int>& workers, int64_t bytes);

}  // namespace pt::sim
