#include "plan/planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "core/error.h"
#include "core/parallel.h"
#include "core/units.h"
#include "plan/pipetrain_cost.h"
#include "plan/search.h"
#include "plan/state_space.h"

namespace pt::plan {
namespace {

// Bounds on the states of a DAG so that every search stays well under a second; above them the
// graph is coarsened (state_space.h). The compat model at inner levels solves every range
// (a, b), cubic in the states, hence its smaller bound.
constexpr int kMaxStates = 2500;
constexpr int kMaxStatesHierarchicalCompat = 600;
// The pipetrain search's tables hold W² links per level.
constexpr int kMaxPlanWorkers = 1024;
// The pipetrain search visits about pairs × W² (state pair, first worker, replicas) triples.
constexpr double kPipetrainWork = 6e7;
// From this many workers plan_candidates says before each search that it is searching: the search
// then visits up to 1,000 state pairs x W² (kPipetrainWork's floor), about a second's work.
constexpr int kAnnounceSearchWorkers = 512;

const char* name_of(CostModel m) { return m == CostModel::kPipedream ? "pipedream" : "pipetrain"; }

[[noreturn]] void explain_no_plan(const profile::Profile& profile, const Cluster& cluster,
                                  const PlanOptions& options, const StateSpace& space) {
  int W = cluster.workers();
  int nodes = space.num_states() > 0 ? static_cast<int>(space.node_layers.size()) : 0;
  size_t grouped = 0;  // the layers in the nodes: more than nodes where projections share one
  for (const auto& layers : space.node_layers) grouped += layers.size();
  std::string why = space.note;
  if (why.empty() && grouped > static_cast<size_t>(nodes))
    why = str("its ", grouped, " layers to plan in ", nodes, " groups: a layer that costs nothing and only selects from "
              "another's output stays with it");
  if (options.straight && W > nodes)
    throw ConfigError(str("--straight: ", W, " workers need ", W, " stages but '", profile.model, "' has only ", nodes,
                          " layers to split", why.empty() ? "" : " (" + why + ")",
                          "; use fewer workers or allow replication",
                          profile.ties.empty() ? "" : ", or a synchronous schedule (plan --schedule 1f1b, or auto)"));
  int64_t mem = memory_limit(cluster, options);
  if (mem > 0) {
    double largest = 0;
    for (const auto& l : profile.layers)
      largest = std::max(largest, static_cast<double>(l.activation_bytes + l.parameter_bytes));
    throw ConfigError(str("memory of ", human_bytes(static_cast<double>(mem)), " per worker is too small for any ",
                          name_of(options.cost_model), " plan of '", profile.model, "' on ", W,
                          " workers (its largest layer alone holds ", human_bytes(largest),
                          " of activations and parameters per minibatch in flight",
                          profile.ties.empty() ? "" : "; " + why + "; a synchronous schedule may split them: plan "
                                                      "--schedule 1f1b, or auto", ")"));
  }
  if (!profile.ties.empty())
    throw ConfigError(str("no ", name_of(options.cost_model), " plan of '", profile.model, "' on ", cluster.describe(),
                          why.empty() ? "" : ": " + why,
                          "; a synchronous schedule may split them, its stages summing the copies' gradients ",
                          "(plan --schedule 1f1b, or auto)"));
  throw InternalError(str("the planner found no plan for '", profile.model, "' on ", cluster.describe()));
}

struct Searched {
  std::shared_ptr<const StateSpace> space;  // shared by the searches of one plan_candidates
  SearchResult result;
};

// The search's states of the profile for the cluster's size and the options' cost model, after
// checking the flags and the cluster.
StateSpace search_space(const profile::Profile& profile, const Cluster& cluster, const PlanOptions& options) {
  if (cluster.levels.empty()) throw ConfigError("cluster has no levels");
  if (cluster.workers() > kMaxPlanWorkers)
    throw ConfigError(str("the cluster ", cluster.describe(), " has ", cluster.workers(), " workers; the planner handles at ",
                          "most ", kMaxPlanWorkers, " (its search grows with the square of the workers)"));
  if (options.memory_bytes < 0) throw UsageError(str("--memory: must be >= 0, got ", options.memory_bytes));
  bool compat = options.cost_model == CostModel::kPipedream;
  int max_states = compat && cluster.levels.size() > 1 ? kMaxStatesHierarchicalCompat : kMaxStates;
  int W = cluster.workers();
  size_t max_pairs = compat ? static_cast<size_t>(-1)
                            : static_cast<size_t>(std::max(1000.0, kPipetrainWork / (static_cast<double>(W) * W)));
  return build_state_space(profile, max_states, max_pairs, !compat);
}

// The search on `space` (search_space's), or no plan (result.pipeline_ms kInfinity) where none fits.
Searched search_if_any(std::shared_ptr<const StateSpace> space, const Cluster& cluster, const PlanOptions& options) {
  Searched out{std::move(space), {}};
  if (options.straight && cluster.workers() > static_cast<int>(out.space->node_layers.size())) return out;
  out.result = options.cost_model == CostModel::kPipedream ? search_pipedream(*out.space, cluster, options)
                                                          : search_pipetrain(*out.space, cluster, options);
  return out;
}

Searched run_search(std::shared_ptr<const StateSpace> space, const profile::Profile& profile, const Cluster& cluster,
                    const PlanOptions& options) {
  Searched out = search_if_any(std::move(space), cluster, options);
  if (out.result.pipeline_ms == kInfinity) explain_no_plan(profile, cluster, options, *out.space);
  return out;
}

Searched run_search(const profile::Profile& profile, const Cluster& cluster, const PlanOptions& options) {
  return run_search(std::make_shared<const StateSpace>(search_space(profile, cluster, options)), profile, cluster,
                    options);
}

// The exact cost model's predictions, in the plan, with the minibatches in flight the pipedream
// schedule needs (choose_in_flight) where fewer than PipeDream's rule predict no slower; returns
// the estimate they come from. `under_rule`: the plan's estimate under the rule, where the caller
// has it (best_placed: a third of the neighbours' estimates were this one again).
PlanEstimate predict(Plan& plan, const StageSums& sums, const profile::Profile& profile, const Cluster& cluster,
                     const PlanOptions& options, std::optional<PlanEstimate> under_rule = std::nullopt) {
  for (auto& st : plan.stages) st.in_flight = 0;
  PlanEstimate e = under_rule ? std::move(*under_rule) : evaluate_plan(plan, sums, profile, cluster, options);
  Plan fewer = plan;
  choose_in_flight(fewer, e, profile);
  PlanEstimate f = evaluate_plan(fewer, sums, profile, cluster, options);
  if (f.pipeline_ms_per_minibatch <= e.pipeline_ms_per_minibatch * (1 + 1e-9)) plan = std::move(fewer), e = f;
  plan.pipeline_ms_per_minibatch = e.pipeline_ms_per_minibatch;
  for (int s = 0; s < plan.num_stages(); ++s)
    plan.stages[s].compute_ms = e.stages[s].compute_ms, plan.stages[s].comm_ms = e.stages[s].comm_ms,
    plan.stages[s].time_ms = e.stages[s].time_ms;
  return e;
}

// Data parallelism on every worker of `cluster` by the exact rules (its all-reduce buckets
// overlapping its backward): the baseline a pipetrain plan records, 0 where it does not fit.
// Computed once per cluster, not per candidate: it is the same for all of them.
double exact_data_parallel_ms(const profile::Profile& profile, const Cluster& cluster, const PlanOptions& options) {
  PlanEstimate e = evaluate_plan(data_parallel_plan(profile.num_layers(), cluster.workers()), profile, cluster, options);
  return e.fits_memory ? e.pipeline_ms_per_minibatch : 0;
}

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
  Plan one = data_parallel_plan(profile.num_layers(), cluster.workers());
  double compute = exact_stage_sums(one, profile, cluster).compute[0];
  int m = static_cast<int>(compute / (data_parallel_ms * (1 + 1e-9)));
  while (m > 0 && compute / m <= data_parallel_ms * (1 + 1e-9)) --m;  // the largest m ruled out
  return m + 1;
}

// Worker orders the planner tries for a searched plan (the search numbers workers stage by
// stage): as searched and, on clusters of several levels, reversed (the last stage first) and
// spread (consecutive replicas in different units of the innermost level). Stage s takes the
// next `replicas` entries of the order.
std::vector<std::vector<int>> placements(const Cluster& cluster) {
  int W = cluster.workers();
  std::vector<int> order(W);
  for (int w = 0; w < W; ++w) order[w] = w;
  std::vector<std::vector<int>> out = {order};
  // On one level every worker's links are alike: any order predicts the same.
  if (cluster.levels.size() == 1) return out;
  std::reverse(order.begin(), order.end());
  out.push_back(order);
  int per = cluster.levels[0].fan_out, units = W / per;
  if (per > 1) {
    for (int i = 0; i < W; ++i) order[i] = (i % units) * per + i / units;
    out.push_back(order);
  }
  return out;
}

Plan placed(Plan plan, const std::vector<int>& order) {
  size_t next = 0;
  for (auto& st : plan.stages) {
    for (int& w : st.workers) w = order[next++];
    std::sort(st.workers.begin(), st.workers.end());
  }
  return plan;
}

// `plan` in the placement the exact model predicts fastest among those that fit the memory
// (ties keep the first order), with its predictions; no stages when none fits. Fewer minibatches
// in flight than PipeDream's rule are never predicted faster (choose_in_flight only lowers them,
// which only lengthens the in-flight term), so a placement's time is its estimate under the rule,
// and predict's second estimate is needed only for the placement chosen, or where the rule's
// stashes do not fit the memory (GNMT's neighbour plans on 4x4: 6 estimates each, now 4).
Plan best_placed(const Plan& plan, const profile::Profile& profile, const Cluster& cluster,
                 const PlanOptions& options) {
  Plan best;
  std::optional<PlanEstimate> best_e;  // its estimate under the rule, where not predicted yet
  double best_ms = 0;
  bool predicted = false;  // best's in-flight counts and predictions are set
  const StageSums sums = exact_stage_sums(plan, profile, cluster);  // the same in every placement
  for (auto order : placements(cluster)) {
    // A plan on fewer workers (smaller_clusters) takes ids 0..k-1, which are that smaller cluster.
    order.erase(std::remove_if(order.begin(), order.end(), [&](int w) { return w >= plan.workers; }), order.end());
    Plan p = placed(plan, order);
    for (auto& st : p.stages) st.in_flight = 0;
    PlanEstimate e = evaluate_plan(p, sums, profile, cluster, options);
    bool full = !e.fits_memory;
    if (full && !predict(p, sums, profile, cluster, options, e).fits_memory) continue;
    double ms = full ? p.pipeline_ms_per_minibatch : e.pipeline_ms_per_minibatch;
    if (best.stages.empty() || ms < best_ms) {
      best = std::move(p), best_ms = ms, predicted = full;
      if (!full) best_e = std::move(e);
    }
  }
  if (!best.stages.empty() && !predicted) predict(best, sums, profile, cluster, options, std::move(best_e));
  return best;
}

// The plan of a searched sequence of stages, with its predictions: the pipetrain model's exact
// evaluation, or the search's own figures for PipeDream's.
Plan to_plan(const std::vector<SearchStage>& stages, double search_ms, const StateSpace& space,
             double data_parallel_ms, const profile::Profile& profile, const Cluster& cluster,
             const PlanOptions& options) {
  Plan plan;
  plan.model = profile.model;
  for (const auto& t : profile.ties) plan.ties.push_back(t.layers);
  plan.batch_size = profile.batch_size;
  plan.cost_model = name_of(options.cost_model);
  plan.workers = cluster.workers();
  for (size_t i = 0; i < stages.size(); ++i) {
    const SearchStage& ss = stages[i];
    Stage st;
    st.layers = space.stage_layers(ss.from, ss.to);
    if (i == 0) {
      st.layers.insert(st.layers.end(), space.pinned_first.begin(), space.pinned_first.end());
      std::sort(st.layers.begin(), st.layers.end());
    }
    st.workers = ss.workers;
    std::sort(st.workers.begin(), st.workers.end());
    st.replicas = static_cast<int>(st.workers.size());
    st.compute_ms = ss.compute_ms;
    st.comm_ms = ss.comm_ms;
    plan.stages.push_back(std::move(st));
  }
  // Detached sinks go with the stage of the layer they read (stage 0 for an Input).
  for (int l : space.attached) {
    int producer = profile.layers[l].inputs.front(), home = 0;
    for (int st = 0; st < plan.num_stages(); ++st)
      if (std::binary_search(plan.stages[st].layers.begin(), plan.stages[st].layers.end(), producer)) home = st;
    auto& layers = plan.stages[home].layers;
    layers.insert(std::upper_bound(layers.begin(), layers.end(), l), l);
  }
  plan.pipeline_ms_per_minibatch = search_ms;
  // Data parallelism may not fit the memory limit (pipetrain model); 0 then means "not possible".
  plan.data_parallel_ms_per_minibatch = data_parallel_ms == kInfinity ? 0 : data_parallel_ms;
  if (!space.note.empty()) plan.notes.push_back(space.note);
  if (data_parallel_ms == kInfinity) plan.notes.push_back("data parallelism does not fit the memory limit");
  check_plan_fits(plan, profile, "planner");
  return plan;
}

}  // namespace

