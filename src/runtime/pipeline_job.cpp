#include "runtime/pipeline_job.h"

#include <iostream>
#include <numeric>

#include "core/error.h"
#include "core/host_allocator.h"
#include "model/batch_sampler.h"
#include "runtime/tied_gradients.h"
#include "runtime/trainer.h"

namespace pt::runtime {

WorkerOptions worker_options(const PipelineOptions& o, const model::OptimizerOptions& sgd) {
  WorkerOptions w;
  w.batch_size = o.train.batch_size;
  w.sgd = sgd;
  w.seed = o.train.seed;
  w.stash_weights = o.stash_weights;
  w.weight_prediction = o.weight_prediction;
  w.stale_warmup = o.stale_warmup;
  w.deferred_batch_norm = o.deferred_batch_norm;
  w.record_weight_sums = o.record_weight_sums;
  w.shuffle = o.train.shuffle;
  w.bucket_bytes = o.bucket_bytes;
  return w;
}

schedule::Schedule schedule_for(const plan::Plan& plan, const PipelineOptions& o, int minibatches) {
  if (o.schedule_file) return *o.schedule_file;  // one minibatch, repeated (it flushes)
  schedule::ScheduleOptions so;
  so.microbatches = o.microbatches;
  so.chunks = o.chunks;
  so.minibatches = minibatches;
  so.vertical_sync = o.vertical_sync;
  so.activation_budget = o.activation_budget;
  return schedule::make_schedule(o.schedule, plan, so);
}

std::vector<Segment> plan_segments(const schedule::Schedule& probe, const plan::Plan& plan, int64_t per_epoch,
                                   int64_t total_steps, int64_t first_step, int64_t checkpoint_every,
                                   int64_t eval_every) {
  int unit = 1;
  if (!probe.flush) {
    for (const auto& st : plan.stages) unit = std::lcm(unit, st.replicas);
  }
  auto round_up = [&](int64_t every) { return every > 0 ? (every + unit - 1) / unit * unit : 0; };
  // Asynchronous: minibatches left until the next cut of each kind; every epoch end cuts both.
  int64_t ck_piece = round_up(checkpoint_every), ev_piece = round_up(eval_every);
  int64_t to_ck = ck_piece, to_ev = ev_piece;
  std::vector<Segment> out;
  for (int64_t start = first_step; start < total_steps;) {
    int64_t epoch = start / per_epoch;
    int64_t epoch_end = std::min(total_steps, (epoch + 1) * per_epoch);
    int64_t n = probe.flush ? 1 : (epoch_end - start) / unit * unit;
    if (n == 0) {  // fewer than `unit` minibatches left in the epoch: they are skipped
      start = epoch_end;
      if (!out.empty()) out.back().ends_epoch = out.back().evaluate = true;
      continue;
    }
    if (!probe.flush && ck_piece > 0) n = std::min(n, to_ck);
    if (!probe.flush && ev_piece > 0) n = std::min(n, to_ev);
    Segment seg{start, static_cast<int>(n), false, epoch};
    start += n;
    seg.ends_epoch = start == epoch_end || (!probe.flush && epoch_end - start < unit);
    if (seg.ends_epoch) start = epoch_end;
    if (probe.flush) {
      seg.checkpoint = checkpoint_every > 0 && (start >= total_steps || start % checkpoint_every == 0);
      seg.evaluate = seg.ends_epoch || (eval_every > 0 && start % eval_every == 0);
    } else {
      to_ck -= n;
      to_ev -= n;
      seg.checkpoint = ck_piece > 0 && (to_ck == 0 || seg.ends_epoch || start >= total_steps);
      seg.evaluate = seg.ends_epoch || (ev_piece > 0 && to_ev == 0);
      if (seg.checkpoint) to_ck = ck_piece;
      if (seg.evaluate) to_ev = ev_piece;
    }
    out.push_back(seg);
  }
  return out;
}

void check_pipeline_options(const PipelineOptions& o, const plan::Plan& plan, const model::DataSplit& data) {
  check_train_options(o.train, data);
  if (o.microbatches < 1 || o.microbatches > schedule::kMaxMicrobatches)
    throw UsageError(str("--microbatches: must be in 1..", schedule::kMaxMicrobatches, ", got ", o.microbatches));
  if (o.train.batch_size % o.microbatches != 0)
    throw UsageError(str("--microbatches: ", o.microbatches, " does not divide --batch-size ", o.train.batch_size));
  if (o.chunks < 1 || o.chunks > schedule::kMaxChunks)
    throw UsageError(str("--chunks: must be in 1..", schedule::kMaxChunks, ", got ", o.chunks));
  // A week: beyond it a deadline computed from now overflows the clock.
  if (!(o.timeout_s > 0 && o.timeout_s <= 604800))
    throw UsageError(str("--timeout: must be in (0, 604800] seconds, got ", o.timeout_s));
  if (o.vertical_sync && o.schedule != "pipedream")
    throw UsageError(str("--vertical-sync: only the pipedream schedule keeps weight versions to sync, not ", o.schedule));
  // Versions count a stage's steps; a replicated stage steps once per round, so its versions
  // do not line up with the others' and the sync would ask for versions never stashed.
  for (int st = 0; o.vertical_sync && st < plan.num_stages(); ++st)
    if (plan.stages[st].replicas > 1)
      throw UsageError(str("--vertical-sync: needs one replica per stage, but stage ", st, " of plan ", plan.shape(),
                           " has ", plan.stages[st].replicas));
  if (o.schedule == "dp" && plan.num_stages() > 1)
    throw UsageError(str("--schedule dp: data parallelism runs one stage on every worker, but the plan has ",
                         plan.num_stages(), " stages (use a pipeline schedule, or no --plan)"));
}

std::shared_ptr<model::LayeredModel> build_worker_model(const ModelFactory& factory, const schedule::Schedule& probe,
                                                        int worker, const std::shared_ptr<model::MemoryAccount>& account) {
  // What the process freed before (LibTorch's start, the data's loading) goes back to the kernel
  // first: malloc would keep it resident beside the worker's training.
  release_freed_host_memory();
  model::install_memory_meter();
  model::ChargeTo charge(account);
  return factory(model::LayerSet(probe.worker_layers(worker)));
}

uint32_t tensor_crc32(const torch::Tensor& t) {
  if (!t.defined()) return 0;
  torch::Tensor c = t.contiguous();
  return crc32_of(std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size()));
}

