// plan_candidates: the searches of both all-reduce bounds (and of one worker a stage) side by
// side on one set of states, their alternatives placed, and the best plan of each smaller
// cluster: what the referee replays (planner.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/units.h"
#include "core/fingerprint.h"
#include "core/parallel.h"
#include "plan/realised_cost.h"
#include "plan/planner.h"
#include "plan/planner_internal.h"
#include "plan/search.h"
#include "plan/state_space.h"

namespace pt::plan {

using detail::best_placed;
using detail::exact_data_parallel_ms;
using detail::run_search;
using detail::Searched;
using detail::search_space;
using detail::to_plan;

namespace {

// From this many workers plan_candidates says before each search that it is searching: the search
// then visits up to 1,000 state pairs x W² (kPipetrainWork's floor), about a second's work.
constexpr int kAnnounceSearchWorkers = 512;

// PlanOptions::fewest_workers for `cluster`, where data parallelism on all of it takes
// `data_parallel_ms` (0: does not fit). Every plan's stages compute at least the one stage's sum
// (each charges the host its actions), so on m workers its busiest worker computes at least
// that over m: its physical limit, which the referee compares with the best time replayed
// before it. The candidates go in order of estimate, never below that compute, and data
// parallelism's replay is its estimate (steady_state_in_closed_form), so a plan on m workers
// whose compute bound is above it comes after it and is ruled out unreplayed: ResNet-101 on 16
// workers at 10 Gbit/s plans no cluster of under 14 (411 ms of compute, data parallelism 29.6 ms).
int fewest_workers_to_plan(const profile::Profile& profile, const Cluster& cluster, double data_parallel_ms) {
  if (data_parallel_ms <= 0) return 0;
  // Workers that outnumber the host's cores (Cluster::host_cores) compute no faster for being
  // more, and both figures here count a device each: mnist-cnn on 4 workers sharing 1 core ruled
  // out one worker (12.65 ms of compute against data parallelism's 3.64), which the cores run at
  // 12.769 ms per minibatch where the chosen 4 ran at 12.785. Nothing is ruled out there.
  if (cluster.host_cores > 0 && cluster.host_cores < cluster.workers()) return 0;
  Plan one = data_parallel_plan(profile.num_layers(), cluster.workers());
  double compute = exact_stage_sums(one, profile, cluster).compute[0];
  int m = static_cast<int>(compute / (data_parallel_ms * (1 + 1e-9)));
  while (m > 0 && compute / m <= data_parallel_ms * (1 + 1e-9)) --m;  // the largest m ruled out
  return m + 1;
}

}  // namespace

std::vector<Plan> plan_candidates(const profile::Profile& profile, const Cluster& cluster, const PlanOptions& options) {
  if (options.candidates < 1) throw UsageError(str("candidates: must be >= 1, got ", options.candidates));
  // The search's closed form bounds what the all-reduce buckets hide from below (all of the
  // backward hides it) while charging it all after the backward bounds it from above; the
  // exact model replays them. So the referee gets each bound's best `candidates` and the best
  // `candidates` of four times as many from both by the exact model (VGG-16 on 4x4: the
  // paper's 15-1, fastest in simulation, was the bucket-blind search's 13th; on 8x2 the
  // bucket-blind search never offered 8-8, the fastest; GNMT-16's 1x12-4 comes from it).
  PlanOptions wider = options;
  wider.candidates = 4 * options.candidates;
  // Of each smaller cluster, the search keeps the few plans read below.
  constexpr int kSuffixCandidates = 4;
  wider.suffix_candidates = kSuffixCandidates;
  if (options.cost_model == CostModel::kPipedream) {
    Searched searched = run_search(profile, cluster, wider);
    return {to_plan(searched.result.stages, searched.result.pipeline_ms, *searched.space,
                    searched.result.data_parallel_ms, profile, cluster, options)};
  }
  std::vector<Plan> plans;
  const double data_parallel_ms = exact_data_parallel_ms(profile, cluster, options);
  // (--straight: data parallelism is no candidate, and nothing rules the smaller clusters out.)
  if (!options.straight) wider.fewest_workers = fewest_workers_to_plan(profile, cluster, data_parallel_ms);
  // The search's baseline, where it found data parallelism possible, by the exact rules.
  auto with_baseline = [&](Plan p) {
    if (p.data_parallel_ms_per_minibatch > 0) p.data_parallel_ms_per_minibatch = data_parallel_ms;
    return p;
  };
  std::vector<int> search_rank;  // the better of its ranks in the two searches
  std::map<Fingerprint::Key, int> seen;  // a plan's stages (add_stage_sums) -> its index in `unique` below
  // The two bounds' searches run side by side: they share nothing, and on hundreds of workers
  // each takes seconds (1,024: about 3 s each). With no bucket the bounds are one search.
  std::vector<int64_t> bounds{options.bucket_bytes};
  if (options.bucket_bytes > 0) bounds.push_back(0);
  // Both on one set of states (each built its own: as long as the search on Inception-v3).
  auto space = std::make_shared<const StateSpace>(search_space(profile, cluster, wider));
  auto search_bound = [&](int64_t bucket_bytes) {
    PlanOptions bound = wider;
    bound.bucket_bytes = bucket_bytes;
    return run_search(space, profile, cluster, bound);
  };
  bool announce = options.progress && cluster.workers() >= kAnnounceSearchWorkers;
  auto started = std::chrono::steady_clock::now();
  if (announce)
    options.progress(str("searching splits of ", counted(profile.num_layers(), "layer"), " over ",
                         counted(cluster.workers(), "worker"), " (",
                         bounds.size() == 2 ? "all-reduce after each bucket, and after the backward, side by side"
                                            : "all-reduce after the backward",
                         ")"));
  // And the best plans without replication, one worker a stage: both bounds rank them below
  // replicated plans that simulate slower (GNMT-16 on 8 workers at 10 Gbit/s: 3-1-1-1-1-1 at
  // 65.8 ms per minibatch, where the straight 1-1-1-1-1-1-1-1 runs at 57.1), and no move of
  // the local search splits a replicated stage in two. On the bounds' states.
  bool search_straight = !options.straight && cluster.workers() > 1 &&
                         cluster.workers() <= static_cast<int>(space->node_layers.size());
  std::optional<SearchResult> straight;
  std::vector<Searched> searches(bounds.size());
  // The searches side by side, each taking the next as it finishes, the straight one first: its
  // bound prunes least, and on Inception-v3 on 8 workers it takes longer than both bounds.
  std::vector<std::function<void()>> searching;
  if (search_straight)
    searching.push_back([&] {
      PlanOptions one_each = wider;
      one_each.straight = true;
      one_each.fewer_workers = false;  // no suffixes: the smaller clusters' plans come from the bounds
      straight = search_pipetrain(*space, cluster, one_each);
      // None where a tie or the memory holds the layers together.
      if (straight->pipeline_ms == kInfinity) straight.reset();
    });
  for (size_t b = bounds.size(); b-- > 0;) searching.push_back([&, b] { searches[b] = search_bound(bounds[b]); });
  side_by_side(searching.size(), [&](size_t i) { searching[i](); });
  if (announce)
    options.progress(str("searched ", searches.front().space->num_states(), " states in ",
                         std::round(10 * std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()) / 10,
                         " s"));
  std::vector<const SearchResult*> all;  // on `space`, all of them
  for (const Searched& searched : searches) all.push_back(&searched.result);
  if (straight) all.push_back(&*straight);
  // Each alternative in the placement the exact model predicts fastest (ties keep the search's
  // own numbering). The searches share their states and number workers stage by stage: the
  // same stages, or stages alike in all they cost, are one plan, placed once whichever search
  // offered it, with the better of its ranks. The placements are worked out side by side
  // (ResNet-101 on 4x4: 144 alternatives).
  struct Offered {
    const SearchAlternative* alt;
    const SearchResult* result;
  };
  std::vector<Offered> unique;
  std::vector<std::pair<int, int>> offers;  // in the order offered: (index in unique, rank)
  for (const SearchResult* result : all) {
    int rank = 0;
    for (const auto& alt : result->alternatives) {
      Fingerprint f;  // the searches' own test of one plan (add_stage_sums)
      for (const auto& st : alt.stages) {
        space->add_stage_sums(f, st.from, st.to);
        f.add(st.workers.front()), f.add(st.workers.size());
      }
      Fingerprint::Key key = f.key();
      auto [it, fresh] = seen.emplace(std::move(key), static_cast<int>(unique.size()));
      if (fresh) unique.push_back({&alt, result});
      offers.push_back({it->second, rank++});
    }
  }
  std::vector<Plan> placed_plans(unique.size());
  side_by_side(unique.size(), [&](size_t i) {
    const Offered& offered = unique[i];
    placed_plans[i] = with_baseline(best_placed(to_plan(offered.alt->stages, offered.alt->pipeline_ms, *space,
                                                        offered.result->data_parallel_ms, profile, cluster, options),
                                                profile, cluster, options));
  });
  std::vector<int> plan_of(unique.size(), -2);  // -2: not offered yet; -1: no placement fits
  for (auto [u, rank] : offers) {
    if (plan_of[u] == -2) {
      plan_of[u] = placed_plans[u].stages.empty() ? -1 : static_cast<int>(plans.size());
      if (plan_of[u] >= 0) plans.push_back(std::move(placed_plans[u])), search_rank.push_back(rank);
    } else if (plan_of[u] >= 0) {
      search_rank[plan_of[u]] = std::min(search_rank[plan_of[u]], rank);
    }
  }
  std::vector<size_t> order(plans.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return plans[a].pipeline_ms_per_minibatch < plans[b].pipeline_ms_per_minibatch;
  });
  // Data parallelism (one stage) too whenever it fits: the referee always weighs the baseline.
  std::vector<Plan> kept;
  for (size_t k = 0; k < order.size(); ++k)
    if (static_cast<int>(k) < options.candidates || search_rank[order[k]] < options.candidates ||
        plans[order[k]].num_stages() == 1)
      kept.push_back(std::move(plans[order[k]]));
  plans = std::move(kept);
  // The best plan of each smaller cluster, on this one: the referee weighs leaving workers idle
  // (AWD-LM on 8 workers at 1 Gbit/s: every plan on all 8 is slower than one worker alone).
  // Each is a suffix of this cluster's workers, which the searches above planned too
  // (SearchResult::suffixes); as for this cluster, the best by the exact model of each bound's
  // best few.
  if (options.fewer_workers) {
    PlanOptions one = options;
    one.fewer_workers = false;
    one.candidates = 1;
    for (const Cluster& sub : smaller_clusters(cluster)) {
      if (sub.workers() < wider.fewest_workers) continue;  // not planned: none could win
      int w = cluster.workers() - sub.workers();
      Plan best;
      for (const Searched& searched : searches) {
        const SearchResult::Suffix& suffix = searched.result.suffixes.at(w);
        for (size_t i = 0; i < suffix.alternatives.size() && i < static_cast<size_t>(kSuffixCandidates); ++i) {
          const SearchAlternative& alt = suffix.alternatives[i];
          Plan p = best_placed(to_plan(alt.stages, alt.pipeline_ms, *searched.space, suffix.data_parallel_ms, profile,
                                       sub, one),
                               profile, sub, one);
          if (!p.stages.empty() && (best.stages.empty() || p.pipeline_ms_per_minibatch < best.pipeline_ms_per_minibatch))
            best = std::move(p);
        }
      }
      if (best.stages.empty()) continue;  // no plan fits that few workers' memory
      Plan p = with_baseline(best_placed(best, profile, cluster, options));
      if (!p.stages.empty()) plans.push_back(std::move(p));
    }
    std::stable_sort(plans.begin(), plans.end(), [](const Plan& a, const Plan& b) {
      return a.pipeline_ms_per_minibatch < b.pipeline_ms_per_minibatch;
    });
  }
  return plans;
}

}  // namespace pt::plan
