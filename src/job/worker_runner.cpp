#include "job/worker_runner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <functional>
#include <map>
#include <numeric>

#include "job/loss_report.h"
#include "model/data_checks.h"
#include "model/memory_meter.h"
#include "model/optimizer.h"
#include "runtime/checkpoint.h"
#include "runtime/progress.h"
#include "runtime/trainer.h"

namespace pt::job {

using runtime::Evaluation;
using runtime::JobAborted;
using runtime::wall_ms;
using runtime::Progress;
using runtime::StepRecord;
using runtime::Transport;
using runtime::Worker;

namespace {

// Segments whose gathered losses travel to the reporter as one list.
constexpr int64_t kLossBlock = 16;

// The tag of a block's losses sent to the reporter: negative, below the evaluations' (which
// count down from -1 by test batches x stages), and apart from every training tag (>= 0).
int64_t loss_tag(int64_t block) { return -(int64_t{1} << 28) - block % (int64_t{1} << 20); }

}  // namespace

std::vector<int64_t> gather_peaks(Transport& transport, int64_t mine) {
  std::vector<int> all(transport.world_size());
  std::iota(all.begin(), all.end(), 0);
  std::vector<torch::Tensor> t{torch::zeros({transport.world_size()}, torch::kDouble)};
  t[0][transport.rank()] = static_cast<double>(mine);
  transport.allreduce_sum(t, all);
  std::vector<int64_t> out;
  for (int w = 0; w < transport.world_size(); ++w) out.push_back(static_cast<int64_t>(t[0][w].item<double>()));
  return out;
}

namespace {
runtime::CheckpointManifest job_description(const Job& job, const model::LayeredModel& m) {
  const plan::Plan& plan = job.plan;
  const PipelineOptions& options = job.options;
  runtime::CheckpointManifest d;
  d.run_id = job.run_id;
  d.model = m.name();
  d.model_sha256 = m.file_sha256();
  d.layers = m.num_layers();
  d.batch_size = options.train.batch_size;
  d.seed = options.train.seed;
  d.shuffle = options.train.shuffle;
  d.schedule = options.schedule;
  d.plan = plan.shape();
  d.workers = job.workers();
  d.lr = options.train.sgd.lr;
  d.momentum = options.train.sgd.momentum;
  d.optimizer = options.train.sgd.kind;
  d.weight_decay = options.train.sgd.weight_decay;
  d.weight_decay_on = options.train.sgd.weight_decay_on;
  d.zero_grad = options.train.sgd.zero_grad;
  d.beta1 = options.train.sgd.beta1, d.beta2 = options.train.sgd.beta2, d.eps = options.train.sgd.eps;
  d.clip_grad_norm = options.train.sgd.clip_grad_norm;
  d.precision = model::to_string(m.precision());
  d.label_smoothing = m.label_smoothing();
  d.microbatches = job.typical->microbatches;
  d.deferred_batch_norm = options.deferred_batch_norm ? 1 : 0;
  d.weight_lag = weight_lag(job);
  d.lr_schedule = job.optimizer().lr_schedule;
  d.warmup_steps = job.optimizer().warmup_steps;
  d.schedule_steps = job.optimizer().total_steps;
  d.min_lr = job.optimizer().min_lr;
  d.data = job.data;
  for (const auto& group : m.tie_groups()) {
    std::vector<std::pair<int, int>> members;
    for (const auto& member : group.members) members.emplace_back(member.layer, member.param);
    d.ties.push_back(std::move(members));
  }
  return d;
}

}  // namespace

void prepare_worker(Worker& worker, const Job& job) {
  worker.prepare(*job.typical);
  if (!job.resume_from.empty()) {
    runtime::load_checkpoint(worker, *job.typical, job.resume_from, job.resume_manifest);
    // The load's read buffers are no training's: the peak starts from what it left (a resumed
    // mlp reported 351 MiB against 254 fresh, and its metrics CSV jumped at the resume).
    if (auto account = model::charged_account()) account->reset_peak();
  }
}

void run_worker_segments(Worker& worker, Transport& transport, const Job& job, const model::DataSplit& data,
                         TrainingClock& clock, const EvaluatedCallback& on_evaluated, const TrainedCallback& trained,
                         const RunLossSource& run_loss) {
  const PipelineOptions& options = job.options;
  std::unique_ptr<runtime::Checkpointer> checkpointer;
  if (!options.checkpoint.dir.empty())
    checkpointer =
        std::make_unique<runtime::Checkpointer>(options.checkpoint, job_description(job, worker.model()), *job.typical);
  for (const auto& seg : job.segments) {
    const schedule::Schedule& schedule = job.schedule_of(seg);
    worker.run(schedule, seg.first_minibatch);
    bool evaluates = options.train.evaluate && seg.evaluate, checkpoints = checkpointer && seg.checkpoint;
    double stopped = 0;  // when this worker's training of the segment ended: its pause in the trace starts there
    if (evaluates || checkpoints || &seg == &job.segments.back()) {
      // The segment's training is over on every worker before its last rows are reported: an
      // asynchronous pipeline's first stage steps its last minibatch after the last stage, the
      // reporter, has its loss, and an accuracy row stamped before that drain read 0.186 s of
      // training for weights that existed at 0.29 (pipedream on 5 stages); the drain went to the
      // next row, and the run's last row fell short of its total.
      worker.finish_sends();
      stopped = wall_ms();
      clock.stop(transport);
    }
    if (trained) trained(seg);
    if (!evaluates && !checkpoints) continue;
    // The measured peak memory is training's: evaluations and checkpoints are not charged to
    // the worker. An evaluation runs the training's microbatches, so that it holds no more than
    // a forward of training does: at the whole minibatch (4 microbatches) the README's llama's
    // last stage held 4x the logits training does, and its process peaked at 148-190 MiB
    // against 120-133 (2 gloo processes).
    model::ChargeTo uncharged(nullptr);
    Evaluation e;
    if (evaluates) e = worker.evaluate(schedule, data.test, options.train.batch_size / schedule.microbatches);
    // Before the checkpoint exists, the rows up to it are written: a job killed just after it
    // lost that step's row, its accuracy too, for good (the resume starts after it).
    if (on_evaluated) on_evaluated(seg, e);
    // The workers outside the evaluation's chain wait for it as long as it progresses: under
    // --timeout from the call, a data-parallel replica failed a healthy job while worker 0
    // evaluated a language model's test set (45 s), and the checkpoint's waits began meanwhile.
    if (evaluates) transport.pause_barrier();
    // Every worker waits out the whole pause, its replica in the evaluation's chain or not, and
    // the work one worker does alone: the reporter's rows, and worker 0's end of a checkpoint
    // (its CRCs, manifest, rename and rotation). Else the others' resume ended the common pause
    // and that work counted as training: a replicated stage's other replicas paused for no
    // evaluation (40.8 ms per minibatch against 0.43), and mnist-cnn on 2 stages, a checkpoint
    // every 10 steps, read 3,231 samples/s for 3,354 (150 ms of worker 0's checkpoints).
    try {
      if (checkpoints) {
        checkpointer->save(worker, transport, seg.first_minibatch + seg.minibatches,
                           run_loss ? run_loss() : runtime::RunLoss{});
        transport.pause_barrier();  // worker 0 reads every layer back for the manifest meanwhile
      } else {
        transport.barrier();
      }
    } catch (const runtime::TransportError& e) {
      // A save waits as long as each layer is written and read back within --timeout: a healthy
      // job whose stages write unequal shares of a large model to a slow disk failed naming an
      // all-reduce alone, and one layer that takes longer still fails it.
      if (!checkpoints || dynamic_cast<const runtime::JobAborted*>(&e)) throw;
      throw runtime::TransportError(str(e.what(), " (while the workers saved the checkpoint of step ",
                                        seg.first_minibatch + seg.minibatches, ", each of whose layers must be written "
                                        "within --timeout ", options.timeout_s,
                                        " s: a large layer on a slow disk may need a larger one)"));
    }
    // The trace's common pause runs from the last worker's stop to the first one's resume, as the
    // training time's does (TrainingClock). From each worker's exit from the barrier, it left the
    // barrier's wake-ups to training: on a busy machine 1.8 ms of each pause, and 20 evaluations in
    // 40 steps made the trace's training 0.501 s where the actions ran 0.480.
    worker.mark_pause(stopped, wall_ms());
    clock.resume();
  }
  worker.finish_sends();
}


WorkerRun run_worker(Worker& worker, Transport& transport, const Job& job, const model::DataSplit& data,
                     double trace_origin_ms, std::shared_ptr<model::MemoryAccount> memory) {
  const PipelineOptions& options = job.options;
  const schedule::Schedule& typical = *job.typical;
  WorkerRun run;
  run.reports = transport.rank() == job.reporting;
  std::string phase = "building its stages";  // named in errors when no action is running
  // What this worker's training allocates is charged to it, wherever it is freed.
  model::install_memory_meter();
  model::ChargeTo charge(memory);
  try {
    // The job's time runs from when every worker is ready to when every worker is done (the
    // reporter, the last stage, finishes before the first stage's last backward), without the
    // evaluations (run_worker_segments times them from a barrier). Ready is with its stages
    // built: timed from before, vgg16's last stage (530 MB of weights, gradients and momentum to
    // lay out) took 1.2 s of a 6-step run that trains in 0.8.
    prepare_worker(worker, job);
    phase = "the start barrier (every worker's stages built; --timeout)";
    transport.barrier();
    phase = "training (between segments)";
    TrainingClock clock;
    // Counted as the steps are, by position in the data's order (past minibatches skipped).
    int64_t last_step = job.segments.empty() ? job.first_step + job.steps
                                             : job.segments.back().first_minibatch + job.segments.back().minibatches;
    Progress progress(last_step, run.reports ? options.train.metrics_path : "", options.train.quiet || !run.reports,
                      job.first_step, job.resume_from.empty() ? std::numeric_limits<double>::quiet_NaN()
                                                              : job.resume_manifest.first_loss);
    // A replicated last stage's replicas each compute part of the losses; the others send theirs
    // to the reporter after each segment.
    const std::vector<int>& last = typical.stage_workers.back();
    bool gathered = last.size() > 1;
    bool sends_losses = gathered && !run.reports && std::count(last.begin(), last.end(), transport.rank()) > 0;
    // pipedream's replicas of the last stage step once per round, at the rate of the round's
    // first minibatch (Worker::run): the lr column printed each minibatch's own (a one-stage
    // pipedream on 2 workers: 0.000146 where its step applied 0.0005).
    const int last_replicas = typical.replicas(typical.num_stages - 1);
    const bool rounds = typical.kind == "pipedream" && last_replicas > 1;
    auto rate_step = [&job, rounds, last_replicas](int64_t m) {
      for (const auto& seg : job.segments)
        if (rounds && m >= seg.first_minibatch && m < seg.first_minibatch + seg.minibatches)
          return m - (m - seg.first_minibatch) % last_replicas;
      return m;
    };
    // The rates the last stage applied, its stale warm-up included (2bw's last stage lags too).
    LossReport losses(progress, clock, job.per_epoch, options.train.batch_size, typical.microbatches, gathered,
                      runtime::stage_optimizer(typical, typical.num_stages - 1, job.worker),
                      options.trace_source != "emulated", rate_step, !typical.flush);
    if (!job.resume_from.empty()) losses.resumed_from(job.resume_manifest.first_loss);
    std::vector<double> mine{0};  // their count, then this segment's (minibatch, loss, seconds) triples, to send
    if (run.reports) {
      worker.set_loss_callback([&](int64_t minibatch, double loss) { losses.add(minibatch, loss); });
      if (gathered || !typical.flush)
        worker.set_step_callback([&](int64_t minibatch) { losses.stepped(minibatch, losses.train_seconds()); });
      worker.set_grad_norm_callback([&](int64_t minibatch, double norm) { losses.add_grad_norm(minibatch, norm); });
    }
    if (sends_losses) {
      worker.set_loss_callback([&](int64_t minibatch, double loss) {
        mine.push_back(static_cast<double>(minibatch));
        mine.push_back(loss);
        mine.push_back(-1);  // its time once stepped
      });
      worker.set_step_callback([&](int64_t minibatch) {
        double secs = losses.train_seconds();
        for (size_t i = mine.size(); i >= 4 && mine[i - 1] < 0; i -= 3)
          if (mine[i - 3] <= static_cast<double>(minibatch)) mine[i - 1] = secs;
      });
    }
    // Gathered losses travel in blocks of kLossBlock segments, each waited for a block late. A flush
    // schedule's segment is one minibatch, and a list sent and waited for after each took longer
    // than the minibatch: gloo hands a message over in several wake-ups of its threads, each of
    // which waits for a core the computing workers hold (on 2 cores up to a timer tick, 4 ms).
    // Data parallelism on 2 gloo processes ran at 4,500 samples/s so, at 6,000 without the lists.
    // An evaluation, a checkpoint and the job's end take every list at once.
    int64_t segment = 0, block = 0, block_first = job.first_step;
    std::vector<std::shared_ptr<runtime::PendingTransfer>> sent;  // this worker's unfinished loss lists
    std::vector<std::pair<int, std::shared_ptr<runtime::PendingTransfer>>> expected;  // (sender, its list)
    auto take_lists = [&] {
      for (auto& [from, list] : expected) {
        torch::Tensor triples = list->wait();
        auto a = triples.accessor<double, 1>();
        PT_CHECK(triples.size(0) == 1 + 3 * static_cast<int64_t>(a[0]), "worker ", from, " sent a malformed loss list");
        for (int64_t i = 1; i + 2 < triples.size(0); i += 3) losses.add(static_cast<int64_t>(a[i]), a[i + 1], a[i + 2]);
      }
      expected.clear();
      for (auto& p : sent) p->wait();
      sent.clear();
    };
    double trained_s = 0;  // the run's training time: at its last segment's end, every worker done
    auto gather_losses = [&](const Segment& seg) {
      if (&seg == &job.segments.back()) trained_s = losses.train_seconds();
      int64_t end = seg.first_minibatch + seg.minibatches;
      bool pauses = (options.train.evaluate && seg.evaluate) || (!options.checkpoint.dir.empty() && seg.checkpoint) ||
                    end >= job.first_step + job.steps;
      losses.trained_until(end, pauses);  // a pause's segment ended on every worker (run_worker_segments)
      if (!gathered) {
        // The segment's last minibatch is reported now, its training time before any evaluation or
        // checkpoint after it: reported at the next loss, its row counted them as training (the
        // last step of a 6-step run said 0.92 s of training, 0.12 s of which were).
        losses.flush();
        return;
      }
      if (++segment % kLossBlock != 0 && !pauses) return;
      take_lists();  // the block before's: sent a block ago
      int64_t tag = loss_tag(block++);
      if (sends_losses) {
        mine[0] = static_cast<double>((mine.size() - 1) / 3);
        sent.push_back(transport.isend(torch::tensor(mine, torch::kDouble), last.front(), tag));
        mine.assign(1, 0);
      } else if (run.reports) {
        for (size_t r = 1; r < last.size(); ++r) expected.emplace_back(last[r], transport.irecv(last[r], tag));
      }
      if (pauses) {
        take_lists();
        losses.flush();
      } else {
        losses.flush_before(block_first);  // every list of the blocks before this one is in
      }
      block_first = end;
    };
    worker.set_trace_origin(trace_origin_ms);
    Evaluation evaluated;
    run_worker_segments(
        worker, transport, job, data, clock,
        [&](const Segment& seg, const Evaluation& e) {
          if (e.accuracy >= 0 || e.loss) {
            evaluated = e;
            StepRecord rec{seg.first_minibatch + seg.minibatches, seg.epoch, losses.last_loss(), 0, e.accuracy};
            rec.test_loss = e.loss;
            progress.evaluated(rec);
          }
          progress.flush_pending();
        },
        gather_losses, [&] { return run.reports ? losses.so_far() : runtime::RunLoss{}; });
    take_lists();
    losses.flush();
    phase = "the end barrier";
    std::vector<int64_t> peaks = gather_peaks(transport, memory->peak());
    std::vector<int64_t> rss = gather_peaks(transport, model::process_peak_rss_bytes());
    progress.finish();
    worker.set_loss_callback(nullptr);
    worker.set_step_callback(nullptr);
    if (run.reports) {
      run.train.steps = job.steps;
      run.train.seconds = job.segments.empty() ? losses.train_seconds() : trained_s;
      run.train.samples_per_s = job.steps * options.train.batch_size / std::max(run.train.seconds, 1e-9);
      run.train.first_loss = losses.first_loss();
      run.train.final_loss = losses.final_loss();
      run.train.final_losses = losses.final_losses();
      run.train.loss_known = losses.losses_known();
      run.train.shuffled = options.train.shuffle;
      run.train.test_accuracy = evaluated.accuracy;
      run.train.test_loss = evaluated.loss;
      run.train.peak_memory_bytes = peaks;
      run.train.peak_rss_bytes = rss;
      run.train.language_model = worker.model().task() == model::Task::kLanguageModel;
    }
    run.trace = worker.trace();
    run.pauses = worker.pauses();
    return run;
  } catch (const runtime::TrainingDiverged& e) {
    throw WorkerFailure(e.what(), false, true);
  } catch (const std::exception& e) {
    std::string action = worker.current_action();
    throw WorkerFailure(str("worker ", transport.rank(), " at ", action.empty() ? phase : action, ": ",
                            model::explain_training_error(e)),
                        dynamic_cast<const JobAborted*>(&e) != nullptr);
  }
}

}  // namespace pt::job
