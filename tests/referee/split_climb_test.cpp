// The joint search's climb over a configuration's split (src/referee/split_climb.h), against
// `pipetrain simulate` of every split it could have chosen.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "plan/cluster.h"
#include "plan/plan.h"
#include "profile/pipedream_graph.h"
#include "pt_paths.h"
#include "referee/joint_search.h"
#include "referee/split_climb.h"
#include "tests/apps/shell_run.h"

namespace pt::referee {
namespace {

// The search's splits were the even and link-aware ones alone: on a 5-layer profile whose
// second layer holds most weights and whose middle cuts carry 16 MB, 1F1B on 4 workers at
// 10 Gbit/s ran 0 | 1-2 | 3 | 4 at 25.496 ms a minibatch, GPipe 0 | 1-2 | 3-4 at 27.081 and
// ZB-H1 0 | 1-2 | 3 | 4 at 24.183, where 0 | 1-3 | 4 runs each at 22.669, 22.906 and 22.412
// (a helper's enumeration through `simulate`). The climb over the boundaries finds it: the plan
// is never slower than `simulate` says any split into 2 to 4 single-worker stages runs.
TEST(SplitClimb, FindsTheFastestSplitThatSimulateFinds) {
  const std::string text = R"({"format": "pipetrain.profile/1", "model": "r12", "batch_size": 32,
    "input_bytes": 1000000, "layers": [
    {"name": "l0", "forward_ms": 3.076, "backward_ms": 6.224, "activation_bytes": 4000000,
     "parameter_bytes": 100000, "optimizer_ms": 0.01},
    {"name": "l1", "forward_ms": 0.748, "backward_ms": 1.486, "activation_bytes": 16000000,
     "parameter_bytes": 100000000, "optimizer_ms": 0},
    {"name": "l2", "forward_ms": 4.013, "backward_ms": 8.426, "activation_bytes": 16000000,
     "parameter_bytes": 1000000, "optimizer_ms": 0},
    {"name": "l3", "forward_ms": 2.812, "backward_ms": 4.631, "activation_bytes": 1000000,
     "parameter_bytes": 0, "optimizer_ms": 0.1},
    {"name": "l4", "forward_ms": 2.363, "backward_ms": 5.289, "activation_bytes": 100000,
     "parameter_bytes": 0, "optimizer_ms": 0}]})";
  namespace fs = std::filesystem;
  fs::path tmp = fs::temp_directory_path() / ("pt_split_climb_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  const std::string prof_file = (tmp / "r12.json").string(), plan_file = (tmp / "plan.json").string();
  { std::ofstream(prof_file) << text; }
  profile::Profile prof = profile::parse_any_profile(text, prof_file);
  plan::Cluster cluster = plan::Cluster::flat(4, 10);
  const std::string cluster_flags = " --workers 4 --bandwidth-gbps 10";
  // `simulate`'s time per minibatch of a plan.
  auto simulated = [&](const plan::Plan& p) {
    plan::write_plan(p, plan_file);
    auto r = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain simulate --profile " + prof_file +
                                cluster_flags + " --plan " + plan_file);
    std::smatch m;
    EXPECT_TRUE(std::regex_search(r.output, m, std::regex("time per minibatch +([0-9.]+) ms"))) << r.output;
    return m.empty() ? 0.0 : std::stod(m[1]);
  };
  for (const char* kind : {"1f1b", "gpipe", "zb-h1"}) {
    SCOPED_TRACE(kind);
    plan::PlanOptions po;
    po.time_limit_s = 0;
    JointOptions o;
    o.schedules = {kind};
    JointResult r = joint_search(prof, cluster, po, o);
    const Configuration& best = chosen(r, o, prof, cluster);
    EXPECT_GT(r.climbed, 0);
    const double ms = best.simulated.ms_per_minibatch;
    EXPECT_NEAR(simulated(best.plan), ms, 1e-3);
    EXPECT_EQ(best.plan.num_stages(), 3);
    if (best.plan.num_stages() == 3) EXPECT_EQ(best.plan.stages[1].layers, (std::vector<int>{1, 2, 3}));
    // Every split into d stages, one worker each, at the chosen microbatches: cuts after layers
    // drawn from 0..3 (bit c: a cut after layer c).
    for (int cuts = 1; cuts < 16; ++cuts) {
      int d = 1 + __builtin_popcount(cuts);
      if (d > 4) continue;
      plan::Plan q = best.plan;
      q.order.clear();
      q.stages.assign(d, plan::Stage{});
      for (int l = 0, st = 0; l < prof.num_layers(); ++l) {
        q.stages[st].layers.push_back(l);
        if (l < 4 && (cuts >> l & 1)) ++st;
      }
      for (int st = 0; st < d; ++st) q.stages[st].workers = {st}, q.stages[st].replicas = 1;
      q.workers = d;
      EXPECT_LE(ms, simulated(q) * (1 + 1e-4)) << q.shape() << " cuts " << cuts;
    }
  }
  fs::remove_all(tmp);
}

