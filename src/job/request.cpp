#include "job/request.h"

#include <algorithm>
#include <iostream>
#include <optional>

#include "core/error.h"
#include "model/data_checks.h"
#include "plan/cluster.h"
#include "plan/planner.h"
#include "plan/split_ties.h"
#include "profile/pipedream_graph.h"
#include "profile/profiler.h"
#include "runtime/gloo_transport.h"
#include "runtime/launcher.h"
#include "schedule/generators.h"
#include "schedule/given_order.h"
#include "schedule/schedule_file.h"
#include "sim/weigh_schedule.h"

namespace pt::job {

namespace {

// The plan to run: the launcher's, --plan FILE, an even split into --stages N by the profile,
// (dp) one stage replicated over --workers, or a JSON --schedule-file's stages (the file, read
// for them, is kept in `file`). `timed`: whether it timed the model's layers here for the split.
plan::Plan pick_plan(const Request& r, const PipelineOptions& options, model::LayeredModel& m, const model::DataSplit& data,
                     std::optional<schedule::Schedule>& file, bool& timed) {
  if (!r.launched_plan.empty()) return plan::read_plan(r.launched_plan);
  if (!r.schedule_file.empty() && r.plan_path.empty() && r.stages == 0) {
    file = schedule::read_schedule_file(r.schedule_file);
    return schedule::plan_of_schedule_file(*file, r.schedule_file, "--plan P or --stages N");
  }
  if (!r.plan_path.empty()) return plan::read_plan(r.plan_path);
  if (options.schedule == "dp" && r.stages > 1)  // it ran data parallelism on 2 workers, saying nothing
    throw UsageError(str("--stages ", r.stages, " with --schedule dp: data parallelism runs the whole model on every "
                         "worker, one stage; give --workers N for N replicas, or a pipeline schedule for stages"));
  if (options.schedule == "dp" || (r.workers > 0 && r.stages == 0))  // --workers N: one stage on N
    return plan::data_parallel_plan(m.num_layers(), r.workers > 0 ? r.workers : 2);
  int stages = r.stages > 0 ? r.stages : 2;
  if (schedule::is_interleaved(options.schedule)) {
    // Checked before it multiplies --stages, so that the error names --chunks.
    if (options.chunks < 1 || options.chunks > schedule::kMaxChunks)
      throw UsageError(str("--chunks: must be in 1..", schedule::kMaxChunks, ", got ", options.chunks));
    if (stages * options.chunks > m.num_layers())
      throw UsageError(str("--stages ", stages, " x --chunks ", options.chunks, " = ", stages * options.chunks,
                           " model chunks, but ", m.name(), " has ", m.num_layers(), " layers"));
    stages *= options.chunks;
  }
  if (schedule::is_v_schedule(options.schedule)) {  // two chunks per worker, in a V
    if (2 * stages > m.num_layers())
      throw UsageError(str("--stages ", stages, " with --schedule ", options.schedule, " = ", 2 * stages,
                           " model chunks (two per worker), but ", m.name(), " has ", m.num_layers(), " layers"));
    stages *= 2;
  }
  profile::Profile measured;
  const profile::Profile* prof = r.profile.get();
  if (!prof) {  // measure one here: a few forward/backward passes per layer
    int64_t batch = options.train.batch_size;
    // Times at the batch alone: the split weighs whole minibatches.
    profile::ProfilerOptions profiler_options{1, 3, options.train.sgd.kind, {batch}};
    try {
      measured = profile::measure_profile(m, data.train.first_inputs(batch), profiler_options, data.train.first_targets(batch));
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {  // the user's model failing at the batch (a TorchScript error): as workers say it
      throw RuntimeFailure(str("timing the model's layers at a batch of ", batch, " for the split: ",
                               model::explain_training_error(e, "--batch-size is 1; give 2 or more")));
    }
    prof = &measured;
    timed = true;
  }
  if (prof->num_layers() != m.num_layers())
    throw ConfigError(str("--profile: ", r.profile_path, " has ", prof->num_layers(), " layers but ", m.name(), " has ",
                          m.num_layers()));
  return plan::even_split(*prof, stages);
}

// The schedule where neither the request nor the plan names one: pipedream, unless the plan's
// stages split a tie that trains (layers sharing a parameter), which pipedream would train as
// two copies drifting apart and refuses (runtime/tied_gradients.h); then 1f1b, which sums the
// copies' gradients before its step, said in a note.
std::string default_schedule(const plan::Plan& plan, const model::LayeredModel& m) {
  std::vector<std::vector<int>> ties, stage_layers, stage_workers;
  for (const auto& g : m.tie_groups())
    if (g.trains) ties.push_back(g.layers());
  for (const auto& st : plan.stages) stage_layers.push_back(st.layers), stage_workers.push_back(st.workers);
  if (plan::split_ties(ties, stage_layers, stage_workers).empty()) return "pipedream";
  std::cerr << "note: no --schedule given, and the plan's stages split a parameter " << m.name()
            << "'s layers share, which pipedream (the default) would train as copies drifting apart: training "
               "with 1f1b, which sums the copies' gradients (--schedule chooses)\n";
  return "1f1b";
}

// The plan says how to run it (a planner's joint choice, or the user's): its schedule,
// microbatches, chunks and deferred step, unless the request says otherwise; --recompute
// recomputes every stage.
void follow_plan(const Request& r, PipelineOptions& options, plan::Plan& plan, const std::string& source) {
  schedule::GivenSettings given{r.schedule_given || !r.schedule_file.empty(), r.microbatches_given, r.chunks_given};
  schedule::follow_plan(plan, source, given, options.schedule, options.microbatches, options.chunks);
  if (r.recompute)
    for (auto& st : plan.stages) st.recompute = true;
  if (r.deferred_step >= 0) plan.deferred_step = r.deferred_step == 1;
  if (r.deferred_step >= 0 && options.schedule != "pipedream")  // --no-deferred-step too: it changed nothing
    throw UsageError(str(r.deferred_step == 1 ? "--deferred-step" : "--no-deferred-step",
                         ": only the pipedream schedule defers a step, not ", options.schedule));
  // It changed nothing there either, and the checkpoint recorded it on.
  if (r.deferred_step == 1 && !plan.stages.empty() && plan.stages.front().replicas < 2)
    throw UsageError(str("--deferred-step: defers a replicated first stage's step (its all-reduce overlapping the "
                         "next forward); ", source, "'s first stage has 1 replica"));
  // It ran 1 without a word.
  if (options.schedule == "pipedream" && r.microbatches_given && options.microbatches != 1)
    std::cerr << "note: --microbatches " << options.microbatches << " is not used: pipedream runs each minibatch "
              << "whole (--schedule 2bw splits minibatches into microbatches)\n";
}

// --schedule-file: the file's schedule on the plan, validated, in place of a generator's; the
// runtime runs its one minibatch again and again, so it must flush. `file`: read already, or not.
void use_schedule_file(const Request& r, PipelineOptions& options, const plan::Plan& plan,
                       std::optional<schedule::Schedule> file) {
  const std::string& path = r.schedule_file;
  if (!file) file = schedule::read_schedule_file(path, plan.num_stages());
  schedule::refuse_settings_the_file_overrides(*file, path, r.microbatches_given, options.microbatches, r.chunks_given,
                                               options.chunks);
  if (!file->flush)
    throw UsageError(str("--schedule-file ", path, ": its schedule (", file->kind, ") does not flush; train "
                         "runs synchronous schedules from a file (the asynchronous ones: --schedule pipedream or 2bw)"));
  // Each minibatch runs the file again from its first action: a file of two ran the data's
  // minibatches 0,1,1,2,2,... with two steps each, 12 steps of a 6-step run, and exited 0.
  if (file->minibatches != 1)
    throw UsageError(str("--schedule-file ", path, ": minibatches is ", file->minibatches, "; train runs a synchronous "
                         "file's one minibatch again for each minibatch of the run, so the file must cover 1 "
                         "(`pipetrain simulate --emit-schedule` writes one)"));
  auto s = std::make_shared<const schedule::Schedule>(schedule::bind_schedule(std::move(*file), plan, path));
  // Said of the file, not of a --microbatches never given.
  if (options.train.batch_size % s->microbatches != 0)
    throw UsageError(str("--schedule-file ", path, ": its ", s->microbatches, " microbatches do not divide --batch-size ",
                         options.train.batch_size));
  options.microbatches = s->microbatches;
  options.chunks = s->chunks;
  options.schedule_file = s;
}

// A split made here by times measured just now (no --plan or --profile) may differ from the last
// run's, and with it what bf16 rounds where stages meet, or the staleness of pipedream's weights
// (2bw's delay is every stage's): the same command then trains other weights (fp32's synchronous
// ones do not).
void note_split_measured_here(const Request& r, const PipelineOptions& options, const plan::Plan& plan,
                              const std::string& source) {
  if (source != "the plan" || r.profile || plan.num_stages() < 2) return;
  bool bf16 = r.precision == "bf16", stale = options.schedule == "pipedream";
  if (!bf16 && !stale) return;
  std::cerr << "note: the stages split the model by times measured just now, which vary from run to run, and so "
            << "may the split; " << (bf16 ? "a bf16 tensor is rounded where two stages meet" : str(options.schedule,
            "'s weights are as stale as their stage is far from the last")) << ", so the trained weights follow the "
            << "split: --profile P (`pipetrain profile -o P` once) splits it the same way every run\n";
}

// A zero-bubble schedule weighs its stages by the profile (their bytes for its budget, their times
// and the cluster's links for its clock), as simulate and the planner do, so that it runs the
// order they timed.
void weigh_schedule(const Request& r, PipelineOptions& options, const plan::Plan& plan) {
  const std::string& kind = options.schedule;
  if (!r.schedule_file.empty()) return;
  // The planner's own order, where this is the run it planned: wherever it runs, as it timed it.
  options.order_source = options.plan_source + ": field 'order'";
  options.order = schedule::plan_order(plan, options.plan_source, kind, options.microbatches, options.chunks);
  if (!options.order.empty() || !schedule::order_is_weighed(kind)) return;
  if (!r.profile) {
    if (!r.plan_path.empty())  // a planner's plan was simulated with the weighed order
      std::cerr << "note: " << kind << " without --profile counts microbatches for its memory budget and times "
                << "every action alike; `plan` and `simulate` weigh them by the profile (give the profile for "
                << "their order)\n";
    return;
  }
  schedule::ScheduleOptions unweighed;
  unweighed.microbatches = options.microbatches;
  unweighed.chunks = options.chunks;
  // On threads the tensors are handed over in memory, whatever --cluster says.
  schedule::ScheduleOptions weighed =
      sim::weigh_schedule(kind, plan, unweighed, profile::with_batch_size(*r.profile, options.train.batch_size),
                          r.over_links ? options.cluster : plan::Cluster{});
  options.activation_budget = weighed.activation_budget;
  options.action_times = weighed.action_times;
  std::string budget_note = schedule::activation_budget_note(kind, options.activation_budget);
  if (!budget_note.empty()) std::cerr << "note: " << budget_note << "\n";
}

}  // namespace

Road choose_road(Request& r, const std::string& transport) {
  auto& o = r.options;
  bool parallel = !r.plan_path.empty() || r.stages > 0 || r.workers > 0 || o.schedule != "none" ||
                  !r.schedule_file.empty();
  // Refused as a pipeline refuses it (one worker took --microbatches 0 and -1 without a word).
  if (r.microbatches_given && o.microbatches < 1)
    throw UsageError(str("--microbatches: must be >= 1, got ", o.microbatches));
  // One worker trains each minibatch whole: --microbatches changes what BatchNorm sees in a pipeline.
  if (!parallel && r.microbatches_given && o.microbatches != 1)
    std::cerr << "note: --microbatches " << o.microbatches << " is for pipelines (--stages, --plan, "
              << "--schedule): one worker trains each minibatch of " << o.train.batch_size << " whole\n";
  // A process the environment counts as one of several workers (torchrun, mpirun) joins them or
  // is refused: alone it would train a model of its own and exit 0 beside the others.
  int world = runtime::gloo_world_size_in_env();
  if (!parallel && world > 1)
    throw UsageError(str("this process is one worker of a job of ", world,
                         " (its environment says so, as torchrun and mpirun set it), but the command trains one "
                         "worker alone: give the job's plan (--plan PLAN, or --stages N with --profile P, or "
                         "--schedule dp) and --transport gloo"));
  if (!parallel) {  // one worker: a one-stage pipeline of one microbatch, on the runtime every schedule runs on
    o.schedule = "1f1b";
    o.microbatches = 1;
    r.workers = 1;
  }
  r.launched_plan = runtime::launched_plan_path();
  bool launched = runtime::launched_as_gloo_worker();
  if (transport == "threads" && launched && world > 1)
    throw UsageError("this process is one worker of a job of several (RANK and WORLD_SIZE, as torchrun and mpirun set "
                     "them), but --transport threads trains alone, in one process: give --transport gloo");
  if (transport != "gloo") return Road::kThreads;
  if (!launched) return Road::kGlooLauncher;
  bool measured = o.schedule != "dp" && !(r.workers > 0 && r.stages == 0);  // an even split of a profile made here
  if (r.launched_plan.empty() && r.plan_path.empty() && r.profile_path.empty() && measured)
    throw UsageError("--transport gloo under mpirun or torchrun: give --plan or --profile, so that every worker "
                     "computes the same plan (a profile measured by each worker could differ)");
  return Road::kGlooWorker;
}

Settled settle_request(const Request& r, model::LayeredModel& m, const model::DataSplit& data) {
  Settled s;
  PipelineOptions& options = s.options;
  options = r.options;
  if (!r.schedule_file.empty()) options.schedule = "file";
  bool defaulted = options.schedule == "none";
  // --workers N alone is data parallelism, as its help says: it split the model into 2 stages of
  // pipedream on 2 workers, whatever N (exit 0, the banner the only sign).
  bool data_parallel = defaulted && r.workers > 1 && r.stages == 0 && r.plan_path.empty() && r.schedule_file.empty();
  if (defaulted) options.schedule = data_parallel ? "dp" : "pipedream";
  if (r.profile) note_profile_settings(*r.profile, r.profile_path, r.precision, options.train.sgd.kind);
  if (r.profile && options.trace_source != "emulated") check_profile_fits_data(*r.profile, r.profile_path, m, data);
  std::optional<schedule::Schedule> file;  // --schedule-file, read once
  s.plan = pick_plan(r, options, m, data, file, options.timed_layers);
  plan::Plan& plan = s.plan;
  // Whatever its source (a file, the launcher's, a split made here), the plan must fit the model.
  // A JSON schedule file without --plan gives the stages its own layers.
  const std::string& source = options.plan_source =
      !r.launched_plan.empty()  ? r.launched_plan
      : !r.plan_path.empty()    ? r.plan_path
      : !r.schedule_file.empty() && r.stages == 0 ? str("--schedule-file ", r.schedule_file)
                                                 : std::string("the plan");
  // The model first: a plan of another model fails the fit on some layer, which names neither.
  // A split made here of another model's --profile named neither the profile nor its file.
  if (!plan.model.empty() && plan.model != m.name())
    throw ConfigError(str(source == "the plan" && !r.profile_path.empty() ? "--profile " + r.profile_path : source,
                          ": the ", source == "the plan" ? "profile" : "plan", " is for model '", plan.model, "' but ",
                          options.trace_source == "emulated" ? "--profile " + r.profile_path + " profiles"
                                                             : std::string("--model is"),
                          " '", m.name(), "'"));
  plan::check_plan_fits(plan, profile::layer_graph(m), source);
  // A plan that names no batch (made here, a schedule file's, a hand-written file) holds for
  // --profile's, whatever the road: one worker and --workers N trained at 64 where --stages N took
  // the profile's 32, and scaled its times.
  const bool profile_batch = r.profile && plan.batch_size == 0;
  if (profile_batch) plan.batch_size = r.profile->batch_size;
  if (source != "the plan") note_planned_settings(plan, source, r.precision, options.train.sgd.kind);
  if (defaulted && !data_parallel && plan.schedule.empty()) options.schedule = default_schedule(plan, m);
  follow_plan(r, options, plan, source);
  note_split_measured_here(r, options, plan, source);
  if (!r.schedule_file.empty()) use_schedule_file(r, options, plan, std::move(file));
  if (plan.batch_size > 0 && plan.batch_size != options.train.batch_size) {
    // The plan's timings hold for its batch: take it unless --batch-size says otherwise.
    if (!r.batch_size_given) options.train.batch_size = plan.batch_size;
    else if (source != "the plan" && !profile_batch)
      std::cerr << "note: " << source << " was planned for batch " << plan.batch_size << "; training with --batch-size "
                << options.train.batch_size << ", so its predicted throughput does not apply\n";
    else  // split here from the profile (or the layers timed here), whose times the prediction scales to its batch
      std::cerr << "note: " << (r.profile_path.empty() ? std::string("the layers timed here for the split") : r.profile_path)
                << " " << (r.profile_path.empty() ? "ran" : "was measured") << " at batch " << plan.batch_size
                << "; training with --batch-size " << options.train.batch_size
                << (plan.num_stages() > 1 && source == "the plan" ? ", the split and the prediction take"
                                                                  : ", the prediction takes")
                << " its times scaled to that batch\n";
  }
  // The microbatches must divide the batch: where the plan file or a default gave either, say so
  // (check_pipeline_options names the flags, which the user may not have given).
  bool file_microbatches = plan.microbatches > 0 && !r.microbatches_given && r.schedule_file.empty();
  bool default_microbatches = !r.microbatches_given && r.schedule_file.empty();
  bool file_batch = plan.batch_size > 0 && !r.batch_size_given;
  const std::string batch_file = source != "the plan" && !profile_batch ? source : r.profile_path;
  if (file_batch && !batch_file.empty() && options.train.batch_size > data.train.size())  // check_train_options names --batch-size
    throw ConfigError(str(batch_file, ": field 'batch_size': ", options.train.batch_size, " is larger than the ",
                          data.train.size(), " training samples of ", data.name, "; give --batch-size"));
  if ((file_microbatches || default_microbatches || file_batch) && options.microbatches > 0 &&
      options.schedule != "pipedream" && options.train.batch_size % options.microbatches != 0) {
    std::string divisors;
    for (int64_t d = 1, found = 0; d <= options.train.batch_size && found <= 8; ++d) {
      if (options.train.batch_size % d != 0) continue;
      divisors += found ? ", " : "";
      divisors += ++found > 8 ? std::string("...") : std::to_string(d);
    }
    // A split made here has no file but the profile it splits, whose batch it takes (or the one
    // measured here, at --batch-size's default).
    const std::string plan_file = source != "the plan" ? source : "";
    auto from = [&](bool file, const std::string& name, bool given, const char* field, const char* flag) {
      return file && !name.empty() ? str(name, "'s field '", field, "'")
             : given               ? str(flag)
                                   : str(flag, "'s default");
    };
    throw ConfigError(str(options.microbatches, " microbatches (",
                          from(file_microbatches, plan_file, r.microbatches_given || !r.schedule_file.empty(),
                               "microbatches", r.schedule_file.empty() ? "--microbatches" : "--schedule-file"),
                          ") do not divide the batch of ", options.train.batch_size, " (",
                          from(file_batch, batch_file, r.batch_size_given,
                               "batch_size", "--batch-size"),
                          "); give --microbatches one of its divisors: ", divisors));
  }
  // The plan's bucket, where the planner chose one, unless --bucket-mb says.
  double bucket_mb = plan.bucket_mb >= 0 && !r.bucket_given ? plan.bucket_mb : r.bucket_mb;
  // An emulated cluster moves its bytes x B: its buckets are the real ones x B as well.
  options.bucket_bytes = static_cast<int64_t>(bucket_mb * (1 << 20) * r.byte_scale);
  if (!r.cluster_path.empty()) {
    plan::ClusterFlags cluster_flags;
    cluster_flags.file = r.cluster_path;
    cluster_flags.allreduce = r.allreduce;
    options.cluster = plan::cluster_for_plan(plan::cluster_from_flags(cluster_flags), plan, !r.allreduce.empty());
    options.cluster_source = r.cluster_path;
  } else if (plan.allreduce == "hierarchical" && r.allreduce.empty() && plan.workers > 1) {
    std::cerr << "note: " << source << " was timed with hierarchical all-reduces, which need the servers: without "
              << "--cluster FILE the replicas all-reduce in one ring\n";
  }
  weigh_schedule(r, options, plan);
  return s;
}

void note_profile_settings(const profile::Profile& profile, const std::string& path, const std::string& precision,
                           const std::string& optimizer) {
  if (profile.precision != precision)
    std::cerr << "note: " << path << " was measured in " << profile.precision << " and this run computes in "
              << precision << ": its times, the activations the memory model holds, and the bytes crossing between "
              << "stages are " << profile.precision << "'s"
              // A helper measured 28-42% more than modelled on an fp32 profile: the bf16 weight copies.
              << (precision == "bf16" ? ", and the bf16 copy of the weights each microbatch keeps is not in it: the "
                                        "modelled memory is under what this run holds"
                                      : "")
              << " (`pipetrain profile --precision " << precision << "` measures this run's)\n";
  if (profile.optimizer != optimizer)
    std::cerr << "note: " << path << " timed " << profile.optimizer << "'s step and this run steps with " << optimizer
              << " (`pipetrain profile --optimizer " << optimizer << "` times it)\n";
}

void check_profile_fits_data(const profile::Profile& profile, const std::string& path, const model::LayeredModel& m,
                             const model::DataSplit& data) {
  // Refused on one worker and data parallelism too, as --stages refused it (the name was
  // checked on that road alone).
  if (profile.model != m.name())
    throw ConfigError(str("--profile ", path, ": the profile is for model '", profile.model, "' but --model is '",
                          m.name(), "'"));
  // Train predicted lstm-lm at --seq-len 64 from a profile at 8: 7,862 samples/s against 574
  // measured, its memory at a third of the OS's, exit 0 and no word (the layers' bytes held
  // alike, an LSTM's weights not growing with the sequence).
  if (profile.input_bytes <= 0 || profile.batch_size <= 0 || data.train.size() == 0) return;
  const auto sample = static_cast<int64_t>(data.train.first_inputs(1).nbytes());
  if (profile.input_bytes == sample * profile.batch_size) return;
  throw ConfigError(str("--profile ", path, ": measured on inputs of ", profile.input_bytes, " bytes a batch of ",
                        profile.batch_size, " (field 'input_bytes'), where ", data.name, " gives ", sample,
                        " bytes a sample, ", sample * profile.batch_size, " a batch: the profile is of another input "
                        "size (a sequence length, an image size); `pipetrain profile` with this run's model and data "
                        "measures it"));
}

void note_planned_settings(const plan::Plan& plan, const std::string& path, const std::string& precision,
                           const std::string& optimizer) {
  if (!plan.precision.empty() && plan.precision != precision)
    std::cerr << "note: " << path << " was planned from a profile measured in " << plan.precision
              << " and this run computes in " << precision << ": its times, memory and the bytes crossing between "
              << "stages are " << plan.precision << "'s (plan from `pipetrain profile --precision " << precision
              << "`)\n";
  if (!plan.optimizer.empty() && plan.optimizer != optimizer)
    std::cerr << "note: " << path << " was planned for " << plan.optimizer << "'s step and state, and this run steps "
              << "with " << optimizer << " (plan from `pipetrain profile --optimizer " << optimizer << "`)\n";
}

}  // namespace pt::job
