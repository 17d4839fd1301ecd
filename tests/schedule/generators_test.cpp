// Property tests: every generator over stages 1-8 x microbatches 1-16 (chunks 1-4 for
// interleaved) validates, and runs each microbatch forward and backward exactly once per stage.
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "schedule/comm_pass.h"
#include "schedule/generators.h"
#include "schedule/validate.h"
#include "test_plans.h"

namespace pt::schedule {
namespace {

using testing::plan_with_replicas;
using testing::straight_plan;

// Counts compute actions by (kind, stage, mb) and checks each appears exactly once.
void expect_each_once(const Schedule& s) {
  std::map<std::tuple<int, int, int>, int> count;
  for (const auto& list : s.actions)
    for (const auto& a : list)
      if (is_compute(a.kind)) ++count[{static_cast<int>(a.kind), a.stage, a.microbatch}];
  for (int st = 0; st < s.num_stages; ++st)
    for (int k = 0; k < s.total_microbatches(); ++k) {
      EXPECT_EQ((count[{static_cast<int>(ActionKind::kForward), st, k}]), 1) << s.kind << " " << st << "F" << k;
      EXPECT_EQ((count[{static_cast<int>(ActionKind::kBackward), st, k}]), 1) << s.kind << " " << st << "B" << k;
      if (s.split_backward[st]) {
        EXPECT_EQ((count[{static_cast<int>(ActionKind::kBackwardWeight), st, k}]), 1) << s.kind << " W";
      }
    }
}

void check(const std::string& kind, const plan::Plan& plan, ScheduleOptions o) {
  SCOPED_TRACE(kind + " stages " + std::to_string(plan.num_stages()) + " mb " + std::to_string(o.microbatches) +
               " chunks " + std::to_string(o.chunks));
  Schedule s;
  ASSERT_NO_THROW(s = make_schedule(kind, plan, o));
  expect_each_once(s);
}

// The runtime sizes a job's segments from schedule_flushes(kind): it must say what the
// generator builds.
TEST(Generators, FlushesAsTheKindSays) {
  for (const auto& kind : schedule_kinds()) {
    SCOPED_TRACE(kind);
    int chunks = kind == "interleaved" ? 2 : 1;
    Schedule s = make_schedule(kind, straight_plan(kind == "interleaved" ? 4 : 2), {4, chunks, 0, false});
    EXPECT_EQ(s.flush, schedule_flushes(kind));
  }
  EXPECT_FALSE(schedule_flushes("pipedream"));
  EXPECT_TRUE(schedule_flushes("1f1b"));
}

TEST(Generators, SynchronousSweepValidates) {
  for (const char* kind : {"gpipe", "1f1b", "zb-h1", "mp"})
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 16; ++m) check(kind, straight_plan(p), {m, 1, 0, false});
}

TEST(Generators, DataParallelSweepValidates) {
  for (int n = 1; n <= 8; ++n)
    for (int m = n; m <= 16; ++m) check("dp", straight_plan(n), {m, 1, 0, false});
  EXPECT_THROW(make_schedule("dp", straight_plan(4), {3, 1, 0, false}), ConfigError);
}

TEST(Generators, InterleavedSweepValidates) {
  for (int p = 1; p <= 8; ++p)
    for (int v = 1; v <= 4; ++v)
      for (int m = 1; m <= 16; ++m) check("interleaved", straight_plan(p * v), {m, v, 0, false});
}

TEST(Generators, AsynchronousSweepValidates) {
  for (int p = 1; p <= 8; ++p) {
    for (int n = 1; n <= 16; ++n) check("pipedream", straight_plan(p), {1, 1, n, false});
    for (int m = 1; m <= 16; ++m) check("2bw", straight_plan(p), {m, 1, 3, false});
  }
}

TEST(Generators, ReplicatedStagesValidate) {
  for (auto shape : std::vector<std::vector<int>>{{2, 1}, {3, 1}, {1, 2}, {2, 2}, {3, 1, 2}, {15, 1}}) {
    plan::Plan plan = plan_with_replicas(shape);
    for (const char* kind : {"gpipe", "1f1b", "mp", "2bw"}) check(kind, plan, {16, 1, 2, false});
    check("pipedream", plan, {1, 1, default_minibatches(plan), false});
    check("dp", plan, {plan.workers, 1, 0, false});
  }
}

// completes_gradients marks, for each AllReduce, the last action of its worker that adds to the
// stage's weight gradients before it (the runtime starts its gradient buckets there).
void expect_one_completing_action_per_allreduce(const Schedule& s) {
  for (int w = 0; w < s.num_workers(); ++w) {
    auto marked = s.completes_gradients(w);
    const auto& list = s.actions[w];
    ASSERT_EQ(marked.size(), list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i].kind != ActionKind::kAllReduce) continue;
      int st = list[i].stage;
      auto adds = [&](const Action& a) {
        return a.stage == st && ((a.kind == ActionKind::kBackward && !s.split_backward[st]) ||
                                 a.kind == ActionKind::kBackwardWeight);
      };
      size_t j = i;
      while (j-- > 0 && !adds(list[j])) EXPECT_FALSE(marked[j]) << s.kind << " worker " << w << " action " << j;
      ASSERT_LT(j, i) << s.kind << ": an AllReduce with no backward before it";
      EXPECT_TRUE(marked[j]) << s.kind << " worker " << w << ": " << to_string(list[j]) << " before " << to_string(list[i]);
    }
    int allreduces = 0, marks = 0;
    for (size_t i = 0; i < list.size(); ++i) allreduces += list[i].kind == ActionKind::kAllReduce, marks += marked[i];
    EXPECT_EQ(marks, allreduces) << s.kind << " worker " << w;
  }
}

TEST(Generators, EachAllReduceHasOneActionCompletingItsGradients) {
  for (auto shape : std::vector<std::vector<int>>{{2, 1}, {1, 2}, {3, 1, 2}}) {
    plan::Plan plan = plan_with_replicas(shape);
    for (const char* kind : {"gpipe", "1f1b", "2bw"})
      expect_one_completing_action_per_allreduce(make_schedule(kind, plan, {8, 1, 2, false}));
    expect_one_completing_action_per_allreduce(make_schedule("pipedream", plan, {1, 1, default_minibatches(plan), false}));
    expect_one_completing_action_per_allreduce(make_schedule("dp", plan, {plan.workers, 1, 0, false}));
  }
}

// 2BW on replicated stages: a replica runs m / r of a minibatch's microbatches, so its
// in-flight ones span more minibatches than m alone says; the declared versions cover them
// (2-2-2-2 with m = 2 and 4 kept 4 and 3 versions against 3 and 2 declared, and the joint
// planner's validator rejected both).
TEST(Generators, TwoBwOnReplicatedStagesDeclaresTheVersionsItKeeps) {
  for (auto shape : std::vector<std::vector<int>>{{2, 2, 2, 2}, {2, 1}, {3, 1}, {1, 2, 4}})
    for (int m : {1, 2, 3, 4, 8, 16}) {
      plan::Plan plan = plan_with_replicas(shape);
      Schedule s;
      try {
        s = make_schedule("2bw", plan, {m, 1, 4, false});
      } catch (const ConfigError&) {
        continue;  // fewer microbatches than some stage's replicas
      } catch (const InvalidSchedule& e) {
        ADD_FAILURE() << plan.shape() << " m=" << m << ": " << e.what();
      }
    }
}

}  // namespace
}  // namespace pt::schedule
