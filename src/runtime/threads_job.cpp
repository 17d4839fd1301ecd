#include "runtime/threads_job.h"

#include <thread>

#include "model/compute_threads.h"
#include "runtime/progress.h"
#include "runtime/thread_transport.h"
#include "runtime/tied_gradients.h"

namespace pt::runtime {

PipelineResult train_pipeline(const ModelFactory& factory, const model::DataSplit& data, const plan::Plan& plan,
                              const PipelineOptions& o, std::vector<std::unique_ptr<Worker>>* workers_out) {
  check_pipeline_options(o, plan, data);
  auto described = factory(model::LayerSet::none());
  check_ties(*described, plan, o);  // before the layout starts the checkpoints
  JobLayout job = layout_job(plan, o, data);
  const schedule::Schedule& probe = job.probe;
  check_resume_fits(job, o, *described);
  int n = probe.num_workers();
  // Each worker builds only its stages' layers, with the initial weights single-worker training
  // starts from (layered_model.h), charged to its own account.
  std::vector<std::shared_ptr<model::MemoryAccount>> accounts;
  std::vector<std::shared_ptr<model::LayeredModel>> models;
  for (int w = 0; w < n; ++w) {
    accounts.push_back(std::make_shared<model::MemoryAccount>());
    models.push_back(build_worker_model(factory, probe, w, accounts[w]));
  }
  auto hub = std::make_shared<ThreadHub>(n, o.timeout_s);
  std::vector<std::unique_ptr<ThreadTransport>> transports;
  std::vector<std::unique_ptr<Worker>> workers;
  WorkerOptions wo = worker_options(o, job.sgd);
  for (int w = 0; w < n; ++w) {
    transports.push_back(std::make_unique<ThreadTransport>(hub, w));
    workers.push_back(std::make_unique<Worker>(w, models[w], data, *transports[w], wo));
  }
  // Each worker runs as a thread; the first failure that is not another's abort is reported.
  std::vector<std::string> errors(n);
  std::vector<char> consequence(n, 0);
  std::vector<WorkerRun> runs(n);
  double start = wall_ms();
  std::vector<std::thread> threads;
  for (int w = 0; w < n; ++w) {
    threads.emplace_back([&, w] {
      model::use_one_compute_thread();
      try {
        runs[w] = run_worker(*workers[w], *transports[w], job, plan, o, data, start, accounts[w]);
      } catch (const WorkerFailure& e) {
        errors[w] = e.what();
        consequence[w] = e.consequence;
        hub->abort(errors[w]);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::string first;
  for (size_t w = 0; w < errors.size(); ++w)
    if (!errors[w].empty() && !consequence[w] && first.empty()) first = errors[w];
  for (const auto& e : errors)
    if (first.empty() && !e.empty()) first = e;
  if (!first.empty()) throw RuntimeFailure("pipeline failed: " + first);

  PipelineResult r = result_header(probe, o);
  r.train = runs[r.reporting].train;
  r.train.one_process = true;
  for (int w = 0; w < n; ++w) {
    r.trace.workers[w] = std::move(runs[w].trace);
    r.trace.pauses = w == 0 ? runs[w].pauses : schedule::common_pauses(r.trace.pauses, runs[w].pauses);
  }
  if (workers_out) *workers_out = std::move(workers);
  return r;
}

}  // namespace pt::runtime
