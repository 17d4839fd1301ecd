// Workers placed on the host's cores (sim/core_placement.h) and the simulator sharing each core
// among the workers placed on it (SimOptions::placement).
#include <gtest/gtest.h>

#include "schedule/generators.h"
#include "sim/core_placement.h"
#include "sim/simulator.h"
#include "../schedule/test_plans.h"
#include "../schedule/uniform_profile.h"

namespace pt::sim {
namespace {

using schedule::make_schedule;
using schedule::testing::plan_with_replicas;
using schedule::testing::uniform_profile;

// The demo's shape: 3 replicas of stage 0, one of stage 1, 1f1b over 4 microbatches. Per
// minibatch worker 3 computes 4 microbatches of stage 1 (2 ms), worker 0 two of stage 0 (1 ms),
// workers 1 and 2 one each (0.5 ms): worker 3 takes a core alone, the replicas share the other.
TEST(CorePlacement, TheBusiestFirstEachOnTheCoreWithTheLeastWork) {
  auto prof = uniform_profile(2, 1.0, 1.0);
  auto s = make_schedule("1f1b", plan_with_replicas({3, 1}), {4});
  auto costs = stage_costs(s, prof);
  EXPECT_EQ(place_on_cores(s, costs, 2), (std::vector<int>{1, 1, 1, 0}));
  // Three cores: worker 3 alone, worker 0 alone, workers 1 and 2 on the third.
  EXPECT_EQ(place_on_cores(s, costs, 3), (std::vector<int>{1, 2, 2, 0}));
  EXPECT_EQ(place_on_cores(s, costs, 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(place_on_cores(s, costs, 0).empty());
}

// Two replicas each computing one microbatch's forward (0.5 ms) at once on a host of 2 cores:
// placed on one core they share it and end at 1 ms; on a core each, or the cores as one pool,
// at 0.5.
TEST(CorePlacement, WorkersPlacedOnOneCoreShareItAlone) {
  auto prof = uniform_profile(1, 1.0, 1.0);
  auto s = make_schedule("gpipe", plan_with_replicas({2}), {2});
  auto first_forward_ends = [&](std::vector<int> placement, double core_share = 1) {
    SimOptions o;
    o.cores = 2;
    o.placement = std::move(placement);
    plan::Cluster c = plan::Cluster::flat(2, 10);
    c.core_share = core_share;
    auto t = simulate(s, prof, c, o);
    std::vector<double> ends;
    for (const auto& events : t.workers)
      for (const auto& e : events)
        if (e.action.kind == schedule::ActionKind::kForward) {
          ends.push_back(e.end_ms);
          break;
        }
    return ends;
  };
  EXPECT_EQ(first_forward_ends({0, 0}), (std::vector<double>{1.0, 1.0}));
  EXPECT_EQ(first_forward_ends({0, 1}), (std::vector<double>{0.5, 0.5}));
  EXPECT_EQ(first_forward_ends({}), (std::vector<double>{0.5, 0.5}));
  // Switching between two workers on one core costs it (Cluster::core_share): at 0.8 of the core
  // in all, the two forwards end at 1 / 0.8 ms; a core of one worker loses nothing, and neither
  // does one pool.
  auto shared = first_forward_ends({0, 0}, 0.8);
  ASSERT_EQ(shared.size(), 2u);
  EXPECT_DOUBLE_EQ(shared[0], 1.25);
  EXPECT_DOUBLE_EQ(shared[1], 1.25);
  EXPECT_EQ(first_forward_ends({0, 1}, 0.8), (std::vector<double>{0.5, 0.5}));
  EXPECT_EQ(first_forward_ends({}, 0.8), (std::vector<double>{0.5, 0.5}));
}

// The planner's and compare's replays (SimOptions::pin_as_train) place the workers as train pins
// them where they outnumber the cores: the demo's shape on 2 cores replays as with the placement
// given, not as one pool; with a core each there is nothing to place.
TEST(CorePlacement, ReplaysAsTrainRunsPinWhereTheWorkersOutnumberTheCores) {
  auto prof = uniform_profile(2, 1.0, 1.0);
  auto s = make_schedule("1f1b", plan_with_replicas({3, 1}), {4});
  plan::Cluster c = plan::Cluster::flat(4, 10);
  auto last_end = [&](const SimOptions& o) {
    double end = 0;
    for (const auto& events : simulate(s, prof, c, o).workers)
      for (const auto& e : events) end = std::max(end, e.end_ms);
    return end;
  };
  SimOptions pool, placed, as_train;
  placed.placement = place_on_cores(s, stage_costs(s, prof), 2);
  as_train.pin_as_train = true;
  c.host_cores = 2;
  EXPECT_DOUBLE_EQ(last_end(as_train), last_end(placed));
  EXPECT_NE(last_end(pool), last_end(placed));
  c.host_cores = 4;
  EXPECT_DOUBLE_EQ(last_end(as_train), last_end(pool));
}

}  // namespace
}  // namespace pt::sim
