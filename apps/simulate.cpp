// pipetrain simulate: one schedule of one plan on a virtual clock; prints the metrics and
// optionally draws the timeline.
#include <algorithm>
#include <iostream>
#include <memory>
#include <tuple>

#include "apps/command.h"
#include "core/host_allocator.h"
#include "apps/planning_flags.h"
#include "core/error.h"
#include "core/files.h"
#include "metrics/metrics.h"
#include "metrics/timeline.h"
#include "plan/planner.h"
#include "profile/pipedream_graph.h"
#include "referee/steady_replay.h"
#include "schedule/generators.h"
#include "schedule/given_order.h"
#include "schedule/memory.h"
#include "schedule/schedule_file.h"
#include "schedule/schedule_notes.h"
#include "schedule/validate.h"
#include "sim/core_placement.h"
#include "sim/simulator.h"
#include "sim/weigh_schedule.h"

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
  bool pin_cores = false;     // --pin-cores: the default where the workers share cores
  bool no_pin_cores = false;  // one pool of cores, as the kernel shares them among unpinned threads
  bool no_weight_prediction = false;  // as train's: the memory model's and the trace's copies
  double bucket_mb = plan::Cluster::kDefaultBucketBytes / double(1 << 20);
};

// What a plan file says of how it runs (schedule, microbatches, chunks), where the flags do not:
// the run its prediction and `train --plan` are for, so that simulate prints the plan's time.
void follow_plan(SimulateFlags& flags, const plan::Plan& plan) {
  schedule::GivenSettings given{flags.kind_flag->count() > 0 || !flags.schedule_file.empty(),
                                flags.microbatches_flag->count() > 0, flags.chunks_flag->count() > 0};
  schedule::follow_plan(plan, flags.plan, given, flags.kind, flags.options.microbatches, flags.options.chunks);
  if (!given.kind && !plan.schedule.empty())
    std::cerr << "schedule " << flags.kind << ": the plan's (--schedule runs another)\n";
}

