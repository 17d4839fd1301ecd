// pipetrain compare: every schedule and data parallelism on one profile and cluster, side by
// side, on the simulator.
#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>

#include "apps/command.h"
#include "core/host_allocator.h"
#include "referee/joint_search.h"
#include "referee/referee.h"
#include "referee/steady_replay.h"
#include "apps/planning_flags.h"
#include "profile/pipedream_graph.h"
#include "core/error.h"
#include "core/units.h"
#include "metrics/metrics.h"
#include "plan/realised_cost.h"
#include "plan/plan_command.h"
#include "plan/planner.h"
#include "schedule/generators.h"
#include "schedule/memory.h"
#include "sim/simulator.h"

namespace pt::app {
namespace {

using namespace referee;  // the referee and the joint search (src/referee)

struct CompareFlags {
  std::string profile;
  plan::ClusterFlags cluster;
  schedule::ScheduleOptions options;
  std::string memory;
  bool microbatches_given = false;
  bool json = false;
};

struct Row {
  std::string kind, plan;
  metrics::Metrics m;
  std::string scaling;  // data parallelism only: "weak" (the baseline) or "strong"
  int64_t peak_memory = 0;  // the memory model's, fullest worker
  std::string cell;  // `plan` as the table shows it (short_shape); empty: `plan`
};

// The plan's shape for a table cell: PipeDream's notation, or where that runs long (zb-h1 on 16
// workers: 31 characters, past the column) its stage count and replicas.
std::string short_shape(const plan::Plan& p) {
  std::string shape = p.shape();
  if (shape.size() <= 14) return shape;
  bool uniform = true;
  for (const auto& st : p.stages) uniform = uniform && st.replicas == p.stages[0].replicas;
  if (uniform) return str(p.num_stages(), " stages x", p.stages[0].replicas);
  return str(shape.substr(0, 8), ".. (", p.num_stages(), ")");
}

const double kDefaultBucketMb = static_cast<double>(plan::Cluster::kDefaultBucketBytes) / (1 << 20);

// " bN" where a row runs with N MiB buckets rather than the default.
std::string bucket_label(double bucket_mb) {
  return bucket_mb >= 0 && std::abs(bucket_mb - kDefaultBucketMb) > 1e-9 ? str(" b", bucket_mb) : std::string();
}

int run_compare(CompareFlags& flags) {
  keep_freed_host_memory();
  auto prof = profile::read_any_profile(flags.profile);  // as plan reads it: PipeDream's files too
  profile::require_timed(prof, flags.profile);
  plan::Cluster cluster = plan::cluster_from_flags(flags.cluster);
  int n = cluster.workers();
  schedule::check_schedule_options(flags.options);
  // Each schedule's own best configuration: the joint search (src/referee/joint_search.h) pinned to it,
  // so `plan --schedule auto` is never slower in simulation than the best row here.
  plan::PlanOptions plan_options;
  plan_options.candidates = plan::PlanFlags{}.candidates;
  if (!flags.memory.empty()) plan_options.memory_bytes = parse_bytes(flags.memory, "--memory");
  JointOptions joint;
  joint.own_buckets = true;  // each row at the bucket it runs fastest with, as `plan` chooses
  joint.memory_cap = plan::memory_limit(cluster, plan_options);
  plan_options.memory_bytes = std::numeric_limits<int64_t>::max();  // the candidates; the cap is the memory model's
  if (flags.microbatches_given) joint.microbatches = flags.options.microbatches;
  std::vector<Row> rows;
  std::string plan_note = "each schedule's best plan, microbatches and recomputation (the joint search)";
  if (joint.memory_cap > 0) plan_note += str(" within ", human_bytes(static_cast<double>(joint.memory_cap)), " per worker");
  const std::vector<std::string> kinds{"pipedream", "2bw", "1f1b", "gpipe", "zb-h1", "zb-v", "v-half", "v-min",
                                      "dualpipev", "interleaved", "interleaved-zb", "mp"};
  // Each row is a joint search of its own: on hundreds of workers they take minutes together,
  // so past a second a line says which row is being searched.
  auto started = std::chrono::steady_clock::now();
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string& kind = kinds[i];
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (s > 1)
      std::cerr << "compare: searching " << kind << "'s best (" << i + 1 << " of " << kinds.size() << " schedules, "
                << static_cast<int>(s) << " s so far)\n";
    joint.schedules = {kind};
    try {
      JointResult best = joint_search(prof, cluster, plan_options, joint);
      const Configuration& c = chosen(best, joint, prof, cluster);
      std::string how;
      if (c.plan.chunks > 1) how += str(" x", c.plan.chunks);
      if (c.plan.microbatches > 0) how += str(" m", c.plan.microbatches);
      how += bucket_label(c.plan.bucket_mb);
      for (const auto& st : c.plan.stages)
        if (st.recompute) {
          how += " rc";
          break;
        }
      rows.push_back({kind, c.plan.shape() + how, c.simulated, "", c.peak_memory, short_shape(c.plan) + how});
    } catch (const ConfigError& e) {
      std::cerr << "skipping " << kind << ": " << e.what() << "\n";
    }
  }
  auto add = [&](const std::string& kind, const plan::Plan& plan, const std::string& label,
                 schedule::ScheduleOptions schedule_options, const profile::Profile& costs, const std::string& name) {
    schedule_options.chunks = 1;
    try {
      auto s = schedule::make_schedule(kind, plan, schedule_options);
      // At the bucket size it runs fastest with (the referee's sizes; the default's at a tie),
      // over the default minibatches until the window settles, as the referee replays it.
      BucketChoice bucket = choose_bucket(plan, costs, cluster, plan_options, kind, 0, 0, schedule_options);
      SteadyReplayOptions how;
      how.sim.bucket_bytes = static_cast<int64_t>(bucket.bucket_mb * (1 << 20));
      how.sim.pin_as_train = true;
      how.lengthen = schedule_options.minibatches == 0;
      metrics::Metrics m = steady_replay(kind, plan, schedule_options, costs, cluster, how, &s).metrics;
      int64_t peak = schedule::peak_memory(
          schedule::memory_over_long_run(kind, plan, schedule_options, costs, joint.memory, &s));
      rows.push_back({name, label + bucket_label(bucket.bucket_mb), m, "", peak, ""});
    } catch (const ConfigError& e) {
      std::cerr << "skipping " << name << ": " << e.what() << "\n";
    }
  };
  // The baseline, as PipeDream measures it and users run it: every worker a minibatch of the
  // profile's batch (the global batch grows with the workers), simulated as one minibatch of
  // n x batch in n microbatches. Beside it, labelled, one minibatch split over the workers.
  plan::Plan everyone = plan::data_parallel_plan(prof.num_layers(), n);
  double dp_rate = 0;
  if (n <= schedule::kMaxMicrobatches) {
    schedule::ScheduleOptions weak = flags.options;
    weak.microbatches = n;
    add("dp", everyone, str(n, " x batch ", prof.batch_size), weak, profile::with_batch_size(prof, prof.batch_size * n),
        "dp");
    if (rows.back().kind == "dp") dp_rate = rows.back().m.samples_per_s, rows.back().scaling = "weak";
  } else {
    std::cerr << "skipping dp: " << n << " workers are more than " << schedule::kMaxMicrobatches
              << " microbatches of one step\n";
  }
  schedule::ScheduleOptions strong = flags.options;
  strong.microbatches = std::max(flags.options.microbatches, n);
  if (strong.microbatches <= schedule::kMaxMicrobatches && prof.batch_size % strong.microbatches == 0) {
    add("dp", everyone, str("1 batch / ", n), strong, prof, "dp-split");
    if (rows.back().kind == "dp-split") rows.back().scaling = "strong";
  }
  if (flags.json) {
    json out = json::array();
    for (const auto& r : rows) {
      json j = metrics::to_json(r.m);
      j["row"] = r.kind;
      j["plan"] = r.plan;
      j["modelled_peak_memory_bytes"] = r.peak_memory;
      if (joint.memory_cap > 0) j["over_memory_cap"] = r.peak_memory > joint.memory_cap;
      if (!r.scaling.empty()) j["scaling"] = r.scaling;
      if (dp_rate > 0) j["speedup_over_dp"] = r.m.samples_per_s / dp_rate;
      out.push_back(j);
    }
    std::cout << json{{"format", format_tag("compare", 1)}, {"plan", plan_note}, {"rows", out}}.dump(1) << "\n";
    return 0;
  }
  std::cout << prof.model << " (batch " << prof.batch_size << ") on " << cluster.describe() << ", simulated\nplans: "
            << plan_note << "\n\n";
  std::cout << std::left << std::setw(15) << "schedule" << std::setw(24) << "plan" << std::right << std::setw(12)
            << "ms/minibatch" << std::setw(12) << "samples/s" << std::setw(10) << "vs dp" << std::setw(9) << "bubble"
            << std::setw(13) << "peak memory" << "\n";
  std::cout << std::fixed;
  for (const auto& r : rows) {
    std::ostringstream speedup;
    speedup << std::fixed << std::setprecision(2) << (dp_rate > 0 ? r.m.samples_per_s / dp_rate : 0) << "x";
    std::cout << std::left << std::setw(15) << r.kind << std::setw(24) << (r.cell.empty() ? r.plan : r.cell) << std::right << std::setw(12)
              << std::setprecision(2) << r.m.ms_per_minibatch << std::setw(12) << std::setprecision(1)
              << r.m.samples_per_s << std::setw(10) << speedup.str() << std::setw(9) << std::setprecision(3)
              << r.m.bubble_fraction << std::setw(13) << human_bytes(static_cast<double>(r.peak_memory))
              << (joint.memory_cap > 0 && r.peak_memory > joint.memory_cap ? "  over the cap" : "") << "\n";
  }
  std::cout << "\nplan: the stages' replicas, x chunks, m microbatches per step, rc recomputation, bN all-reduce buckets\n"
               "of N MiB (each row at the fastest of "
            << bucket_choices_text() << " for its plan; " << str(kDefaultBucketMb)
            << " where not shown). A minibatch is a\n"
               "step's batch (a pipeline copied r times steps on r x "
            << prof.batch_size << "; pipedream on " << prof.batch_size
            << " per replica); samples/s compare them. Asynchronous schedules (2bw, pipedream) are measured in the\n"
               "steady state; peak memory is the memory model's, fullest worker. dp is the baseline: every worker a\n"
               "minibatch of batch "
            << prof.batch_size << " (a step covers " << n << " of them); dp-split splits one minibatch over the workers.\n";
  // The baselines are what users run, fit or not (the planner's rows are planned within the
  // cap): a dp row over it is marked, as `plan` says it does not fit.
  if (joint.memory_cap > 0)
    std::cout << "Rows marked \"over the cap\" need more memory per worker than --memory allows.\n";
  return 0;
}

Register reg({"compare", "Simulate every schedule and data parallelism side by side on one profile and cluster",
              [](CLI::App& app) -> std::function<int()> {
  auto flags = std::make_shared<CompareFlags>();
  flags->options.microbatches = 8;
  flags->options.chunks = 2;
  app.add_option("--profile", flags->profile, "Profile: pipetrain JSON, PipeDream JSON figures, or graph.txt")->required();
  add_cluster_flags(app, flags->cluster);
  add_schedule_options(app, flags->options);
  if (auto* m = app.get_option_no_throw("--microbatches"))
    // The 8 set above is only dp-split's floor: the option's shown default is the search.
    m->each([flags](const std::string&) { flags->microbatches_given = true; })
        ->description("Pin each schedule's microbatches per step (default: searched)")
        ->default_str("");
  app.add_option("--memory", flags->memory, "Memory per worker, e.g. 16GB (default: the cluster's, or unlimited)");
  app.add_flag("--json", flags->json, "Print the table as JSON");
  return [flags] { return run_compare(*flags); };
}});

}  // namespace
}  // namespace pt::app
