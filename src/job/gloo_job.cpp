#include "job/gloo_job.h"

#include <algorithm>
#include <csignal>
#include <map>
#include <numeric>
#include <set>

#include "job/core_pinning.h"
#include "job/job_digest.h"
#include "job/trace_gather.h"
#include "job/worker_data.h"
#include "job/worker_runner.h"
#include "model/memory_meter.h"
#include "plan/split_ties.h"
#include "runtime/checkpoint_lock.h"
#include "runtime/shm_allreduce.h"
#include "runtime/shm_channel.h"
#include "runtime/tied_gradients.h"

namespace pt::job {

namespace {
// The pairs of workers that exchange tensors: the schedule's sends and the evaluation's chain of
// each stage's first replica; with `losses`, the loss lists a replicated last stage sends its
// reporter too.
std::vector<std::pair<int, int>> talking_pairs(const schedule::Schedule& s, int reporter, bool losses) {
  std::set<std::pair<int, int>> pairs;
  auto add = [&](int a, int b) {
    if (a != b) pairs.insert({std::min(a, b), std::max(a, b)});
  };
  for (const auto& list : s.actions)
    for (const auto& a : list)
      if (schedule::is_p2p(a.kind)) add(a.worker, a.peer);
  for (int st = 1; st < s.num_stages; ++st) add(s.stage_workers[st - 1][0], s.stage_workers[st][0]);
  for (int w : s.stage_workers.back())
    if (losses) add(w, reporter);
  return {pairs.begin(), pairs.end()};
}

// A worker's failure, said on stderr before the other workers are told: their exits make the
// launcher stop this one (SIGTERM), which ended it before it said why in 2 of 6 runs of a model
// whose forward threw; the others only said that it aborted the job.
struct ToldFailure : RuntimeFailure {
  using RuntimeFailure::RuntimeFailure;
};

// `wait_s` > 0: it failed before the rendezvous, which is told (the others waited its timeout).
[[noreturn]] void told_then_abandoned(runtime::GlooTransport* transport, const std::string& what, double wait_s) {
  print_line_to_stderr(str("pipetrain ", what));
  if (transport) transport->abandon(what);
  if (wait_s > 0) runtime::tell_rendezvous_of_failure(what, wait_s);
  throw ToldFailure(what);
}

}  // namespace

std::vector<int64_t> shared_memory_per_worker(const Job& job, const std::vector<int64_t>& gradients,
                                              const std::vector<profile::Tie>& ties) {
  const schedule::Schedule& s = *job.typical;
  std::vector<int64_t> bytes(static_cast<size_t>(s.num_workers()), 0);
  for (auto [a, b] : talking_pairs(s, job.reporting, false)) {
    bytes[static_cast<size_t>(a)] += 2 * static_cast<int64_t>(runtime::ShmChannel::kRingBytes);
    bytes[static_cast<size_t>(b)] += 2 * static_cast<int64_t>(runtime::ShmChannel::kRingBytes);
  }
  for (const auto& group : s.stage_workers) {
    if (group.size() < 2) continue;
    for (int w : group) {
      int64_t message = gradients.at(static_cast<size_t>(w));
      if (job.worker.bucket_bytes > 0) message = std::min(message, job.worker.bucket_bytes);
      bytes[static_cast<size_t>(w)] += runtime::ShmAllreduce::touched_bytes(static_cast<int>(group.size()), message);
    }
  }
  // A group of workers is one region, whichever ties it sums, in tie order each step (their
  // gradients in fp32, and the flag of whether a backward reached them: one element more).
  std::vector<std::vector<int>> layers;
  for (const auto& t : ties) layers.push_back(t.layers);
  std::map<std::vector<int>, std::vector<int64_t>> tie_groups;
  for (const plan::SplitTie& t : plan::split_ties(layers, s.stage_layers, s.stage_workers))
    if (t.exchanges()) tie_groups[t.workers].push_back(ties[t.group].bytes + 4);
  // Clipping, the group of every worker also sums the gradients' norm each step: its rounds'
  // parity shifts, and each set of slots comes to hold the longest chunk (a Llama's tie on 2
  // stages: 16 MiB measured where one set held 8 without clipping; evaluations' pauses between
  // segments left it at 8).
  std::vector<int> everyone(static_cast<size_t>(s.num_workers()));
  std::iota(everyone.begin(), everyone.end(), 0);
  const bool shifted = job.options.train.sgd.clip_grad_norm > 0 && s.flush;
  for (const auto& [group, messages] : tie_groups) {
    const int members = static_cast<int>(group.size());
    const int64_t touched =
        group == everyone && shifted
            ? runtime::ShmAllreduce::touched_bytes(members, *std::max_element(messages.begin(), messages.end()))
            : runtime::ShmAllreduce::touched_bytes(members, messages);
    for (int w : group) bytes[static_cast<size_t>(w)] += touched;
  }
  return bytes;
}

namespace {

// `releasable`: `data` itself, where it is this process's own to release what the worker's
// stages never read (once the workers have agreed on all of it); null: kept whole.
PipelineResult run_gloo_worker_on(const Job& job, const ModelFactory& factory, const model::LayeredModel& described,
                                  const model::DataSplit& data, model::DataSplit* releasable,
                                  const runtime::GlooConfig& config, std::unique_ptr<runtime::Worker>* worker_out,
                                  const std::string& trace_path) {
  // A peer that dies leaves a closed socket; writing to it must fail the transfer, not kill us.
  std::signal(SIGPIPE, SIG_IGN);
  const PipelineOptions& options = job.options;
  const schedule::Schedule& typical = *job.typical;
  std::string action = "setup";
  std::unique_ptr<runtime::GlooTransport> transport;
  std::unique_ptr<runtime::Worker> worker;
  // Before the transport starts its threads, which take this one's core with it.
  if (config.rank >= 0 && config.rank < static_cast<int>(job.cores_of_workers.size())) pin_to_core(job.cores_of_workers[config.rank]);
  try {
    if (job.workers() != config.world_size)
      throw ConfigError(str("the plan needs ", job.workers(), " workers but the gloo job has ", config.world_size,
                            " (WORLD_SIZE)"));
    std::unique_ptr<runtime::CheckpointLock> lock;
    if (config.rank == 0 && !options.checkpoint.dir.empty())
      lock = std::make_unique<runtime::CheckpointLock>(options.checkpoint.dir);
    runtime::GlooConfig c = config;
    c.timeout_s = options.timeout_s;
    c.rendezvous_timeout_s = options.rendezvous_timeout_s;
    c.cluster = options.cluster;
    action = "rendezvous";
    transport = std::make_unique<runtime::GlooTransport>(c);
    action = "checking that the workers agree";
    transport->check_agreement(job_digest(job, described, data));
    if (releasable) release_unread_data(job, config.rank, *releasable);
    action = "creating all-reduce groups";
    std::vector<std::vector<int>> groups;
    for (auto g : typical.stage_workers) {
      std::sort(g.begin(), g.end());
      groups.push_back(g);
    }
    for (auto& g : runtime::TiedGradients::worker_groups(described.tie_groups(), typical)) groups.push_back(g);
    if (options.train.sgd.clip_grad_norm > 0 && typical.flush) {  // the whole model's gradient norm (worker.h)
      std::vector<int> everyone(typical.num_workers());
      std::iota(everyone.begin(), everyone.end(), 0);
      groups.push_back(everyone);
    }
    transport->prepare_groups(groups);
    auto pairs = talking_pairs(typical, job.reporting, true);
    transport->prepare_channels(pairs);

    action = "building the model";
    auto account = std::make_shared<model::MemoryAccount>();
    auto model = build_worker_model(factory, job, config.rank, account);
    worker = std::make_unique<runtime::Worker>(config.rank, model, data, *transport, job.worker);
    action = "training";
    // Absolute steady-clock times: the launcher aligns the workers' traces.
    WorkerRun run = run_worker(*worker, *transport, job, data, 0, account);
    PipelineResult r = result_header(job);
    r.train = run.train;
    r.train.one_host = transport->one_host();
    r.trace.workers[config.rank] = std::move(run.trace);
    r.trace.pauses = std::move(run.pauses);
    if (job.gather_traces) {
      action = "gathering the traces";
      gather_traces(*transport, job.reporting, r.trace);
    }
    if (!trace_path.empty()) {  // its own part (the launcher merges them); the reporter may hold every worker's
      schedule::Trace part = r.trace;
      for (int w = 0; w < part.num_workers(); ++w)
        if (w != config.rank) part.workers[w].clear();
      // Said after the report, as a threads run says it: failing here, a full disk lost the
      // run's whole report (its steps, loss, accuracy, memory and throughput).
      try {
        schedule::write_trace(part, trace_path + ".worker" + std::to_string(config.rank));
      } catch (const Error& e) {
        r.trace_unwritten = e.what();
      }
    }
    // Each process's peak RSS once the traces are gathered and written, which the reporter's
    // grows by most: read at the end of training, w0 printed 153.9 MiB of its 156.3.
    action = "the peak RSS's gathering";
    std::vector<int64_t> rss = gather_peaks(*transport, model::process_peak_rss_bytes());
    std::vector<int64_t> shared = gather_peaks(*transport, model::process_shared_memory_bytes());
    if (!r.train.peak_rss_bytes.empty()) r.train.peak_rss_bytes = rss, r.train.shared_memory_bytes = shared;
    for (auto [a, b] : pairs)
      if (a == config.rank || b == config.rank) r.shared_memory |= transport->has_channel(a == config.rank ? b : a);  // merge_worker_traces keeps what every worker's cover
    // Wait for every worker before tearing down the connections a peer may still be reading.
    action = "finishing";
    transport->barrier();
    if (worker_out) *worker_out = std::move(worker);
    return r;
  } catch (const WorkerFailure& e) {
    told_then_abandoned(transport.get(), e.what(), 0);
  } catch (const std::exception& e) {
    told_then_abandoned(transport.get(), str("worker ", config.rank, " at ", action, ": ", e.what()),
                        action == "setup" && !dynamic_cast<const runtime::RankTaken*>(&e)
                            ? std::min(60.0, options.rendezvous_timeout_s)
                            : 0);
  }
}

}  // namespace

PipelineResult run_gloo_worker(const Job& job, const ModelFactory& factory, const model::LayeredModel& described,
                               model::DataSplit& data, const runtime::GlooConfig& config,
                               std::unique_ptr<runtime::Worker>* worker_out, const std::string& trace_path) {
  return run_gloo_worker_on(job, factory, described, data, &data, config, worker_out, trace_path);
}

PipelineResult run_gloo_worker(const ModelFactory& factory, const model::DataSplit& data, const plan::Plan& plan,
                               const PipelineOptions& options, const runtime::GlooConfig& config,
                               std::unique_ptr<runtime::Worker>* worker_out) {
  std::shared_ptr<model::LayeredModel> described;
  Job job;
  try {
    described = factory(model::LayerSet::none());
    job = make_job(plan, options, *described, data, config.rank == 0);
  } catch (const std::exception& e) {
    throw RuntimeFailure(str("worker ", config.rank, " at setup: ", e.what()));
  }
  return run_gloo_worker_on(job, factory, *described, data, nullptr, config, worker_out, "");
}

int train_with_gloo(const Job& job, const ModelFactory& factory, const model::LayeredModel& described,
                    model::DataSplit& data, const std::string& trace_path,
                    const std::function<void(const PipelineResult&)>& on_result, bool started_apart) {
  int rank = -1;
  PipelineResult r;
  try {
    runtime::GlooConfig config = runtime::gloo_config_from_env();
    rank = config.rank;
    // Started by torchrun or mpirun, each worker is given its flags apart: one given --metrics
    // that does not report wrote nothing and said nothing (this launcher's workers stay quiet).
    const std::string& metrics = job.options.train.metrics_path;
    if (started_apart && !metrics.empty() && rank != job.reporting)
      print_line_to_stderr(str("note: --metrics ", metrics, ": worker ", rank, " does not report; worker ", job.reporting,
                               " (the last stage's first replica) writes the metrics"));
    r = run_gloo_worker(job, factory, described, data, config, nullptr, trace_path);
  } catch (const ToldFailure&) {
    return 1;
  } catch (const std::exception& e) {
    print_line_to_stderr(str("pipetrain ", rank < 0 ? "worker: " : "", e.what()));
    return 1;
  }
  // The job is over: what the report throws (a diverged loss) is the command's error, said as a
  // threads run says it ("pipetrain train: error: training diverged ...", not "pipetrain training ...").
  if (rank == r.reporting && on_result) {
    if (static_cast<size_t>(rank) < r.train.peak_rss_bytes.size())  // its own, to the report
      r.train.peak_rss_bytes[rank] = std::max(r.train.peak_rss_bytes[rank], model::process_peak_rss_bytes());
    on_result(r);
  }
  if (!r.trace_unwritten.empty()) {
    // The launcher's merge then names the part missing and fails the run; a worker started apart
    // fails itself.
    print_line_to_stderr(str("pipetrain worker ", rank, ": --trace: ", r.trace_unwritten));
    if (started_apart) return 1;
  }
  return 0;
}

}  // namespace pt::job
