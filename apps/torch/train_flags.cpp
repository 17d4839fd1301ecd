#include "apps/torch/train_flags.h"

#include <set>
#include <tuple>

#include "apps/command.h"
#include "apps/flag_digest.h"
#include "model/optimizer.h"
#include "schedule/generators.h"

namespace pt::app {

namespace {

// Options that may differ between the workers of one job: where each writes its own outputs,
// how much it says, how long it waits. Every other option is compared at rendezvous.
const std::set<std::string> kPerWorkerFlags = {"--metrics", "--trace", "--prediction-trace", "--quiet", "--timeout",
                                               "--rendezvous-timeout", "--print-job", "--max-input",
                                               "--no-pin-cores"};  // a worker's own core: this host's matter
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
    {"--prediction-trace", "--profile", true, "the prediction is --profile P's simulation of the run: give --profile"},
};

void check_flag_rules(const CLI::App& app) {
  auto given = [&](const char* name) { return app.get_option(name)->count() > 0; };
  for (const FlagRule& r : kFlagRules) {
    if (!given(r.flag) || given(r.other) == r.needs) continue;  // needs and has, or excludes and has not
    throw UsageError(r.needs ? str(r.flag, ": ", r.why) : str(r.flag, " and ", r.other, ": ", r.why));
  }
}

}  // namespace

