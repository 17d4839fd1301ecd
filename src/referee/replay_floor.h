#pragma once
// What no steady state of a plan is under: its physical limit (plan/physical_limit.h) and,
// under the pipedream schedule, two bounds its action order sets. The referee skips a candidate
// whose floor is above the best time it has simulated, and a replay under its own floor has not
// reached its steady state and is lengthened (settled_replay): AlexNet 12-4 on 4x4 at 25/1
// Gbit/s with a hierarchical all-reduce and a deferred step repeats a pattern over its default
// 84 minibatches at 27.626 ms per minibatch, where it runs at 30.396 from 168 on, its last
// stage's round bound exactly.
#include <cstdint>
#include <string>
#include <vector>

#include "plan/cluster.h"
#include "plan/realised_cost.h"
#include "plan/plan.h"
#include "profile/profile.h"
#include "schedule/schedule.h"
#include "sim/stage_costs.h"

namespace pt::referee {

// Little's law: a replica of stage s begins its forward of item i + in_flight only after its
// backward of item i (schedule/generator_util.h, append_1f1b), so it holds at most in_flight
// items from a forward's start to its backward's end; each stays at least its round trip, the
// forwards and backwards from s to the last stage with their host time (Cluster::action_ms) and
// each cut's transfer both ways (`exact`'s trip_out_ms, averaged over the replica pairs, as
// Little's law allows). So the stage completes at most in_flight x replicas minibatches per round
// trip. Steps are left out: a later stage's step comes after its gradient has left.
double in_flight_limit_ms(const plan::Plan& plan, const std::vector<sim::StageCost>& costs,
                          const plan::PlanEstimate& exact, const plan::Cluster& cluster);

// A replica of a replicated stage runs one minibatch of each round of its replicas: its
// forward, its backward, the all-reduce (which ends no sooner than its buckets do from the
// backward's start, plan::buckets_end_ms with nothing else on the links), and the step, one
// after another on its worker; with a deferred step the next forward comes between the backward
// and the all-reduce (plan.h, deferred_step). No round is shorter, per replica count.
double round_limit_ms(const plan::Plan& plan, const std::vector<sim::StageCost>& costs, const plan::Cluster& cluster);

// The stages' costs the simulator charges `plan`'s schedule of `kind` (sim::stage_costs of its
// layers; an asynchronous stage's step copies the weights where forwards run ahead of it:
// pipedream's replays charged no copy, nor did simulate its last stage's, and `plan` said 9.804 ms
// a minibatch for a 2-stage plan that `simulate` ran at 9.936).
std::vector<sim::StageCost> stage_costs_of(const plan::Plan& plan, const profile::Profile& profile, int64_t bucket_bytes,
                                           const std::string& kind);

// The floor of `plan` under schedule `kind` from its exact estimate and stage costs.
double replay_floor_ms(const plan::Plan& plan, const plan::PlanEstimate& exact, const std::vector<sim::StageCost>& costs,
                       const profile::Profile& profile, const plan::Cluster& cluster, const std::string& kind);
// The same, working out both; 0 where the plan does not fit the profile or the cluster. With
// `schedule` (the plan's under `kind`, over the default minibatches), also its cycle time
// (sim/cycle_time.h), which the closed forms above cannot see: replicas waiting for each other.
double replay_floor_ms(const plan::Plan& plan, const profile::Profile& profile, const plan::Cluster& cluster,
                       const std::string& kind, int64_t bucket_bytes, const schedule::Schedule* schedule = nullptr);

}  // namespace pt::referee