int run_simulate(SimulateFlags flags) {
  keep_freed_host_memory();
  // The JSON is stdout's whole: the grid was left out without a word.
  if (flags.json && flags.grid) throw UsageError("--json and --grid: give one (the grid is text; --json prints JSON alone)");
  // Before any is written: `--svg` given the profile's path replaced it with the picture, exit 0,
  // and a bad last path left the earlier outputs written.
  const std::vector<FlagPath> outputs = {{"--emit-schedule", flags.schedule_out}, {"--svg", flags.svg},
                                         {"--trace", flags.chrome}, {"--save-trace", flags.trace_out}};
  for (const auto& [flag, path] : outputs) check_output_path(path, flag);
  check_outputs_apart({{"--profile", flags.profile}, {"--plan", flags.plan}, {"--schedule-file", flags.schedule_file},
                       {"--cluster", flags.cluster.file}},
                      outputs);
  schedule::check_schedule_options(flags.options);  // before --chunks multiplies the workers
  auto prof = profile::read_any_profile(flags.profile);  // as plan reads it: PipeDream's files too
  profile::require_timed(prof, flags.profile);
  plan::Cluster cluster = plan::cluster_from_flags(flags.cluster);
  plan::Plan plan;
  schedule::Schedule file;  // --schedule-file, as read
  if (!flags.schedule_file.empty()) {
    if (flags.kind_flag->count() > 0) throw UsageError("--schedule and --schedule-file: give one of them");
    file = schedule::read_schedule_file(flags.schedule_file);
    schedule::refuse_settings_the_file_overrides(file, flags.schedule_file, flags.microbatches_flag->count() > 0,
                                                 flags.options.microbatches, flags.chunks_flag->count() > 0,
                                                 flags.options.chunks);
  }
  if (!flags.plan.empty()) {
    plan = plan::read_plan(flags.plan);
    // Another model's plan can fit a profile of as many layers, and simulate its stages' wrong
    // layers without a word (train --plan refuses it the same way).
    if (!plan.model.empty() && plan.model != prof.model)
      throw ConfigError(str(flags.plan, ": field 'model' is '", printable(plan.model), "' but ", flags.profile,
                            " profiles '", printable(prof.model), "'"));
    plan::check_plan_fits(plan, prof, flags.plan);
    // Its prediction came from the profile it was planned from; this replay is the one given.
    for (const auto& [field, planned, given] : {std::tuple{"precision", plan.precision, prof.precision},
                                                std::tuple{"optimizer", plan.optimizer, prof.optimizer}})
      if (!planned.empty() && planned != given)
        std::cerr << "note: " << flags.plan << " was planned from a profile of " << field << " " << planned << " and "
                  << flags.profile << " is of " << given << ": simulated with " << flags.profile << "'s times and "
                  << "memory, not the ones the plan predicted by\n";
    follow_plan(flags, plan);
    cluster = plan::cluster_for_plan(cluster, plan, !flags.cluster.allreduce.empty());
    schedule::check_schedule_options(flags.options);
    // A plan for another batch per step (the joint search's): the profile scaled to it, as the
    // planner simulated it and train runs it.
    if (plan.batch_size > 0 && plan.batch_size != prof.batch_size) {
      std::cerr << "profile scaled from batch " << prof.batch_size << " to the plan's " << plan.batch_size << "\n";
      prof = profile::with_batch_size(prof, plan.batch_size);
    }
  } else if (!flags.schedule_file.empty()) {
    // Without a plan: the file's stages, an even split into them for a CSV, which names no layers.
    plan = file.stage_layers.empty() ? straight_plan(prof, file.num_stages, "--schedule-file " + flags.schedule_file)
                                     : schedule::plan_of_schedule_file(file, flags.schedule_file, "--plan");
    plan::check_plan_fits(plan, prof, flags.schedule_file);
  } else {
    // Without a plan: an even split, one stage per worker (per chunk for interleaved, two for
    // zb-v's V).
    int stages = schedule::is_interleaved(flags.kind) ? cluster.workers() * flags.options.chunks
                 : schedule::is_v_schedule(flags.kind) ? 2 * cluster.workers()
                                         : cluster.workers();
    std::string workers = flags.cluster.file.empty() ? "--workers " + flags.cluster.workers : flags.cluster.file;
    std::string why = schedule::is_interleaved(flags.kind) ? str(workers, " x --chunks ", flags.options.chunks)
                      : schedule::is_v_schedule(flags.kind) ? str(workers, " under ", flags.kind, " (two stages each)")
                                                            : workers;
    plan = flags.kind == "dp" ? plan::data_parallel_plan(prof.num_layers(), cluster.workers())
                              : straight_plan(prof, stages, "an even split for " + why);
    // Data parallelism: one stage on every worker, however few the layers.
    if (flags.kind != "dp")
      std::cerr << "no --plan: even split of '" << prof.model << "' into " << plan.num_stages() << " stages\n";
  }
  // The planner's order where this is the run it planned (train runs it too), else weighed here.
  schedule::ScheduleOptions options = flags.options;
  options.order = schedule::plan_order(plan, flags.plan, flags.kind, options.microbatches, options.chunks);
  options.order_source = flags.plan + ": field 'order'";
  if (options.order.empty()) options = sim::weigh_schedule(flags.kind, plan, flags.options, prof, cluster);
  std::string budget_note = schedule::activation_budget_note(flags.kind, options.activation_budget);
  if (!budget_note.empty()) std::cerr << "note: " << budget_note << "\n";
  schedule::Schedule s = flags.schedule_file.empty() ? schedule::make_schedule(flags.kind, plan, options)
                                                 : schedule::bind_schedule(std::move(file), plan, flags.schedule_file);
  std::string kind = flags.schedule_file.empty() ? flags.kind : flags.schedule_file;
  // Named as train names it: the simulator's own refusal named neither file.
  const std::string plan_source = !flags.plan.empty()            ? flags.plan
                                  : !flags.schedule_file.empty() ? flags.schedule_file
                                                                 : std::string("the even split");
  if (cluster.workers() < s.num_workers())
    throw ConfigError(str(flags.cluster.file.empty() ? "--workers " + flags.cluster.workers : flags.cluster.file,
                          ": the cluster has ", cluster.workers(), " workers but ", plan_source, " under ", kind,
                          " uses ", s.num_workers()));
  // A microbatch is a share of the minibatch's samples, as train splits it (dp's too, among its
  // workers): 1000 microbatches of a batch of 16 simulated at 3.3 samples/s, and dp's 6 of a
  // batch of 128 at 21.33 samples each, which train refuses.
  schedule::check_microbatches_divide(
      s.microbatches,
      !flags.schedule_file.empty()                                     ? "--schedule-file " + flags.schedule_file
      : flags.microbatches_flag->count() == 0 && plan.microbatches > 0 ? flags.plan + "'s field 'microbatches'"
                                                                       : std::string("--microbatches"),
      prof.batch_size, !flags.plan.empty() && plan.batch_size > 0 ? flags.plan : flags.profile);
  for (const std::string& note : {schedule::weight_delay_note(s, !flags.no_weight_prediction), schedule::one_chunk_note(s)})
    if (!note.empty()) std::cerr << "note: " << note << "\n";
  // It ran 1 without a word (train notes it alike).
  if (flags.kind == "pipedream" && flags.microbatches_flag->count() > 0 && flags.options.microbatches != 1)
    std::cerr << "note: --microbatches " << flags.options.microbatches << " is not used: pipedream runs each minibatch "
              << "whole (--schedule 2bw splits minibatches into microbatches)\n";
  // Read by pipedream alone, as train refuses them elsewhere: gpipe simulated with both as without.
  if (flags.schedule_file.empty() && flags.kind != "pipedream" && (flags.options.vertical_sync || flags.options.deferred_step))
    throw UsageError(str(flags.options.vertical_sync ? "--vertical-sync" : "--deferred-step",
                         ": only the pipedream schedule has it, not ", flags.kind));
  if (s.kind != "pipedream" && s.kind != "2bw" && flags.no_weight_prediction)  // as train (a schedule file's too)
    throw UsageError(str("--no-weight-prediction: only pipedream and 2bw predict weights, not ", s.kind));
  if (s.flush && flags.options.minibatches > 0)
    std::cerr << "note: --minibatches " << flags.options.minibatches << " is not used: " << kind
              << " flushes, and its steady state is one minibatch's list run again and again\n";
  sim::SimOptions sim_options;
  // The plan's bucket, where the planner chose one (as train --plan takes it), unless --bucket-mb says.
  double bucket_mb = plan.bucket_mb >= 0 && flags.bucket_flag->count() == 0 ? plan.bucket_mb : flags.bucket_mb;
  sim_options.bucket_bytes = static_cast<int64_t>(bucket_mb * (1 << 20));
  sim_options.cores = flags.cores;
  sim_options.weight_prediction = !flags.no_weight_prediction;
  const int cores = flags.cores > 0 ? flags.cores : cluster.host_cores;
  if (flags.cores > 0 && cluster.host_cores > 0 && flags.cores != cluster.host_cores && !cluster.core_rates.empty())
    std::cerr << "note: --cores " << flags.cores << ": the cluster's core_rates were measured on its host_cores "
              << cluster.host_cores << "; on " << flags.cores << " the computes share the cores by time-slicing alone\n";
  if (flags.pin_cores && flags.no_pin_cores) throw UsageError("--pin-cores and --no-pin-cores: give one of them");
  if (flags.pin_cores && cores == 0)
    throw UsageError("--pin-cores: the workers share no cores to pin them to: give --cores, or a --cluster with "
                     "host_cores (calibrate writes it)");
  // Pinned unless told: as train runs them and plan replays them (one pool, the default before,
  // put a plan made on a calibrated cluster of 4 workers on 2 cores at 23.8 ms where the plan
  // file said 26.5).
  if (!flags.no_pin_cores && cores > 0 && s.num_workers() > cores)
    sim_options.placement = sim::place_on_cores(s, sim::stage_costs(s, prof), cores);
  // Over the default minibatches, until the window settles, as the planner's referee replays it
  // (data parallelism's schedule makes its own plan, whose floor is not this one's); a schedule
  // file or --minibatches is the run as given.
  referee::SteadyReplayOptions how;
  how.sim = sim_options;
  how.lengthen = flags.schedule_file.empty() && options.minibatches == 0;
  if (flags.kind == "dp") how.floor_ms = 0;
  referee::SteadyReplay replay = referee::steady_replay(flags.kind, plan, options, prof, cluster, how, &s);
  if (replay.lengthened) s = std::move(*replay.lengthened);
  const metrics::Metrics& m = replay.metrics;
  const schedule::Trace& trace = replay.trace;
  if (!flags.schedule_out.empty()) write_text_file_atomic(flags.schedule_out, schedule::to_json(s).dump(1) + "\n");
  std::string title = str(kind, " on ", cluster.describe(), flags.cores > 0 ? str(", on --cores ", flags.cores) : "",
                          ": ", s.num_stages, " stages, ", s.microbatches,
                          " microbatches", s.chunks > 1 ? str(", ", s.chunks, " chunks") : "", " (simulated, ",
                          prof.model, " batch ", prof.batch_size, ")");
  if (!flags.svg.empty()) write_text_file_atomic(flags.svg, metrics::timeline_svg(trace, title));
  if (!flags.chrome.empty()) write_text_file_atomic(flags.chrome, metrics::chrome_trace(trace).dump() + "\n");
  if (!flags.trace_out.empty()) schedule::write_trace(trace, flags.trace_out);
  // Memory by the memory model (schedule/memory.h), the figure train checks and plan, compare and
  // the joint search use; the metrics' own is the trace's stashes and weight versions only.
  // Over a long run (memory_minibatches); a schedule file is the run it gives.
  schedule::MemoryOptions memory_options;
  memory_options.weight_prediction = !flags.no_weight_prediction;
  auto memory = flags.schedule_file.empty()
                    ? schedule::memory_over_long_run(flags.kind, plan, options, prof, memory_options, &s)
                    : schedule::memory_per_worker(s, prof, memory_options);
  // The cluster's cap, which plan and compare plan under: a plan over it was simulated without a word.
  const int64_t peak = schedule::peak_memory(memory);
  if (cluster.memory_bytes_per_worker > 0 && peak > cluster.memory_bytes_per_worker - cluster.process_bytes)
    std::cerr << "warning: a worker's tensors peak at " << human_bytes(static_cast<double>(peak)) << ", over the "
              << human_bytes(static_cast<double>(cluster.memory_bytes_per_worker)) << " of the cluster's "
              << "memory_bytes_per_worker"
              << (cluster.process_bytes > 0 ? str(" less the ", human_bytes(static_cast<double>(cluster.process_bytes)),
                                                   " a worker process holds besides them (process_bytes)")
                                            : std::string())
              << ": this plan does not fit the cluster (plan --memory finds one that does)\n";
  if (flags.json) {
    json doc = metrics::to_json(m);
    doc["peak_memory_bytes"] = doc["memory_model_peak_bytes"] = schedule::peak_memory(memory);
    if (cluster.process_bytes > 0) doc["peak_rss_bytes"] = schedule::peak_memory(memory) + cluster.process_bytes;
    for (size_t w = 0; w < memory.size() && w < doc["workers"].size(); ++w)
      doc["workers"][w]["peak_memory_bytes"] = memory[w].total();
    std::cout << doc.dump(1) << "\n";
    return 0;
  }
  std::cout << title << "\n" << metrics::format_metrics(m);
  std::cout << "memory per worker by the memory model (weights, gradients, optimizer state, activations; "
            << schedule::kSeparateProcessesMemory << "): peak "
            << human_bytes(static_cast<double>(schedule::peak_memory(memory))) << "\n";
  // What the OS counts, where calibrate measured what a worker process holds besides its tensors
  // (a Llama's 190.9 MiB of tensors were a 329 MiB process).
  if (cluster.process_bytes > 0)
    std::cout << "peak RSS per worker process (modelled): "
              << human_bytes(static_cast<double>(schedule::peak_memory(memory) + cluster.process_bytes))
              << " (its tensors and the cluster's process_bytes "
              << human_bytes(static_cast<double>(cluster.process_bytes))
              << "; gloo workers on one host also map shared memory for their transfers, which train models)\n";
  if (flags.grid) std::cout << "\n" << metrics::time_grid(trace) << "\nper-worker order:\n" << schedule::format_grid(s, {}, true);
  return 0;
}