Plan make_plan(const profile::Profile& profile, const Cluster& cluster, const PlanOptions& options) {
  Searched searched = run_search(profile, cluster, options);
  Plan plan = to_plan(searched.result.stages, searched.result.pipeline_ms, *searched.space,
                      searched.result.data_parallel_ms, profile, cluster, options);
  if (options.cost_model == CostModel::kPipetrain) {
    predict(plan, exact_stage_sums(plan, profile, cluster), profile, cluster, options);
    if (plan.data_parallel_ms_per_minibatch > 0)
      plan.data_parallel_ms_per_minibatch = exact_data_parallel_ms(profile, cluster, options);
  }
  return plan;
}

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
    options.progress(str("searching splits of ", profile.num_layers(), " layers over ", cluster.workers(), " workers (",
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
    const Offered& o = unique[i];
    placed_plans[i] = with_baseline(best_placed(to_plan(o.alt->stages, o.alt->pipeline_ms, *space,
                                                        o.result->data_parallel_ms, profile, cluster, options),
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

namespace {

// The unit counts below n that smaller_clusters tries, most first: every one up to
// kEveryCountUpTo units; above, the eight just below n and n x j / 16, so that a cluster of
// 1,024 plans 23 smaller ones, not 1,023 (a plan on 1,000 of them differs from one on 1,008 by
// less than the simulator's noise).
constexpr int kEveryCountUpTo = 32;
std::vector<int> fewer_units(int n) {
  std::set<int, std::greater<int>> ks;
  for (int k = n - 1; k >= 1; --k)
    if (n <= kEveryCountUpTo || k >= n - 8 || k == 1) ks.insert(k);
  if (n > kEveryCountUpTo)
    for (int j = 1; j < 16; ++j) ks.insert(n * j / 16);
  return {ks.begin(), ks.end()};
}

}  // namespace

std::vector<Cluster> smaller_clusters(const Cluster& cluster) {
  std::vector<Cluster> out;
  Cluster unit = cluster;
  while (!unit.levels.empty()) {
    for (int k : fewer_units(unit.levels.back().fan_out)) {
      Cluster c = unit;
      c.levels.back().fan_out = k;
      if (k == 1 && c.levels.size() > 1) c.levels.pop_back();  // one unit: the level below's cluster
      out.push_back(c);
    }
    if (unit.levels.size() == 1) break;
    unit.levels.pop_back();  // one unit of the outermost level, already listed (k = 1)
  }
  return out;
}

std::vector<Plan> neighbour_plans(const Plan& plan, const profile::Profile& profile, const Cluster& cluster,
                                  const PlanOptions& options) {
  std::vector<Plan> shapes;  // replicas and layers changed; workers assigned below
  auto add = [&](Plan p) {
    for (auto& st : p.stages) std::sort(st.layers.begin(), st.layers.end());
    shapes.push_back(std::move(p));
  };
  int S = plan.num_stages();
  for (int i = 0; i + 1 < S; ++i) {
    const auto& a = plan.stages[i].layers;
    const auto& b = plan.stages[i + 1].layers;
    if (a.size() > 1) {  // a's last layer to b
      Plan p = plan;
      p.stages[i].layers.pop_back();
      p.stages[i + 1].layers.push_back(a.back());
      add(std::move(p));
    }
    if (b.size() > 1) {  // b's first layer to a
      Plan p = plan;
      p.stages[i + 1].layers.erase(p.stages[i + 1].layers.begin());
      p.stages[i].layers.push_back(b.front());
      add(std::move(p));
    }
    // Merged, then any one replica to any other stage (or none): not under --straight, where
    // no stage is replicated (the climbs made 3-1-1-1-1 of ResNet-101's straight plans).
    if (options.straight) continue;
    Plan m = plan;
    m.stages[i].layers.insert(m.stages[i].layers.end(), b.begin(), b.end());
    m.stages[i].replicas += plan.stages[i + 1].replicas;
    m.stages.erase(m.stages.begin() + i + 1);
    for (int to = 0; to < m.num_stages(); ++to) {
      if (to == i) continue;
      Plan p = m;
      p.stages[i].replicas -= 1, p.stages[to].replicas += 1;
      add(std::move(p));
    }
    add(std::move(m));
  }
  for (int from = 0; from < S; ++from)
    for (int to = 0; to < S && plan.stages[from].replicas > 1; ++to)
      if (to != from) {
        Plan p = plan;
        p.stages[from].replicas -= 1, p.stages[to].replicas += 1;
        add(std::move(p));
      }
  // Each placed as the exact model predicts fastest, side by side (GNMT-16 on 4x4: 300 shapes,
  // three placements each), kept in the order made.
  std::vector<Plan> placed(shapes.size());
  side_by_side(shapes.size(), [&](size_t i) {
    assign_workers(shapes[i]);
    try {
      check_plan_fits(shapes[i], profile, "neighbour plan");
    } catch (const ConfigError&) {
      return;  // a moved layer's input would come from a later stage
    }
    placed[i] = best_placed(shapes[i], profile, cluster, options);
  });
  std::vector<Plan> out;
  for (Plan& p : placed)
    if (!p.stages.empty()) out.push_back(std::move(p));
  std::stable_sort(out.begin(), out.end(), [](const Plan& a, const Plan& b) {
    return a.pipeline_ms_per_minibatch < b.pipeline_ms_per_minibatch;
  });
  return out;
}

}  // namespace pt::plan
