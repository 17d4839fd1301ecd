// pipetrain train: trains a model on one worker, or pipeline-parallel with a plan and a
// schedule (threads in this process, or one process per worker over gloo).
#include <algorithm>
#include <cmath>
#include <iostream>
#include <set>
#include <thread>

#include <torch/torch.h>

#include "model/compute_threads.h"
#include "core/host_allocator.h"
#include "apps/command.h"
#include "apps/flag_digest.h"
#include "apps/torch/model_flags.h"
#include "apps/torch/train_flags.h"
#include "apps/torch/train_plan.h"
#include "apps/torch/train_report.h"
#include "core/error.h"
#include "core/units.h"
#include "plan/planner.h"
#include "plan/split_ties.h"
#include "profile/pipedream_graph.h"
#include "profile/profiler.h"
#include "runtime/gloo_job.h"
#include "runtime/gloo_transport.h"
#include "runtime/job_digest.h"
#include "runtime/launcher.h"
#include "runtime/threads_job.h"
#include "runtime/pipeline_job.h"
#include "runtime/trainer.h"
#include "schedule/generators.h"
#include "schedule/memory.h"
#include "schedule/schedule_file.h"

namespace pt::app {
namespace {

// Every step takes a whole minibatch (model/batch_sampler.h), so the samples past the last
// whole one are left out of each epoch: say how many, and that --no-shuffle leaves out the same
// ones every time (PyTorch's DataLoader keeps a short last batch by default).
void note_samples_left_out(int64_t samples, const runtime::TrainOptions& t) {
  if (t.batch_size < 1 || samples <= t.batch_size) return;  // refused or one minibatch: check_train_options says
  int64_t left = samples % t.batch_size;
  if (left == 0) return;
  std::cerr << "note: " << samples << " training samples make " << samples / t.batch_size << " minibatches of "
            << t.batch_size << " an epoch; " << left << (left == 1 ? " is" : " are") << " left out of each epoch"
            << (t.shuffle ? " (different ones each time: the order is shuffled)\n"
                          : str(", the same every time with --no-shuffle: sample", left == 1 ? " " : "s ",
                                samples - left, left == 1 ? "" : str("-", samples - 1), " never trained on\n"));
}

// Each tie the plan splits over stages: its stages' workers sum its gradient every step
// (runtime/tied_gradients.h), which only export mentioned.
void note_split_ties(const model::LayeredModel& m, const schedule::Schedule& s) {
  std::vector<model::TieGroup> groups = m.tie_groups();
  std::vector<std::vector<int>> layers;
  for (const auto& g : groups) layers.push_back(g.layers());
  std::vector<std::string> names;
  for (int l = 0; l < m.num_layers(); ++l) names.push_back(m.layer(l).name);
  for (const plan::SplitTie& t : plan::split_ties(layers, s.stage_layers, s.stage_workers))
    if (groups[t.group].trains)
      std::cerr << "note: " << plan::split_tie_note(t, layers[t.group], groups[t.group].bytes, names) << "\n";
}

// A checkpoint resumed under other optimizer settings than it was trained with: the steps after
// it follow this run's, so the result is not one uninterrupted run's; said with both values (a
// cosine schedule laid over another step count jumps where it resumes).
void note_resumed_settings(const runtime::CheckpointManifest& cm, const std::string& from,
                           const model::OptimizerOptions& now, int64_t total) {
  std::string changed;
  auto differ = [&](const std::string& what, const std::string& was, const std::string& is) {
    if (was != is) changed += str(changed.empty() ? "" : "; ", what, " ", was, " -> ", is);
  };
  auto number = [](double v) { return str(v); };
  differ("lr", number(cm.lr), number(now.lr));
  differ("momentum", number(cm.momentum), number(now.momentum));
  differ("weight decay", number(cm.weight_decay), number(now.weight_decay));
  if (!cm.lr_schedule.empty()) {  // older checkpoints do not say
    auto course = [](const std::string& schedule, int64_t steps) {
      return schedule == "cosine" ? str("cosine over ", steps, " steps") : schedule;
    };
    differ("lr schedule", course(cm.lr_schedule, cm.schedule_steps), course(now.lr_schedule, total));
    differ("warm-up steps", str(cm.warmup_steps), str(now.warmup_steps));
  }
  if (changed.empty()) return;
  std::cerr << "note: " << from << " was trained with other optimizer settings (" << changed << "): steps "
            << cm.step + 1 << " on follow this run's, so the result differs from an uninterrupted run\n";
}

// Options that may differ between the workers of one job: where each writes its own outputs,
// how much it says, how long it waits. Every other option is compared at rendezvous.
const std::set<std::string> kPerWorkerFlags = {"--metrics", "--trace", "--quiet", "--timeout",
                                               "--rendezvous-timeout", "--print-job", "--max-input"};
// Options that name a file, which workers compare by its contents (flag_digest.h), and those
// that name the data, whose tensors the job digest compares (data.crc32, data.shard_crc32).
const std::set<std::string> kFileFlags = {"--model", "--plan", "--profile", "--cluster", "--schedule-file"};
const std::set<std::string> kDataFlags = {"--data", "--data-dir", "--text"};

// Flags that go together, or not at all: checked in one place, before anything runs.
struct FlagRule {
  const char* flag;
  const char* other;
  bool needs;       // `flag` needs `other`; otherwise they exclude each other
  const char* why;  // after "FLAG: " (needs) or "FLAG and OTHER: " (excludes)
};
const FlagRule kFlagRules[] = {
    {"--plan", "--stages", false, "give one of them"},
    {"--plan", "--workers", false, "the plan fixes the workers; give one of them"},
    {"--stages", "--workers", false, "--workers is data parallelism's (or one worker's); give one of them"},
    {"--schedule", "--schedule-file", false, "give one of them"},
    {"--resume", "--checkpoint-dir", true, "give --checkpoint-dir D, where the checkpoints are"},
    {"--overwrite", "--checkpoint-dir", true, "give --checkpoint-dir D, the folder to take over"},
    {"--allreduce", "--cluster", true, "give --cluster FILE: which workers share a server"},
};

void check_flag_rules(const CLI::App& app) {
  auto given = [&](const char* name) { return app.get_option(name)->count() > 0; };
  for (const FlagRule& r : kFlagRules) {
    if (!given(r.flag) || given(r.other) == r.needs) continue;  // needs and has, or excludes and has not
    throw UsageError(r.needs ? str(r.flag, ": ", r.why) : str(r.flag, " and ", r.other, ": ", r.why));
  }
}

// Emulated compute: the profile fixes the batch size (unless given), the synthetic data covers
// every step in one epoch (an epoch's end drains PipeDream's pipeline), and there is no accuracy
// to evaluate.
void prepare_emulation(TrainFlags& f) {
  f.model.profile_path = f.profile_path;
  const profile::Profile& p = f.model.emulated_profile();
  auto& t = f.pipe.train;
  if (f.batch_size_flag->count() == 0) t.batch_size = p.batch_size;
  f.model.synthetic_samples = std::max(f.model.synthetic_samples, std::max<int64_t>(t.steps, 1) * t.batch_size);
  t.evaluate = false;
}

int run_train(TrainFlags& f) {
  if (f.betas.size() == 2) std::tie(f.pipe.train.sgd.beta1, f.pipe.train.sgd.beta2) = std::tie(f.betas[0], f.betas[1]);
  model::use_one_compute_thread();  // one compute thread per worker (docs/design.md)
  keep_freed_host_memory();
  std::string label;
  if (f.model.emulated()) {
    prepare_emulation(f);
    label = profile::emulation_label(f.model.emulation);
    f.pipe.trace_source = "emulated";
  }
  if (f.steps_flag->count() > 0 && f.pipe.train.steps < 1)
    throw UsageError(str("--steps: must be >= 1, got ", f.pipe.train.steps));
  // Output paths before any training: a run must not end by failing to write its results.
  check_output_path(f.trace_path, "--trace");
  check_output_path(f.pipe.train.metrics_path, "--metrics");
  model::DataSplit data;
  // A description: names, graph and ties; each worker builds only its stages' layers.
  auto m = f.model.build(&data);
  // Before anything runs on them (--stages measures a profile at the batch size first).
  runtime::check_train_values(f.pipe.train);
  // Before a plan is picked: with --stages alone that profiles the model first (a minute for
  // resnet18 here), only to refuse the flag afterwards.
  if (f.pipe.deferred_batch_norm && m->deferrable_batch_norms() == 0)
    throw UsageError(str("--deferred-batch-norm: ", m->name(), " has no BatchNorm pipetrain can defer (`pipetrain "
                         "export` writes them in place of nn.BatchNorm; the zoo's models have none)"));
  f.pipe.train.seed = f.model.seed;
  auto& ck = f.pipe.checkpoint;
  if (ck.every < 0) throw UsageError(str("--checkpoint-every: must be >= 0, got ", ck.every));
  if (!ck.dir.empty() && ck.every == 0 && !ck.resume)
    std::cerr << "note: --checkpoint-dir without --checkpoint-every: one checkpoint at the end of training\n";
  if (!f.schedule_file.empty()) f.pipe.schedule = "file";
  bool parallel = !f.plan_path.empty() || f.stages > 0 || f.workers > 0 || f.pipe.schedule != "none";
  // One worker trains each minibatch whole: --microbatches, which it ignored without a word,
  // changes what BatchNorm sees in a pipeline (a minibatch of 16 in 4 microbatches of 4).
  if (!parallel && f.microbatches_flag->count() > 0 && f.pipe.microbatches != 1)
    std::cerr << "note: --microbatches " << f.pipe.microbatches << " is for pipelines (--stages, --plan, "
              << "--schedule): one worker trains each minibatch of " << f.pipe.train.batch_size << " whole\n";
  if (!parallel && (!ck.dir.empty() || f.recompute || !f.trace_path.empty())) {
    // Checkpoints, recomputation and traces are runtime features: one worker runs as a
    // one-stage pipeline (which computes what single-worker training does; tests/runtime
    // checks it).
    f.pipe.schedule = "1f1b";
    f.pipe.microbatches = 1;
    f.workers = 1;
    parallel = true;
  }
  // A process the environment counts as one of several workers (torchrun, mpirun) joins them or
  // is refused: alone it would train a model of its own and exit 0 beside the others.
  if (!parallel && runtime::gloo_world_size_in_env() > 1)
    throw UsageError(str("this process is one worker of a job of ", runtime::gloo_world_size_in_env(),
                         " (its environment says so, as torchrun and mpirun set it), but the command trains one "
                         "worker alone: give the job's plan (--plan PLAN, or --stages N with --profile P, or "
                         "--schedule dp) and --transport gloo"));
  if (!parallel) {
    note_samples_left_out(data.train.size(), f.pipe.train);
    std::cerr << "training " << m->name() << " (" << m->num_layers() << " layers) on " << data.name << ": "
              << data.train.size() << " training / " << data.test.size() << " test samples, 1 worker\n";
    auto whole = f.model.build_model_only();
    print_result(runtime::train_single_worker(*whole, data, f.pipe.train), label);
    return 0;
  }
  if (f.pipe.schedule == "none") f.pipe.schedule = "pipedream";
  // A gloo worker started by the launcher below takes the launcher's plan, so that every
  // worker runs the same one even when it was measured rather than read from a file.
  std::string launched_plan = runtime::launched_plan_path();
  bool gloo_worker = f.transport == "gloo" && runtime::launched_as_gloo_worker();
  if (f.transport == "threads" && runtime::launched_as_gloo_worker() && runtime::gloo_world_size_in_env() > 1)
    throw UsageError("this process is one worker of a job of several (RANK and WORLD_SIZE, as torchrun and mpirun set "
                     "them), but --transport threads trains alone, in one process: give --transport gloo");
  if (gloo_worker && launched_plan.empty() && f.plan_path.empty() && f.profile_path.empty() && f.pipe.schedule != "dp")
    throw UsageError("--transport gloo under mpirun or torchrun: give --plan or --profile, so that every worker "
                     "computes the same plan (a profile measured by each worker could differ)");
  plan::Plan plan = !launched_plan.empty() ? plan::read_plan(launched_plan) : pick_plan(f, *m, data);
  // Whatever its source (a file, the launcher's, a split made here), the plan must fit the model.
  std::string plan_source = !launched_plan.empty() ? launched_plan : f.plan_path.empty() ? "the plan" : f.plan_path;
  plan::check_plan_fits(plan, profile::layer_graph(*m), plan_source);
  if (!plan.model.empty() && plan.model != m->name())
    throw ConfigError(str(plan_source, ": the plan is for model '", plan.model, "' but --model is '", m->name(), "'"));
  follow_plan(f, plan, plan_source);
  if (!f.schedule_file.empty()) use_schedule_file(f, plan);
  // A zero-bubble schedule weighs its stages by the profile's bytes, as simulate and the planner do.
  if (schedule::takes_activation_budget(f.pipe.schedule) && f.schedule_file.empty()) {
    if (!f.profile_path.empty())
      f.pipe.activation_budget =
          schedule::activation_budget_from_profile(f.pipe.schedule, plan, profile::read_any_profile(f.profile_path));
    else if (!f.plan_path.empty())  // a planner's plan was simulated with the weighed order
      std::cerr << "note: " << f.pipe.schedule << " without --profile counts microbatches for its memory budget; "
                << "`plan` and `simulate` weigh them by the profile's bytes (give the profile for their order)\n";
  }
  if (plan.batch_size > 0 && plan.batch_size != f.pipe.train.batch_size) {
    // The plan's timings hold for its batch: take it unless --batch-size says otherwise.
    if (f.batch_size_flag->count() == 0) f.pipe.train.batch_size = plan.batch_size;
    else std::cerr << "note: " << plan_source << " was planned for batch " << plan.batch_size << "; training with --batch-size "
                   << f.pipe.train.batch_size << ", so its predicted throughput does not apply\n";
  }
  // With the batch settled (it said minibatches of 64 where the plan's 16 ran).
  note_samples_left_out(data.train.size(), f.pipe.train);
  // The plan's bucket, where the planner chose one, unless --bucket-mb says.
  if (plan.bucket_mb >= 0 && f.bucket_flag->count() == 0) f.bucket_mb = plan.bucket_mb;
  // An emulated cluster moves its bytes x B: its buckets are the real ones x B as well.
  f.pipe.bucket_bytes = static_cast<int64_t>(f.bucket_mb * (1 << 20) * (f.model.emulated() ? f.model.emulation.byte_scale : 1));
  if (!f.cluster_path.empty()) {
    plan::ClusterFlags cluster_flags;
    cluster_flags.file = f.cluster_path;
    cluster_flags.allreduce = f.allreduce;
    f.pipe.cluster = plan::cluster_from_flags(cluster_flags);
    // The workers the schedule runs on: a V or interleaved schedule puts several stages on one.
    int uses = runtime::job_probe(plan, f.pipe).num_workers();
    if (f.pipe.cluster.workers() < uses)
      throw ConfigError(str(f.cluster_path, ": the cluster has ", f.pipe.cluster.workers(), " workers but ", plan_source,
                            " under ", f.pipe.schedule, " uses ", uses));
  }
  runtime::check_pipeline_options(f.pipe, plan, data);
  runtime::check_ties(*m, plan, f.pipe);
  if (f.print_job) {  // what the workers compare at rendezvous, to compare by hand
    std::cout << runtime::job_digest(plan, f.pipe, *m, data).dump(1) << "\n";
    return 0;
  }
  if (!ck.dir.empty() && launched_plan.empty() && !runtime::launched_as_gloo_worker()) {
    // Checked here too, before any worker starts, so a bad folder is named once.
    runtime::CheckpointStart start = runtime::start_checkpoints(ck);
    runtime::CheckpointLock{ck.dir};  // in use by another run: said now, before any worker starts
    const auto& cm = start.manifest;
    if (ck.resume && start.resume_from.empty()) std::cerr << "no checkpoint in " << ck.dir << ": starting from step 0\n";
    if (!start.resume_from.empty()) {
      std::cerr << "resuming from " << start.resume_from << " (step " << cm.step << ", written by " << cm.schedule
                << " on plan " << cm.plan << ")\n";
      note_resumed_settings(cm, start.resume_from, f.pipe.train.sgd, runtime::total_steps(f.pipe.train, data.train.size()));
    }
    if (!cm.model_sha256.empty() && cm.model_sha256 != m->file_sha256())
      std::cerr << "note: " << start.resume_from << " was trained by the model file of sha256 " << cm.model_sha256
                << ", not this one (" << m->file_sha256() << "): its weights load if the layers' shapes match, but "
                << "the code that computes with them has changed\n";
  }
  ModelFlags model_flags = f.model;
  // Each worker builds its stages' layers from the seed, as single-worker training builds them.
  auto factory = [model_flags](const model::LayerSet& held) { return model_flags.build_model_only(held); };
  auto report = [&](const runtime::PipelineResult& r) {
    print_result(r.train, label);
    print_modelled_memory(f, plan, label, data.bytes());
    print_throughput(r.train, plan, f, label);
  };
  if (gloo_worker) return runtime::train_with_gloo(factory, data, plan, f.pipe, f.trace_path, report);
  // As many workers as the schedule places stages on (interleaved and the V schedules put
  // several of the plan's stages on one).
  schedule::Schedule probe = runtime::job_probe(plan, f.pipe);
  int workers = probe.num_workers();
  // Each stage's layers: a split measured here (--stages without --profile) varies with the
  // machine's timing from run to run, and an asynchronous schedule's weights with it.
  std::string layers;
  for (const auto& st : plan.stages)
    layers += str(layers.empty() ? "" : " | ", st.layers.front(),
                  st.layers.size() > 1 ? str("-", st.layers.back()) : std::string());
  std::cerr << "training " << m->name() << " on " << data.name << " with " << f.pipe.schedule << ", plan "
            << plan.shape() << " (" << workers << (workers == 1 ? " worker, " : " workers, ") << plan.num_stages()
            << (plan.num_stages() == 1 ? " stage: layers " : " stages: layers ") << layers << "), "
            << probe.microbatches << (probe.microbatches == 1 ? " microbatch" : " microbatches")  // pipedream's: 1
            << ", transport " << f.transport
            << (label.empty() ? "" : ", " + label) << "\n";
  note_split_ties(*m, probe);
  if (f.transport == "gloo") {  // one process per worker on this host: forks of this one, or this binary again
    runtime::Launch launch = runtime::fork_gloo_job(plan, workers, f.trace_path);
    if (launch.worker) return runtime::train_with_gloo(factory, data, plan, f.pipe, f.trace_path, report);
    if (launch.status == 0 && !f.trace_path.empty()) std::cerr << "wrote " << f.trace_path << "\n";
    return launch.status;
  }
  auto r = runtime::train_pipeline(factory, data, plan, f.pipe);
  report(r);
  if (!f.trace_path.empty()) {
    schedule::write_trace(r.trace, f.trace_path);
    std::cerr << "wrote " << f.trace_path << "\n";
  }
  return 0;
}

Register reg({"train", kTrainDescription,
              [](CLI::App& app) -> std::function<int()> {
  auto f = std::make_shared<TrainFlags>();
  f->pipe.schedule = "none";
  auto& t = f->pipe.train;
  f->model.add_to(app);
  f->model.add_emulation_to(app);
  // Bounded so that 1e20 is refused rather than read as INT64_MAX.
  app.add_option("--epochs", t.epochs, "Passes over the training set")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000000}))
      ->capture_default_str();
  f->steps_flag = app.add_option("--steps", t.steps, "Stop after this many minibatches (overrides --epochs)")
                      ->check(CLI::Range(int64_t{0}, int64_t{1000000000000}));
  f->batch_size_flag = app.add_option("--batch-size", t.batch_size, "Minibatch size (emulated: the profile's)")
                           ->capture_default_str();
  app.add_option("--optimizer", t.sgd.kind,
                 "sgd (momentum, L2 weight decay), adam (L2 weight decay, as torch.optim.Adam) or adamw (decoupled "
                 "weight decay, as torch.optim.AdamW); each stage keeps its own parameters' state")
      ->check(CLI::IsMember(model::optimizer_kinds()))
      ->capture_default_str();
  app.add_option("--lr", t.sgd.lr, "Learning rate")->capture_default_str();
  app.add_option("--momentum", t.sgd.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--betas", f->betas, "Adam's beta1,beta2 (default 0.9,0.999)")->expected(2)->delimiter(',');
  app.add_option("--eps", t.sgd.eps, "Adam's epsilon")->capture_default_str();
  app.add_option("--weight-decay", t.sgd.weight_decay,
                 "Weight decay: L2 (added to the gradient) for sgd and adam, decoupled for adamw")
      ->capture_default_str();
  app.add_option("--clip-grad-norm", t.sgd.clip_grad_norm,
                 "Scale each step's gradient to at most this norm, as torch.nn.utils.clip_grad_norm_ (0: off): the "
                 "whole model's norm under a synchronous schedule, each stage's own under pipedream and 2bw")
      ->capture_default_str();
  app.add_option("--lr-schedule", t.sgd.lr_schedule, "Learning rate over the run: constant, or cosine (decays to 0)")
      ->capture_default_str();
  app.add_option("--warmup-steps", t.sgd.warmup_steps, "Minibatches of linear learning-rate warm-up")
      ->capture_default_str();
  app.add_option("--eval-every", t.eval_every,
                 "Also measure test accuracy every N minibatches (pipelines drain there; for time-to-accuracy)");
  app.add_option("--metrics", t.metrics_path, "Write per-step metrics to this CSV file");
  app.add_flag("--quiet", t.quiet, "No progress output");
  app.add_flag("--no-shuffle", [&t](int64_t) { t.shuffle = false; },
               "Minibatches in the data's order (each epoch the same): to compare with another trainer");
  std::string kinds;
  for (const auto& k : schedule::schedule_kinds()) kinds += (kinds.empty() ? "" : ", ") + k;
  f->schedule_flag = app.add_option("--schedule", f->pipe.schedule, "Pipeline schedule: " + kinds + " (default: the plan's, or pipedream)")
      ->check(CLI::IsMember(schedule::schedule_kinds()));
  app.add_option("--plan", f->plan_path, "Plan file from `pipetrain plan`");
  app.add_option("--schedule-file", f->schedule_file,
                 "Run this schedule (synchronous): pipetrain's JSON (simulate --emit-schedule) or a CSV of "
                 "torch.distributed.pipelining actions per rank (2F0, 1I3, 1W3); its stages are the plan's "
                 "(--plan, --stages, or a JSON file's own)");
  app.add_option("--stages", f->stages, "Even split into this many stages (by --profile, or measured here)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--workers", f->workers, "Workers of --schedule dp")->check(CLI::Range(1, 1024));
  app.add_option("--profile", f->profile_path, "Profile for --stages, and the model of --compute emulated");
  f->microbatches_flag = app.add_option("--microbatches", f->pipe.microbatches, "Microbatches per minibatch (default: the plan's, or 4)")
                             ->capture_default_str();
  f->chunks_flag = app.add_option("--chunks", f->pipe.chunks, "Model chunks per worker (interleaved; default: the plan's, or 1)")
                       ->capture_default_str();
  app.add_flag("--recompute", f->recompute,
               "Activation recomputation on every stage: a forward keeps only its input, the backward runs it again "
               "(less memory, one more forward per microbatch; a plan may ask for it per stage)");
  f->bucket_flag = app.add_option("--bucket-mb", f->bucket_mb,
                                  "Gradient all-reduce bucket, MiB: each is reduced during the backward once its "
                                  "gradients are final (0: all in one, after the backward; emulated runs scale it by "
                                  "--byte-scale; default: the plan's bucket_mb, else 25)")
                       ->check(bucket_mb_range())
                       ->capture_default_str();
  app.add_flag("--vertical-sync", f->pipe.vertical_sync, "pipedream: vertical sync of weight versions");
  app.add_flag("--no-weight-prediction", [f](int64_t) { f->pipe.weight_prediction = false; },
               "pipedream: run each minibatch on the newest weights (the paper's stashing alone) instead of "
               "weights predicted as far ahead as its gradient's step");
  app.add_flag("--deferred-batch-norm", f->pipe.deferred_batch_norm,
               "BatchNorm's running statistics of the whole minibatch, not of each microbatch (models from "
               "pipetrain export)");
  app.add_option("--stale-warmup", f->pipe.stale_warmup,
                 "pipedream: a stage whose gradients lag s steps warms its learning rate up over this many "
                 "minibatches times s (0: off)")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}))
      ->capture_default_str();
  app.add_flag_callback("--deferred-step", [f] { f->deferred_step = 1; },
                        "pipedream: a replicated first stage steps after its next forward, hiding its all-reduce's "
                        "tail (its weights lag one more update); default: the plan's deferred_step");
  app.add_flag_callback("--no-deferred-step", [f] { f->deferred_step = 0; },
                        "pipedream: step before the next forward even where the plan defers it");
  app.add_option("--cluster", f->cluster_path,
                 "Cluster file (pipetrain.cluster/1): which workers share a server, for --allreduce hierarchical");
  app.add_option("--allreduce", f->allreduce,
                 "gloo: ring (one ring over a stage's replicas) or hierarchical (inside each server, then across "
                 "servers a shard each; where the cluster makes it faster); default: the cluster file's")
      ->check(CLI::IsMember({"ring", "hierarchical"}));
  app.add_option("--transport", f->transport, "threads (one process) or gloo (one process per worker)")
      ->check(CLI::IsMember({"threads", "gloo"}))->capture_default_str();
  app.add_option("--trace", f->trace_path, "Write what ran as a pipetrain trace (JSON)");
  app.add_option("--checkpoint-dir", f->pipe.checkpoint.dir, "Write checkpoints (per layer: any plan resumes them) here");
  app.add_option("--checkpoint-every", f->pipe.checkpoint.every, "Minibatches between checkpoints (0: at the end only)")
      ->capture_default_str();
  app.add_flag("--resume", f->pipe.checkpoint.resume, "Continue from the newest complete checkpoint in --checkpoint-dir");
  app.add_flag("--overwrite", f->pipe.checkpoint.overwrite,
               "A fresh run may replace the checkpoints of an earlier run in --checkpoint-dir");
  app.add_option("--timeout", f->pipe.timeout_s, "Seconds a worker waits for a peer before the job fails")
      ->check(finite_positive())->capture_default_str();
  app.add_option("--rendezvous-timeout", f->pipe.rendezvous_timeout_s,
                 "gloo: seconds a worker waits for every other to join (it names the missing ones every 10 s); "
                 "connecting to worker 0 and making the all-reduce groups wait up to the larger of it and --timeout")
      ->check(finite_positive())->capture_default_str();
  app.add_flag("--print-job", f->print_job,
               "Print what every worker of this job must agree on (JSON: the settings, the plan, the data's and "
               "files' digests, every flag) and exit without training");
  return [f, &app] {
    check_flag_rules(app);
    f->pipe.command_line = flag_digest(app, kPerWorkerFlags, kFileFlags, kDataFlags);
    return run_train(*f);
  };
}});

}  // namespace
}  // namespace pt::app
