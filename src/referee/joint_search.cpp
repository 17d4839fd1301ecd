// The joint search (joint_search.h): each configuration built, capped by the memory model, with
// recomputation where it is over, replayed to its steady state and ranked by the objective; each
// schedule's best then given its own all-reduce bucket.
#include "referee/joint_search.h"

#include <algorithm>
#include <array>
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
#include "referee/splits_under_cap.h"
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

// Each stage's compute and communication per minibatch of the step, one replica's share, from its
// replay: the plan table's columns, as the planner gives them (plan/realised_cost.cpp): the
// sends of its busiest worker on its busiest level (links of two levels carry at once), and the
// all-reduce left exposed, over the steady window, by the worker's compute; its time the larger
// of compute and sends, plus that all-reduce. Every all-reduce counted whole, the warm-up's too,
// read 3.093 ms for an AlexNet stage `plan` put at 2.517 (its sends; the deferred step hides the
// rest). The even split's own figures are at the profile's batch, not the step's, and count no
// sends (comm 0.000 for a VGG-16 cut sending 102.8 MB a minibatch). The replicas' mean sends,
// every level's summed, gave VGG-16 15-1 on 4x4 0.281 and 4.217 ms where `plan` gives 0.343 and
// 4.110; the larger of the two columns as the time put GNMT-16's bottleneck on stage 2 (17.8 ms
// of compute) where stage 3 computes 14.3 and waits 8.2 for its all-reduce.
void stage_figures(const schedule::Trace& t, const metrics::Metrics& steady, const plan::Cluster& cluster,
                   plan::Plan& p) {
  std::vector<double> compute(p.num_stages(), 0.0), exposed(p.num_stages(), 0.0);
  // The minibatches the trace holds, its own count: the count a lengthened replay was asked for
  // is not a synchronous one's, which covers its own (dualpipev at 32 microbatches printed each
  // stage's compute at 1/8: 1.878 ms for a layer of 15.02).
  std::set<int> minibatches;
  std::vector<std::map<std::pair<int, int>, double>> sends(p.num_stages());  // (worker, level) -> ms
  // The optimizer's steps too, as the planner's compute counts them (forward, backward, step):
  // without them a `--schedule auto` plan's table put VGG-16's second stage at 33.986 ms where
  // `plan` put the same stage at 39.563.
  auto computes = [](schedule::ActionKind k) { return schedule::is_compute(k) || k == schedule::ActionKind::kStep; };
  const double from = steady.window_start_ms, to = steady.window_end_ms;
  for (const auto& list : t.workers)
    for (const auto& e : list) {
      int st = e.action.stage;
      if (st < 0 || st >= p.num_stages()) continue;
      double d = e.end_ms - e.start_ms;
      if (computes(e.action.kind)) compute[st] += d;
      if (e.action.kind == schedule::ActionKind::kForward) minibatches.insert(e.action.microbatch / std::max(1, t.microbatches));
      if (schedule::is_send(e.action.kind) && e.action.peer >= 0 && e.action.peer != e.action.worker)
        sends[st][{e.action.worker, cluster.level_between(e.action.worker, e.action.peer)}] += d;
      if (e.action.kind != schedule::ActionKind::kAllReduce) continue;
      double a = std::max(e.start_ms, from), b = std::min(e.end_ms, to), hidden = 0;
      if (b <= a) continue;
      for (const auto& c : list)  // one compute at a time on a worker: the overlaps add up
        if (computes(c.action.kind)) hidden += std::max(0.0, std::min(b, c.end_ms) - std::max(a, c.start_ms));
      exposed[st] += b - a - hidden;
    }
  // The steady window's minibatches: its length at the steady pace.
  double in_window = steady.ms_per_minibatch > 0 ? (to - from) / steady.ms_per_minibatch : 0;
  for (int st = 0; st < p.num_stages(); ++st) {
    const double m = std::max<double>(1, static_cast<double>(minibatches.size())), r = p.stages[st].replicas;
    double link = 0;
    for (const auto& [where, ms] : sends[st]) link = std::max(link, ms / m);
    const double allreduce = in_window > 0 ? exposed[st] / (in_window * r) : 0;
    plan::Stage& stage = p.stages[st];
    stage.compute_ms = compute[st] / (m * r);
    stage.comm_ms = link + allreduce;
    stage.time_ms = std::max(stage.compute_ms, link) + allreduce;
  }
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
  stage_figures(rp.trace, rp.metrics, cluster, c.plan);
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
  std::set<std::string> weighed;
  // `deferring`: one over the cap joins `over` (a split of it under the cap is not searched again).
  auto weigh = [&](detail::Trial t, bool deferring) {
    if (!weighed.insert(detail::trial_key(t)).second) return;
    // --straight holds here too: one worker a stage, no copies (VGG-16 on 4 workers with
    // --straight --memory 4GB chose 2-2, with --schedule auto data parallelism).
    if (plan_options.straight && std::any_of(t.plan.stages.begin(), t.plan.stages.end(),
                                   [](const plan::Stage& st) { return st.replicas > 1; })) {
      ++r.not_straight;
      return;
    }
    // A tie split over stages needs the stages to step together: an asynchronous schedule
    // would train its copies apart (runtime/tied_gradients.h), and train refuses it.
    if (!schedule::schedule_flushes(t.kind) && !plan::split_ties(t.plan, profile).empty()) {
      ++r.async_split_tie;
      return;
    }
    const detail::Trial as_given = t;
    profile::Profile prof = profile::with_batch_size(profile, t.batch);
    schedule::ScheduleOptions schedule_options, given_options;
    schedule_options.microbatches = t.microbatches;
    schedule_options.chunks = t.chunks;
    schedule_options.minibatches = t.minibatches;
    // Without recomputation; over the cap, with it where needed, then everywhere.
    for (int mode = 0; mode < 3; ++mode) {
      try {
        // Weighed for the plan as it stands, recomputation included, as train weighs it.
        schedule_options = sim::weigh_schedule(t.kind, t.plan, schedule_options, prof, cluster);
        schedule::Schedule s = schedule::make_unvalidated_schedule(t.kind, t.plan, schedule_options);
        if (mode == 0) ++r.considered, given_options = schedule_options;
        auto memory = schedule::memory_over_long_run(t.kind, t.plan, schedule_options, prof, joint.memory, &s);
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
        c.memory = memory;
        c.peak_memory = peak;
        // Ranked by few BatchNorm samples first (ranks_first), each side has its own best.
        double& best = best_objective[few_batch_norm_samples(c.plan, profile, joint)];
        if (c.objective_ms_per_sample <= best * (1 + 1e-9)) {
          schedule::validate(s);
          best = std::min(best, c.objective_ms_per_sample);
        }
        r.ranked.push_back(std::move(c));
        break;
      } catch (const ConfigError&) {
        break;  // the kind cannot run this plan (e.g. fewer microbatches than replicas)
      } catch (const std::exception&) {
        ++r.invalid;  // a generator's schedule the validator rejects: left out, and counted
        break;
      }
    }
  };
  for (detail::Trial& t : detail::trials(profile, cluster, plan_options, joint)) weigh(std::move(t), true);
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
        str(t.kind, " m", t.microbatches, " v", t.chunks, " B", t.batch, " n", t.minibatches, t.plan.deferred_step ? " ds" : "");
    for (const auto& st : t.plan.stages) key += str(" | f", st.in_flight, " x", st.replicas);
    auto search = searches.try_emplace(key, profile, t, cluster, joint).first;
    for (plan::Plan& fitting : search->second.splits(t.plan)) {
      detail::Trial split = t;
      split.plan = std::move(fitting);
      weigh(std::move(split), false);
    }
  }
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