DataIdentity data_identity(const model::DataSplit& data) {
  DataIdentity d;
  d.name = data.name;
  d.train_samples = data.train.size();
  std::string crcs;
  auto add = [&](uint32_t c) { crcs.append(reinterpret_cast<const char*>(&c), sizeof c); };
  add(tensor_crc32(data.train.inputs));
  add(tensor_crc32(data.train.targets));
  if (data.train.on_disk)
    for (uint32_t c : data.train.on_disk->crcs()) add(c);
  d.crc32 = crc32_of(crcs);
  return d;
}

int reporting_worker(const schedule::Schedule& s) { return s.stage_workers[s.num_stages - 1][0]; }

PipelineResult result_header(const schedule::Schedule& probe, const PipelineOptions& o) {
  PipelineResult r;
  r.workers = probe.num_workers();
  r.stages = probe.num_stages;
  r.reporting = reporting_worker(probe);
  r.trace.source = o.trace_source;
  r.trace.schedule = o.schedule;
  r.trace.num_stages = probe.num_stages;
  r.trace.microbatches = probe.microbatches;
  r.trace.batch_size = o.train.batch_size;
  r.trace.workers.resize(probe.num_workers());
  return r;
}

schedule::Schedule job_probe(const plan::Plan& plan, const PipelineOptions& o) {
  // Asynchronous schedules run many minibatches per repetition (see plan_segments).
  bool async = !schedule::schedule_flushes(o.schedule);
  return schedule_for(plan, o, async ? std::max<int>(1, schedule::default_minibatches(plan)) : 1);
}

