// The memory model (schedule/memory.h) on hand-checked cases: layers of 1,000 stash bytes and
// 100 parameter bytes, one per stage, a batch of 64.
#include <gtest/gtest.h>

#include "core/error.h"
#include "schedule/generators.h"
#include "schedule/memory.h"
#include "test_plans.h"
#include "uniform_profile.h"

namespace pt::schedule {
namespace {

using namespace testing;

constexpr int64_t kAct = 1000, kParams = 100;

std::vector<WorkerMemory> memory(const std::string& kind, plan::Plan plan, int microbatches, bool recompute = false,
                                 int receives_ahead = 0) {
  for (auto& st : plan.stages) st.recompute = recompute;
  ScheduleOptions o;
  o.microbatches = microbatches;
  MemoryOptions mo;
  mo.receives_ahead = receives_ahead;
  return memory_per_worker(make_schedule(kind, plan, o), uniform_profile(plan.num_stages(), 1, 2, kAct, kParams), mo);
}

TEST(MemoryModel, GPipeStashesEveryMicrobatch1F1BOnlyThoseInFlight) {
  // 4 stages, 8 microbatches of 1/8 of the batch: GPipe keeps all 8 on every stage, 1F1B
  // stage s keeps 4 - s. Between threads a received input costs the receiver nothing.
  auto g = memory("gpipe", straight_plan(4), 8);
  auto f = memory("1f1b", straight_plan(4), 8);
  for (int s = 0; s < 4; ++s) {
    // A backward also holds its weight gradient being made, or (stages > 0) the larger input
    // gradient it sends back.
    int64_t busy = s == 0 ? kParams : kAct / 8;
    EXPECT_EQ(g[s].peak_in_flight, 8);
    EXPECT_EQ(g[s].activations, 8 * kAct / 8 + busy);
    EXPECT_EQ(f[s].peak_in_flight, 4 - s);
    EXPECT_EQ(f[s].activations, (4 - s) * kAct / 8 + busy);
    EXPECT_EQ(g[s].weights, kParams);
    EXPECT_EQ(g[s].gradients, kParams);
    EXPECT_EQ(g[s].optimizer, kParams);
  }
}

TEST(MemoryModel, WeightVersionsFollowTheSchedule) {
  auto pd = memory("pipedream", straight_plan(4), 1);
  auto bw = memory("2bw", straight_plan(4), 4);
  EXPECT_EQ(pd[0].weights, 4 * kParams);  // a version per minibatch in flight
  EXPECT_EQ(pd[3].weights, kParams);
  EXPECT_EQ(bw[0].weights, 2 * kParams);  // double buffered
}

TEST(MemoryModel, RecomputationKeepsOnlyInputsAndRebuildsOneMicrobatch) {
  // Between processes (receives posted ahead hold their buffers): stage 1 of GPipe keeps 8
  // received inputs of kAct / 8; recomputing, it rebuilds one stash during each backward.
  auto plain = memory("gpipe", straight_plan(2), 8, false, 8);
  auto again = memory("gpipe", straight_plan(2), 8, true, 8);
  EXPECT_EQ(plain[1].activations, 8 * (kAct / 8) * 2 + kAct / 8);  // stash + input per microbatch, + input gradient
  EXPECT_EQ(again[1].activations, 8 * (kAct / 8) + kAct / 8 + kAct / 8);
  EXPECT_LT(again[0].total(), plain[0].total());
}

TEST(MemoryModel, NamesTheLayerOutsideTheSchedule) {
  Schedule s = make_schedule("1f1b", straight_plan(2), {});
  EXPECT_THROW(memory_per_worker(s, uniform_profile(3, 1, 1)), ConfigError);
}

}  // namespace
}  // namespace pt::schedule
