// The pipetrain search after a bounding chain (search.h, bounding_chain) returns exactly what the
// search of every (state, worker) boundary returns: the same alternatives, times and stages, for
// the whole cluster and for each smaller one, on random DAGs (bounded by chains of 2-8 states)
// and on PipeDream's published DAG profiles (the default 64), with and without a memory limit
// and one worker a stage; and leaving the smaller clusters of fewer workers out
// (PlanOptions::fewest_workers) changes nothing else.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "plan/planner.h"
#include "plan/search.h"
#include "plan/state_space.h"
#include "profile/pipedream_graph.h"
#include "pt_paths.h"

namespace pt::plan {
namespace {

void expect_same(const std::vector<SearchAlternative>& a, const std::vector<SearchAlternative>& b,
                 const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].pipeline_ms, b[i].pipeline_ms) << what << " alternative " << i;
    ASSERT_EQ(a[i].stages.size(), b[i].stages.size()) << what << " alternative " << i;
    for (size_t s = 0; s < a[i].stages.size(); ++s) {
      EXPECT_EQ(a[i].stages[s].from, b[i].stages[s].from) << what << " alternative " << i << " stage " << s;
      EXPECT_EQ(a[i].stages[s].to, b[i].stages[s].to) << what << " alternative " << i << " stage " << s;
      EXPECT_EQ(a[i].stages[s].workers, b[i].stages[s].workers) << what << " alternative " << i << " stage " << s;
    }
  }
}

// Returns how many alternatives were compared (so that a case comparing nothing shows).
size_t compare(const StateSpace& space, const Cluster& cluster, const PlanOptions& options, int chain,
               const std::string& what) {
  SearchResult full = search_pipetrain(space, cluster, options, 0);
  SearchResult bounded = search_pipetrain(space, cluster, options, chain);
  EXPECT_EQ(full.pipeline_ms, bounded.pipeline_ms) << what;
  expect_same(full.alternatives, bounded.alternatives, what);
  EXPECT_EQ(full.suffixes.size(), bounded.suffixes.size()) << what;
  size_t compared = full.alternatives.size();
  for (size_t w = 0; w < full.suffixes.size() && w < bounded.suffixes.size(); ++w) {
    expect_same(full.suffixes[w].alternatives, bounded.suffixes[w].alternatives, what + " from worker " + std::to_string(w));
    compared += full.suffixes[w].alternatives.size();
  }
  return compared;
}

profile::Profile random_dag(std::mt19937& rng, int n) {
  auto uni = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  profile::Profile p;
  p.model = "random-dag";
  for (int i = 0; i < n; ++i) {
    profile::Layer l{"layer" + std::to_string(i), uni(0.1, 10), uni(0.1, 20), static_cast<int64_t>(uni(1e5, 1e8)),
                     static_cast<int64_t>(uni(0, 1e8)), {}};
    // Mostly a chain with skips and short branches: many states, as residual and inception blocks.
    if (i > 0) l.inputs.push_back(i - 1);
    if (i > 2 && uni(0, 1) < 0.3) l.inputs = {static_cast<int>(uni(0, i - 2))};
    if (i > 1 && uni(0, 1) < 0.3) l.inputs.push_back(i - 2);
    p.layers.push_back(l);
  }
  return p;
}

TEST(SearchBound, RandomDagsSearchTheSameAsEveryBoundary) {
  std::mt19937 rng(7);
  size_t compared = 0, bounded_cases = 0;
  const char* clusters[][2] = {{"4", "10"}, {"8", "1"}, {"2,4", "50,5"}, {"2,2,2", "100,10,1"}};
  for (int c = 0; c < 40; ++c) {
    profile::Profile p = random_dag(rng, 10 + c % 7);
    StateSpace space = build_state_space(p, 2500);
    const auto& shape = clusters[c % 4];
    Cluster cluster = cluster_from_shorthand(shape[0], shape[1]);
    PlanOptions options;
    options.candidates = 1 + c % 12;
    options.straight = c % 5 == 4;
    options.fewer_workers = c % 3 != 2;
    options.bucket_bytes = c % 2 ? 25 << 20 : 0;
    if (c % 4 == 1) {
      double total = 0;
      for (const auto& l : p.layers) total += static_cast<double>(l.activation_bytes + l.parameter_bytes);
      options.memory_bytes = static_cast<int64_t>(total * 0.6);
    }
    int chain = 2 + c % 7;
    bounded_cases += space.num_states() > chain;
    compared += compare(space, cluster, options, chain, "case " + std::to_string(c));
  }
  EXPECT_GT(bounded_cases, 30u);
  EXPECT_GT(compared, 200u);
}