JobLayout layout_job(const plan::Plan& plan, const PipelineOptions& o, const model::DataSplit& data, bool leads) {
  JobLayout job;
  model::BatchSampler sampler(data.train.size(), o.train.batch_size, o.train.seed, o.train.shuffle,
                              data.train.shard_sizes());
  job.per_epoch = sampler.batches_per_epoch();
  int64_t total = total_steps(o.train, data.train.size());
  job.sgd = o.train.sgd;
  job.sgd.total_steps = total;
  job.probe = job_probe(plan, o);
  // Before anything is written: an asynchronous plan's replicas take minibatches in whole rounds,
  // and an epoch's minibatches that fill no round are skipped, which can leave nothing to train,
  // or fewer minibatches than --steps asks (it ran 4 of --steps 5 or 8 without a word).
  int64_t unit = 1;
  if (!job.probe.flush)
    for (const auto& st : plan.stages) unit = std::lcm(unit, static_cast<int64_t>(st.replicas));
  std::string rounds = str("the replicas of plan ", plan.shape(), " under ", o.schedule, " take minibatches in rounds of ",
                           unit, ", and an epoch of ", job.per_epoch, " minibatch", job.per_epoch == 1 ? "" : "es",
                           " of ", o.train.batch_size, " holds ");
  int64_t trainable = 0;
  for (const auto& seg : plan_segments(job.probe, plan, job.per_epoch, total)) trainable += seg.minibatches;
  // --steps below one round is the cause where the epoch holds rounds (it blamed the epoch).
  if (total > 0 && trainable == 0 && o.train.steps > 0 && job.per_epoch >= unit)
    throw ConfigError(str("--steps ", o.train.steps, ": nothing would train: the replicas of plan ", plan.shape(),
                          " under ", o.schedule, " take minibatches in rounds of ", unit, ", and ", o.train.steps,
                          " minibatch", o.train.steps == 1 ? " is" : "es are",
                          " less than one round; give a --steps of whole rounds (", unit, ", ", 2 * unit,
                          ", ...) or a synchronous schedule"));
  if (total > 0 && trainable == 0)
    throw ConfigError(str(o.schedule, ": nothing would train: ", rounds,
                          "no whole round; give more data, a smaller --batch-size or a synchronous schedule"));
  rounds += str(job.per_epoch / unit, " whole round", job.per_epoch / unit == 1 ? "" : "s");
  if (o.train.steps > 0 && trainable < total)
    throw ConfigError(str("--steps ", o.train.steps, ": ", rounds, ", so the run would train ", trainable, " of the ",
                          total, " minibatches asked; give a --steps of whole rounds within one epoch (", unit,
                          job.per_epoch / unit > 1 ? str(" to ", job.per_epoch / unit * unit) : std::string(),
                          "), data or a --batch-size whose epoch is a multiple of ", unit,
                          " minibatches, or a synchronous schedule"));
  CheckpointStart start = start_checkpoints(o.checkpoint);
  if (leads && !o.checkpoint.dir.empty()) job.lock = std::make_shared<CheckpointLock>(o.checkpoint.dir);
  job.run_id = start.run_id;
  job.resume_from = start.resume_from;
  job.resume_manifest = start.manifest;
  if (!job.resume_from.empty()) job.first_step = job.resume_manifest.step;
  if (!o.checkpoint.dir.empty()) job.data = data_identity(data);
  // A finished run resumed trains nothing: said, rather than "steps 0, final loss 0".
  if (!job.resume_from.empty() && job.first_step >= total)
    throw ConfigError(str(job.resume_from, ": the checkpoint is at step ", job.first_step, ", and this run ends at step ",
                          total, ": nothing to train (give more --steps or --epochs to go on)"));
  // --checkpoint-every 0 with a directory: one checkpoint, at the end (every `total` steps).
  int64_t every = o.checkpoint.dir.empty() ? 0 : o.checkpoint.every > 0 ? o.checkpoint.every : std::max<int64_t>(total, 1);
  job.segments = plan_segments(job.probe, plan, job.per_epoch, total, job.first_step, every,
                               o.train.evaluate ? o.train.eval_every : 0);
  for (const auto& seg : job.segments) job.steps += seg.minibatches;
  int64_t asked = total - job.first_step;
  if (leads && job.steps < asked)
    std::cerr << "note: " << rounds << ": " << job.per_epoch % unit << " minibatch"
              << (job.per_epoch % unit == 1 ? " of each epoch is" : "es of each epoch are") << " skipped (" << job.steps
              << " of " << asked << " trained)\n";
  return job;
}

void check_ties(const model::LayeredModel& m, const plan::Plan& plan, const PipelineOptions& o) {
  auto ties = m.tie_groups();
  if (ties.empty()) return;
  schedule::Schedule probe = job_probe(plan, o);
  for (int w = 0; w < probe.num_workers(); ++w) TiedGradients(ties, m, probe, w);
}

void check_resume_fits(const JobLayout& job, const PipelineOptions& o, const model::LayeredModel& m) {
  if (job.resume_from.empty()) return;
  check_checkpoint_fits(job.resume_manifest, job.resume_from, m.name(), m.num_layers(), o.train.batch_size,
                        o.train.seed, o.train.shuffle);
  // The layer files hold the state of the optimizer that wrote them: sgd's momentum is not
  // adam's first moment, and adam's second moment has no sgd counterpart.
  if (job.resume_manifest.optimizer != o.train.sgd.kind)
    throw ConfigError(str(job.resume_from, "/manifest.json: the checkpoint holds ", job.resume_manifest.optimizer,
                          "'s state, but this run trains with --optimizer ", o.train.sgd.kind,
                          ": resume it with --optimizer ", job.resume_manifest.optimizer,
                          ", or start a new run (--overwrite)"));
  // Other data continued without a word (--data, --synthetic-samples): the steps after the
  // checkpoint would train a run that is not the one it resumes.
  const DataIdentity& was = job.resume_manifest.data;
  if (was.train_samples >= 0 && !(was == job.data))
    throw ConfigError(str(job.resume_from, "/manifest.json: the checkpoint was trained on ", was.describe(),
                          ", but this run's data is ", job.data.describe(),
                          ": resume it on the data it was trained on, or start a new run (--overwrite)"));
}

}  // namespace pt::runtime
