#include "referee/joint_search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <sstream>

#include "referee/referee.h"
#include "referee/replay_ahead.h"
#include "referee/replay_floor.h"
#include "core/error.h"
#include "core/units.h"
#include "plan/split_ties.h"
#include "schedule/generators.h"
#include "schedule/validate.h"
#include "sim/simulator.h"

namespace pt::referee {
namespace {

// The most microbatches per step searched (beyond, a step's bubble is already small).
constexpr int kMostMicrobatches = 128;

// One configuration to try: a plan (workers placed), how to run it, and the batch of one step.
struct Trial {
  std::string kind;
  plan::Plan plan;
  int microbatches = 1, chunks = 1;
  int64_t batch = 1;
  int minibatches = 0;  // asynchronous kinds: minibatches simulated (0: default_minibatches)
};

// The splits of the layers into d stages tried: the even split, and the link-aware one where its
// largest stage counting the links is smaller (planner.h), at the links of the level holding all
// `workers` (the slowest a stage may cross): which runs faster, only the simulator tells. Where
// the links do not set the largest stage, the even split alone (each split doubles the replays).
std::vector<plan::Plan> splits(const profile::Profile& p, int d, const plan::Cluster& c, int workers) {
  std::vector<plan::Plan> out{plan::even_split(p, d)};
  if (d < 2 || workers < 2) return out;
  double ms_per_byte = c.transfer_ms(c.range_level(0, workers - 1), 1.0);
  plan::Plan linked = plan::link_aware_split(p, d, ms_per_byte);
  if (plan::largest_linked_stage_ms(p, linked, ms_per_byte) < plan::largest_linked_stage_ms(p, out[0], ms_per_byte) * (1 - 1e-9))
    out.push_back(std::move(linked));
  return out;
}

// d stages of `split`, r replicas each: stage-major placement puts a stage's replicas side by
// side, pipeline-major a copy's stages.
plan::Plan uniform_plan(const plan::Plan& split, int r, bool stage_major) {
  plan::Plan u = split;
  int d = u.num_stages();
  for (auto& st : u.stages) st.replicas = r;
  if (stage_major) {
    plan::assign_workers(u);
    return u;
  }
  for (int s = 0; s < d; ++s) {
    u.stages[s].workers.clear();
    for (int k = 0; k < r; ++k) u.stages[s].workers.push_back(k * d + s);
  }
  u.workers = d * r;
  return u;
}

std::vector<Trial> trials(const profile::Profile& p, const plan::Cluster& cluster, const plan::PlanOptions& po,
                          const JointOptions& o) {
  int n = cluster.workers(), layers = p.num_layers();
  int64_t B = p.batch_size;
  auto wanted = [&](const std::string& kind) {
    return o.schedules.empty() || std::find(o.schedules.begin(), o.schedules.end(), kind) != o.schedules.end();
  };
  // Microbatches per copy of the pipeline: 1, 2, 4, ... while a microbatch keeps whole samples.
  auto per_copy = [&](int copies) {
    std::vector<int> ms;
    if (o.microbatches > 0) {
      if (o.microbatches % copies == 0) ms.push_back(o.microbatches / copies);
      return ms;
    }
    for (int m = 1; m <= 64 && m <= B && copies * m <= kMostMicrobatches; m *= 2)
      if (B % m == 0) ms.push_back(m);
    return ms;
  };
  std::vector<Trial> out;
  // The uniform plans on every worker, and (fewer_workers) on each smaller cluster's: its
  // workers are ids 0..k-1 of this one, with the same links.
  std::vector<plan::Cluster> clusters{cluster};
  if (po.fewer_workers)
    for (const plan::Cluster& sub : plan::smaller_clusters(cluster)) clusters.push_back(sub);
  for (const plan::Cluster& c : clusters) {
    int w = c.workers();
    for (int d = 1; d <= std::min(w, layers); ++d) {
      if (w % d != 0) continue;
      int r = w / d;
      for (bool stage_major : {true, false})
      for (const plan::Plan& split : splits(p, d, c, w)) {
        // The same placement, or (one level) the same links.
        if (!stage_major && (r == 1 || d == 1 || c.levels.size() < 2)) continue;
        plan::Plan u = uniform_plan(split, r, stage_major);
        if (d > 1) {
          for (const char* kind : {"1f1b", "gpipe", "2bw"})
            if (wanted(kind))
              // 2BW: a minibatch of r x m microbatches is a whole round of every stage, so a few
              // dozen past the warm-up make its steady state (the default, sized for PipeDream's
              // one-microbatch minibatches, simulates thousands of microbatches here). Its double
              // buffering can alternate two gaps between minibatches: the middle third (metrics.h)
              // needs several to see them repeat; 6 minibatches measured one gap, 0.6-5% under.
              for (int m : per_copy(r)) {
                int enough = std::max(24, 2 * ((2 * d + r * m - 1) / (r * m)));  // a steady state past the warm-up
                out.push_back({kind, u, r * m, 1, B * r, kind == std::string("2bw") ? enough : 0});
              }
          if (wanted("pipedream")) out.push_back({"pipedream", u, 1, 1, B});
        }
        if (r == 1 && d > 1) {
          if (wanted("mp")) out.push_back({"mp", u, 1, 1, B});
          if (wanted("zb-h1"))
            for (int m : per_copy(1)) out.push_back({"zb-h1", u, m, 1, B});
          // The V schedules, two chunks per worker in a V: the even split into 2d chunks, and the
          // V split where it differs (planner.h: the simulator tells which runs faster).
          std::vector<plan::Plan> v_splits;
          if (2 * d <= layers) {
            v_splits = {plan::even_split(p, 2 * d), plan::v_split(p, d)};
            bool same = true;
            for (int c = 0; c < 2 * d; ++c) same = same && v_splits[0].stages[c].layers == v_splits[1].stages[c].layers;
            if (same) v_splits.pop_back();
          }
          for (const char* kind : {"zb-v", "v-half", "v-min", "dualpipev"})
            if (wanted(kind))
              for (int m : per_copy(1))
                if (m >= 2 * d || kind != std::string("dualpipev"))  // dualpipev: 2 x workers or more
                  for (const plan::Plan& v : v_splits) out.push_back({kind, v, m, 1, B});
        }
      }
    }
    // Data parallelism on fewer workers: where the all-reduce outweighs their compute.
    if (w < n && w > 1 && wanted("dp") && (o.microbatches == 0 || o.microbatches == w))
      out.push_back({"dp", plan::data_parallel_plan(layers, w), w, 1, B * w});
  }
  for (const char* kind : {"interleaved", "interleaved-zb"})
    if (wanted(kind))
      for (int v : {2, 4}) {
        // On every worker, or where the layers are too few for v chunks on each, on as many as
        // have them (workers 0..w-1, a smaller cluster's): GPT-2048's 26 layers on 16 workers
        // had no interleaved plan at all.
        // Interleaved runs Megatron's groups of w microbatches: the most workers that divide some
        // microbatch count searched.
        size_t before = out.size();
        for (int w = po.fewer_workers ? std::min(n, layers / v) : n; w > 1 && out.size() == before; --w)
          if (w * v <= layers) {
            for (int m : per_copy(1))
              if (m % w == 0 || kind != std::string("interleaved"))
                out.push_back({kind, plan::even_split(p, w * v), m, v, B});
          } else {
            break;  // all workers, and too few layers for them
          }
      }
  // PipeDream's baseline: every worker a minibatch of B, one step for all (weak scaling).
  if (wanted("dp") && (o.microbatches == 0 || o.microbatches == n))
    out.push_back({"dp", plan::data_parallel_plan(layers, n), n, 1, B * n});
  if (wanted("pipedream")) {
    // What `plan` itself chooses among and from: the search's candidates refereed, with their
    // local search and in-flight and deferred-step variants. A deferred variant the referee
    // turned down (gaining under what pays for its staleness) stays out.
    try {
      Refereed rf = choose(plan::plan_candidates(p, cluster, po), p, cluster, po);
      for (size_t i = 0; i < rf.ranked.size(); ++i)
        if (i == 0 || !rf.ranked[i].plan.deferred_step) out.push_back({"pipedream", rf.ranked[i].plan, 1, 1, B});
    } catch (const ConfigError&) {
      // no candidate schedules under pipedream: the uniform plans above remain
    }
  }
  return out;
}

// The stages held by workers whose modelled total is over the cap.
std::vector<bool> stages_over(const schedule::Schedule& s, const std::vector<schedule::WorkerMemory>& m, int64_t cap) {
  std::vector<bool> over(s.num_stages, false);
  for (int st = 0; st < s.num_stages; ++st)
    for (int w : s.stage_workers[st]) over[st] = over[st] || m[w].total() > cap;
  return over;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string recompute_text(const plan::Plan& p) {
  int n = 0;
  for (const auto& st : p.stages) n += st.recompute;
  if (n == 0) return "none";
  if (n == p.num_stages()) return "all";
  std::string s;
  for (int i = 0; i < p.num_stages(); ++i)
    if (p.stages[i].recompute) s += (s.empty() ? "" : ",") + std::to_string(i);
  return "stages " + s;
}

// Each stage's compute and communication (its sends and all-reduces) per minibatch of the step,
// one replica's share, from its replay: the plan table's columns. The even split's figures were
// at the profile's batch, not the step's, and it sends nothing (the table said comm 0.000 of a
// VGG-16 cut sending 102.8 MB a minibatch).
void stage_figures(const schedule::Trace& t, int minibatches, plan::Plan& p) {
  std::vector<double> compute(p.num_stages(), 0.0), comm(p.num_stages(), 0.0);
  for (const auto& list : t.workers)
    for (const auto& e : list) {
      int st = e.action.stage;
      if (st < 0 || st >= p.num_stages()) continue;
      double d = e.end_ms - e.start_ms;
      if (schedule::is_compute(e.action.kind)) compute[st] += d;
      if (schedule::is_send(e.action.kind) || e.action.kind == schedule::ActionKind::kAllReduce) comm[st] += d;
    }
  for (int st = 0; st < p.num_stages(); ++st) {
    double n = static_cast<double>(std::max(1, minibatches)) * p.stages[st].replicas;
    p.stages[st].compute_ms = compute[st] / n;
    p.stages[st].comm_ms = comm[st] / n;
    p.stages[st].time_ms = 0;
  }
}

// A configuration's replay with `bucket_bytes`: over its schedule's minibatches and, where the
// window has not settled or repeated, longer, as the referee replays (settled_replay).
struct ConfigReplay {
  metrics::Metrics metrics;
  schedule::Trace trace;
  int minibatches = 0;  // the trace's
};
ConfigReplay replay_config(const schedule::Schedule& s, const plan::Plan& plan, const schedule::ScheduleOptions& so,
                           const profile::Profile& prof, const plan::Cluster& cluster, int64_t bucket_bytes) {
  ConfigReplay r;
  r.trace = sim::simulate(s, prof, cluster, {bucket_bytes});
  r.metrics = metrics::compute_metrics(r.trace);
  r.minibatches = s.minibatches;
  // Longer until the window settles and repeats, from the trial's own count too (2BW's few
  // dozen): GNMT-Large's 2BW on 16 workers measured 95.0 ms a minibatch over 24, where it runs
  // at 97.7 from 32 on, and the joint search ranked it ahead of a plan that runs faster.
  auto longer_replay = [&](int minibatches) {
    if (minibatches == 0) return r.metrics;
    schedule::ScheduleOptions longer = so;
    longer.minibatches = r.minibatches = minibatches;
    r.trace = sim::simulate(schedule::make_unvalidated_schedule(s.kind, plan, longer), prof, cluster, {bucket_bytes});
    return metrics::compute_metrics(r.trace);
  };
  double floor = replay_floor_ms(plan, prof, cluster, s.kind, bucket_bytes, &s);
  if (!r.metrics.settled || !r.metrics.periodic || r.metrics.ms_per_minibatch < floor * (1 - 1e-9)) {
    metrics::Metrics first = r.metrics;
    r.metrics = so.minibatches == 0 ? settled_replay(longer_replay, true, nullptr, 0, floor)
                                    : settled_replay(longer_replay, true, &first, so.minibatches, floor);
  }
  return r;
}

// A configuration's figures from its replay (the time per sample weighed as the objective says).
void take_replay(Configuration& c, ConfigReplay rp, const JointOptions& o) {
  c.simulated = std::move(rp.metrics);
  stage_figures(rp.trace, rp.minibatches, c.plan);
  c.ms_per_sample = c.simulated.ms_per_minibatch / static_cast<double>(c.plan.batch_size);
  c.objective_ms_per_sample = c.ms_per_sample * (o.objective == "time-to-accuracy" ? 1 + 0.1 * c.staleness : 1.0);
  c.plan.pipeline_ms_per_minibatch = c.plan.simulated_ms_per_minibatch = c.simulated.ms_per_minibatch;
}

// JointOptions::own_buckets for one configuration: replayed as its trial was with each of
// choose_bucket's sizes, the fastest kept (the options' at a tie); bucket_mb records it.
void own_bucket(Configuration& c, const profile::Profile& profile, const plan::Cluster& cluster,
                const plan::PlanOptions& po, const JointOptions& o) {
  bool replicated = false;
  for (const auto& st : c.plan.stages) replicated = replicated || st.replicas > 1;
  if (!replicated) return;
  profile::Profile prof = profile::with_batch_size(profile, c.plan.batch_size);
  schedule::Schedule s = schedule::make_unvalidated_schedule(c.plan.schedule, c.plan, c.run);
  double own_mb = static_cast<double>(po.bucket_bytes) / (1 << 20);
  c.plan.bucket_mb = own_mb;
  for (double mb : kBucketChoicesMb) {
    if (std::abs(mb - own_mb) <= 1e-9) continue;
    ConfigReplay rp = replay_config(s, c.plan, c.run, prof, cluster, static_cast<int64_t>(mb * (1 << 20)));
    if (rp.metrics.ms_per_minibatch < c.simulated.ms_per_minibatch * (1 - 1e-9)) {
      take_replay(c, std::move(rp), o);
      c.plan.bucket_mb = mb;
    }
  }
}

}  // namespace

JointResult joint_search(const profile::Profile& profile, const plan::Cluster& cluster, const plan::PlanOptions& po,
                         const JointOptions& o) {
  for (const auto& k : o.schedules) {
    const auto& kinds = schedule::schedule_kinds();
    if (std::find(kinds.begin(), kinds.end(), k) == kinds.end())
      throw UsageError(str("--schedule: unknown schedule '", k, "'"));
  }
  if (o.objective != "throughput" && o.objective != "time-to-accuracy")
    throw UsageError(str("--objective: must be throughput or time-to-accuracy, got '", o.objective, "'"));
  JointResult r;
  r.smallest_peak = std::numeric_limits<int64_t>::max();
  // Schedules are built unvalidated, as the referee's replays are (the tests validate every
  // generator on every shape): only one that could be the choice, as good as the best so far, is
  // validated. Validating each was a fifth of the search.
  double best_objective = std::numeric_limits<double>::infinity();
  for (Trial& t : trials(profile, cluster, po, o)) {
    // --straight holds here too: one worker a stage, no copies (VGG-16 on 4 workers with
    // --straight --memory 4GB chose 2-2, with --schedule auto data parallelism).
    if (po.straight && std::any_of(t.plan.stages.begin(), t.plan.stages.end(),
                                   [](const plan::Stage& st) { return st.replicas > 1; })) {
      ++r.not_straight;
      continue;
    }
    // A tie split over stages needs the stages to step together: an asynchronous schedule
    // would train its copies apart (runtime/tied_gradients.h), and train refuses it.
    if (!schedule::schedule_flushes(t.kind) && !plan::split_ties(t.plan, profile).empty()) {
      ++r.async_split_tie;
      continue;
    }
    profile::Profile prof = profile::with_batch_size(profile, t.batch);
    schedule::ScheduleOptions so;
    so.microbatches = t.microbatches;
    so.chunks = t.chunks;
    so.minibatches = t.minibatches;
    if (schedule::takes_activation_budget(t.kind))
      so.activation_budget = schedule::activation_budget_from_profile(t.kind, t.plan, prof);
    // Without recomputation; over the cap, with it where needed, then everywhere.
    for (int mode = 0; mode < 3; ++mode) {
      try {
        schedule::Schedule s = schedule::make_unvalidated_schedule(t.kind, t.plan, so);
        if (mode == 0) ++r.considered;
        auto memory = schedule::memory_per_worker(
            s,
            [&](int n) {
              schedule::ScheduleOptions longer = so;
              longer.minibatches = n;
              return schedule::make_unvalidated_schedule(t.kind, t.plan, longer);
            },
            prof, o.memory);
        int64_t peak = schedule::peak_memory(memory);
        r.smallest_peak = std::min(r.smallest_peak, peak);
        if (o.memory_cap > 0 && peak > o.memory_cap) {
          if (mode == 2) {
            ++r.over_cap;
            break;
          }
          std::vector<bool> over = stages_over(s, memory, o.memory_cap);
          for (int st = 0; st < t.plan.num_stages(); ++st)
            t.plan.stages[st].recompute = mode == 1 || over[st] || t.plan.stages[st].recompute;
          continue;
        }
        Configuration c;
        c.plan = t.plan;
        c.plan.batch_size = t.batch;
        c.run = so;
        c.staleness = s.flush ? 0 : *std::max_element(s.weight_versions.begin(), s.weight_versions.end()) - 1;
        take_replay(c, replay_config(s, t.plan, so, prof, cluster, po.bucket_bytes), o);
        if (c.objective_ms_per_sample <= best_objective * (1 + 1e-9)) {
          schedule::validate(s);
          best_objective = std::min(best_objective, c.objective_ms_per_sample);
        }
        c.memory = memory;
        c.peak_memory = peak;
        plan::Plan& p = c.plan;
        p.schedule = t.kind;
        p.microbatches = t.kind == "pipedream" ? 0 : t.microbatches;
        p.chunks = schedule::is_interleaved(t.kind) ? t.chunks : 0;
        p.batch_size = t.batch;
        p.model = profile.model;
        if (p.cost_model.empty() || p.cost_model == "even") p.cost_model = "pipetrain";
        p.simulated_schedule = t.kind;
        r.ranked.push_back(std::move(c));
        break;
      } catch (const ConfigError&) {
        break;  // the kind cannot run this plan (e.g. fewer microbatches than replicas)
      } catch (const std::exception&) {
        ++r.invalid;  // a generator's schedule the validator rejects: left out, and counted
        break;
      }
    }
  }
  // Nothing is added to a configuration's time; at an equal objective, fewer workers first (the
  // same throughput for less hardware), as the referee ranks (ranks_before).
  auto ranks_first = [](const Configuration& a, const Configuration& b) {
    double ta = a.objective_ms_per_sample, tb = b.objective_ms_per_sample;
    if (std::abs(ta - tb) > 1e-9 * std::max(ta, tb)) return ta < tb;
    return a.plan.workers < b.plan.workers;
  };
  std::stable_sort(r.ranked.begin(), r.ranked.end(), ranks_first);
  // The ranking's replays all used the options' bucket, as the referee's do (Referee's
  // own_buckets: ResNet-18 on 4x4 took pipedream's 15-1 at 17.28 ms per minibatch over data
  // parallelism, 18.61 at 25 MiB and 16.28 at 1 MiB).
  // Each schedule's best gets its own, as `compare`'s row for it (the search pinned to it) does,
  // so that the choice is never slower than compare's best row; and data parallelism on every
  // worker, the baseline.
  if (o.own_buckets && !r.ranked.empty()) {
    std::set<std::string> kinds;
    for (Configuration& c : r.ranked)
      if (kinds.insert(c.plan.schedule).second || (c.plan.schedule == "dp" && c.plan.workers == cluster.workers()))
        own_bucket(c, profile, cluster, po, o);
    std::stable_sort(r.ranked.begin(), r.ranked.end(), ranks_first);
    const Configuration& first = r.ranked.front();  // validated, as every possible choice above
    schedule::validate(schedule::make_unvalidated_schedule(first.plan.schedule, first.plan, first.run));
  }
  // The baseline every plan file records: data parallelism's time per minibatch of B.
  double dp = 0;
  for (const auto& c : r.ranked)
    if (c.plan.schedule == "dp" && c.plan.workers == cluster.workers())
      dp = c.ms_per_sample * static_cast<double>(profile.batch_size);
  // A search pinned to another schedule weighed no data parallelism: without a memory cap it is
  // replayed here as `plan` without the joint search replays it (the table said "does not fit").
  if (dp == 0 && o.memory_cap == 0) dp = simulate_data_parallel(profile, cluster, po, "pipedream");
  if (r.ranked.empty()) return r;
  const Configuration& best = r.ranked.front();
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    Configuration& c = r.ranked[i];
    c.plan.data_parallel_ms_per_minibatch = dp;
    if (i == 0) continue;
    c.why_not = str(fixed(100 * (c.objective_ms_per_sample / best.objective_ms_per_sample - 1), 1), "% slower",
                    o.objective == "time-to-accuracy" && c.staleness > 0 ? " (staleness weighed)" : "",
                    c.plan.workers < cluster.workers() ? str(" (on ", c.plan.workers, " workers)") : "",
                    "; bubble ", fixed(100 * c.simulated.bubble_fraction, 0), "%");
  }
  return r;
}

const Configuration& chosen(const JointResult& r, const JointOptions& o, const profile::Profile& profile,
                           const plan::Cluster& cluster) {
  if (r.considered == 0) {
    std::string kinds;
    for (const auto& k : o.schedules) kinds += (kinds.empty() ? "" : ", ") + k;
    throw ConfigError(str("no configuration of ", kinds.empty() ? "any schedule" : kinds, " runs ", profile.num_layers(),
                          " layers on ", cluster.workers(), " workers",
                          o.microbatches > 0 ? str(" with ", o.microbatches, " microbatches") : "",
                          r.not_straight > 0 ? str(" with one worker a stage (--straight left out ", r.not_straight,
                                                   " that replicate a stage)")
                                             : "",
                          r.async_split_tie > 0 ? str(" (", r.async_split_tie, " would split layers sharing a parameter ",
                                                      "under an asynchronous schedule, which cannot keep it one)")
                                                : ""));
  }
  if (r.ranked.empty())
    throw ConfigError(str("no configuration fits ", human_bytes(static_cast<double>(o.memory_cap)),
                          " per worker: the smallest of ", r.considered, " needs ",
                          human_bytes(static_cast<double>(r.smallest_peak)), " (recomputing where that helps)"));
  return r.ranked.front();
}

std::string format_configurations(const JointResult& r, int k) {
  std::ostringstream os;
  os << "configurations (" << r.considered << " built, " << r.over_cap << " over the memory cap";
  if (r.invalid > 0) os << ", " << r.invalid << " rejected by the schedule validator";
  os << "):\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-3s %-12s %-12s %6s %-10s %10s %12s %11s  %s\n", "#", "schedule", "plan", "micro",
                "recompute", "ms/sample", "samples/s", "peak mem", "why not");
  os << line;
  for (int i = 0; i < std::min<int>(k, static_cast<int>(r.ranked.size())); ++i) {
    const Configuration& c = r.ranked[i];
    std::string shape = c.plan.shape() + (c.plan.chunks > 1 ? str(" x", c.plan.chunks) : "");
    std::snprintf(line, sizeof line, "%-3d %-12s %-12s %6d %-10s %10.4f %12.1f %11s  %s\n", i + 1, c.plan.schedule.c_str(),
                  shape.c_str(), c.plan.microbatches, recompute_text(c.plan).c_str(), c.ms_per_sample,
                  1000.0 / c.ms_per_sample, human_bytes(static_cast<double>(c.peak_memory)).c_str(),
                  i == 0 ? "chosen" : c.why_not.c_str());
    os << line;
  }
  return os.str();
}

}  // namespace pt::referee