void add_train_flags(CLI::App& app, const std::shared_ptr<TrainFlags>& flags) {
  flags->request.options.schedule = "none";
  auto& t = flags->request.options.train;
  flags->model.add_to(app);
  flags->model.add_emulation_to(app);
  // Bounded so that 1e20 is refused rather than read as INT64_MAX.
  app.add_option("--epochs", t.epochs, "Passes over the training set")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000000}))
      ->capture_default_str();
  flags->steps_flag = app.add_option("--steps", t.steps, "Stop after this many minibatches (overrides --epochs)")
                      ->check(CLI::Range(int64_t{1}, int64_t{1000000000000}));
  flags->batch_size_flag = app.add_option("--batch-size", t.batch_size,
                                          "Minibatch size (where not given: a plan's batch, or --profile's)")
                           ->capture_default_str();
  app.add_option("--optimizer", t.sgd.kind,
                 "sgd (momentum, L2 weight decay), adam (L2 weight decay, as torch.optim.Adam) or adamw (decoupled "
                 "weight decay, as torch.optim.AdamW, but --weight-decay's default is 0 here, torch's 0.01); each "
                 "stage keeps its own parameters' state")
      ->check(CLI::IsMember(model::optimizer_kinds()))
      ->capture_default_str();
  flags->lr_flag = app.add_option("--lr", t.sgd.lr, str("Learning rate (default ", model::kSgdLr, " for sgd; ", model::kAdamLr,
                                                         ", torch.optim's, for adam and adamw: SGD's diverged them)"));
  app.add_option("--momentum", t.sgd.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--betas", flags->betas, "Adam's beta1,beta2 (default 0.9,0.999)")->expected(2)->delimiter(',');
  app.add_option("--eps", t.sgd.eps, "Adam's epsilon")->capture_default_str();
  app.add_option("--weight-decay", t.sgd.weight_decay,
                 "Weight decay: L2 (added to the gradient) for sgd and adam, decoupled for adamw")
      ->capture_default_str();
  app.add_option("--weight-decay-on", t.sgd.weight_decay_on,
                 "Which parameters --weight-decay shrinks: all, or matrices (those of 2+ dimensions: not biases and "
                 "norm scales, as LM recipes group them)")
      ->check(CLI::IsMember({"all", "matrices"}))
      ->capture_default_str();
  app.add_option("--zero-grad", t.sgd.zero_grad,
                 "A parameter no backward reached in a step (an expert no row was routed to), as torch.optim treats "
                 "one after optimizer.zero_grad(set_to_none=...): none (torch 2's default) skips it that step (no "
                 "decay, momentum or Adam count); zeros (torch 1.13's default) skips it until its first gradient, "
                 "then steps it with a zero one")
      ->check(CLI::IsMember(model::zero_grad_modes()))
      ->capture_default_str();
  app.add_option("--clip-grad-norm", t.sgd.clip_grad_norm,
                 "Scale each step's gradient to at most this norm, as torch.nn.utils.clip_grad_norm_ (0: off): the "
                 "whole model's norm under a synchronous schedule, each stage's own under pipedream and 2bw")
      ->capture_default_str();
  app.add_option("--lr-schedule", t.sgd.lr_schedule,
                 "Learning rate over the run: constant, or cosine or linear, which decay from --lr towards --min-lr, "
                 "reached one step past the last (nanoGPT's cosine; transformers' linear schedule)")
      ->capture_default_str();
  app.add_option("--min-lr", t.sgd.min_lr, "Where --lr-schedule cosine or linear ends (nanoGPT's min_lr; often --lr / 10)")
      ->capture_default_str();
  app.add_option("--warmup-steps", t.sgd.warmup_steps, "Minibatches of linear learning-rate warm-up: step s (from 0) takes (s+1)/N of --lr, and the "
                 "decay starts from --lr at step N")
      ->capture_default_str();
  app.add_option("--eval-every", t.eval_every,
                 "Also measure test accuracy every N minibatches (pipelines drain there, so pipedream's and 2bw's weights "
                 "are less stale after each; for time-to-accuracy)");
  app.add_option("--metrics", t.metrics_path, "Write per-step metrics to this CSV file");
  app.add_flag("--quiet", t.quiet, "No progress output");
  app.add_flag("--no-shuffle", [&t](int64_t) { t.shuffle = false; },
               "Minibatches in the data's order (each epoch the same): to compare with another trainer");
  std::string kinds;
  for (const auto& k : schedule::schedule_kinds()) kinds += (kinds.empty() ? "" : ", ") + k;
  flags->schedule_flag = app.add_option("--schedule", flags->request.options.schedule, "Pipeline schedule: " + kinds + " (default: the plan's, else pipedream, or 1f1b where the stages split a tied parameter)")
      ->check(CLI::IsMember(schedule::schedule_kinds()));
  app.add_option("--plan", flags->request.plan_path, "Plan file from `pipetrain plan`");
  app.add_option("--schedule-file", flags->request.schedule_file,
                 "Run this schedule (synchronous): pipetrain's JSON (simulate --emit-schedule) or a CSV of "
                 "torch.distributed.pipelining actions per rank (2F0, 1I3, 1W3); its stages are the plan's "
                 "(--plan, --stages, or a JSON file's own)");
  app.add_option("--stages", flags->request.stages, "Even split into this many stages (by --profile, or measured here)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--workers", flags->request.workers, "Workers of one stage: data parallelism (--schedule dp, its default), or the --schedule named on one replicated stage")->check(CLI::Range(1, 1024));
  app.add_option("--profile", flags->request.profile_path, "Profile for --stages, and the model of --compute emulated");
  flags->microbatches_flag = app.add_option("--microbatches", flags->request.options.microbatches, "Microbatches per minibatch (default: the plan's, or 4)")
                             ->capture_default_str();
  flags->chunks_flag = app.add_option("--chunks", flags->request.options.chunks, "Model chunks per worker (interleaved; default: the plan's, or 1)")
                       ->capture_default_str();
  app.add_flag("--recompute", flags->request.recompute,
               "Activation recomputation on every stage: a forward keeps only its input, the backward runs it again "
               "(less memory, one more forward per microbatch; a plan may ask for it per stage)");
  flags->bucket_flag = app.add_option("--bucket-mb", flags->request.bucket_mb,
                                  "Gradient all-reduce bucket, MiB: each is reduced during the backward once its "
                                  "gradients are final (0: all in one, after the backward; emulated runs scale it by "
                                  "--byte-scale; default: the plan's bucket_mb, else 25)")
                       ->check(bucket_mb_range())
                       ->capture_default_str();
  app.add_flag("--vertical-sync", flags->request.options.vertical_sync, "pipedream: vertical sync of weight versions");
  app.add_flag("--no-weight-prediction", [flags](int64_t) { flags->request.options.weight_prediction = false; },
               "pipedream and 2bw: run each minibatch on the paper's weights (pipedream: the newest, stashed; "
               "2bw: the version its delay gives, two kept) instead of weights predicted as far ahead as its "
               "gradient's step (2bw: one copy per minibatch, up to 3 on a stage)");
  app.add_flag("--deferred-batch-norm", flags->request.options.deferred_batch_norm,
               "BatchNorm's running statistics of the whole minibatch, not of each microbatch, every replica's "
               "microbatches included (without it a replicated stage keeps replica 0's, as DDP does; models "
               "from pipetrain export)");
  app.add_option("--stale-warmup", flags->request.options.stale_warmup,
                 "pipedream and 2bw: a stage whose gradients lag s steps warms its learning rate up over this "
                 "many minibatches times s (0: off)")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}))
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--replica-gradients",
         [flags](const std::string& v) { flags->request.options.sum_replica_gradients = v == "sum"; },
         "pipedream: a replicated stage's round of r minibatches (one per replica) steps with the mean of their "
         "gradients, as PipeDream and DDP (a step on r minibatches at --lr), or their sum (r times --lr: what an "
         "unreplicated stage's r steps move, to first order; large r x --lr diverges)")
      ->check(CLI::IsMember({"mean", "sum"}))
      ->default_str("mean");
  // Both at once: the last one given won, without a word.
  CLI::Option* deferred = app.add_flag_callback(
      "--deferred-step", [flags] { flags->request.deferred_step = 1; },
      "pipedream: a replicated first stage steps after its next forward, hiding its all-reduce's tail (its weights "
      "lag one more update); default: the plan's deferred_step");
  app.add_flag_callback("--no-deferred-step", [flags] { flags->request.deferred_step = 0; },
                        "pipedream: step before the next forward even where the plan defers it")
      ->excludes(deferred);
  app.add_option("--cluster", flags->request.cluster_path,
                 "Cluster file (pipetrain.cluster/1): which workers share a server, for --allreduce hierarchical");
  app.add_option("--allreduce", flags->request.allreduce,
                 "gloo: ring (one ring over a stage's replicas) or hierarchical (inside each server, then across "
                 "servers a shard each; where the cluster makes it faster); default: the cluster file's")
      ->check(CLI::IsMember({"ring", "hierarchical"}));
  app.add_option("--transport", flags->transport, "threads (one process) or gloo (one process per worker)")
      ->check(CLI::IsMember({"threads", "gloo"}))->capture_default_str();
  app.add_option("--trace", flags->trace_path, "Write what ran as a pipetrain trace (JSON)");
  app.add_option("--prediction-trace", flags->prediction_trace_path,
                 "With --profile: write the simulation the run's throughput is set against, as a pipetrain trace "
                 "(its steady state; an asynchronous run's figure weighs its segments' fill and drain besides, "
                 "and says so); `pipetrain trace TRACE --against` it shows where the run and its prediction part");
  app.add_option("--checkpoint-dir", flags->request.options.checkpoint.dir, "Write checkpoints (per layer: any plan resumes them) here");
  app.add_option("--checkpoint-every", flags->request.options.checkpoint.every,
                 "Minibatches between checkpoints (0: at the end only; pipelines drain there, so pipedream's and 2bw's "
                 "weights are less stale after each, as after --eval-every's)")
      ->capture_default_str();
  app.add_flag("--resume", flags->request.options.checkpoint.resume, "Continue from the newest complete checkpoint in --checkpoint-dir");
  app.add_flag("--overwrite", flags->request.options.checkpoint.overwrite,
               "A fresh run may replace the checkpoints of an earlier run in --checkpoint-dir");
  app.add_option("--timeout", flags->request.options.timeout_s, "Seconds a worker waits for a peer before the job fails; where others work alone (an "
                 "evaluation's chain, a checkpoint's writers), the others wait as long as they progress "
                 "within it (an evaluation round, a layer written or read back)")
      ->check(finite_positive())->capture_default_str();
  app.add_option("--rendezvous-timeout", flags->request.options.rendezvous_timeout_s,
                 "gloo: seconds a worker waits for every other to join (it names the missing ones every 10 s); "
                 "connecting to worker 0 and making the all-reduce groups wait up to the larger of it and --timeout")
      ->check(finite_positive())->capture_default_str();
  app.add_flag("--no-pin-cores", flags->no_pin_cores,
               "Where the workers outnumber this host's cores, leave their placement to the kernel (the prediction "
               "then shares the cores as one pool); by default each is pinned to a core, the busiest first by the "
               "profile's times, or without --profile the plan's");
  app.add_flag("--print-job", flags->print_job,
               "Print what every worker of this job must agree on (JSON: the settings, the plan, the data's and "
               "files' digests, every flag) and exit without training");
}

void finish_train_flags(const CLI::App& app, TrainFlags& flags) {
  check_flag_rules(app);
  job::Request& r = flags.request;
  r.options.command_line = flag_digest(app, kPerWorkerFlags, kFileFlags, kDataFlags);
  if (flags.betas.size() == 2) std::tie(r.options.train.sgd.beta1, r.options.train.sgd.beta2) = std::tie(flags.betas[0], flags.betas[1]);
  r.schedule_given = flags.schedule_flag->count() > 0;
  r.microbatches_given = flags.microbatches_flag->count() > 0;
  r.chunks_given = flags.chunks_flag->count() > 0;
  r.batch_size_given = flags.batch_size_flag->count() > 0;
  r.bucket_given = flags.bucket_flag->count() > 0;
  model::OptimizerOptions& sgd = r.options.train.sgd;
  if (flags.lr_flag->count() == 0) sgd.lr = sgd.adam() ? model::kAdamLr : model::kSgdLr;
  r.precision = flags.model.precision;
}

}  // namespace pt::app
