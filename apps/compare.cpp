// pipetrain compare: every schedule and data parallelism on one profile and cluster, side by
// side, on the simulator.
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include "apps/command.h"
#include "apps/planning_flags.h"
#include "core/error.h"
#include "core/host_allocator.h"
#include "core/units.h"
#include "metrics/metrics.h"
#include "plan/plan_command.h"
#include "profile/pipedream_graph.h"
#include "referee/comparison.h"
#include "referee/referee.h"
#include "schedule/memory.h"

namespace pt::app {
namespace {

struct CompareFlags {
  std::string profile;
  plan::ClusterFlags cluster;
  schedule::ScheduleOptions options;
  std::string memory;
  bool microbatches_given = false;
  int chunks = -1;  // -1: searched (given 0 was taken as not given)
  bool json = false;
  bool no_weight_prediction = false;
};

int run_compare(CompareFlags& flags) {
  keep_freed_host_memory();
  auto prof = profile::read_any_profile(flags.profile);  // as plan reads it: PipeDream's files too
  profile::require_timed(prof, flags.profile);
  plan::Cluster cluster = plan::cluster_from_flags(flags.cluster);
  int n = cluster.workers();
  schedule::check_schedule_options(flags.options);
  if (flags.chunks != -1 && (flags.chunks < 2 || flags.chunks > schedule::kMaxChunks))
    throw UsageError(str("--chunks: must be in 2..", schedule::kMaxChunks, ", got ", flags.chunks));
  // Every pipeline row would be skipped as if no configuration ran, where the count is the reason.
  if (flags.microbatches_given)
    schedule::check_microbatches_divide(flags.options.microbatches, "--microbatches", prof.batch_size, flags.profile);
  referee::ComparisonOptions options;
  options.schedule = flags.options;
  options.microbatches_given = flags.microbatches_given;
  options.chunks = std::max(0, flags.chunks);  // 0: searched
  options.weight_prediction = !flags.no_weight_prediction;
  if (!flags.memory.empty()) options.memory_bytes = parse_bytes(flags.memory, "--memory");
  options.note = [](const std::string& line) { std::cerr << line << "\n"; };
  referee::Comparison c = referee::compare_schedules(prof, cluster, options);
  const auto& rows = c.rows;
  const std::string& plan_note = c.plan_note;
  double dp_rate = c.dp_rate;
  const double default_bucket_mb = static_cast<double>(plan::Cluster::kDefaultBucketBytes) / (1 << 20);
  if (flags.json) {
    json out = json::array();
    for (const auto& r : rows) {
      json j = metrics::to_json(r.m);
      j["row"] = r.kind;
      j["plan"] = r.plan;
      j["peak_memory_bytes"] = j["modelled_peak_memory_bytes"] = r.peak_memory;
      if (c.memory_cap > 0) j["over_memory_cap"] = r.peak_memory > c.memory_cap;
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
    // A space before each column, so that a figure wider than its column stays apart (on 1e-6
    // Gbit/s samples/s and the speed-up ran together: "892.03776168.02x").
    std::cout << std::left << std::setw(15) << r.kind << std::setw(24) << (r.cell.empty() ? r.plan : r.cell) << std::right
              << " " << std::setw(11) << std::setprecision(2) << r.m.ms_per_minibatch << " " << std::setw(11)
              << std::setprecision(1) << r.m.samples_per_s << " " << std::setw(9) << speedup.str() << " " << std::setw(8)
              << std::setprecision(3) << r.m.bubble_fraction << " " << std::setw(12)
              << human_bytes(static_cast<double>(r.peak_memory))
              << (c.memory_cap > 0 && r.peak_memory > c.memory_cap ? "  over the cap" : "") << "\n";
  }
  std::cout << "\nplan: the stages' replicas (a long plan shortened, its stages counted in parentheses), x chunks,\n"
               "m microbatches per step, rc recomputation, bN all-reduce buckets of N MiB (each row at the fastest of\n"
            << referee::bucket_choices_text() << " for its plan; " << str(default_bucket_mb)
            << " where not shown). A minibatch is a step's batch\n(a pipeline copied r times steps on r x "
            << prof.batch_size << "; pipedream on " << prof.batch_size
            << " per replica); samples/s compare them.\n"
               "Asynchronous schedules (2bw, pipedream) are measured in the steady state; bubble is the idle share of\n"
               "the workers a plan uses (a row on fewer workers leaves the rest idle, which its samples/s counts);\n"
               "peak memory is the memory model's tensors, fullest worker: "
            << schedule::kSeparateProcessesMemory
            << (cluster.process_bytes > 0
                    ? str("; a worker process holds the cluster's process_bytes ",
                          human_bytes(static_cast<double>(cluster.process_bytes)), " besides, as the OS counts it")
                    : std::string())
            << ".\ndp is the baseline: every worker a minibatch of batch "
            << prof.batch_size << " (a step covers " << n << " of them); dp-split splits one minibatch over the workers.\n";
  // The baselines are what users run, fit or not (the planner's rows are planned within the
  // cap): a dp row over it is marked, as `plan` says it does not fit.
  if (c.memory_cap > 0)
    std::cout << "Rows marked \"over the cap\" need more memory per worker than "
              << (flags.memory.empty() ? "the --cluster file's memory_bytes_per_worker" : "--memory") << " allows.\n";
  return 0;
}

Register compare_command({"compare", "Simulate every schedule and data parallelism side by side on one profile and cluster",
              [](CLI::App& app) -> std::function<int()> {
  auto flags = std::make_shared<CompareFlags>();
  app.add_option("--profile", flags->profile, "Profile: pipetrain JSON, PipeDream JSON figures, or graph.txt")->required();
  add_cluster_flags(app, flags->cluster);
  // Only what the search pins: the rows' minibatches and options are the search's own.
  app.add_option("--microbatches", flags->options.microbatches, "Pin each schedule's microbatches per step (default: searched)")
      ->each([flags](const std::string&) { flags->microbatches_given = true; });
  app.add_option("--chunks", flags->chunks, "Pin the interleaved rows' chunks per worker (default: 2 and 4 searched)");
  app.add_option("--memory", flags->memory, "Memory per worker, e.g. 16GB (binary: GB and GiB both 2^30 bytes, MB 2^20, as the figures print them; default: the cluster's, or unlimited)");
  add_no_weight_prediction_flag(app, flags->no_weight_prediction);
  app.add_flag("--json", flags->json, "Print the table as JSON");
  return [flags] { return run_compare(*flags); };
}});

}  // namespace
}  // namespace pt::app
