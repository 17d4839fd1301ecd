// The PipeDream cost model against numbers worked out by hand from its equations
// (docs/planner.md) on the first ten layers of PipeDream's own VGG-16 profile
// (profiler/image_classification/profiles/vgg16/graph.txt, V100, batch 128).
#include <gtest/gtest.h>

#include "plan/plan_table.h"
#include "plan/planner.h"
#include "profile/pipedream_graph.h"

namespace pt::plan {
namespace {

// Input + the first ten layers; forward+backward (ms) of node2..node11:
// 46.920 9.999 159.531 9.766 9.374 54.803 5.097 75.441 5.133 4.999 → Σ C = 381.063 ms;
// Σ P = 7168 + 147712 + 295424 + 590336 = 1040640 bytes.
const char* kVgg10 =
    "node1 -- Input -- forward_compute_time=17.972, backward_compute_time=0.000, activation_size=77070336.0, parameter_size=0.000\n"
    "node2 -- Conv2d(3, 64, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1)) -- forward_compute_time=22.307, backward_compute_time=24.613, activation_size=1644167168.0, parameter_size=7168.000\n"
    "node3 -- ReLU(inplace) -- forward_compute_time=4.446, backward_compute_time=5.553, activation_size=1644167168.0, parameter_size=0.000\n"
    "node4 -- Conv2d(64, 64, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1)) -- forward_compute_time=46.201, backward_compute_time=113.330, activation_size=1644167168.0, parameter_size=147712.000\n"
    "node5 -- ReLU(inplace) -- forward_compute_time=4.455, backward_compute_time=5.311, activation_size=1644167168.0, parameter_size=0.000\n"
    "node6 -- MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False) -- forward_compute_time=3.795, backward_compute_time=5.579, activation_size=411041792.0, parameter_size=0.000\n"
    "node7 -- Conv2d(64, 128, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1)) -- forward_compute_time=15.155, backward_compute_time=39.648, activation_size=822083584.0, parameter_size=295424.000\n"
    "node8 -- ReLU(inplace) -- forward_compute_time=2.359, backward_compute_time=2.738, activation_size=822083584.0, parameter_size=0.000\n"
    "node9 -- Conv2d(128, 128, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1)) -- forward_compute_time=22.062, backward_compute_time=53.379, activation_size=822083584.0, parameter_size=590336.000\n"
    "node10 -- ReLU(inplace) -- forward_compute_time=2.513, backward_compute_time=2.620, activation_size=822083584.0, parameter_size=0.000\n"
    "node11 -- MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False) -- forward_compute_time=2.211, backward_compute_time=2.788, activation_size=205520896.0, parameter_size=0.000\n"
    "\tnode1 -- node2\n\tnode2 -- node3\n\tnode3 -- node4\n\tnode4 -- node5\n\tnode5 -- node6\n"
    "\tnode6 -- node7\n\tnode7 -- node8\n\tnode8 -- node9\n\tnode9 -- node10\n\tnode10 -- node11\n";

constexpr double kTol = 1e-6;

profile::Profile vgg10() { return profile::profile_from_pipedream_graph(kVgg10, "vgg16-first-10"); }

PlanOptions compat(bool transfer, bool straight = false) {
  PlanOptions o;
  o.cost_model = CostModel::kPipedream;
  o.activation_transfer = transfer;
  o.straight = straight;
  return o;
}

std::vector<int> range(int a, int b) {
  std::vector<int> v;
  for (int i = a; i <= b; ++i) v.push_back(i);
  return v;
}

TEST(PipedreamCompatVgg16, DataParallelTimeOnFourWorkers) {
  // (C + 4(M−1)·P/(B·M)) / M with B = 10 Gbps = 1.25e6 B/ms:
  // (381.063 + 4·3·1040640/(1.25e6·4)) / 4 = (381.063 + 2.497536) / 4
  Plan p = make_plan(vgg10(), Cluster::flat(4, 10), compat(false));
  EXPECT_NEAR(p.data_parallel_ms_per_minibatch, 95.890134, kTol);
}

TEST(PipedreamCompatVgg16, StraightTwoStagesWithoutTransfersSplitsAtTheComputeMiddle) {
  // Prefix compute after node4 is 216.450, the rest 164.613: max 216.450 is the best cut.
  Plan p = make_plan(vgg10(), Cluster::flat(2, 10), compat(false, true));
  EXPECT_NEAR(p.pipeline_ms_per_minibatch, 216.450, kTol);
  ASSERT_EQ(p.num_stages(), 2);
  EXPECT_EQ(p.stages[0].layers, range(0, 3));  // Input is pinned to the first stage
  EXPECT_EQ(p.stages[1].layers, range(4, 10));
}

TEST(PipedreamCompatVgg16, StraightTwoStagesWithTransfersCutsAtTheSmallestActivation) {
  // The last stage's input term 2·O_k/(B·1) dominates: the smallest O is node6 (MaxPool,
  // 411041792 B): 2·411041792/1.25e6 = 657.6668672 ms > both computes (235.590, 145.473).
  Plan p = make_plan(vgg10(), Cluster::flat(2, 10), compat(true, true));
  EXPECT_NEAR(p.pipeline_ms_per_minibatch, 657.6668672, kTol);
  EXPECT_EQ(p.stages[0].layers, range(0, 5));
}

TEST(PipedreamCompatVgg16, ReplicationBeatsAnySplitOnTwoWorkers) {
  // One stage on 2: (381.063 + 4·1·1040640/(1.25e6·2)) / 2 = 191.364012 < 216.450.
  for (bool transfer : {false, true}) {
    Plan p = make_plan(vgg10(), Cluster::flat(2, 10), compat(transfer));
    EXPECT_NEAR(p.pipeline_ms_per_minibatch, 191.364012, kTol);
    ASSERT_EQ(p.num_stages(), 1);
    EXPECT_EQ(p.stages[0].replicas, 2);
  }
}

TEST(PipedreamCompatVgg16, TwoLevelsDivideTheOuterAllReduceByTheInnerFanOut) {
  // Level 0 (2 workers, 100 Gbps = 1.25e7 B/ms): (381.063 + 4·1040640/(1.25e7·2)) / 2 = 190.6147512.
  // Level 1 (2 servers, 10 Gbps, w = 2): (190.6147512 + 4·1040640/(1.25e6·2)/2) / 2 = 95.7236316,
  // which beats every outer split (the best, after node4, is max(108.24.., 82.37..)).
  Plan p = make_plan(vgg10(), cluster_from_shorthand("2,2", "100,10"), compat(false));
  EXPECT_NEAR(p.pipeline_ms_per_minibatch, 95.7236316, kTol);
  EXPECT_NEAR(p.data_parallel_ms_per_minibatch, 95.7236316, kTol);
  ASSERT_EQ(p.num_stages(), 1);
  EXPECT_EQ(p.stages[0].replicas, 4);
}

// On one level each stage's time is the search's term for it, so the slowest is the plan's time
// (the table's bottleneck): max(compute, comm) named a stage that computes longest where another's
// compute and all-reduce set the time.
TEST(PipedreamCompatVgg16, TheSlowestStagesTimeIsThePlans) {
  for (int workers : {2, 3, 4, 6})
    for (bool transfer : {false, true})
      for (double gbps : {1.0, 10.0}) {
        SCOPED_TRACE(std::to_string(workers) + " workers at " + std::to_string(gbps) + (transfer ? " with transfers" : ""));
        Plan p = make_plan(vgg10(), Cluster::flat(workers, gbps), compat(transfer));
        double slowest = 0;
        for (const auto& st : p.stages) slowest = std::max(slowest, st.stage_time_ms());
        EXPECT_NEAR(slowest, p.pipeline_ms_per_minibatch, kTol);
      }
}

// Stages that tie for the slowest are the bottleneck together: an interleaved gpt plan whose stages
// 1 and 7-14 tie at 935.769 ms named stage 14 alone.
TEST(PipedreamCompatVgg16, StagesThatTieForTheSlowestAreNamedTogether) {
  profile::Profile profile = vgg10();
  Plan p;
  p.workers = 4;
  for (int s = 0; s < 4; ++s) {
    Stage st;
    st.layers = {s};
    if (s == 3)
      for (int l = 4; l < profile.num_layers(); ++l) st.layers.push_back(l);
    st.workers = {s};
    st.compute_ms = s == 1 || s == 3 ? 2.0 : 1.0;
    p.stages.push_back(st);
  }
  std::string table = format_plan_table(p, profile, Cluster::flat(4, 10));
  EXPECT_NE(table.find("bottleneck: stages 1,3 (the largest stage_ms)"), std::string::npos) << table;
  p.stages[3].compute_ms = 1.5;
  table = format_plan_table(p, profile, Cluster::flat(4, 10));
  EXPECT_NE(table.find("bottleneck: stage 1 (the largest stage_ms)"), std::string::npos) << table;
}

}  // namespace
}  // namespace pt::plan
