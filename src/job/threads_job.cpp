#include "job/threads_job.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>

#include "core/error.h"
#include "job/core_pinning.h"
#include "model/compute_threads.h"
#include "runtime/checkpoint_lock.h"
#include "runtime/progress.h"
#include "profile/profile.h"
#include "runtime/thread_transport.h"
#include "runtime/trainer.h"

namespace pt::job {

PipelineResult run_on_threads(const Job& job, const ModelFactory& factory, const model::DataSplit& data,
                              std::vector<std::unique_ptr<runtime::Worker>>* workers_out) {
  const PipelineOptions& options = job.options;
  std::unique_ptr<runtime::CheckpointLock> lock;
  if (!options.checkpoint.dir.empty()) lock = std::make_unique<runtime::CheckpointLock>(options.checkpoint.dir);
  int n = job.workers();
  // Each worker builds only its stages' layers, with the initial weights single-worker training
  // starts from (layered_model.h), charged to its own account.
  std::vector<std::shared_ptr<model::MemoryAccount>> accounts;
  std::vector<std::shared_ptr<model::LayeredModel>> models;
  for (int w = 0; w < n; ++w) {
    accounts.push_back(std::make_shared<model::MemoryAccount>());
    models.push_back(build_worker_model(factory, job, w, accounts[w]));
  }
  auto hub = std::make_shared<runtime::ThreadHub>(n, options.timeout_s);
  std::vector<std::unique_ptr<runtime::ThreadTransport>> transports;
  std::vector<std::unique_ptr<runtime::Worker>> workers;
  for (int w = 0; w < n; ++w) {
    transports.push_back(std::make_unique<runtime::ThreadTransport>(hub, w));
    if (models[w]->task() == model::Task::kEmulated) transports.back()->sum_no_gradients();
    workers.push_back(std::make_unique<runtime::Worker>(w, models[w], data, *transports[w], job.worker));
  }
  // Each worker runs as a thread; the first failure that is not another's abort is reported.
  std::vector<std::string> errors(n);
  std::vector<char> consequence(n, 0), diverged(n, 0);
  std::vector<WorkerRun> runs(n);
  std::vector<std::thread> threads;
  std::mutex mu;
  std::condition_variable ended;
  std::vector<char> done(n, 0);
  std::optional<std::chrono::steady_clock::time_point> failed_at;
  for (int w = 0; w < n; ++w) {
    threads.emplace_back([&, w] {
      if (!job.cores_of_workers.empty()) pin_to_core(job.cores_of_workers[w]);
      model::use_one_compute_thread();
      try {
        runs[w] = run_worker(*workers[w], *transports[w], job, data, 0, accounts[w]);
      } catch (const WorkerFailure& e) {
        std::string what = e.what();
        {
          std::lock_guard<std::mutex> l(mu);
          errors[w] = what;
          consequence[w] = e.consequence;
          diverged[w] = e.diverged;
          if (!failed_at) failed_at = std::chrono::steady_clock::now();
        }
        hub->abort(what);
      }
      std::lock_guard<std::mutex> l(mu);
      done[w] = 1;
      ended.notify_all();
    });
  }
  auto first_failure = [&] {
    std::string first;
    for (size_t w = 0; w < errors.size(); ++w)
      if (!errors[w].empty() && !consequence[w] && first.empty()) first = errors[w];
    for (const auto& e : errors)
      if (first.empty() && !e.empty()) first = e;
    return first;
  };
  // Once one worker fails the others are aborted and stop within an action. One still running a
  // timeout after it is in a compute that does not return (a forward that loops): a thread cannot
  // be stopped from outside, and joining it hung the job without a word, so the process says
  // why and exits.
  const auto grace = std::chrono::duration<double>(options.timeout_s);
  {
    std::unique_lock<std::mutex> l(mu);
    auto all_done = [&] { return std::all_of(done.begin(), done.end(), [](char d) { return d != 0; }); };
    while (!all_done()) {
      if (!failed_at) {
        ended.wait(l);
        continue;
      }
      if (ended.wait_until(l, *failed_at + std::chrono::duration_cast<std::chrono::steady_clock::duration>(grace),
                           all_done))
        break;
      std::string stuck;
      for (int w = 0; w < n; ++w)
        if (!done[w]) stuck += (stuck.empty() ? "" : ", ") + std::to_string(w);
      print_line_to_stderr(str("pipetrain train: error: pipeline failed: ", first_failure(), "; worker",
                               stuck.find(',') == std::string::npos ? " " : "s ", stuck, " did not stop within ",
                               options.timeout_s, " s (--timeout) of it, in a compute that does not return: exiting"));
      std::_Exit(1);
    }
  }
  for (auto& t : threads) t.join();
  std::string first = first_failure();
  // A diverged loss is the run's, not a worker's failure: said as the run's end says it.
  for (int w = 0; w < n; ++w)
    if (diverged[w]) throw runtime::TrainingDiverged(errors[w]);
  if (!first.empty()) throw RuntimeFailure("pipeline failed: " + first);

  PipelineResult r = result_header(job);
  r.train = runs[r.reporting].train;
  r.train.one_process = true;
  for (int w = 0; w < n; ++w) {
    r.trace.workers[w] = std::move(runs[w].trace);
    r.trace.pauses = w == 0 ? runs[w].pauses : schedule::common_pauses(r.trace.pauses, runs[w].pauses);
  }
  // Recorded on the steady clock: the trace starts at the first action, after every worker built
  // its stages.
  schedule::start_at_first_event(r.trace);
  if (workers_out) *workers_out = std::move(workers);
  return r;
}

PipelineResult train_pipeline(const ModelFactory& factory, const model::DataSplit& data, const plan::Plan& plan,
                              const PipelineOptions& options, std::vector<std::unique_ptr<runtime::Worker>>* workers_out) {
  Job job = make_job(plan, options, *factory(model::LayerSet::none()), data);
  return run_on_threads(job, factory, data, workers_out);
}

int64_t hub_sum_bytes(const Job& job, const profile::Profile& profile) {
  const schedule::Schedule& s = *job.typical;
  int64_t bytes = 0;
  for (int st = 0; st < s.num_stages; ++st)
    if (s.replicas(st) > 1) bytes += profile::parameter_bytes(profile, s.stage_layers[st]);
  return bytes;
}

}  // namespace pt::job
