// The accelerator-scale profiles of data/profiles (scripts/accelerator_profiles.py): each loads,
// plans on PipeDream's 4x4 cluster, and agrees with PipeDream's measured V100 profile of the same
// network (../shared) within 15% in time per sample and parameter bytes.
#include <gtest/gtest.h>

#include <filesystem>

#include "plan/planner.h"
#include "profile/pipedream_graph.h"
#include "pt_paths.h"

namespace pt::plan {
namespace {

const std::string kDir = std::string(PT_SOURCE_DIR) + "/data/profiles/";

// Forward + backward ms per sample, PipeDream's Input nodes (data loading) left out.
double ms_per_sample(const profile::Profile& p) {
  double ms = 0;
  for (const auto& l : p.layers)
    if (!(l.inputs.empty() && l.name.rfind("Input", 0) == 0)) ms += l.forward_ms + l.backward_ms;
  return ms / static_cast<double>(p.batch_size);
}

TEST(AcceleratorProfiles, LoadAndPlanOnATwoLevelCluster) {
  for (const char* name : {"vgg16", "resnet50", "gnmt16", "awd-lm"}) {
    SCOPED_TRACE(name);
    auto p = profile::read_any_profile(kDir + name + ".json");
    EXPECT_EQ(p.model, name);
    EXPECT_GE(p.num_layers(), 5);
    EXPECT_GT(p.total_compute_ms(), 0);
    Plan plan = make_plan(p, cluster_from_shorthand("4,4", "96,10"), {});
    EXPECT_EQ(plan.workers, 16);
    std::cout << "[ plan ] " << name << " on 4x4 (96, 10 Gbit/s): " << plan.shape() << "\n";
  }
}

TEST(AcceleratorProfiles, AgreeWithPipeDreamsV100Profiles) {
  std::string shared = std::string(PT_SHARED_DIR) + "/data/pipedream-profiles/";
  if (!std::filesystem::exists(shared)) GTEST_SKIP() << "no PipeDream profiles at " << shared;
  for (auto [ours, theirs] : {std::pair{"vgg16", "vgg16"}, {"resnet50", "resnet50"}, {"gnmt16", "gnmt_large"}}) {
    SCOPED_TRACE(ours);
    auto a = profile::read_any_profile(kDir + ours + ".json");
    auto b = profile::read_any_profile(shared + theirs + ".json");
    double ratio = ms_per_sample(a) / ms_per_sample(b);
    double params = static_cast<double>(a.total_parameter_bytes()) / static_cast<double>(b.total_parameter_bytes());
    std::cout << "[ v100 ] " << ours << " vs PipeDream's " << theirs << ": time per sample x" << ratio
              << ", parameter bytes x" << params << "\n";
    EXPECT_NEAR(ratio, 1.0, 0.15);
    EXPECT_NEAR(params, 1.0, 0.15);
  }
}

}  // namespace
}  // namespace pt::plan
