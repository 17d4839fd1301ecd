// pipetrain simulate: one schedule of one plan on a virtual clock; prints the metrics and
// optionally draws the timeline.
#include <algorithm>
#include <iostream>
#include <memory>

#include "apps/command.h"
#include "core/host_allocator.h"
#include "apps/planning_flags.h"
#include "core/error.h"
#include "metrics/metrics.h"
#include "metrics/timeline.h"
#include "plan/planner.h"
#include "profile/pipedream_graph.h"
#include "referee/steady_replay.h"
#include "schedule/generators.h"
#include "schedule/memory.h"
#include "schedule/schedule_file.h"
#include "schedule/validate.h"
#include "sim/simulator.h"

namespace pt::app {
namespace {

struct SimulateFlags {
  std::string profile, plan, kind = "1f1b", svg, chrome, trace_out, schedule_out, schedule_file;
  CLI::Option* kind_flag = nullptr;
  CLI::Option *microbatches_flag = nullptr, *chunks_flag = nullptr;
  CLI::Option* bucket_flag = nullptr;  // a given --bucket-mb overrides the plan's bucket_mb
  plan::ClusterFlags cluster;
  schedule::ScheduleOptions options;
  bool json = false, grid = false;
  int cores = 0;  // SimOptions::cores: the workers are threads sharing this many cores
  double bucket_mb = plan::Cluster::kDefaultBucketBytes / double(1 << 20);
};

// What a plan file says of how it runs (schedule, microbatches, chunks), where the flags do not:
// the run its prediction and `train --plan` are for, so that simulate prints the plan's time.
void follow_plan(SimulateFlags& f, const plan::Plan& plan) {
  if (!plan.schedule.empty() && f.kind_flag->count() == 0 && f.schedule_file.empty()) {
    const auto& kinds = schedule::schedule_kinds();
    if (std::find(kinds.begin(), kinds.end(), plan.schedule) == kinds.end())
      throw ConfigError(str(f.plan, ": field 'schedule' is '", plan.schedule, "', not a schedule kind"));
    f.kind = plan.schedule;
    std::cerr << "schedule " << f.kind << ": the plan's (--schedule runs another)\n";
  }
  if (plan.microbatches > 0 && f.microbatches_flag->count() == 0) f.options.microbatches = plan.microbatches;
  if (plan.chunks > 0 && f.chunks_flag->count() == 0) f.options.chunks = plan.chunks;
}

int run_simulate(SimulateFlags f) {
  keep_freed_host_memory();
  schedule::check_schedule_options(f.options);  // before --chunks multiplies the workers
  auto prof = profile::read_any_profile(f.profile);  // as plan reads it: PipeDream's files too
  profile::require_timed(prof, f.profile);
  plan::Cluster cluster = plan::cluster_from_flags(f.cluster);
  plan::Plan plan;
  schedule::Schedule file;  // --schedule-file, as read
  if (!f.schedule_file.empty()) {
    if (f.kind_flag->count() > 0) throw UsageError("--schedule and --schedule-file: give one of them");
    file = schedule::read_schedule_file(f.schedule_file);
  }
  if (!f.plan.empty()) {
    plan = plan::read_plan(f.plan);
    // Another model's plan can fit a profile of as many layers, and simulate its stages' wrong
    // layers without a word (train --plan refuses it the same way).
    if (!plan.model.empty() && plan.model != prof.model)
      throw ConfigError(str(f.plan, ": field 'model' is '", printable(plan.model), "' but ", f.profile,
                            " profiles '", printable(prof.model), "'"));
    plan::check_plan_fits(plan, prof, f.plan);
    follow_plan(f, plan);
    schedule::check_schedule_options(f.options);
    // A plan for another batch per step (the joint search's): the profile scaled to it, as the
    // planner simulated it and train runs it.
    if (plan.batch_size > 0 && plan.batch_size != prof.batch_size) {
      std::cerr << "profile scaled from batch " << prof.batch_size << " to the plan's " << plan.batch_size << "\n";
      prof = profile::with_batch_size(prof, plan.batch_size);
    }
  } else if (!f.schedule_file.empty()) {
    // Without a plan: the file's stages, an even split into them for a CSV, which names no layers.
    plan = file.stage_layers.empty() ? straight_plan(prof, file.num_stages)
                                     : schedule::plan_of_schedule_file(file, f.schedule_file, "--plan");
    plan::check_plan_fits(plan, prof, f.schedule_file);
  } else {
    // Without a plan: an even split, one stage per worker (per chunk for interleaved, two for
    // zb-v's V).
    int stages = schedule::is_interleaved(f.kind) ? cluster.workers() * f.options.chunks
                 : schedule::is_v_schedule(f.kind) ? 2 * cluster.workers()
                                         : cluster.workers();
    plan = straight_plan(prof, stages);
    // Data parallelism makes its own one-stage plan from the workers (make_schedule).
    if (f.kind != "dp")
      std::cerr << "no --plan: even split of '" << prof.model << "' into " << plan.num_stages() << " stages\n";
  }
  schedule::ScheduleOptions options = f.options;
  if (schedule::takes_activation_budget(f.kind))
    options.activation_budget = schedule::activation_budget_from_profile(f.kind, plan, prof);
  schedule::Schedule s = f.schedule_file.empty() ? schedule::make_schedule(f.kind, plan, options)
                                                 : schedule::bind_schedule(std::move(file), plan, f.schedule_file);
  std::string kind = f.schedule_file.empty() ? f.kind : f.schedule_file;
  sim::SimOptions sim_options;
  // The plan's bucket, where the planner chose one (as train --plan takes it), unless --bucket-mb says.
  double bucket_mb = plan.bucket_mb >= 0 && f.bucket_flag->count() == 0 ? plan.bucket_mb : f.bucket_mb;
  sim_options.bucket_bytes = static_cast<int64_t>(bucket_mb * (1 << 20));
  sim_options.cores = f.cores;
  // Over the default minibatches, until the window settles, as the planner's referee replays it
  // (data parallelism's schedule makes its own plan, whose floor is not this one's); a schedule
  // file or --minibatches is the run as given.
  referee::SteadyReplayOptions how;
  how.sim = sim_options;
  how.lengthen = f.schedule_file.empty() && options.minibatches == 0;
  if (f.kind == "dp") how.floor_ms = 0;
  referee::SteadyReplay replay = referee::steady_replay(f.kind, plan, options, prof, cluster, how, &s);
  if (replay.lengthened) s = std::move(*replay.lengthened);
  const metrics::Metrics& m = replay.metrics;
  const schedule::Trace& trace = replay.trace;
  if (!f.schedule_out.empty()) write_text_file_atomic(f.schedule_out, schedule::to_json(s).dump(1) + "\n");
  std::string title = str(kind, " on ", cluster.describe(), ": ", s.num_stages, " stages, ", s.microbatches,
                          " microbatches", s.chunks > 1 ? str(", ", s.chunks, " chunks") : "", " (simulated, ",
                          prof.model, " batch ", prof.batch_size, ")");
  if (!f.svg.empty()) write_text_file_atomic(f.svg, metrics::timeline_svg(trace, title));
  if (!f.chrome.empty()) write_text_file_atomic(f.chrome, metrics::chrome_trace(trace).dump() + "\n");
  if (!f.trace_out.empty()) schedule::write_trace(trace, f.trace_out);
  // Memory by the memory model (schedule/memory.h), the figure train checks and plan, compare and
  // the joint search use; the metrics' own is the trace's stashes and weight versions only.
  // Over a long run (memory_minibatches); a schedule file is the run it gives.
  auto memory = f.schedule_file.empty() ? schedule::memory_over_long_run(f.kind, plan, options, prof, {}, &s)
                                        : schedule::memory_per_worker(s, prof);
  if (f.json) {
    json doc = metrics::to_json(m);
    doc["memory_model_peak_bytes"] = schedule::peak_memory(memory);
    std::cout << doc.dump(1) << "\n";
    return 0;
  }
  std::cout << title << "\n" << metrics::format_metrics(m);
  std::cout << "memory per worker by the memory model (weights, gradients, momentum, activations; what train checks): "
               "peak "
            << human_bytes(static_cast<double>(schedule::peak_memory(memory))) << "\n";
  if (f.grid) std::cout << "\n" << metrics::time_grid(trace) << "\nper-worker order:\n" << schedule::format_grid(s, {}, true);
  return 0;
}

Register reg({"simulate", "Replay a schedule of a plan on a virtual clock: time, bubbles, memory, pictures",
              [](CLI::App& app) -> std::function<int()> {
  auto f = std::make_shared<SimulateFlags>();
  app.add_option("--profile", f->profile, "Profile: pipetrain JSON, PipeDream JSON figures, or graph.txt")->required();
  app.add_option("--plan", f->plan, "Plan file (pipetrain.plan/1); default: even split over the workers");
  add_cluster_flags(app, f->cluster);
  std::string kinds;
  for (const auto& k : schedule::schedule_kinds()) kinds += (kinds.empty() ? "" : ", ") + k;
  f->kind_flag = app.add_option("--schedule", f->kind, "Schedule kind: " + kinds + " (default: the plan's, or 1f1b)")
                    ->capture_default_str();
  app.add_option("--schedule-file", f->schedule_file,
                 "Replay this schedule: pipetrain's JSON (--emit-schedule) or a CSV of torch.distributed.pipelining "
                 "actions per rank (2F0, 1I3, 1W3; its stages are --plan's, or an even split)");
  add_schedule_options(app, f->options);
  f->microbatches_flag = app.get_option("--microbatches");
  f->chunks_flag = app.get_option("--chunks");
  f->bucket_flag = app.add_option("--bucket-mb", f->bucket_mb,
                                  "All-reduce bucket, MiB, as train's: reduced during the backward (0: all after it; "
                                  "default: the plan's bucket_mb, else 25)")
      ->check(bucket_mb_range())
      ->capture_default_str();
  app.add_option("--cores", f->cores,
                 "The workers are threads of one machine sharing this many cores, time-sliced as the kernel does "
                 "(0: a device each; train --profile predicts its threads' run so)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--svg", f->svg, "Write the timeline as SVG");
  app.add_option("--trace", f->chrome, "Write Chrome trace JSON (chrome://tracing, ui.perfetto.dev)");
  app.add_option("--save-trace", f->trace_out, "Write the trace (pipetrain.trace/1)");
  app.add_option("--emit-schedule,--save-schedule", f->schedule_out,
                 "Write the schedule (pipetrain.schedule/1), which --schedule-file reads back");
  app.add_flag("--json", f->json, "Print the metrics as JSON");
  app.add_flag("--grid", f->grid, "Print the ASCII timeline and each worker's order");
  return [f] { return run_simulate(*f); };
}});

}  // namespace
}  // namespace pt::app