TEST(SearchBound, PublishedDagProfilesSearchTheSameAsEveryBoundary) {
  std::string dir = std::string(PT_SHARED_DIR) + "/data/pipedream-profiles/";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no shared profiles at " << dir;
  for (const char* model : {"resnet50", "inception_v3_compressed", "densenet121", "gnmt"}) {
    profile::Profile p = profile::read_any_profile(dir + model + ".json");
    for (auto [workers, gbps] : {std::pair{"8", "10"}, std::pair{"4,4", "100,10"}}) {
      Cluster cluster = cluster_from_shorthand(workers, gbps);
      StateSpace space = build_state_space(p, 2500, static_cast<size_t>(6e7 / (cluster.workers() * cluster.workers())));
      ASSERT_GT(space.num_states(), kBoundingChain) << model;
      PlanOptions options;
      options.candidates = 48;  // as plan_candidates asks
      options.fewer_workers = true;
      std::string what = std::string(model) + " on " + workers;
      EXPECT_GT(compare(space, cluster, options, kBoundingChain, what), 48u) << what;
      options.bucket_bytes = 0;
      compare(space, cluster, options, kBoundingChain, what + " without buckets");
    }
  }
}

// PlanOptions::fewest_workers leaves the smaller clusters of fewer workers out of the search
// and changes nothing else it returns: the whole cluster's alternatives and every smaller
// cluster's still planned are the same, on random DAGs and on ResNet-101, whose smaller clusters
// `plan` leaves out at 10 Gbit/s.
TEST(SearchBound, SmallerClustersLeftOutChangeNothingElse) {
  std::mt19937 rng(11);
  size_t compared = 0, left_out = 0;
  auto check = [&](const StateSpace& space, const Cluster& cluster, PlanOptions options, int fewest,
                   const std::string& what) {
    options.fewer_workers = true;
    SearchResult all = search_pipetrain(space, cluster, options);
    options.fewest_workers = fewest;
    SearchResult some = search_pipetrain(space, cluster, options);
    EXPECT_EQ(all.pipeline_ms, some.pipeline_ms) << what;
    expect_same(all.alternatives, some.alternatives, what);
    compared += all.alternatives.size();
    int W = cluster.workers();
    ASSERT_EQ(all.suffixes.size(), some.suffixes.size()) << what;
    for (int w = 1; w < W; ++w) {
      std::string from = what + " from worker " + std::to_string(w);
      if (W - w >= fewest) {
        expect_same(all.suffixes[w].alternatives, some.suffixes[w].alternatives, from);
        compared += all.suffixes[w].alternatives.size();
      } else {
        EXPECT_TRUE(some.suffixes[w].alternatives.empty()) << from;
        left_out += !all.suffixes[w].alternatives.empty();
      }
    }
  };
  const char* clusters[][2] = {{"8", "10"}, {"2,4", "50,5"}};
  for (int c = 0; c < 20; ++c) {
    profile::Profile p = random_dag(rng, 12 + c % 9);
    Cluster cluster = cluster_from_shorthand(clusters[c % 2][0], clusters[c % 2][1]);
    PlanOptions options;
    options.candidates = 1 + c % 12;
    options.suffix_candidates = 4;
    options.bucket_bytes = c % 3 ? 25 << 20 : 0;
    check(build_state_space(p, 2500), cluster, options, 2 + c % 6, "case " + std::to_string(c));
  }
  std::string dir = std::string(PT_SHARED_DIR) + "/data/pipedream-profiles/";
  if (std::filesystem::exists(dir)) {
    profile::Profile p = profile::read_any_profile(dir + "resnet101.json");
    Cluster cluster = cluster_from_shorthand("16", "10");
    PlanOptions options;
    options.candidates = 48;  // as plan_candidates asks
    options.suffix_candidates = 4;
    check(build_state_space(p, 2500, static_cast<size_t>(6e7 / 256)), cluster, options, 15, "resnet101 on 16");
  }
  EXPECT_GT(compared, 300u);
  EXPECT_GT(left_out, 50u) << "the cases leave too few smaller clusters out to show anything";
}

}  // namespace
}  // namespace pt::plan
