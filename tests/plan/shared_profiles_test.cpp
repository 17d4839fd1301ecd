// Every PipeDream profile of ../shared/data/pipedream-profiles plans under both cost models,
// on flat and two-level clusters, into a plan that fits its profile.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "plan/realised_cost.h"
#include "plan/planner.h"
#include "profile/pipedream_graph.h"
#include "pt_paths.h"

namespace pt::plan {
namespace {

std::vector<std::string> shared_profiles() {
  std::vector<std::string> paths;
  std::string dir = std::string(PT_SHARED_DIR) + "/data/pipedream-profiles";
  if (!std::filesystem::exists(dir)) return paths;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".json") paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  return paths;
}

TEST(SharedProfiles, EveryProfilePlansOnFlatAndTwoLevelClusters) {
  auto paths = shared_profiles();
  if (paths.empty()) GTEST_SKIP() << "no shared profiles at " << PT_SHARED_DIR;
  std::vector<Cluster> clusters = {Cluster::flat(4, 10), Cluster::flat(8, 10), Cluster::flat(16, 10),
                                   cluster_from_shorthand("4,4", "100,10")};
  for (const auto& path : paths) {
    auto prof = profile::read_any_profile(path);
    for (const auto& c : clusters)
      for (auto model : {CostModel::kRealised, CostModel::kPipedream}) {
        PlanOptions o;
        o.cost_model = model;
        auto t0 = std::chrono::steady_clock::now();
        Plan p = make_plan(prof, c, o);
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        SCOPED_TRACE(path + " on " + c.describe());
        EXPECT_EQ(p.workers, c.workers());
        EXPECT_GT(p.pipeline_ms_per_minibatch, 0);
        EXPECT_LT(secs, 5.0);  // the benchmark holds the sub-second figures; this guards regressions
        if (model == CostModel::kRealised) {
          EXPECT_NEAR(evaluate_plan(p, prof, c, o).pipeline_ms_per_minibatch, p.pipeline_ms_per_minibatch,
                      1e-6 * p.pipeline_ms_per_minibatch);
        }
      }
  }
}

}  // namespace
}  // namespace pt::plan
