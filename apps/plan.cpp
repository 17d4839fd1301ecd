// pipetrain plan: PipeDream's partitioner (stages, replicas, workers) over a profile and a
// cluster, its best candidates refereed by the simulator; prints a table, or the plan JSON with
// --json, and writes it with -o.
#include <filesystem>
#include <iostream>

#include "apps/command.h"
#include "apps/planning_flags.h"
#include "core/error.h"
#include "core/files.h"
#include "core/host_allocator.h"
#include "core/json_doc.h"
#include "plan/plan_command.h"
#include "plan/plan_table.h"
#include "referee/plan_decision.h"
#include "referee/referee.h"
#include "schedule/generators.h"

namespace pt::app {
namespace {

struct Flags {
  plan::PlanFlags plan;
  std::string output;
  bool json = false, explain = false;
  int top = 0;
  std::string save_top;  // a folder: each --top candidate as a plan file
  std::string schedule = "pipedream", objective = "throughput";
  double staleness_cost = -1;  // --staleness-cost: 1 + C k in place of the measured steps
  bool no_weight_prediction = false;
  int microbatches = 0;
  CLI::Option *schedule_flag = nullptr, *microbatches_flag = nullptr, *objective_flag = nullptr, *bucket_flag = nullptr;
};

// The joint search (src/referee/joint_search.h) runs when asked for a schedule choice, microbatches or
// an objective, or under a memory cap; without them `plan` plans for the pipedream schedule.
bool joint_wanted(const Flags& flags) {
  // A memory cap is joint under the pipetrain model; PipeDream's optimizer has its own.
  return flags.schedule_flag->count() > 0 || flags.microbatches_flag->count() > 0 || flags.objective_flag->count() > 0 ||
         (!flags.plan.memory.empty() && flags.plan.cost_model == "pipetrain");
}

// The joint search's options from the flags.
referee::JointOptions joint_options(const Flags& flags, int64_t memory_cap) {
  referee::JointOptions joint;
  if (flags.schedule_flag->count() > 0 && flags.schedule != "auto") joint.schedules = {flags.schedule};
  if (flags.microbatches_flag->count() > 0 && (flags.microbatches < 1 || flags.microbatches > schedule::kMaxMicrobatches))
    throw UsageError(str("--microbatches: must be in 1..", schedule::kMaxMicrobatches, ", got ", flags.microbatches));
  joint.microbatches = flags.microbatches;
  joint.objective = flags.objective;
  if (flags.staleness_cost >= 0) joint.staleness_steps = {{0, 1.0}, {1, 1.0 + flags.staleness_cost}};
  joint.memory_cap = memory_cap;
  if (flags.plan.memory.empty())  // a cluster file's cap
    joint.memory_cap_named = str("memory_bytes_per_worker in '", flags.plan.cluster.file, "'");
  joint.own_buckets = flags.bucket_flag->count() == 0;
  return joint;
}

int run_plan(Flags& flags) {
  keep_freed_host_memory();
  // Before the search: `-o` given the profile's path replaced the profile with the plan, exit 0.
  check_outputs_apart({{"--profile", flags.plan.profile}, {"--cluster", flags.plan.cluster.file}},
                      {{"-o", flags.output}, {"--save-top", flags.save_top}});
  if (!flags.save_top.empty() && flags.top < 1) throw UsageError("--save-top: needs --top K, the candidates to write");
  // It was read by nothing: the throughput objective weighs no staleness.
  if (flags.staleness_cost >= 0 && flags.objective != "time-to-accuracy")
    throw UsageError(str("--staleness-cost ", flags.staleness_cost, ": weighs staleness for --objective "
                         "time-to-accuracy; --objective is ", flags.objective));
  // As train and simulate refuse it: a plan pinned to a schedule that keeps no predicted copies.
  if (flags.no_weight_prediction && flags.schedule_flag->count() > 0 && flags.schedule != "auto" &&
      flags.schedule != "pipedream" && flags.schedule != "2bw")
    throw UsageError(str("--no-weight-prediction: only pipedream and 2bw predict weights, not ", flags.schedule));
  if (!flags.save_top.empty() && !std::filesystem::is_directory(flags.save_top)) {
    std::error_code made;  // as -o needs no file made first, the folder is made where its parent is
    if (!std::filesystem::create_directory(flags.save_top, made))
      throw UsageError(str("--save-top '", flags.save_top, "': cannot make the folder (",
                           made ? made.message() : "a file of that name is there", ")"));
  }
  check_output_path(flags.output, "-o");  // after --save-top's folder, which may hold it
  if (flags.top < 0 || flags.top > plan::kMaxCandidates)
    throw UsageError(str("--top: must be in 0..", plan::kMaxCandidates, ", got ", flags.top));
  // Every candidate --top lists is refereed (a bad --candidates is left for its own message).
  if (flags.plan.candidates >= 1 && flags.top > flags.plan.candidates) flags.plan.candidates = flags.top;
  flags.plan.joint = joint_wanted(flags);
  // A search of many workers takes seconds: a line every few, on stderr.
  flags.plan.progress = [](const std::string& line) { std::cerr << "plan: " << line << "\n"; };
  plan::PlanOutcome out = plan::run_plan_command(flags.plan);
  // PipeDream's optimizer keeps its own memory constraint (12 of its 111 published settings);
  // the pipetrain model plans under a cap jointly, with the memory model of each schedule.
  bool pipedream = out.options.cost_model != plan::CostModel::kRealised;
  if (flags.plan.joint && pipedream)
    throw UsageError("--schedule, --microbatches and --objective use the joint search, which needs --cost-model "
                     "pipetrain");
  referee::PlanRequest request;
  request.joint = out.joint;  // a cluster file's cap too
  if (request.joint) request.joint_options = joint_options(flags, out.memory_cap);
  if (!request.joint && pipedream && (flags.top > 0 || flags.explain))
    throw UsageError("--top and --explain use the pipetrain cost model's exact evaluation and the simulator; "
                     "--cost-model pipedream gives PipeDream's one plan");
  request.bucket_mb = flags.plan.bucket_mb;
  request.bucket_given = flags.bucket_flag->count() > 0;
  request.top = flags.top;
  request.explain = flags.explain;
  request.memory.weight_prediction = !flags.no_weight_prediction;
  referee::PlanDecision decision = referee::decide_plan(out, request);
  // A count that splits no copy's batch left the search pipedream, which runs minibatches whole,
  // chosen without a word. (The search spreads the count over a pipeline's copies, whose step
  // takes the batch once each: 256 on ResNet-50's batch of 128 is 8 copies' 32 each.)
  const int64_t batch = out.profile.batch_size;
  if (flags.microbatches_flag->count() > 0 && decision.shown.schedule == "pipedream" &&
      (flags.schedule_flag->count() == 0 || flags.schedule == "auto") && batch % flags.microbatches != 0)
    decision.shown.notes.push_back(str("--microbatches ", flags.microbatches, " does not divide the batch of ", batch,
                                       ": the joint search chose pipedream, which runs each minibatch whole, so the "
                                       "count is not used (a divisor of ", batch, " pins a split)"));
  std::string table = plan::format_plan_table(decision.shown, out.profile, out.cluster, decision.one_worker_fits) +
                      decision.summary;
  // As it runs: an interleaved or V plan's file lists the workers its chunks share.
  std::string json = to_json(decision.shown).dump(1) + "\n";
  if (!flags.output.empty()) {
    write_text_file_atomic(flags.output, json);
    std::cerr << "wrote " << flags.output << "\n";
  }
  for (size_t k = 0; k < decision.top.size() && !flags.save_top.empty(); ++k) {
    std::string path = (std::filesystem::path(flags.save_top) / str("top-", k + 1, ".plan.json")).string();
    write_text_file_atomic(path, to_json(decision.top[k]).dump(1) + "\n");
    std::cerr << "wrote " << path << " (rank " << k + 1 << ")\n";
  }
  if (flags.json) {
    std::cout << json;
    std::cerr << table << decision.reports;
  } else {
    std::cout << table << decision.reports;
  }
  return 0;
}

Register plan_command({"plan", "Split a profiled model into replicated pipeline stages for a cluster (PipeDream's planner)",
              [](CLI::App& app) -> std::function<int()> {
  auto flags = std::make_shared<Flags>();
  app.add_option("--profile", flags->plan.profile, "Profile: pipetrain JSON, PipeDream JSON figures, or graph.txt")->required();
  add_cluster_flags(app, flags->plan.cluster);
  app.add_option("--memory", flags->plan.memory, "Memory per worker, e.g. 16GB (binary: GB and GiB both 2^30 bytes, MB 2^20, as the figures print them; default: the cluster's, or unlimited)");
  app.add_option("--cost-model", flags->plan.cost_model, "pipetrain (default) or pipedream (PipeDream's optimizer)")
      ->capture_default_str();
  app.add_flag("--straight", flags->plan.straight, "One worker per stage, no replication");
  app.add_flag("--no-activation-transfer", flags->plan.no_activation_transfer,
               "PipeDream model: leave activation transfers out (its optimizer's default)");
  app.add_option("--candidates", flags->plan.candidates,
                 "How many of the search's best plans the simulator replays to choose among")
      ->capture_default_str();
  flags->bucket_flag = app.add_option("--bucket-mb", flags->plan.bucket_mb,
                                  str("The all-reduce bucket train will use, MiB (0: all after the backward; default: the "
                                      "planner tries ", referee::bucket_choices_text(), " for the chosen plan and keeps "
                                      "the fastest, ", flags->plan.bucket_mb, " unless another is faster)"))
                       ->check(bucket_mb_range())
                       ->capture_default_str();
  app.add_flag("--no-deferred-step", flags->plan.no_deferred_step,
               "Never defer a replicated first stage's step past its next forward (which hides its all-reduce "
               "at the cost of one more update of staleness)");
  app.add_flag("--all-workers", flags->plan.all_workers,
               "Use every worker of the cluster, as PipeDream's optimizer does, even where a plan on fewer of them "
               "(the rest idle) is faster");
  app.add_option("--time-limit", flags->plan.time_limit_s,
                 "Seconds planning may take: past them the simulator replays no further candidate or bucket size "
                 "and the best of those replayed is chosen, with a note saying so (the search itself always "
                 "completes; 0: no limit)")
      ->capture_default_str();
  app.add_option("--top", flags->top, "Print the K best candidates: predicted and simulated time, memory, why each lost");
  app.add_option("--save-top", flags->save_top,
                 "With --top K: write each of the K best candidates into this folder as top-<rank>.plan.json, as "
                 "`train --plan` runs it (its schedule, bucket and simulated time), to measure them");
  app.add_flag("--explain", flags->explain, "Print the chosen plan's per-stage compute, links, all-reduce and memory");
  std::string kinds;
  for (const auto& k : schedule::schedule_kinds()) kinds += ", " + k;
  flags->schedule_flag = app.add_option("--schedule", flags->schedule,
                                    "Joint search over schedules (auto), or pinned to one: auto" + kinds +
                                        " (default: pipedream's planner alone)");
  flags->microbatches_flag = app.add_option("--microbatches", flags->microbatches,
                                        "Joint search with the microbatches per step pinned");
  flags->objective_flag = app.add_option("--objective", flags->objective,
                                     "Joint search objective: throughput, or time-to-accuracy (staleness weighed)");
  app.add_option("--staleness-cost", flags->staleness_cost,
                 "--objective time-to-accuracy: weigh an asynchronous schedule whose weights lag k updates by the "
                 "steps 1 + C k (default: the steps bench/staleness.sh measured on mnist-cnn, 1.00 at k = 1 and "
                 "1.44 at k = 3; it measures them for a model)")
      ->check(CLI::Range(0.0, 100.0));
  add_no_weight_prediction_flag(app, flags->no_weight_prediction);
  app.add_option("-o,--output", flags->output, "Write the plan JSON here");
  app.add_flag("--json", flags->json, "Print the plan JSON on standard output (the table goes to standard error)");
  return [flags] { return run_plan(*flags); };
}});

}  // namespace
}  // namespace pt::app
