// Replays worked out ahead of their turn (referee/replay_ahead.h) are the replays the referee
// would work out in turn, whichever order they are taken in.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "plan/cluster.h"
#include "plan/planner.h"
#include "profile/pipedream_graph.h"
#include "pt_paths.h"
#include "referee/replay_ahead.h"

namespace pt::referee {
namespace {

struct Fixture {
  profile::Profile profile = profile::read_any_profile(std::string(PT_SHARED_DIR) +
                                                       "/data/pipedream-profiles/vgg16.json");
  plan::Cluster cluster = plan::cluster_from_shorthand("16", "10");
  plan::PlanOptions options;
  std::string kind = "pipedream";
  SimulationMemo memo;
  ReplayContext context{profile, cluster, options, kind, memo};
  // Two-stage plans on 16 workers, the cut and the replicas taken in turn.
  std::vector<plan::Plan> plans() const {
    std::vector<plan::Plan> out;
    for (int cut : {8, 12, 16})
      for (int first : {15, 12, 8}) {
        plan::Plan p;
        p.workers = cluster.workers();
        for (int s = 0; s < 2; ++s) {
          plan::Stage st;
          for (int l = s ? cut : 0; l < (s ? profile.num_layers() : cut); ++l) st.layers.push_back(l);
          st.replicas = s ? 16 - first : first;
          p.stages.push_back(st);
        }
        plan::assign_workers(p);
        out.push_back(p);
      }
    return out;
  }
};

TEST(ReplayAhead, TakenInAnyOrderTheyAreTheReplaysInTurn) {
  Fixture f;
  std::vector<plan::Plan> plans = f.plans();
  ReplayAhead ahead(f.context);
  for (size_t i = 0; i < plans.size(); ++i) ahead.queue(std::to_string(i), plans[i]);
  bool threads = std::thread::hardware_concurrency() > 1;
  for (size_t i = plans.size(); i-- > 0;) {  // the last queued first
    std::optional<Replay> taken = ahead.take(std::to_string(i));
    ASSERT_EQ(taken.has_value(), threads) << plans[i].shape();
    Replay w = taken ? std::move(*taken) : Replay(plans[i]);
    simulate(w, f.context);  // what the referee does with it in turn (nothing where it is done)
    Replay own(plans[i]);
    SimulationMemo fresh;
    ReplayContext alone{f.profile, f.cluster, f.options, f.kind, fresh};
    simulate(own, alone);
    ASSERT_TRUE(w.simulated && own.simulated) << plans[i].shape() << ": " << w.error << own.error;
    EXPECT_EQ(w.simulated->ms_per_minibatch, own.simulated->ms_per_minibatch) << plans[i].shape();
    EXPECT_EQ(w.limit_ms, own.limit_ms) << plans[i].shape();
    EXPECT_FALSE(ahead.take(std::to_string(i))) << "taken twice";
  }
  EXPECT_FALSE(ahead.take("never queued"));
}

// Above the best time so far a plan cannot win: it is estimated ahead, not simulated.
TEST(ReplayAhead, APlanRuledOutByTheBestIsNotSimulated) {
  Fixture f;
  std::vector<plan::Plan> plans = f.plans();
  ReplayAhead ahead(f.context);
  ahead.set_best(1e-9);
  for (size_t i = 0; i < plans.size(); ++i) ahead.queue(std::to_string(i), plans[i]);
  for (size_t i = 0; i < plans.size(); ++i) {
    std::optional<Replay> taken = ahead.take(std::to_string(i));
    if (!taken) continue;  // one core: nothing is worked out ahead
    EXPECT_FALSE(taken->simulated) << plans[i].shape();
    if (taken->estimate) {
      EXPECT_GT(taken->limit_ms, 1e-9);
    }
  }
}

// Dropped replays no thread has begun are not taken; the others still are, worked out.
TEST(ReplayAhead, DroppedReplaysAreNotTakenUnlessBegun) {
  Fixture f;
  std::vector<plan::Plan> plans = f.plans();
  ReplayAhead ahead(f.context);
  for (size_t i = 0; i < plans.size(); ++i) ahead.queue(std::to_string(i), plans[i]);
  ahead.drop_queued();
  for (size_t i = 0; i < plans.size(); ++i) {
    std::optional<Replay> taken = ahead.take(std::to_string(i));
    if (taken) {
      EXPECT_TRUE(taken->estimate) << "a replay taken after the drop was begun, so it is worked out";
    }
  }
  ahead.queue("again", plans.front());  // a dropped key may be queued again
  if (std::thread::hardware_concurrency() > 1) {
    EXPECT_TRUE(ahead.take("again"));
  }
}

// Past the deadline (plan --time-limit) nothing is begun ahead: the referee's turn decides.
TEST(ReplayAhead, NothingIsBegunAheadPastTheDeadline) {
  Fixture f;
  std::vector<plan::Plan> plans = f.plans();
  ReplayAhead ahead(f.context, std::chrono::steady_clock::now() - std::chrono::seconds(1));
  for (size_t i = 0; i < plans.size(); ++i) ahead.queue(std::to_string(i), plans[i]);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // time enough to begin some, had it any
  for (size_t i = 0; i < plans.size(); ++i) {
    std::optional<Replay> taken = ahead.take(std::to_string(i));
    if (!taken) continue;  // one core: nothing is queued
    EXPECT_FALSE(taken->estimate) << plans[i].shape();
    EXPECT_FALSE(taken->simulated) << plans[i].shape();
  }
}

// A replay bound ahead against an older, higher best ranks among the plans ruled out by the
// floor the referee knows in turn: its estimate's where that alone rules it out.
TEST(ReplayAhead, TheFloorInTurnDoesNotDependOnWhatWasWorkedOutAhead) {
  Fixture f;
  // GNMT-Large's candidates on 16 workers: many plans whose cycle time is above the estimate's floor.
  f.profile = profile::read_any_profile(std::string(PT_SHARED_DIR) + "/data/pipedream-profiles/gnmt_large.json");
  f.options.candidates = 12;
  int raised = 0;
  for (const plan::Plan& p : plan::plan_candidates(f.profile, f.cluster, f.options)) {
    Replay estimated(p), bound_ahead(p);
    estimate(estimated, f.context);
    bound(bound_ahead, f.context);  // as a thread does against an infinite best
    ASSERT_TRUE(estimated.estimate && bound_ahead.estimate) << p.shape();
    EXPECT_EQ(bound_ahead.estimate_floor_ms, estimated.limit_ms) << p.shape();
    EXPECT_GE(bound_ahead.limit_ms, estimated.limit_ms) << p.shape();
    raised += bound_ahead.limit_ms > estimated.limit_ms * (1 + 1e-9);
    double below = estimated.limit_ms * (1 - 1e-6);  // a best the estimate rules it out against
    EXPECT_EQ(floor_in_turn(bound_ahead, below), floor_in_turn(estimated, below)) << p.shape();
    EXPECT_EQ(floor_in_turn(bound_ahead, below), estimated.limit_ms) << p.shape();
    // Against a best the estimate does not rule it out by, the referee bounds it too.
    EXPECT_EQ(floor_in_turn(bound_ahead, estimated.limit_ms), bound_ahead.limit_ms) << p.shape();
  }
  EXPECT_GT(raised, 0) << "no plan's cycle time was above its estimate's floor: the test shows nothing";
}

}  // namespace
}  // namespace pt::referee
