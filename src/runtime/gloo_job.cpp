#include "runtime/gloo_job.h"

#include <csignal>
#include <numeric>

#include "runtime/job_digest.h"
#include "runtime/tied_gradients.h"
#include "runtime/worker_runner.h"

namespace pt::runtime {

PipelineResult run_gloo_worker(const ModelFactory& factory, const model::DataSplit& data, const plan::Plan& plan,
                               const PipelineOptions& o, const GlooConfig& config, std::unique_ptr<Worker>* worker_out) {
  // A peer that dies leaves a closed socket; writing to it must fail the transfer, not kill us.
  std::signal(SIGPIPE, SIG_IGN);
  std::string action = "setup";
  std::unique_ptr<GlooTransport> transport;
  std::unique_ptr<Worker> worker;
  try {
    check_pipeline_options(o, plan, data);
    auto described = factory(model::LayerSet::none());
    check_ties(*described, plan, o);  // before the layout starts the checkpoints
    JobLayout job = layout_job(plan, o, data, config.rank == 0);
    const schedule::Schedule& probe = job.probe;
    if (probe.num_workers() != config.world_size)
      throw ConfigError(str("the plan needs ", probe.num_workers(), " workers but the gloo job has ", config.world_size,
                            " (WORLD_SIZE)"));
    GlooConfig c = config;
    c.timeout_s = o.timeout_s;
    c.rendezvous_timeout_s = o.rendezvous_timeout_s;
    c.cluster = o.cluster;
    action = "rendezvous";
    transport = std::make_unique<GlooTransport>(c);
    action = "checking that the workers agree";
    transport->check_agreement(job_digest(plan, o, *described, data));
    action = "creating all-reduce groups";
    std::vector<std::vector<int>> groups;
    for (auto g : probe.stage_workers) {
      std::sort(g.begin(), g.end());
      groups.push_back(g);
    }
    for (auto& g : TiedGradients::worker_groups(described->tie_groups(), probe)) groups.push_back(g);
    if (o.train.sgd.clip_grad_norm > 0 && probe.flush) {  // the whole model's gradient norm (worker.h)
      std::vector<int> everyone(probe.num_workers());
      std::iota(everyone.begin(), everyone.end(), 0);
      groups.push_back(everyone);
    }
    transport->prepare_groups(groups);

    WorkerOptions wo = worker_options(o, job.sgd);
    check_resume_fits(job, o, *described);
    described.reset();
    action = "building the model";
    auto account = std::make_shared<model::MemoryAccount>();
    auto model = build_worker_model(factory, probe, config.rank, account);
    worker = std::make_unique<Worker>(config.rank, model, data, *transport, wo);
    action = "training";
    // Absolute steady-clock times: the launcher aligns the workers' traces.
    WorkerRun run = run_worker(*worker, *transport, job, plan, o, data, 0, account);
    PipelineResult r = result_header(probe, o);
    r.train = run.train;
    r.trace.workers[config.rank] = std::move(run.trace);
    r.trace.pauses = std::move(run.pauses);  // merge_worker_traces keeps what every worker's cover
    // Wait for every worker before tearing down the connections a peer may still be reading.
    action = "finishing";
    transport->barrier();
    if (worker_out) *worker_out = std::move(worker);
    return r;
  } catch (const WorkerFailure& e) {
    transport->abandon(e.what());
    throw;
  } catch (const std::exception& e) {
    if (transport) transport->abandon(e.what());
    throw RuntimeFailure(str("worker ", config.rank, " at ", action, ": ", e.what()));
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
    if (rank == r.reporting && on_result) on_result(r);
    return 0;
  } catch (const std::exception& e) {
    print_line_to_stderr(str("pipetrain ", rank < 0 ? "worker: " : "", e.what()));
    return 1;
  }
}

}  // namespace pt::runtime
