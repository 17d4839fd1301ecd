#pragma once
// The configurations the joint search tries (internal to src/referee; joint_search.h lists them
// per schedule kind): plans, how each runs, and the batch of one step.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "plan/cluster.h"
#include "plan/plan.h"
#include "plan/planner.h"
#include "profile/profile.h"
#include "referee/joint_search.h"
#include "referee/referee.h"

namespace pt::referee::detail {

// One configuration to try: a plan (workers placed), how to run it, and the batch of one step.
struct Trial {
  std::string kind;
  plan::Plan plan;
  int microbatches = 1, chunks = 1;
  int64_t batch = 1;
};

// What makes two trials run alike: the kind, its settings, and each stage's layers, workers,
// minibatches in flight and recomputation.
std::string trial_key(const Trial& t);

// Each uniform plan: d stages of `splits` (the even split, and the link-aware one where it differs)
// of r replicas each, stage-major and (several levels) pipeline-major, on the w = d r workers of
// `cluster` and (plan_options.fewer_workers) of each smaller cluster, which `visit` is given
// with it; `done(c)` after each cluster's plans.
void for_each_uniform_plan(const profile::Profile& p, const plan::Cluster& cluster, const plan::PlanOptions& plan_options,
                           const std::function<void(const plan::Plan& u, const plan::Cluster& c)>& visit,
                           const std::function<void(const plan::Cluster& c)>& done = {});

// What `plan` chooses from under pipedream: the search's `candidates` refereed (referee.h's
// choose) and, `with_uniform`, the uniform plans of two stages or more that pipedream can run
// refereed apart, whichever list's first ranks before the other's (Refereed::uniform then set).
// Throws ConfigError where none of the candidates can be scheduled.
Refereed choose_pipedream(const std::vector<plan::Plan>& candidates, const profile::Profile& p,
                          const plan::Cluster& cluster, const plan::PlanOptions& plan_options, bool own_buckets,
                          bool with_uniform);

// Every configuration of the kinds `joint` asks for, on `cluster` and (plan_options.fewer_workers)
// on its smaller clusters, pipedream's from the referee's candidates. `ungrouped` counts the
// interleaved layouts left out for want of a microbatch count that is a multiple of their workers.
std::vector<Trial> trials(const profile::Profile& p, const plan::Cluster& cluster,
                          const plan::PlanOptions& plan_options, const JointOptions& joint, int* ungrouped = nullptr);

}  // namespace pt::referee::detail
