#include "job/job.h"

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "core/error.h"
#include "core/units.h"
#include "core/host_allocator.h"
#include "model/batch_sampler.h"
#include "runtime/checkpoint_lock.h"
#include "runtime/tied_gradients.h"

namespace pt::job {

namespace {

// Asynchronous schedules run many minibatches per repetition (see plan_segments).
int typical_minibatches(const plan::Plan& plan, const PipelineOptions& options) {
  return schedule::schedule_flushes(options.schedule) ? 1 : std::max<int>(1, schedule::default_minibatches(plan));
}

// An asynchronous plan's replicas take minibatches in whole rounds, and an epoch's minibatches
// that fill no round are skipped, which can leave nothing to train, or fewer minibatches than
// --steps asks: refused before anything is written.
void check_whole_rounds(const Job& job, int64_t total, const PipelineOptions& options) {
  const plan::Plan& plan = job.plan;
  int64_t unit = replica_round(*job.typical, plan);
  std::string rounds = str("the replicas of plan ", plan.shape(), " under ", options.schedule, " take minibatches in rounds of ",
                           unit, ", and an epoch of ", job.per_epoch, " minibatch", job.per_epoch == 1 ? "" : "es",
                           " of ", options.train.batch_size, " holds ");
  int64_t trainable = 0;
  for (const auto& seg : plan_segments(*job.typical, plan, job.per_epoch, total)) trainable += seg.minibatches;
  // --steps below one round is the cause where the epoch holds rounds.
  if (total > 0 && trainable == 0 && options.train.steps > 0 && job.per_epoch >= unit)
    throw ConfigError(str("--steps ", options.train.steps, ": nothing would train: the replicas of plan ", plan.shape(),
                          " under ", options.schedule, " take minibatches in rounds of ", unit, ", and ", options.train.steps,
                          " minibatch", options.train.steps == 1 ? " is" : "es are",
                          " less than one round; give a --steps of whole rounds (", unit, ", ", 2 * unit,
                          ", ...) or a synchronous schedule"));
  if (total > 0 && trainable == 0)
    throw ConfigError(str(options.schedule, ": nothing would train: ", rounds,
                          "no whole round; give more data, a smaller --batch-size or a synchronous schedule"));
  rounds += str(job.per_epoch / unit, " whole round", job.per_epoch / unit == 1 ? "" : "s");
  if (options.train.steps > 0 && trainable < total)
    throw ConfigError(str("--steps ", options.train.steps, ": ", rounds, ", so the run would train ", trainable, " of the ",
                          total, " minibatches asked; give a --steps of whole rounds within one epoch (", unit,
                          job.per_epoch / unit > 1 ? str(" to ", job.per_epoch / unit * unit) : std::string(),
                          "), data or a --batch-size whose epoch is a multiple of ", unit,
                          " minibatches, or a synchronous schedule"));
}

void check_resume_fits(const Job& job, const PipelineOptions& options, const model::LayeredModel& m) {
  if (job.resume_from.empty()) return;
  runtime::check_checkpoint_fits(job.resume_manifest, job.resume_from, m.name(), m.num_layers(), options.train.batch_size,
                                 options.train.seed, options.train.shuffle);
  // The layer files hold the state of the optimizer that wrote them: sgd's momentum is not
  // adam's first moment, and adam's second moment has no sgd counterpart.
  if (job.resume_manifest.optimizer != options.train.sgd.kind)
    throw ConfigError(str(job.resume_from, "/manifest.json: the checkpoint holds ", job.resume_manifest.optimizer,
                          "'s state, but this run trains with --optimizer ", options.train.sgd.kind,
                          ": resume it with --optimizer ", job.resume_manifest.optimizer,
                          ", or start a new run (--overwrite)"));
  // Other data (--data, --synthetic-samples): the steps after the checkpoint would train a run
  // that is not the one it resumes.
  const runtime::DataIdentity& was = job.resume_manifest.data;
  if (was.train_samples >= 0 && !(was == job.data))
    throw ConfigError(str(job.resume_from, "/manifest.json: the checkpoint was trained on ", was.describe(),
                          ", but this run's data is ", job.data.describe(),
                          // Where the flags named the same data, a model flag made it other (a
                          // change of width read as a change of data alone).
                          was.kind() == "synthetic" && job.data.kind() == "synthetic"
                              ? " (synthetic data is drawn for the model's sample shape and classes: a model flag "
                                "such as --width, --classes, --image-size or --seq-len changes it too)"
                              : "",
                          ": resume it on the data it was trained on, or start a new run (--overwrite)"));
}

runtime::WorkerOptions worker_options(const PipelineOptions& options, const model::OptimizerOptions& optimizer) {
  runtime::WorkerOptions w;
  w.batch_size = options.train.batch_size;
  w.sgd = optimizer;
  w.seed = options.train.seed;
  w.stash_weights = options.stash_weights;
  w.weight_prediction = options.weight_prediction;
  w.stale_warmup = options.stale_warmup;
  w.sum_replica_gradients = options.sum_replica_gradients;
  w.deferred_batch_norm = options.deferred_batch_norm;
  w.record_weight_sums = options.record_weight_sums;
  w.shuffle = options.train.shuffle;
  w.bucket_bytes = options.bucket_bytes;
  return w;
}

}  // namespace

const schedule::Schedule& Job::schedule_of(const Segment& segment) const {
  std::lock_guard<std::mutex> lock(*mutex_);
  auto it = schedules_.find(segment.minibatches);
  PT_CHECK(it != schedules_.end(), "the job made no schedule of ", segment.minibatches, " minibatches");
  return *it->second;
}

std::shared_ptr<const schedule::Schedule> Job::schedule_over(int minibatches) const {
  std::lock_guard<std::mutex> lock(*mutex_);
  if (minibatches == 0) return typical;
  auto it = schedules_.find(minibatches);
  if (it == schedules_.end())
    it = schedules_.emplace(minibatches, std::make_shared<const schedule::Schedule>(
                                             generate_schedule(plan, options, minibatches))).first;
  return it->second;
}

Job make_job(const plan::Plan& plan, const PipelineOptions& options, const model::LayeredModel& described,
             const model::DataSplit& data, bool leads) {
  check_pipeline_options(options, plan, data);
  Job job;
  job.plan = plan;
  job.options = options;
  job.typical = std::make_shared<const schedule::Schedule>(generate_schedule(plan, options, typical_minibatches(plan, options)));
  const schedule::Schedule& typical = *job.typical;
  if (typical.microbatches > 1 && !data.loss_not_a_mean.empty())
    throw UsageError(str("the model file's own loss is not a mean over samples: ", data.loss_not_a_mean, ". ",
                         options.schedule, " splits each minibatch into ", typical.microbatches,
                         " microbatches and averages their losses, the minibatch's loss only where the loss is a "
                         "mean over samples (reduction='sum' is not, nor a mean over the targets an ignore_index "
                         "keeps): export a loss that averages over samples, train each minibatch whole (one "
                         "worker), or give --loss lm or cross-entropy, which skip targets of -100 and weigh each "
                         "microbatch by the targets it keeps"));
  // The workers the schedule runs on: a V or interleaved schedule puts several stages on one.
  if (!options.cluster.levels.empty() && options.cluster.workers() < typical.num_workers())
    throw ConfigError(str(options.cluster_source, ": the cluster has ", counted(options.cluster.workers(), "worker"), " but ",
                          options.plan_source, " under ", options.schedule, " uses ", typical.num_workers()));
  job.reporting = typical.stage_workers[typical.num_stages - 1][0];
  // Before the checkpoints start: a tie the schedule would train wrong (tied_gradients.h).
  auto ties = described.tie_groups();
  for (int w = 0; !ties.empty() && w < typical.num_workers(); ++w) runtime::TiedGradients(ties, described, typical, w);

  model::BatchSampler sampler(data.train.size(), options.train.batch_size, options.train.seed, options.train.shuffle,
                              data.train.shard_sizes());
  job.per_epoch = sampler.batches_per_epoch();
  int64_t total = runtime::total_steps(options.train, data.train.size());
  model::OptimizerOptions optimizer = options.train.sgd;
  optimizer.total_steps = total;
  job.worker = worker_options(options, optimizer);
  check_whole_rounds(job, total, options);

  runtime::CheckpointStart start = runtime::start_checkpoints(options.checkpoint);
  // Another run's folder is named now, before any worker starts; the run holds the lock itself.
  if (leads && !options.checkpoint.dir.empty()) runtime::CheckpointLock{options.checkpoint.dir};
  job.run_id = start.run_id;
  job.resume_from = start.resume_from;
  job.resume_manifest = start.manifest;
  if (!job.resume_from.empty()) job.first_step = job.resume_manifest.step;
  if (leads && !start.passed_over.empty()) {
    std::sort(start.passed_over.begin(), start.passed_over.end());
    std::string names;
    for (const auto& name : start.passed_over) names += (names.empty() ? "" : ", ") + name;
    std::cerr << "note: --resume: " << names << " in '" << options.checkpoint.dir << "' "
              << (start.passed_over.size() == 1 ? "is" : "are") << " no checkpoint (no manifest.json that reads): "
              << "resuming from the newest that is, " << std::filesystem::path(job.resume_from).filename().string() << "\n";
  }
  if (!options.checkpoint.dir.empty()) job.data = data_identity(data);
  // A finished run resumed trains nothing: said, rather than "steps 0, final loss 0".
  if (!job.resume_from.empty() && job.first_step >= total)
    throw ConfigError(str(job.resume_from, ": the checkpoint is at step ", job.first_step, ", and this run ends at step ",
                          total, ": nothing to train (give more --steps or --epochs to go on)"));
  check_resume_fits(job, options, described);
  // An asynchronous plan's replicas take each epoch's minibatches in whole rounds from its start.
  // A checkpoint within a round (written by another plan, or a synchronous schedule) resumed so
  // skipped the epoch's last minibatches, which the run it continues would train: a 1f1b run at
  // step 35 of epochs of 10, resumed under pipedream's rounds of 2, trained 36..39 of 40, exit 0.
  const int64_t unit = replica_round(typical, plan), into = job.first_step % std::max<int64_t>(job.per_epoch, 1);
  if (!job.resume_from.empty() && into % unit != 0) {
    const int64_t epoch_end = std::min(total, job.first_step - into + job.per_epoch);
    throw ConfigError(str(job.resume_from, ": the checkpoint is at step ", job.first_step, ", ", into, " minibatches into",
                          " its epoch of ", job.per_epoch, ", no whole number of the rounds of ", unit, " in which the",
                          " replicas of plan ", plan.shape(), " under ", options.schedule, " take an epoch's minibatches;",
                          " resume up to the epoch's end (--steps ", epoch_end, ") with a synchronous schedule or the",
                          " plan that wrote it, then go on with this one"));
  }
  // --checkpoint-every 0 with a directory: one checkpoint, at the end (every `total` steps).
  int64_t every = options.checkpoint.dir.empty() ? 0 : options.checkpoint.every > 0 ? options.checkpoint.every : std::max<int64_t>(total, 1);
  job.segments = plan_segments(typical, plan, job.per_epoch, total, job.first_step, every,
                               options.train.evaluate ? options.train.eval_every : 0);
  // One schedule per segment length, each generated and validated here, once.
  for (const auto& seg : job.segments) {
    job.steps += seg.minibatches;
    if (job.schedules_.count(seg.minibatches)) continue;
    job.schedules_[seg.minibatches] =
        typical.flush || seg.minibatches == static_cast<int>(typical.minibatches)
            ? job.typical
            : std::make_shared<const schedule::Schedule>(generate_schedule(plan, options, seg.minibatches));
  }
  if (leads && !options.checkpoint.dir.empty()) {
    std::vector<int64_t> written;  // the steps this run checkpoints at
    for (const auto& seg : job.segments)
      if (seg.checkpoint) written.push_back(seg.first_minibatch + seg.minibatches);
    runtime::check_checkpoint_steps(options.checkpoint.dir, written);
  }
  int64_t asked = total - job.first_step;
  if (job.steps == 0)  // what check_whole_rounds and the resume's checks above leave out
    throw ConfigError(str(options.schedule, ": nothing would train: the replicas of plan ", plan.shape(),
                          " take minibatches in rounds of ", unit, ", and no whole round lies in the ", asked,
                          " minibatches from step ", job.first_step, " to ", total));
  if (leads && job.steps < asked)
    std::cerr << "note: the replicas of plan " << plan.shape() << " under " << options.schedule
              << " take minibatches in rounds of " << unit << ", and an epoch of " << job.per_epoch << " minibatches of "
              << options.train.batch_size << " holds " << job.per_epoch / unit << " whole round"
              << (job.per_epoch / unit == 1 ? "" : "s") << ": " << job.per_epoch % unit << " minibatch"
              << (job.per_epoch % unit == 1 ? " of each epoch is" : "es of each epoch are") << " skipped (" << job.steps
              << " of " << asked << " trained)\n";
  return job;
}

std::string weight_lag(const Job& job) {
  const schedule::Schedule& typical = *job.typical;
  const PipelineOptions& options = job.options;
  // One worker runs each minibatch on the weights it updates: no lag, whatever the schedule.
  if (typical.flush || (typical.num_workers() == 1 && typical.weight_delay == 0)) return "";
  std::string s = str(options.schedule, " on plan ", job.plan.shape(), ": layers ", job.plan.split(),
                      "; weight prediction ", options.weight_prediction ? "on" : "off");
  // 2bw warms its stale stages up too: resumed under another --stale-warmup it moved 8.3% off the
  // run it continued, unsaid (recorded last: train_notes.cpp compares a checkpoint from before).
  if (options.schedule == "2bw")
    return str(s, "; weights lag ", typical.weight_delay, " steps; stale warm-up ", options.stale_warmup);
  // Deferred where the first stage is replicated alone (plan.h): on 1-1-1 it changed nothing.
  const bool deferred = job.plan.deferred_step && job.plan.stages.front().replicas > 1;
  return str(s, "; stale warm-up ", options.stale_warmup, "; vertical sync ", options.vertical_sync ? "on" : "off",
             "; replica gradients ", options.sum_replica_gradients ? "sum" : "mean", "; deferred step ",
             deferred ? "on" : "off");
}

PipelineResult result_header(const Job& job) {
  const schedule::Schedule& typical = *job.typical;
  PipelineResult r;
  r.workers = typical.num_workers();
  r.stages = typical.num_stages;
  r.reporting = job.reporting;
  r.trace.source = job.options.trace_source;
  // The schedule's own kind, as the simulator stamps its trace: a schedule file's run was
  // stamped "file" against its prediction's "1f1b", and `trace --against` refused the pair.
  r.trace.schedule = typical.kind;
  r.trace.num_stages = typical.num_stages;
  r.trace.microbatches = typical.microbatches;
  r.trace.weight_delay = typical.weight_delay;
  r.trace.predicted_weights =
      job.worker.weight_prediction && typical.predicts_weights() && job.worker.sgd.state_copies() > 0;
  r.trace.batch_size = job.options.train.batch_size;
  r.trace.workers.resize(typical.num_workers());
  return r;
}

std::shared_ptr<model::LayeredModel> build_worker_model(const ModelFactory& factory, const Job& job, int worker,
                                                        const std::shared_ptr<model::MemoryAccount>& account) {
  // What the process freed before (LibTorch's start, the data's loading) goes back to the kernel
  // first: malloc would keep it resident beside the worker's training.
  release_freed_host_memory();
  model::install_memory_meter();
  model::ChargeTo charge(account);
  return factory(model::LayerSet(job.typical->worker_layers(worker)));
}

uint32_t tensor_crc32(const torch::Tensor& t) {
  if (!t.defined()) return 0;
  // Read where it lies: a copy of Fashion-MNIST's training images (188 MB) was each gloo
  // worker's peak resident memory, 150 MiB over its training.
  torch::Tensor c = t.contiguous();
  return runtime::crc32_of(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
}

uint32_t inputs_crc32(const model::Dataset& d) {
  if (!d.pixels.on() || !d.inputs.defined()) return tensor_crc32(d.inputs);
  constexpr int64_t kRows = 4096;  // 12 MiB of Fashion-MNIST's floats at a time
  uint32_t crc = 0;
  for (int64_t first = 0; first < d.size(); first += kRows) {
    torch::Tensor rows = d.input_rows(first, std::min(kRows, d.size() - first));
    crc = runtime::crc32_of(rows.data_ptr(), static_cast<size_t>(rows.nbytes()), crc);
  }
  return crc;
}

runtime::DataIdentity data_identity(const model::DataSplit& data) {
  runtime::DataIdentity d;
  d.name = data.name;
  d.train_samples = data.train.size();
  std::string crcs;
  auto add = [&](uint32_t c) { crcs.append(reinterpret_cast<const char*>(&c), sizeof c); };
  add(inputs_crc32(data.train));
  add(tensor_crc32(data.train.targets));
  if (data.train.on_disk)
    for (uint32_t c : data.train.on_disk->crcs()) add(c);
  d.crc32 = runtime::crc32_of(crcs);
  return d;
}

}  // namespace pt::job