// A move of a layer at a time stopped where each neighbour was slower: GNMT-16 under GPipe on 4
// workers at 1 Gbit/s chose 1-1-1 at 219.324 ms a minibatch (its 2-stage climb ended cut after
// layer 10, 13 MiB crossing), where 2 stages cut between encoder and decoder (after layer 8,
// 6.2 MiB) run at 171.007. Now no 2-stage split at the chosen microbatches runs faster.
TEST(SplitClimb, JumpsToACheaperCutAMoveOfOneLayerCannotReach) {
  namespace fs = std::filesystem;
  fs::path tmp = fs::temp_directory_path() / ("pt_split_jump_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  const std::string prof_file = std::string(PT_SOURCE_DIR) + "/data/profiles/gnmt16.json";
  const std::string plan_file = (tmp / "plan.json").string();
  profile::Profile prof = profile::read_profile_json(prof_file);
  plan::PlanOptions po;
  po.time_limit_s = 0;
  JointOptions o;
  o.schedules = {"gpipe"};
  JointResult r = joint_search(prof, plan::Cluster::flat(4, 1), po, o);
  const Configuration& best = chosen(r, o, prof, plan::Cluster::flat(4, 1));
  const double ms = best.simulated.ms_per_minibatch;
  EXPECT_LT(ms, 172);
  for (int cut = 1; cut < prof.num_layers(); ++cut) {
    plan::Plan q = best.plan;
    q.order.clear();
    q.stages.assign(2, plan::Stage{});
    for (int l = 0; l < prof.num_layers(); ++l) q.stages[l < cut ? 0 : 1].layers.push_back(l);
    q.stages[0].workers = {0}, q.stages[1].workers = {1};
    q.workers = 2;
    plan::write_plan(q, plan_file);
    auto run = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain simulate --profile " + prof_file +
                                  " --workers 4 --bandwidth-gbps 1 --plan " + plan_file);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(run.output, m, std::regex("time per minibatch +([0-9.]+) ms"))) << run.output;
    EXPECT_LE(ms, std::stod(m[1]) * (1 + 1e-4)) << "cut before layer " << cut;
  }
  fs::remove_all(tmp);
}

TEST(SplitClimb, AJumpGoesToTheNearestCutCrossingAtMostHalfTheBytes) {
  plan::Plan p;
  p.stages.assign(2, plan::Stage{});
  p.stages[0].layers = {0, 1, 2, 3, 4, 5, 6}, p.stages[1].layers = {7, 8, 9};
  // Bytes crossing after each layer; the boundary is after layer 6 (8 bytes). To the left, after
  // layer 4 (4 bytes, below layer 3's and 5's) is the nearest cut at most half of 8; after layer 2
  // (3) is farther. To the right, after layer 8 crosses 6, above half.
  std::vector<double> bytes_after{9, 9, 3, 6, 4, 9, 8, 5, 6, 0};
  auto jumps = detail::jumped_boundaries(p, bytes_after);
  ASSERT_EQ(jumps.size(), 1u);
  EXPECT_EQ(jumps[0].stages[0].layers, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(jumps[0].stages[1].layers, (std::vector<int>{5, 6, 7, 8, 9}));
  // Layers that are no run (a graph's stage) are not jumped over.
  p.stages[0].layers = {0, 1, 2, 4, 5, 6}, p.stages[1].layers = {7, 8, 9};
  EXPECT_TRUE(detail::jumped_boundaries(p, bytes_after).empty());
}

}  // namespace
}  // namespace pt::referee
