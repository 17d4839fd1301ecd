#pragma once
// The simulator: replays a validated schedule on a virtual clock, without threads or tensors
// (docs/design.md, "sim"), and returns the same Trace the runtime produces.
//
// The model, chosen to match how the runtime runs a schedule:
//  - each worker runs its compute (F, B, W) one at a time in list order; F/B/W of a microbatch
//    take the stage's profiled time x (microbatch size / batch size); a split backward (zb-h1)
//    charges profile::input_gradient_share of the backward to B and the rest to W (all of it
//    to W on the first stage, whose input needs no gradient);
//  - actions run in time order: each round the action that can start earliest (its inputs
//    known), ties to the lowest worker, so the result does not depend on how workers are
//    numbered;
//  - every worker has, per cluster level, a full-duplex link of that level's bandwidth (a NIC):
//    one transfer at a time out of it and one into it. Without this, a stage receiving from
//    many replicas at once took them all at full rate, and the simulator under-predicted the
//    testbed by 76% on VGG-16 13-2-1 (docs/emulation.md);
//  - a send starts when the worker reaches it (right after the compute that made its data)
//    and both the sender's outgoing and the receiver's incoming link at the innermost level
//    holding the two are free, and takes bytes / that level's bandwidth; it overlaps the
//    sender's compute. A transfer takes the earliest gap long enough on both links, in the order
//    the sends are posted (the runtime's ingress gate serves a worker's incoming payloads in
//    the order they are offered). Receives are posted ahead (the runtime posts them ahead of
//    their place in the list), so they cost nothing on the worker; the compute that needs the
//    data waits for it;
//  - the link rules (levels, transfer time, ring all-reduce) are the cost engine's (cluster.h);
//  - an all-reduce is a ring all-reduce, 2 (n - 1) / n x bytes / the bandwidth of the innermost
//    level holding all replicas, with those links busy both ways; each of its 2 (n - 1) steps is
//    a message (its level's latency) and, on a calibrated cluster, per byte its members sum
//    (Cluster::ring_step_ms: a step's host time counts where it outlasts its message). With buckets (the runtime's
//    default, gradient_buckets.h) the gradients are reduced bucket by bucket, each starting once
//    every replica's last backward before the AllReduce has produced it (its share of the
//    stage's backward time, layers taken from the last) and the previous bucket is done; the
//    AllReduce action waits for the last. With bucket_bytes 0 it all starts when every replica
//    reaches the AllReduce;
//  - a recomputing stage (Schedule::recompute) charges its forward again to the backward (to B
//    where the backward is split), and stashes only its input;
//  - Step takes the stage's optimizer step and stash copy (profile::compute_step_ms).
#include "plan/cluster.h"
#include "profile/profile.h"
#include "schedule/schedule.h"
#include "schedule/trace.h"
#include "sim/stage_costs.h"

namespace pt::sim {

// Throws ConfigError when the cluster has fewer workers than the schedule or the layers do not
// fit the profile.
struct SimOptions {
  int64_t bucket_bytes = plan::Cluster::kDefaultBucketBytes;  // all-reduce buckets, as train --bucket-mb
  // > 0: the workers' computes share this many cores (the threads of one machine) as the
  // kernel time-slices threads: the n computes running at once each progress at the cluster's
  // core_rate (measured by calibrate; else min(1, cores / n)) of their profiled rate (the mnist-cnn demo, 4 threads on 2 cores: 7,426 samples/s simulated
  // when a ready compute waited for a free core and then ran to its end, 7,021 now, against
  // 5,030-5,083 measured); 0: the cluster's host_cores (0 there too: a device per worker).
  int cores = 0;
  // With cores: each worker's core (place_on_cores; the runtime pins its workers so, where they
  // outnumber the cores): the computes on a core share it alone, each core at the cluster's
  // core_rate of the cores busy. Empty: the cores are one pool, as above.
  std::vector<int> placement;
  // With cores, no placement and more workers than cores: each worker on the core train pins it
  // to (place_on_cores), as train runs it by default; false: the cores are one pool (simulate
  // without --pin-cores, train --no-pin-cores). The planner and compare replay so: a plan that
  // simulates fastest as one pool may run slowest pinned (the zoo GPT's 3-1 on 4 threads of 2
  // cores: 403 samples/s as one pool, 304 pinned, 291-297 measured; its 2-2 398 and 389-394).
  bool pin_as_train = false;
  // Record only the computes and steps: all that metrics' timing (Detail::kTiming) reads, the
  // same steady state in fewer events (the referee's replays).
  bool computes_only = false;
  // The runtime's weight prediction (train's default; --no-weight-prediction turns it off): the
  // trace's predicted_weights, whose copies its memory counts (schedule/trace.h).
  bool weight_prediction = true;
};
schedule::Trace simulate(const schedule::Schedule& s, const profile::Profile& p, const plan::Cluster& cluster,
                         const SimOptions& options = {});
// The same with the stages' costs given: stage_costs(s, p, options.bucket_bytes), all the replay
// reads of the profile besides its batch size.
schedule::Trace simulate(const schedule::Schedule& s, const profile::Profile& p, const plan::Cluster& cluster,
                         const SimOptions& options, const std::vector<StageCost>& costs);

}  // namespace pt::sim
