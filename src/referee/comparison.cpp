#include "referee/comparison.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/units.h"
#include "plan/plan_command.h"
#include "plan/planner.h"
#include "referee/joint_search.h"
#include "referee/referee.h"
#include "referee/steady_replay.h"
#include "schedule/generators.h"
#include "schedule/memory.h"

namespace pt::referee {

namespace {

std::string short_shape(const plan::Plan& p) {
  std::string shape = p.shape();
  if (shape.size() <= 14) return shape;
  bool uniform = true;
  for (const auto& st : p.stages) uniform = uniform && st.replicas == p.stages[0].replicas;
  // Replicas, never "x": the column's "x" is chunks ("16 stages x1 x2" read as 1 chunk and 2).
  const int first = p.stages[0].replicas;
  if (uniform) return str(first, "-", first, "-..-", first, " (", p.num_stages(), ")");
  return str(shape.substr(0, 8), ".. (", p.num_stages(), ")");
}

std::string bucket_label(double bucket_mb) {
  const double default_mb = static_cast<double>(plan::Cluster::kDefaultBucketBytes) / (1 << 20);
  return bucket_mb >= 0 && std::abs(bucket_mb - default_mb) > 1e-9 ? str(" b", bucket_mb) : std::string();
}

}  // namespace

const std::vector<std::string>& compared_schedules() {
  static const std::vector<std::string> kinds{"pipedream", "2bw",         "1f1b",  "gpipe",     "zb-h1",
                                              "zb-v",      "v-half",      "v-min", "dualpipev", "interleaved",
                                              "interleaved-zb", "mp"};
  return kinds;
}

Comparison compare_schedules(const profile::Profile& prof, const plan::Cluster& cluster, const ComparisonOptions& options) {
  Comparison out;
  int n = cluster.workers();
  plan::PlanOptions plan_options;
  plan_options.candidates = plan::PlanFlags{}.candidates;
  plan_options.memory_bytes = options.memory_bytes;
  JointOptions joint;
  joint.own_buckets = true;  // each row at the bucket it runs fastest with, as `plan` chooses
  joint.memory_cap = out.memory_cap = plan::memory_limit(cluster, plan_options);
  if (options.memory_bytes <= 0) joint.memory_cap_named = "memory_bytes_per_worker in the --cluster file";
  plan_options.memory_bytes = std::numeric_limits<int64_t>::max();  // the candidates; the cap is the memory model's
  if (options.microbatches_given) joint.microbatches = options.schedule.microbatches;
  joint.chunks = options.chunks;
  joint.memory.weight_prediction = options.weight_prediction;
  out.plan_note = "each schedule's best plan, microbatches and recomputation (the joint search)";
  if (joint.memory_cap > 0) out.plan_note += str(" within ", human_bytes(static_cast<double>(joint.memory_cap)), " per worker");
  const auto& kinds = compared_schedules();
  auto started = std::chrono::steady_clock::now();
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string& kind = kinds[i];
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (s > 1)
      options.note(str("compare: searching ", kind, "'s best (", i + 1, " of ", kinds.size(), " schedules, ",
                       static_cast<int>(s), " s so far)"));
    joint.schedules = {kind};
    try {
      JointResult best = joint_search(prof, cluster, plan_options, joint);
      const Configuration& c = chosen(best, joint, prof, cluster);
      if (best.climb_timed_out)
        options.note(str("note: ", kind, ": the time limit stopped moving its split's boundaries (",
                         plan_options.time_limit_s, " s; `plan --schedule ", kind,
                         " --time-limit 0` searches on)"));
      std::string how;
      if (c.plan.chunks > 1) how += str(" x", c.plan.chunks);
      if (c.plan.microbatches > 0) how += str(" m", c.plan.microbatches);
      how += bucket_label(c.plan.bucket_mb);
      if (std::any_of(c.plan.stages.begin(), c.plan.stages.end(), [](const plan::Stage& st) { return st.recompute; }))
        how += " rc";
      out.rows.push_back({kind, c.plan.shape() + how, short_shape(c.plan) + how, c.simulated, "", c.peak_memory});
      std::string budget_note = schedule::activation_budget_note(kind, c.run.activation_budget);
      if (!budget_note.empty()) options.note("note: " + budget_note);
    } catch (const ConfigError& e) {
      options.note(str("skipping ", kind, ": ", e.what()));
    }
  }
  // Data parallelism, replayed as the rows above were: at its own bucket, pinned as train runs it.
  auto add_dp = [&](const std::string& name, const std::string& label, schedule::ScheduleOptions schedule_options,
                    const profile::Profile& costs, const std::string& scaling) {
    plan::Plan everyone = plan::data_parallel_plan(prof.num_layers(), n);
    schedule_options.chunks = 1;
    try {
      auto s = schedule::make_schedule("dp", everyone, schedule_options);
      BucketChoice bucket = choose_bucket(everyone, costs, cluster, plan_options, "dp", 0, 0, schedule_options);
      SteadyReplayOptions how;
      how.sim.bucket_bytes = static_cast<int64_t>(bucket.bucket_mb * (1 << 20));
      how.sim.pin_as_train = true;
      how.lengthen = schedule_options.minibatches == 0;
      metrics::Metrics m = steady_replay("dp", everyone, schedule_options, costs, cluster, how, &s).metrics;
      int64_t peak = schedule::peak_memory(
          schedule::memory_over_long_run("dp", everyone, schedule_options, costs, joint.memory, &s));
      out.rows.push_back({name, label + bucket_label(bucket.bucket_mb), "", m, scaling, peak});
      return true;
    } catch (const ConfigError& e) {
      options.note(str("skipping ", name, ": ", e.what()));
      return false;
    }
  };
  if (n <= schedule::kMaxMicrobatches) {
    schedule::ScheduleOptions weak = options.schedule;
    weak.microbatches = n;
    if (add_dp("dp", str(n, " x batch ", prof.batch_size), weak, profile::with_batch_size(prof, prof.batch_size * n),
               "weak"))
      out.dp_rate = out.rows.back().m.samples_per_s;
  } else {
    options.note(str("skipping dp: ", n, " workers are more than ", schedule::kMaxMicrobatches,
                     " microbatches of one step"));
  }
  // One microbatch a worker, as a user splits a batch over data-parallel workers, unless
  // --microbatches pins more (then said: it ran 8 under the label "1 batch / 4", 23% slower).
  schedule::ScheduleOptions strong = options.schedule;
  strong.microbatches = options.microbatches_given ? std::max(options.schedule.microbatches, n) : n;
  if (strong.microbatches <= schedule::kMaxMicrobatches && prof.batch_size % strong.microbatches == 0)
    add_dp("dp-split", str("1 batch / ", n, strong.microbatches > n ? str(" m", strong.microbatches) : ""), strong,
           prof, "strong");
  else  // the row was left out without a word, the legend still describing it
    options.note(str("skipping dp-split: the batch of ", prof.batch_size, " does not split into ", strong.microbatches,
                     " microbatches of whole samples",
                     strong.microbatches > schedule::kMaxMicrobatches
                         ? str(" (at most ", schedule::kMaxMicrobatches, " a step)")
                         : std::string()));
  return out;
}

}  // namespace pt::referee
