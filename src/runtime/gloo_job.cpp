#include "runtime/gloo_job.h"

#include <csignal>
#include <iostream>
#include <numeric>

#include "runtime/job_digest.h"
#include "runtime/progress.h"

namespace pt::runtime {

int reporting_worker(const schedule::Schedule& s) { return s.stage_workers[s.num_stages - 1][0]; }

namespace {

// Minibatch losses on the reporting worker, from the microbatch losses it computes. With a
// replicated last stage it sees only its share of a minibatch's microbatches (or only some
// minibatches), so a minibatch's loss is the mean over the microbatches it saw, scaled to the
// whole minibatch. Microbatches arrive in minibatch order, so a minibatch is complete when the
// next one starts.
class LossReport {
 public:
  LossReport(Progress& progress, int64_t per_epoch, int64_t batch_size, int microbatches, int64_t first_step)
      : progress_(progress), per_epoch_(per_epoch), batch_size_(batch_size), microbatches_(microbatches),
        first_step_(first_step) {}

  void add(int64_t minibatch, double loss) {
    if (minibatch != current_) flush();
    current_ = minibatch;
    sum_ += loss;
    ++seen_;
  }
  void flush() {
    if (seen_ == 0) return;
    double loss = sum_ * microbatches_ / seen_;
    recent_.push_back(loss);
    last_loss_ = loss;
    double secs = (wall_ms() - start_ms_ - eval_ms_) / 1000;
    progress_.step({current_ + 1, current_ / per_epoch_, loss, (current_ + 1 - first_step_) * batch_size_ / std::max(secs, 1e-9), -1,
                    secs});
    sum_ = 0;
    seen_ = 0;
  }
  double final_loss() const {
    size_t k = std::min<size_t>(50, recent_.size());
    return k ? std::accumulate(recent_.end() - k, recent_.end(), 0.0) / k : 0;
  }
  double last_loss() const { return last_loss_; }
  void start(double ms) { start_ms_ = ms; }
  void add_eval_ms(double ms) { eval_ms_ += ms; }

 private:
  Progress& progress_;
  int64_t per_epoch_, batch_size_;
  int microbatches_;
  int64_t first_step_;
  int64_t current_ = -1;
  double sum_ = 0, last_loss_ = 0, start_ms_ = 0, eval_ms_ = 0;
  int seen_ = 0;
  std::vector<double> recent_;
};

}  // namespace

PipelineResult run_gloo_worker(const ModelFactory& factory, const model::DataSplit& data, const plan::Plan& plan,
                               const PipelineOptions& o, const GlooConfig& config, std::unique_ptr<Worker>* worker_out) {
  // A peer that dies leaves a closed socket; writing to it must fail the transfer, not kill us.
  std::signal(SIGPIPE, SIG_IGN);
  std::string action = "setup";
  std::unique_ptr<GlooTransport> transport;
  std::unique_ptr<Worker> worker;
  try {
    check_pipeline_options(o, plan, data);
    JobLayout job = layout_job(plan, o, data);
    const schedule::Schedule& probe = job.probe;
    if (probe.num_workers() != config.world_size)
      throw ConfigError(str("the plan needs ", probe.num_workers(), " workers but the gloo job has ", config.world_size,
                            " (WORLD_SIZE)"));
    int reporter = reporting_worker(probe);
    bool reports = config.rank == reporter;
    GlooConfig c = config;
    c.timeout_s = o.timeout_s;
    action = "rendezvous";
    transport = std::make_unique<GlooTransport>(c);
    action = "building the model";
    auto model = factory();
    action = "checking that the workers agree";
    transport->check_agreement(job_digest(plan, o, *model, data));
    action = "creating all-reduce groups";
    std::vector<std::vector<int>> groups;
    for (auto g : probe.stage_workers) {
      std::sort(g.begin(), g.end());
      groups.push_back(g);
    }
    transport->prepare_groups(groups);

    WorkerOptions wo{o.train.batch_size, job.sgd, o.train.seed, o.stash_weights, o.record_weight_sums, o.train.shuffle};
    check_resume_fits(job, o, *model);
    worker = std::make_unique<Worker>(config.rank, model, data, *transport, wo);
    Progress progress(job.first_step + job.steps, reports ? o.train.metrics_path : "", o.train.quiet || !reports);
    LossReport losses(progress, job.per_epoch, o.train.batch_size, probe.microbatches, job.first_step);
    worker->set_loss_callback([&](int64_t minibatch, double loss, int64_t, int64_t) { losses.add(minibatch, loss); });
    double accuracy = -1;
    double start = wall_ms();
    losses.start(start);
    worker->set_trace_origin(0);  // absolute steady-clock times: the launcher aligns the workers
    action = "training";
    run_worker_segments(*worker, *transport, job, plan, o, data, [&](const Segment& seg, double acc, double ms) {
      losses.flush();
      losses.add_eval_ms(ms);
      if (acc >= 0) {
        accuracy = acc;
        progress.evaluated({seg.first_minibatch + seg.minibatches, seg.epoch, losses.last_loss(), 0, acc});
      }
    });
    losses.flush();
    progress.finish();

    PipelineResult r;
    r.workers = probe.num_workers();
    r.stages = probe.num_stages;
    r.train.steps = job.steps;
    r.train.seconds = (wall_ms() - start) / 1000;
    r.train.samples_per_s = job.steps * o.train.batch_size / std::max(r.train.seconds, 1e-9);
    r.train.final_loss = losses.final_loss();
    r.train.test_accuracy = accuracy;
    r.trace.source = o.trace_source;
    r.trace.schedule = o.schedule;
    r.trace.num_stages = probe.num_stages;
    r.trace.microbatches = probe.microbatches;
    r.trace.batch_size = o.train.batch_size;
    r.trace.workers.resize(probe.num_workers());
    r.trace.workers[config.rank] = worker->trace();
    // Wait for every worker before tearing down the connections a peer may still be reading.
    action = "finishing";
    transport->barrier();
    if (worker_out) *worker_out = std::move(worker);
    return r;
  } catch (const std::exception& e) {
    if (worker && !worker->current_action().empty()) action = worker->current_action();
    if (transport) transport->abandon(e.what());
    throw RuntimeFailure(str("worker ", config.rank, ": ", action, ": ", e.what()));
  }
}

int train_with_gloo(const ModelFactory& factory, const model::DataSplit& data, const plan::Plan& plan,
                    const PipelineOptions& options, const std::string& trace_path,
                    const std::function<void(const PipelineResult&)>& on_result) {
  int rank = -1;
  try {
    GlooConfig config = gloo_config_from_env();
    rank = config.rank;
    PipelineResult r = run_gloo_worker(factory, data, plan, options, config);
    if (!trace_path.empty()) schedule::write_trace(r.trace, trace_path + ".worker" + std::to_string(rank));
    if (rank == reporting_worker(job_probe(plan, options)) && on_result) on_result(r);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "pipetrain " << (rank < 0 ? std::string("worker: ") : "") << e.what() << std::endl;
    return 1;
  }
}

}  // namespace pt::runtime
