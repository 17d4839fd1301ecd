// Interleaved zero bubble (schedule/interleaved_zero_bubble.cpp): the order as text for a small
// case, every shape valid within its budget, and against interleaved 1F1B in the simulator.
#include <gtest/gtest.h>

#include "metrics/metrics.h"
#include "plan/planner.h"
#include "schedule/generators.h"
#include "schedule/validate.h"
#include "sim/simulator.h"
#include "test_plans.h"
#include "uniform_profile.h"

namespace pt::schedule {
namespace {

using testing::straight_plan;

TEST(InterleavedZeroBubble, GoldenGridTwoWorkersTwoChunks) {
  // Stages 0 and 2 on w0, 1 and 3 on w1 (looped); B first, then an F that leaves its microbatch
  // room in the later chunk, then the oldest W.
  EXPECT_EQ(to_text(make_schedule("interleaved-zb", straight_plan(4), {4, 2}), /*compute_only=*/true),
            "w0: 0F0 0F1 2F0 2F1 2B0 2W0 0B0 2B1 0F2 0B1 2F2 0W0 2W1 2B2 0F3 0B2 2F3 0W1 2W2 2B3 0W2 0B3 2W3 0W3 "
            "0ST0 2ST0\n"
            "w1: 1F0 1F1 3F0 3B0 3F1 1B0 3B1 3W0 1B1 1F2 1W0 3F2 3B2 3W1 1B2 1F3 1W1 3F3 3B3 3W2 1B3 1W2 3W3 1W3 "
            "1ST0 3ST0\n");
}

TEST(InterleavedZeroBubble, ValidWithinItsBudgetForEveryShape) {
  for (int p = 1; p <= 6; ++p)
    for (int v : {2, 3, 4})
      for (int m : {1, 2, p, p + 1, 2 * p + 3}) {
        SCOPED_TRACE("p=" + std::to_string(p) + " v=" + std::to_string(v) + " m=" + std::to_string(m));
        ValidationReport r;
        ASSERT_NO_THROW(r = validate(make_schedule("interleaved-zb", straight_plan(p * v), {m, v})));
        for (int w = 0; w < p; ++w) EXPECT_LE(r.workers[w].peak_stash, interleaved_zero_bubble_limit(p, v));
      }
  EXPECT_THROW(make_schedule("interleaved-zb", straight_plan(5), {4, 2}), ConfigError);  // not p x chunks
  EXPECT_THROW(make_schedule("interleaved-zb", testing::plan_with_replicas({2, 1}), {4, 1}), ConfigError);
}

double simulated_ms(const std::string& kind, int p, int v, int m) {
  profile::Profile prof = testing::uniform_profile(p * v * 2, 10, 20, 8 << 20, 4 << 20, 16);
  plan::Plan plan = plan::even_split(prof, p * v);
  return metrics::compute_metrics(sim::simulate(make_schedule(kind, plan, {m, v}), prof, plan::Cluster::flat(p, 100)))
      .ms_per_minibatch;
}

TEST(InterleavedZeroBubble, FasterThanInterleaved1F1B) {
  // W's fill interleaved 1F1B's bubbles: on identical layers, 4 workers, 2 chunks. The bubble
  // shrinks with more microbatches, and with it what there is to fill.
  for (int m : {4, 8, 16}) {
    double plain = simulated_ms("interleaved", 4, 2, m), zb = simulated_ms("interleaved-zb", 4, 2, m);
    EXPECT_LT(zb, (m <= 8 ? 0.95 : 0.99) * plain) << "m=" << m << ": " << zb << " ms, interleaved " << plain;
  }
}

}  // namespace
}  // namespace pt::schedule