Register simulate_command({"simulate", "Replay a schedule of a plan on a virtual clock: time, bubbles, memory, pictures",
              [](CLI::App& app) -> std::function<int()> {
  auto flags = std::make_shared<SimulateFlags>();
  app.add_option("--profile", flags->profile, "Profile: pipetrain JSON, PipeDream JSON figures, or graph.txt")->required();
  app.add_option("--plan", flags->plan, "Plan file (pipetrain.plan/1); default: even split over the workers");
  add_cluster_flags(app, flags->cluster);
  std::string kinds;
  for (const auto& k : schedule::schedule_kinds()) kinds += (kinds.empty() ? "" : ", ") + k;
  flags->kind_flag = app.add_option("--schedule", flags->kind, "Schedule kind: " + kinds + " (default: the plan's, or 1f1b)")
                    ->capture_default_str();
  app.add_option("--schedule-file", flags->schedule_file,
                 "Replay this schedule: pipetrain's JSON (--emit-schedule) or a CSV of torch.distributed.pipelining "
                 "actions per rank (2F0, 1I3, 1W3; its stages are --plan's, or an even split)");
  add_schedule_options(app, flags->options);
  flags->microbatches_flag = app.get_option("--microbatches");
  flags->chunks_flag = app.get_option("--chunks");
  flags->bucket_flag = app.add_option("--bucket-mb", flags->bucket_mb,
                                  "All-reduce bucket, MiB, as train's: reduced during the backward (0: all after it; "
                                  "default: the plan's bucket_mb, else 25)")
      ->check(bucket_mb_range())
      ->capture_default_str();
  app.add_option("--cores", flags->cores,
                 "The workers are threads of one machine sharing this many cores, time-sliced as the kernel does "
                 "(0: the --cluster's host_cores where calibrate wrote them, else a device each; train --profile "
                 "predicts its threads' run so)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_flag("--pin-cores", flags->pin_cores,
               "Where the workers outnumber the cores (--cores, or the cluster's host_cores): each on the core "
               "train pins it to, the busiest first, each core shared among its own (the default, as train runs "
               "them and plan replays them)");
  app.add_flag("--no-pin-cores", flags->no_pin_cores,
               "Workers that outnumber the cores share them as one pool, as the kernel schedules unpinned threads "
               "(train --no-pin-cores)");
  add_no_weight_prediction_flag(app, flags->no_weight_prediction);
  app.add_option("--svg", flags->svg, "Write the timeline as SVG");
  app.add_option("--trace", flags->chrome, "Write Chrome trace JSON (chrome://tracing, ui.perfetto.dev)");
  app.add_option("--save-trace", flags->trace_out, "Write the trace (pipetrain.trace/1)");
  app.add_option("--emit-schedule,--save-schedule", flags->schedule_out,
                 "Write the schedule (pipetrain.schedule/1), which --schedule-file reads back");
  app.add_flag("--json", flags->json, "Print the metrics as JSON");
  app.add_flag("--grid", flags->grid, "Print the ASCII timeline and each worker's order");
  return [flags] { return run_simulate(*flags); };
}});

}  // namespace
}  // namespace pt::app
