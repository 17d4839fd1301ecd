// The joint search (joint_search.h): each configuration built, capped by the memory model, with
// recomputation where it is over, replayed to its steady state and ranked by the objective; each
// schedule's best then given its own all-reduce bucket.
#include "referee/joint_search.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/units.h"
#include "plan/split_ties.h"
#include "referee/joint_trials.h"
#include "referee/referee.h"
#include "referee/split_climb.h"
#include "referee/splits_under_cap.h"
#include "referee/stage_figures.h"
#include "referee/steady_replay.h"
#include "schedule/generators.h"
#include "schedule/memory.h"
#include "schedule/validate.h"
#include "sim/weigh_schedule.h"

namespace pt::referee {
namespace {

// The stages held by workers whose modelled total is over the cap.
std::vector<bool> stages_over(const schedule::Schedule& s, const std::vector<schedule::WorkerMemory>& m, int64_t cap) {
  std::vector<bool> over(s.num_stages, false);
  for (int st = 0; st < s.num_stages; ++st)
    for (int w : s.stage_workers[st]) over[st] = over[st] || m[w].total() > cap;
  return over;
}

// A configuration's replay with `bucket_bytes`: over its schedule's minibatches and, where the
// window has not settled or repeated, longer, from the trial's own count too (2BW's few dozen):
// GNMT-Large's 2BW on 16 workers measured 95.0 ms a minibatch over 24, where it runs at 97.7
// from 32 on, and a shorter replay would rank it ahead of a plan that runs faster.
SteadyReplay replay_config(const schedule::Schedule& s, const plan::Plan& plan,
                           const schedule::ScheduleOptions& schedule_options, const profile::Profile& prof,
                           const plan::Cluster& cluster, int64_t bucket_bytes, const JointOptions& joint) {
  SteadyReplayOptions how;
  how.sim.bucket_bytes = bucket_bytes;
  how.sim.pin_as_train = true;
  how.sim.weight_prediction = joint.memory.weight_prediction;
  return steady_replay(s.kind, plan, schedule_options, prof, cluster, how, &s);
}

// The shapes of each kind whose best split the search climbs from (split_climb.h).
constexpr int kClimbsPerKind = 3;

}  // namespace

double staleness_step_multiplier(const StalenessSteps& measured, int k) {
  PT_CHECK(measured.size() >= 2, "staleness steps need two measured points");
  size_t i = 1;
  while (i + 1 < measured.size() && measured[i].first < k) ++i;
  const auto& [k0, s0] = measured[i - 1];
  const auto& [k1, s1] = measured[i];
  return s0 + (s1 - s0) * (k - k0) / static_cast<double>(k1 - k0);
}

namespace {

// A configuration's figures from its replay (the time per sample weighed as the objective says).
void take_replay(Configuration& c, SteadyReplay rp, const plan::Cluster& cluster, const JointOptions& joint) {
  detail::stage_figures(rp.trace, rp.metrics, cluster, c.plan);
  c.replayed_minibatches = rp.minibatches;
  c.simulated = std::move(rp.metrics);
  c.ms_per_sample = c.simulated.ms_per_minibatch / static_cast<double>(c.plan.batch_size);
  c.objective_ms_per_sample = c.ms_per_sample * (joint.objective == "time-to-accuracy" ? staleness_step_multiplier(joint.staleness_steps, c.staleness) : 1.0);
  c.plan.pipeline_ms_per_minibatch = c.plan.simulated_ms_per_minibatch = c.simulated.ms_per_minibatch;
}

// A trial's configuration on schedule `s` (options `o`, `prof` the profile at its batch), replayed.
Configuration configured(const detail::Trial& t, const schedule::Schedule& s, const schedule::ScheduleOptions& o,
                         const profile::Profile& prof, const profile::Profile& profile, const plan::Cluster& cluster,
                         const plan::PlanOptions& plan_options, const JointOptions& joint) {
  Configuration c;
  c.plan = t.plan;
  c.plan.batch_size = t.batch;
  c.run = o;
  c.workers = s.num_workers();
  c.staleness = s.flush ? 0 : *std::max_element(s.weight_versions.begin(), s.weight_versions.end()) - 1;
  take_replay(c, replay_config(s, t.plan, o, prof, cluster, plan_options.bucket_bytes, joint), cluster, joint);
  plan::Plan& p = c.plan;
  p.schedule = t.kind;
  p.microbatches = t.kind == "pipedream" ? 0 : t.microbatches;
  p.chunks = schedule::is_interleaved(t.kind) ? t.chunks : 0;
  p.batch_size = t.batch;
  p.model = profile.model;
  if (p.cost_model.empty() || p.cost_model == "even") p.cost_model = "pipetrain";
  p.simulated_schedule = t.kind;
  return c;
}

// JointOptions::own_buckets for one configuration: replayed as its trial was with each of
// choose_bucket's sizes, the fastest kept (the options' at a tie); bucket_mb records it.
void own_bucket(Configuration& c, const profile::Profile& profile, const plan::Cluster& cluster,
                const plan::PlanOptions& plan_options, const JointOptions& joint) {
  bool replicated = false;
  for (const auto& st : c.plan.stages) replicated = replicated || st.replicas > 1;
  if (!replicated) return;
  profile::Profile prof = profile::with_batch_size(profile, c.plan.batch_size);
  schedule::Schedule s = schedule::make_unvalidated_schedule(c.plan.schedule, c.plan, c.run);
  double own_mb = static_cast<double>(plan_options.bucket_bytes) / (1 << 20);
  c.plan.bucket_mb = own_mb;
  for (double mb : kBucketChoicesMb) {
    if (std::abs(mb - own_mb) <= 1e-9) continue;
    SteadyReplay rp = replay_config(s, c.plan, c.run, prof, cluster, static_cast<int64_t>(mb * (1 << 20)), joint);
    if (rp.metrics.ms_per_minibatch < c.simulated.ms_per_minibatch * (1 - 1e-9)) {
      take_replay(c, std::move(rp), cluster, joint);
      c.plan.bucket_mb = mb;
    }
  }
}

// Whether data parallelism on every worker (each the profile's batch, as its trial runs it, no
// recomputation) fits the cap: only then is it the baseline a pinned search is compared with.
bool data_parallelism_fits(const profile::Profile& profile, const plan::Cluster& cluster, const JointOptions& joint) {
  if (joint.memory_cap == 0) return true;
  const int n = cluster.workers();
  plan::Plan dp = plan::data_parallel_plan(profile.num_layers(), n);
  profile::Profile prof = profile::with_batch_size(profile, profile.batch_size * n);
  schedule::ScheduleOptions options;
  options.microbatches = n;
  options = sim::weigh_schedule("dp", dp, options, prof, cluster);
  schedule::Schedule s = schedule::make_unvalidated_schedule("dp", dp, options);
  return schedule::peak_memory(schedule::memory_over_long_run("dp", dp, options, prof, joint.memory, &s)) <=
         joint.memory_cap;
}

// Equal objectives, to the replay's rounding (the same plan's steps in another order differ at 1e-15).
bool as_fast(const Configuration& a, const Configuration& b) {
  double ta = a.objective_ms_per_sample, tb = b.objective_ms_per_sample;
  return std::abs(ta - tb) <= 1e-9 * std::max(ta, tb);
}

// Why a configuration as fast as the best ranks after it (ranks_first's order).
std::string as_fast_but(const Configuration& c, const Configuration& best) {
  if (c.workers != best.workers) return "as fast, on more workers";
  if (c.staleness != best.staleness)
    return str("as fast, its weights ", counted(c.staleness, "update"), " stale against ", best.staleness);
  if (c.peak_memory != best.peak_memory)
    return str("as fast, its peak ", human_bytes(static_cast<double>(c.peak_memory)), " against ",
               human_bytes(static_cast<double>(best.peak_memory)));
  return "as fast; an equal configuration was found first";
}

}  // namespace

bool few_batch_norm_samples(const plan::Plan& plan, const profile::Profile& profile, const JointOptions& joint) {
  return profile.batch_norms > 0 && joint.microbatches == 0 && plan.microbatches > 1 &&
         plan.batch_size / plan.microbatches < profile::kFewBatchNormSamples;
}

JointResult joint_search(const profile::Profile& profile, const plan::Cluster& cluster,
                         const plan::PlanOptions& plan_options, const JointOptions& joint) {
  for (const auto& k : joint.schedules) {
    const auto& kinds = schedule::schedule_kinds();
    if (std::find(kinds.begin(), kinds.end(), k) == kinds.end())
      throw UsageError(str("--schedule: unknown schedule '", k, "'"));
  }
  if (joint.objective != "throughput" && joint.objective != "time-to-accuracy")
    throw UsageError(str("--objective: must be throughput or time-to-accuracy, got '", joint.objective, "'"));
  const auto began = std::chrono::steady_clock::now();
  JointResult r;
  r.smallest_peak = std::numeric_limits<int64_t>::max();
  // Schedules are built unvalidated, as the referee's replays are (the tests validate every
  // generator on every shape): only one that could be the choice, as good as the best so far, is
  // validated. Validating each was a fifth of the search.
  std::array<double, 2> best_objective = {std::numeric_limits<double>::infinity(),
                                           std::numeric_limits<double>::infinity()};
  // Trials over the cap at every recomputation that a split of their stages under it may save
  // (splits_under_cap.h), each with its objective as it stands.
  std::vector<std::pair<double, detail::Trial>> over;
  // Those that fit, as given (the climb's starting points), and each trial's objective by its key.
  std::vector<detail::Weighed> fits;
  std::map<std::string, double> weighed;
  constexpr double kNone = std::numeric_limits<double>::infinity();
  // The trial's objective where it fits (kNone where not). `deferring`: one over the cap joins
  // `over` (a split of it under the cap is not searched again). `climbing`: a split the climb
  // tries, which the counts of those left out leave out.
  auto weigh = [&](detail::Trial t, bool deferring, bool climbing = false) -> double {
    auto [seen, fresh] = weighed.try_emplace(detail::trial_key(t), kNone);
    if (!fresh) return seen->second;
    double& objective = seen->second;
    // --straight holds here too: one worker a stage, no copies (VGG-16 on 4 workers with
    // --straight --memory 4GB chose 2-2, with --schedule auto data parallelism).
    if (plan_options.straight && std::any_of(t.plan.stages.begin(), t.plan.stages.end(),
                                   [](const plan::Stage& st) { return st.replicas > 1; })) {
      ++r.not_straight;
      return kNone;
    }
    // A tie split over stages needs the stages to step together: an asynchronous schedule
    // would train its copies apart (runtime/tied_gradients.h), and train refuses it.
    if (!schedule::schedule_flushes(t.kind) && !plan::split_ties(t.plan, profile).empty()) {
      if (!climbing) ++r.async_split_tie;
      return kNone;
    }
    const detail::Trial as_given = t;
    profile::Profile prof = profile::with_batch_size(profile, t.batch);
    schedule::ScheduleOptions schedule_options, given_options;
    schedule_options.microbatches = t.microbatches;
    schedule_options.chunks = t.chunks;
    // An asynchronous run's memory over as many minibatches as its replay took to settle, once
    // known (0: memory_minibatches'), as `simulate` weighs it: ResNet-50 13-3 under pipedream on
    // 4x4 held 11.74 GiB at most over the 234 the memory model ran, 12.02 from 468 on, and `plan
    // --memory 11.9GB --top 8` listed it as fitting.
    int memory_run = 0;
    // Without recomputation; over the cap, with it where needed, then everywhere.
    for (int mode = 0; mode < 3; ++mode) {
      try {
        // Weighed for the plan as it stands, recomputation included, as train weighs it.
        schedule_options = sim::weigh_schedule(t.kind, t.plan, schedule_options, prof, cluster);
        schedule::Schedule s = schedule::make_unvalidated_schedule(t.kind, t.plan, schedule_options);
        if (mode == 0 && memory_run == 0) ++r.considered, given_options = schedule_options;
        schedule::ScheduleOptions memory_options = schedule_options;
        if (memory_run > 0) memory_options.minibatches = memory_run;
        auto memory = memory_run > 0
                          ? schedule::memory_over_long_run(t.kind, t.plan, memory_options, prof, joint.memory)
                          : schedule::memory_over_long_run(t.kind, t.plan, schedule_options, prof, joint.memory, &s);
        int64_t peak = schedule::peak_memory(memory);
        r.smallest_peak = std::min(r.smallest_peak, peak);
        if (joint.memory_cap > 0 && peak > joint.memory_cap) {
          if (mode == 2) {
            ++r.over_cap;
            if (deferring && detail::splits_under_cap(as_given)) {
              s = schedule::make_unvalidated_schedule(t.kind, as_given.plan, given_options);
              over.emplace_back(configured(as_given, s, given_options, prof, profile, cluster, plan_options, joint)
                                    .objective_ms_per_sample, as_given);
            }
            break;
          }
          std::vector<bool> held_over = stages_over(s, memory, joint.memory_cap);
          for (int st = 0; st < t.plan.num_stages(); ++st)
            t.plan.stages[st].recompute = mode == 1 || held_over[st] || t.plan.stages[st].recompute;
          continue;
        }
        Configuration c = configured(t, s, schedule_options, prof, profile, cluster, plan_options, joint);
        if (!s.flush && c.replayed_minibatches > std::max(memory_run, schedule::memory_minibatches(s, joint.memory))) {
          memory_run = c.replayed_minibatches;
          --mode;  // this mode again, its memory over the longer run
          continue;
        }
        c.memory = memory;
        c.peak_memory = peak;
        // Ranked by few BatchNorm samples first (ranks_first), each side has its own best.
        double& best = best_objective[few_batch_norm_samples(c.plan, profile, joint)];
        if (c.objective_ms_per_sample <= best * (1 + 1e-9)) {
          schedule::validate(s);
          best = std::min(best, c.objective_ms_per_sample);
        }
        objective = c.objective_ms_per_sample;
        fits.push_back({objective, few_batch_norm_samples(c.plan, profile, joint), as_given});
        r.ranked.push_back(std::move(c));
        break;
      } catch (const ConfigError&) {
        break;  // the kind cannot run this plan (e.g. fewer microbatches than replicas)
      } catch (const std::exception&) {
        ++r.invalid;  // a generator's schedule the validator rejects: left out, and counted
        break;
      }
    }
    return objective;
  };
  for (detail::Trial& t : detail::trials(profile, cluster, plan_options, joint, &r.ungrouped)) weigh(std::move(t), true);
  // Those over the cap, fastest first, each split so that its workers fit where it could still
  // rank first: such a split is no better balanced than the one it replaces (searching every
  // one took DenseNet-121 on 16 workers minutes).
  std::stable_sort(over.begin(), over.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  // By the trial's kind, settings and stages (where its workers are holds no more or less; the
  // chunks a worker holds do: interleaved's 2 chunks on 4 workers and 4 on 2 have 8 stages each).
  std::map<std::string, detail::SplitsUnderCap> searches;
  for (auto& [objective, t] : over) {
    plan::Plan given = t.plan;
    given.microbatches = t.kind == "pipedream" ? 0 : t.microbatches, given.batch_size = t.batch;
    if (objective > best_objective[few_batch_norm_samples(given, profile, joint)] * (1 + 1e-9)) continue;
    std::string key =
        str(t.kind, " m", t.microbatches, " v", t.chunks, " B", t.batch, t.plan.deferred_step ? " ds" : "");
    for (const auto& st : t.plan.stages) key += str(" | f", st.in_flight, " x", st.replicas);
    auto search = searches.try_emplace(key, profile, t, cluster, joint).first;
    for (plan::Plan& fitting : search->second.splits(t.plan)) {
      detail::Trial split = t;
      split.plan = std::move(fitting);
      weigh(std::move(split), false);
    }
  }
  // The best splits climbed (split_climb.h): a few shapes of each kind, fastest first.
  // Where each climb ends is ranked, not the splits it passed on its way (`--top` listed a climb's
  // steps, each a layer apart, in place of other shapes; a step as fast as the end, with a smaller
  // peak, goes too: the climb keeps the first of equals it finds).
  const int built = r.considered;
  const size_t before_climbs = r.ranked.size();
  const auto deadline = plan_options.planning_deadline(began);
  std::set<std::string> ends;
  const std::vector<double> bytes_after = profile::bytes_after_each_layer(profile);
  for (const detail::Weighed& start : detail::climb_starts(fits, kClimbsPerKind))
    ends.insert(detail::trial_key(detail::climb_split(
        start.trial, start.objective, [&](const detail::Trial& t) { return weigh(t, false, true); }, bytes_after,
        deadline, r.climb_timed_out)));
  r.climbed = r.considered - built;
  size_t kept = before_climbs;
  for (size_t i = before_climbs; i < r.ranked.size(); ++i)
    if (ends.count(detail::trial_key(fits[i].trial))) {
      if (kept != i) r.ranked[kept] = std::move(r.ranked[i]);  // (a move onto itself empties it)
      ++kept;
    }
  r.ranked.erase(r.ranked.begin() + static_cast<std::ptrdiff_t>(kept), r.ranked.end());
  // Nothing is added to a configuration's time; at an equal objective, fewer workers first (the
  // same throughput for less hardware), as the referee ranks (ranks_before), then the fresher
  // weights, then the smaller peak: GPT-2048 on 4x4 under 80 GB chose 2bw's 8 microbatches at
  // 65.6 GiB, weights 2 updates stale, over 16 as fast at 35.9 GiB and 1 ("0.0% slower"). A BatchNorm model's
  // microbatches of fewer than kFewBatchNormSamples come after every other, unless --microbatches
  // pins them: the fastest split regnet_y_400mf (53 BatchNorms, batch 32) into 16 microbatches
  // of 2, and it diverged where one microbatch of 32 trained.
  auto ranks_first = [few = [&](const Configuration& c) { return few_batch_norm_samples(c.plan, profile, joint); }](
                         const Configuration& a, const Configuration& b) {
    if (few(a) != few(b)) return few(b);
    double ta = a.objective_ms_per_sample, tb = b.objective_ms_per_sample;
    if (!as_fast(a, b)) return ta < tb;
    if (a.workers != b.workers) return a.workers < b.workers;
    if (a.staleness != b.staleness) return a.staleness < b.staleness;
    return a.peak_memory < b.peak_memory;
  };
  std::stable_sort(r.ranked.begin(), r.ranked.end(), ranks_first);
  // The ranking's replays all used the options' bucket, as the referee's do, and another bucket
  // can reverse it (Referee's own_buckets: ResNet-18 on 4x4, pipedream's 15-1 at 17.28 ms per
  // minibatch against data parallelism at 18.61 with 25 MiB and 16.28 with 1 MiB).
  // Each schedule's best gets its own, as `compare`'s row for it (the search pinned to it) does,
  // so that the choice is never slower than compare's best row; and data parallelism on every
  // worker, the baseline.
  if (joint.own_buckets && !r.ranked.empty()) {
    std::set<std::string> kinds;
    for (Configuration& c : r.ranked)
      if (kinds.insert(c.plan.schedule).second || (c.plan.schedule == "dp" && c.plan.workers == cluster.workers()))
        own_bucket(c, profile, cluster, plan_options, joint);
    std::stable_sort(r.ranked.begin(), r.ranked.end(), ranks_first);
    const Configuration& first = r.ranked.front();  // validated, as every possible choice above
    schedule::validate(schedule::make_unvalidated_schedule(first.plan.schedule, first.plan, first.run));
  }
  // The baseline every plan file records: data parallelism's time per minibatch of the plan's
  // batch (pipeline_ms_per_minibatch's), from its time per sample.
  double dp_per_sample = 0;
  for (const auto& c : r.ranked)
    if (c.plan.schedule == "dp" && c.plan.workers == cluster.workers()) dp_per_sample = c.ms_per_sample;
  // A search pinned to another schedule weighed no data parallelism: where it fits it is replayed
  // here as `plan` without the joint search replays it (else the table would say "does not fit").
  if (dp_per_sample == 0 && data_parallelism_fits(profile, cluster, joint)) {
    double ms = simulate_data_parallel(profile, cluster, plan_options, "pipedream");
    // At its own bucket where the candidates got theirs (at 25 MiB alone, `plan --schedule
    // pipedream` printed 1.23x over data parallelism where compare's rows give 0.85x).
    if (joint.own_buckets) ms = data_parallel_at_its_bucket(profile, cluster, plan_options, "pipedream", ms);
    dp_per_sample = ms / static_cast<double>(profile.batch_size);
  }
  if (r.ranked.empty()) return r;
  const Configuration& best = r.ranked.front();
  for (const Configuration& c : r.ranked)
    r.faster_on_few_batch_norm_samples += c.objective_ms_per_sample < best.objective_ms_per_sample * (1 - 1e-9);
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    Configuration& c = r.ranked[i];
    c.plan.data_parallel_ms_per_minibatch =
        dp_per_sample * static_cast<double>(c.plan.batch_size > 0 ? c.plan.batch_size : profile.batch_size);
    if (i == 0) continue;
    // Against the best's figure in the same measure, said where it is not the ms a sample shown
    // (an asynchronous best's weighted one made a synchronous row 81% slower at 121% the time).
    bool weighed = joint.objective == "time-to-accuracy";
    const int64_t samples = c.plan.batch_size / std::max(1, c.plan.microbatches);
    const bool few = few_batch_norm_samples(c.plan, profile, joint);
    c.why_not = str(few ? str("BatchNorm over ", counted(samples, "sample"), " a microbatch; ") : "",
                    !as_fast(c, best)
                        ? str(fixed(100 * (c.objective_ms_per_sample / best.objective_ms_per_sample - 1), 1), "% slower")
                    : few != few_batch_norm_samples(best.plan, profile, joint) ? std::string("as fast")
                                                                                : as_fast_but(c, best),
                    weighed ? str(" to accuracy (", fixed(c.objective_ms_per_sample, 4), " against ",
                                  fixed(best.objective_ms_per_sample, 4), " ms a sample, staleness weighed)")
                            : "",
                    c.workers < cluster.workers() ? str(" (on ", c.workers, " workers)") : "",
                    "; bubble ", fixed(100 * c.simulated.bubble_fraction, 0), "%");
  }
  return r;
}

}  // namespace pt::referee
