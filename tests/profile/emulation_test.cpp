// Emulated compute's costs follow the profile: cut bytes of a DAG, input layers, scales.
#include <gtest/gtest.h>

#include "core/error.h"
#include "profile/emulation.h"
#include "tests/profile/chain_profile.h"

namespace pt::profile {
namespace {

using pt::testing::chain_profile;

TEST(EmulatedCosts, CostsArePerSampleAndScaled) {
  auto costs = emulated_costs(chain_profile(), {2.0, 0.5});
  ASSERT_EQ(costs.size(), 4u);
  EXPECT_DOUBLE_EQ(costs[0].forward_ms_per_sample, 8 * 2.0 / 8);
  EXPECT_DOUBLE_EQ(costs[0].backward_ms_per_sample, 16 * 2.0 / 8);
  EXPECT_EQ(costs[1].output_floats_per_sample, 500);  // 1000 floats x byte scale 0.5
  EXPECT_EQ(costs[2].parameter_floats, 40000 * 3 / 4 / 2);
  EXPECT_EQ(costs[2].step_ms, 0);  // the profile measured no optimizer step
  profile::Profile p = chain_profile();
  p.layers[2].optimizer_ms = 1.5;
  EXPECT_DOUBLE_EQ(emulated_costs(p, {2.0, 0.5})[2].step_ms, 1.5 * 2.0);  // per step, not per sample
  EXPECT_THROW(emulated_costs(chain_profile(), {0, 1}), ConfigError);
  EXPECT_THROW(emulated_costs(chain_profile(), {1, -1}), ConfigError);
}

// A microbatch waits what the simulator charges it: the layer's timings at its size, not its
// share of the whole minibatch's time (an emulation ran 5-7% faster than its prediction).
TEST(EmulatedCosts, AMicrobatchWaitsTheProfilesTimeAtItsSize) {
  profile::Profile p = chain_profile();  // batch 8, 8 ms forward and 16 ms backward a layer
  p.layers[1].timings = {{2, 3.0, 5.0}, {8, 8.0, 16.0}};
  auto costs = emulated_costs(p, {2.0, 1.0});
  model::EmulatedLayerImpl timed(costs[1]), linear(costs[2]);
  EXPECT_DOUBLE_EQ(timed.forward_ms(2), 3.0 * 2.0);
  EXPECT_DOUBLE_EQ(timed.backward_ms(2), 5.0 * 2.0);
  EXPECT_DOUBLE_EQ(timed.forward_ms(2), compute_forward_ms(p, 1, 4) / 4 * 2.0);  // 4 microbatches of 2
  EXPECT_DOUBLE_EQ(timed.backward_ms(2), compute_backward_ms(p, 1, 4) / 4 * 2.0);
  EXPECT_DOUBLE_EQ(timed.forward_ms(8), 8.0 * 2.0);
  EXPECT_DOUBLE_EQ(linear.forward_ms(2), 8.0 * 2.0 * 2 / 8);  // no timings: its share
}

TEST(EmulatedCosts, DagCutsCarryEveryLiveOutputAndInputsCostNothing) {
  // Input -> a -> b -> c, with a skip a -> c: the cut after b carries a's and b's outputs.
  profile::Profile p;
  p.model = "dag";
  p.batch_size = 2;
  p.layers = {{"Input0", 50, 0, 8, 0, {}},
              {"a", 2, 2, 80, 0, {0}},
              {"b", 2, 2, 800, 0, {1}},
              {"c", 2, 2, 16, 0, {1, 2}}};
  auto c = emulated_costs(p, {});
  EXPECT_EQ(c[0].forward_ms_per_sample, 0);  // data loading, left out as the planner does
  p.layers[0].optimizer_ms = 3;
  EXPECT_EQ(emulated_costs(p, {})[0].step_ms, 0);
  EXPECT_EQ(c[0].output_floats_per_sample, 1);
  EXPECT_EQ(c[1].output_floats_per_sample, 10);         // a: 80 B / 2 samples / 4 B
  EXPECT_EQ(c[2].output_floats_per_sample, 100 + 10);   // b and the skip from a
  EXPECT_EQ(c[3].output_floats_per_sample, 2);          // the last layer's own output
}

}  // namespace
}  // namespace pt::profile
