#pragma once
// What no steady state of a periodic schedule is under, from one period of its action lists:
// the max-plus cycle time of its precedence graph. Every time the simulator gives an action
// satisfies that action's precedences: it starts after the action before it on its worker, a
// compute after its input's transfer (the link taken alone: contention only delays), an
// all-reduce ends after each replica's buckets are reduced from its backward's start
// (plan::buckets_end_ms, nothing else on the links). So along any cycle of precedences spanning
// T periods with durations summing to D, the times grow at least D per T periods, and the steady
// state takes at least the heaviest cycle's D / T per period (Baccelli, Cohen, Olsder and Quadt,
// "Synchronization and Linearity", 1992). It counts what the closed-form floors
// (referee/replay_floor.h) cannot: replicas waiting for each other at every all-reduce through
// the stages around them (GNMT-Large 1x12-3-1 on 16 workers at 10 Gbit/s: closed-form floors of
// 79.8 ms per minibatch, a cycle time of 135.4, a steady state of 145.6).
#include <cstdint>
#include <vector>

#include "plan/cluster.h"
#include "schedule/schedule.h"
#include "sim/stage_costs.h"

namespace pt::sim {

// ms per minibatch; 0 where `s` is not the pipedream schedule on a device per worker, or is too
// short to hold a whole period between its warm-up and drain (then no bound is claimed).
// `bucket_bytes` as SimOptions's; `costs` stage_costs(s, ...) of that bucket.
double cycle_time_ms(const schedule::Schedule& s, const std::vector<StageCost>& costs, const plan::Cluster& cluster,
                     int64_t bucket_bytes);

// The heaviest ratio sum(weight) / sum(periods) over the cycles of a graph in which every node has
// an edge in (Howard's policy iteration: Cochet-Terrasson, Cohen, Gaubert, McGettrick and
// Quadrat, 1998). Whatever iteration it stops at, its figure is some cycle's, so never above the
// heaviest; 0 where a cycle spans no period (none in a schedule the simulator can run).
struct CycleEdge {
  int from, to;
  double weight;
  int periods;
};
double heaviest_cycle_ratio(int nodes, const std::vector<CycleEdge>& edges);

}  // namespace pt::sim
