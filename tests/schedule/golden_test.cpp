// Literal expected grids (compute actions, in each worker's order) for small cases, in the
// torchgpipe habit: a schedule is a pure function, so its output is checked as text.
#include <gtest/gtest.h>

#include "schedule/generators.h"
#include "schedule/validate.h"
#include "test_plans.h"

namespace pt::schedule {
namespace {

using testing::plan_with_replicas;
using testing::straight_plan;

std::string grid(const std::string& kind, const plan::Plan& plan, ScheduleOptions o) {
  return to_text(make_schedule(kind, plan, o), /*compute_only=*/true);
}

TEST(Golden, GPipeFillDrain) {
  EXPECT_EQ(grid("gpipe", straight_plan(3), {4}),
            "w0: 0F0 0F1 0F2 0F3 0B0 0B1 0B2 0B3 0ST0\n"
            "w1: 1F0 1F1 1F2 1F3 1B0 1B1 1B2 1B3 1ST0\n"
            "w2: 2F0 2F1 2F2 2F3 2B0 2B1 2B2 2B3 2ST0\n");
}

TEST(Golden, OneFOneBWarmUpIsStagesMinusIndex) {
  EXPECT_EQ(grid("1f1b", straight_plan(3), {4}),
            "w0: 0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3 0ST0\n"
            "w1: 1F0 1F1 1B0 1F2 1B1 1F3 1B2 1B3 1ST0\n"
            "w2: 2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3 2ST0\n");
}

TEST(Golden, ZeroBubbleH1FillsWithW) {
  EXPECT_EQ(grid("zb-h1", straight_plan(3), {4}),
            "w0: 0F0 0F1 0F2 0B0 0W0 0F3 0B1 0W1 0B2 0W2 0B3 0W3 0ST0\n"
            "w1: 1F0 1F1 1B0 1F2 1B1 1W0 1F3 1B2 1W1 1B3 1W2 1W3 1ST0\n"    // W lags B by 1
            "w2: 2F0 2B0 2F1 2B1 2F2 2B2 2W0 2F3 2B3 2W1 2W2 2W3 2ST0\n");  // W lags B by 2
}

// One chunk a worker is 1F1B's order, as its note says: Megatron's interleaved warm-up of
// 2(p - w - 1), or everything where m == p, ran it as GPipe (VGG-16 on 4 workers: 869 ms a
// minibatch against 1F1B's 782).
TEST(Golden, InterleavedOneChunkIs1F1B) {
  for (int m : {1, 2, 3, 4, 6, 8})
    EXPECT_EQ(grid("interleaved", straight_plan(3), {m, 1}), grid("1f1b", straight_plan(3), {m})) << m;
}

TEST(Golden, InterleavedTwoChunks) {
  // Megatron's closed form (m a multiple of p = 2): stages 0, 2 on w0 and 1, 3 on w1.
  EXPECT_EQ(grid("interleaved", straight_plan(4), {4, 2}),
            "w0: 0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3 0ST0 2ST0\n"
            "w1: 1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3 1ST0 3ST0\n");
}

TEST(Golden, PipeDreamStepsAfterEachBackward) {
  EXPECT_EQ(grid("pipedream", straight_plan(3), {1, 1, 6}),
            "w0: 0F0 0F1 0F2 0B0 0ST0 0F3 0B1 0ST1 0F4 0B2 0ST2 0F5 0B3 0ST3 0B4 0ST4 0B5 0ST5\n"
            "w1: 1F0 1F1 1B0 1ST0 1F2 1B1 1ST1 1F3 1B2 1ST2 1F4 1B3 1ST3 1F5 1B4 1ST4 1B5 1ST5\n"
            "w2: 2F0 2B0 2ST0 2F1 2B1 2ST1 2F2 2B2 2ST2 2F3 2B3 2ST3 2F4 2B4 2ST4 2F5 2B5 2ST5\n");
}

TEST(Golden, PipeDreamRoundRobinReplicas) {
  // Plan 2-1: minibatch k on stage 0's replica k % 2; the replicas all-reduce per round.
  EXPECT_EQ(grid("pipedream", plan_with_replicas({2, 1}), {1, 1, 4}),
            "w0: 0F0 0F2 0B0 0AR0 0ST0 0B2 0AR1 0ST2\n"
            "w1: 0F1 0F3 0B1 0AR0 0ST1 0B3 0AR1 0ST3\n"
            "w2: 1F0 1B0 1ST0 1F1 1B1 1ST1 1F2 1B2 1ST2 1F3 1B3 1ST3\n");
}

TEST(Golden, TwoBWStepsOncePerMinibatch) {
  EXPECT_EQ(grid("2bw", straight_plan(2), {2, 1, 3}),
            "w0: 0F0 0F1 0B0 0F2 0B1 0ST0 0F3 0B2 0F4 0B3 0ST1 0F5 0B4 0B5 0ST2\n"
            "w1: 1F0 1B0 1F1 1B1 1ST0 1F2 1B2 1F3 1B3 1ST1 1F4 1B4 1F5 1B5 1ST2\n");
}

TEST(Golden, Baselines) {
  EXPECT_EQ(grid("dp", straight_plan(2), {4}),
            "w0: 0F0 0B0 0F2 0B2 0AR0 0ST0\n"
            "w1: 0F1 0B1 0F3 0B3 0AR0 0ST0\n");
  EXPECT_EQ(grid("mp", straight_plan(3), {2}),
            "w0: 0F0 0B0 0F1 0B1 0ST0\n"
            "w1: 1F0 1B0 1F1 1B1 1ST0\n"
            "w2: 2F0 2B0 2F1 2B1 2ST0\n");
}

TEST(Golden, CommunicationPlacement) {
  // Sends right after the compute that made the data; receives where it arrives.
  EXPECT_EQ(to_text(make_schedule("1f1b", straight_plan(2), {2})),
            "w0: 0F0 0SA0>1 0F1 0SA1>1 0RG0<1 0B0 0RG1<1 0B1 0ST0\n"
            "w1: 1RA0<0 1F0 1RA1<0 1B0 1SG0>0 1F1 1B1 1SG1>0 1ST0\n");
}

TEST(Stash, OneFOneBPeakIsMinOfStagesLeftAndMicrobatches) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      auto r = validate(make_schedule("1f1b", straight_plan(p), {m}));
      auto g = validate(make_schedule("gpipe", straight_plan(p), {m}));
      for (int i = 0; i < p; ++i) {
        EXPECT_EQ(r.workers[i].peak_stash, std::min(p - i, m)) << "1f1b p=" << p << " m=" << m << " stage " << i;
        EXPECT_EQ(g.workers[i].peak_stash, m) << "gpipe p=" << p << " m=" << m;
        EXPECT_EQ(r.workers[i].weight_versions, 1);
      }
    }
}

TEST(Stash, ZeroBubblePeakNoHigherThanOneFOneB) {
  // 1F1B's peak is stage 0's min(p, m); ZB-H1's later stages hold more but never more than that.
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      auto z = validate(make_schedule("zb-h1", straight_plan(p), {m}));
      for (int i = 0; i < p; ++i) EXPECT_LE(z.workers[i].peak_stash, std::min(p, m)) << "p=" << p << " m=" << m;
      EXPECT_EQ(z.workers[0].peak_stash, std::min(p, m));
    }
}

TEST(Stash, AsynchronousWeightVersions) {
  for (int p = 1; p <= 8; ++p) {
    Schedule s = make_schedule("pipedream", straight_plan(p), {1, 1, 4 * p});
    for (int i = 0; i < p; ++i) EXPECT_EQ(s.weight_versions[i], p - i) << "pipedream stage " << i << " of " << p;
    Schedule b = make_schedule("2bw", straight_plan(p), {p, 1, 4});
    for (int i = 0; i < p; ++i) EXPECT_LE(b.weight_versions[i], 2) << "2bw stage " << i << " of " << p;
  }
}

}  // namespace
}  // namespace pt::schedule
