// referee::replay_floor_ms is a bound the referee prunes with and replays longer under: it must
// never be above a plan's steady state (else pruning could drop the best plan, and a replay would
// be lengthened for nothing), and each of its terms must bind somewhere (else it prunes nothing).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "metrics/metrics.h"
#include "plan/physical_limit.h"
#include "plan/realised_cost.h"
#include "plan/planner.h"
#include "profile/pipedream_graph.h"
#include "pt_paths.h"
#include "referee/referee.h"
#include "referee/replay_ahead.h"
#include "referee/replay_floor.h"
#include "schedule/generators.h"
#include "sim/cycle_time.h"
#include "sim/simulator.h"

namespace pt {
namespace {

profile::Profile published(const std::string& model) {
  return profile::read_any_profile(std::string(PT_SHARED_DIR) + "/data/pipedream-profiles/" + model + ".json");
}

// The steady state over four times the schedule's default minibatches: past the plateaus a
// default-length window can sit in (metrics.h, periodic).
double long_replay_ms(const plan::Plan& p, const profile::Profile& prof, const plan::Cluster& cluster,
                      int64_t bucket_bytes) {
  schedule::ScheduleOptions o;
  o.minibatches = 4 * schedule::default_minibatches(p);
  schedule::Schedule s = schedule::make_unvalidated_schedule("pipedream", p, o);
  return metrics::compute_metrics(sim::simulate(s, prof, cluster, referee::timing_only(bucket_bytes)),
                                  metrics::Detail::kTiming)
      .ms_per_minibatch;
}

plan::Cluster make_cluster(std::vector<int> fan_out, std::vector<double> gbps, double latency_us = 0,
                           double action_us = 0, bool hierarchical = false) {
  plan::Cluster c;
  for (size_t k = 0; k < fan_out.size(); ++k)
    c.levels.push_back({"level" + std::to_string(k), fan_out[k], gbps[k], latency_us});
  c.action_us = action_us;
  if (hierarchical) c.allreduce = plan::Cluster::Allreduce::kHierarchical;
  return c;
}

TEST(ReplayFloor, NeverAboveTheSteadyStateAndEachTermBinds) {
  int plans = 0, in_flight_binds = 0, round_binds = 0, tight = 0;
  for (const char* model : {"gnmt_large", "alexnet", "resnet18", "vgg16"}) {
    profile::Profile prof = published(model);
    for (const plan::Cluster& cluster :
         {make_cluster({16}, {10}), make_cluster({8}, {1}, 50, 300), make_cluster({4, 4}, {100, 10}),
          make_cluster({4, 4}, {25, 1}, 0, 0, true)}) {
      plan::PlanOptions options;
      options.candidates = 6;
      for (plan::Plan p : plan::plan_candidates(prof, cluster, options))
        for (bool deferred : {false, true})
          for (bool paper : {false, true}) {
            if (deferred && (p.stages[0].replicas < 2 || p.num_stages() < 2)) continue;
            if (p.num_stages() < 2) continue;  // data parallelism's steady state is its closed form
            p.deferred_step = deferred;
            if (paper)
              for (auto& st : p.stages) st.in_flight = 0;
            plan::PlanEstimate exact = plan::evaluate_plan(p, prof, cluster, options);
            auto costs = referee::stage_costs_of(p, prof, options.bucket_bytes, "pipedream");
            double physical = plan::physical_limit(p, exact, prof, cluster).ms();
            double in_flight = referee::in_flight_limit_ms(p, costs, exact, cluster);
            double round = referee::round_limit_ms(p, costs, cluster);
            double floor = referee::replay_floor_ms(p, exact, costs, prof, cluster, "pipedream");
            EXPECT_EQ(floor, std::max({physical, in_flight, round}));
            double steady = long_replay_ms(p, prof, cluster, options.bucket_bytes);
            std::string where = std::string(model) + " on " + cluster.describe() + ": " + p.shape() +
                                (deferred ? " deferred" : "") + (paper ? " paper" : "");
            EXPECT_LE(floor, steady * (1 + 1e-9)) << where;
            // The referee's own replay ends at or above the floor too.
            EXPECT_GE(referee::simulate_plan(p, prof, cluster, options), floor * (1 - 1e-9)) << where;
            in_flight_binds += in_flight > physical * 1.01;
            round_binds += round > physical * 1.01;
            tight += floor > physical * 1.01 && floor > steady * (1 - 1e-3);
            ++plans;
          }
    }
  }
  EXPECT_GT(plans, 100);
  // Each term is above the physical limit somewhere, and there the steady state itself at times.
  EXPECT_GT(in_flight_binds, 0) << plans << " plans";
  EXPECT_GT(round_binds, 0) << plans << " plans";
  EXPECT_GT(tight, 0) << plans << " plans";
}

// sim::cycle_time_ms, which the referee prunes with too: on the same plans and clusters, at two
// bucket sizes, never above the steady state four times the default long, above the closed-form
// floor on some (replicas waiting at their all-reduce through the stages around them), and the
// steady state itself on some.
TEST(CycleTime, NeverAboveTheSteadyStateAndAboveTheClosedFormsSomewhere) {
  int plans = 0, bounded = 0, above = 0, tight = 0;
  for (const char* model : {"gnmt_large", "alexnet", "resnet18", "vgg16"}) {
    profile::Profile prof = published(model);
    for (const plan::Cluster& cluster :
         {make_cluster({16}, {10}), make_cluster({8}, {1}, 50, 300), make_cluster({4, 4}, {100, 10}),
          make_cluster({4, 4}, {25, 1}, 0, 0, true)}) {
      plan::PlanOptions options;
      options.candidates = 6;
      for (plan::Plan p : plan::plan_candidates(prof, cluster, options))
        for (int64_t bucket : {options.bucket_bytes, int64_t{0}})
          for (bool deferred : {false, true}) {
            if (p.num_stages() < 2 || (deferred && p.stages[0].replicas < 2)) continue;
            p.deferred_step = deferred;
            schedule::Schedule s = schedule::make_unvalidated_schedule("pipedream", p, {});
            double cycle = sim::cycle_time_ms(s, referee::stage_costs_of(p, prof, bucket, "pipedream"), cluster, bucket);
            double steady = long_replay_ms(p, prof, cluster, bucket);
            std::string where = std::string(model) + " on " + cluster.describe() + ": " + p.shape() +
                                (deferred ? " deferred" : "") + " bucket " + std::to_string(bucket);
            EXPECT_LE(cycle, steady * (1 + 1e-9)) << where;
            double closed = referee::replay_floor_ms(p, prof, cluster, "pipedream", bucket);
            EXPECT_EQ(referee::replay_floor_ms(p, prof, cluster, "pipedream", bucket, &s), std::max(closed, cycle)) << where;
            bounded += cycle > 0;
            above += cycle > closed * 1.01;
            tight += cycle > steady * (1 - 1e-6);
            ++plans;
          }
    }
  }
  EXPECT_GT(plans, 100);
  EXPECT_GT(bounded, plans * 9 / 10) << plans << " plans";  // the default schedule holds a period
  EXPECT_GT(above, 0) << plans << " plans";
  EXPECT_GT(tight, 0) << plans << " plans";
}

// A ring of two nodes a period apart and a heavier ring of three spanning two periods: the
// heaviest ratio is the second's; a cycle spanning no period is no schedule's.
TEST(CycleTime, HeaviestCycleRatioOfASmallGraph) {
  std::vector<sim::CycleEdge> edges{{0, 1, 3, 0}, {1, 0, 2, 1}, {1, 2, 4, 1}, {2, 3, 5, 0}, {3, 1, 6, 1}};
  EXPECT_NEAR(sim::heaviest_cycle_ratio(4, edges), 15.0 / 2, 1e-12);
  edges.push_back({0, 0, 1, 0});
  EXPECT_EQ(sim::heaviest_cycle_ratio(4, edges), 0);
}

// AlexNet 12-4 on 4x4 at 25/1 Gbit/s, hierarchical all-reduce, one bucket, deferred step: its
// default 84 minibatches repeat a pattern at 27.626 ms per minibatch, which `plan` chose and
// `simulate` printed; from 168 on it runs at 30.396, its last stage's round floor. Under the
// floor, the replay goes on.
TEST(ReplayFloor, AWindowUnderTheFloorIsReplayedLonger) {
  profile::Profile prof = published("alexnet");
  plan::Cluster cluster = make_cluster({4, 4}, {25, 1}, 0, 0, true);
  plan::Plan p;
  p.stages.resize(2);
  for (int l = 0; l < prof.num_layers(); ++l) p.stages[l < 14 ? 0 : 1].layers.push_back(l);
  p.stages[0].replicas = 12, p.stages[1].replicas = 4;
  plan::assign_workers(p);
  p.deferred_step = true;
  plan::PlanOptions options;
  options.bucket_bytes = 0;
  double floor = referee::replay_floor_ms(p, prof, cluster, "pipedream", 0);
  schedule::Schedule s = schedule::make_unvalidated_schedule("pipedream", p, {});
  metrics::Metrics short_window = metrics::compute_metrics(sim::simulate(s, prof, cluster, referee::timing_only(0)));
  // The plateau: periodic and settled, yet under the floor.
  ASSERT_TRUE(short_window.periodic && short_window.settled);
  EXPECT_LT(short_window.ms_per_minibatch, floor * 0.95) << short_window.ms_per_minibatch << " vs " << floor;
  double replayed = referee::simulate_plan(p, prof, cluster, options);
  EXPECT_GE(replayed, floor * (1 - 1e-9));
  EXPECT_NEAR(replayed, long_replay_ms(p, prof, cluster, 0), 1e-6 * replayed);
}

}  // namespace
}  // namespace pt
