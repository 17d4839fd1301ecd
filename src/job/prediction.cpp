#include "job/prediction.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "core/error.h"
#include "core/units.h"
#include "job/segments.h"
#include "metrics/metrics.h"
#include "referee/replay_ahead.h"
#include "sim/simulator.h"

namespace pt::job {

namespace {

// The calibrated figures a replay on `cores` took for computes at once (Replay::rates): core_rates
// for those on cores of their own, core_share where pinned workers outnumber the cores.
std::string core_figures(const plan::Cluster& c, int workers, int cores, bool pinned) {
  std::string s;
  const int at_once = std::min(workers, cores);
  if (!c.core_rates.empty() && at_once > 1)
    s = str("the cluster's core_rates run ", at_once, " computes at once at ", fixed(c.core_rate(at_once, cores), 3),
            " of a core each");
  if (pinned && workers > cores && c.core_share < 1)
    s += str(s.empty() ? "" : ", and ", "two computes pinned to one core get ", fixed(c.core_share, 3),
             " of it together (core_share)");
  return s;
}

RunPrediction simulate_run(const Job& job, const profile::Profile& p, const plan::Cluster* cluster, int cores = 0) {
  const PipelineOptions& options = job.options;
  RunPrediction r;
  r.workers = job.workers();
  r.cores = cores;
  r.on_cluster = cluster != nullptr;
  // A tensor handed to another thread costs no link time; the host's time per action is the
  // job's --cluster's (calibrate measures it on threads), where it gave one.
  plan::Cluster links = cluster ? *cluster : plan::Cluster::flat(r.workers, std::numeric_limits<double>::infinity());
  if (!cluster) {
    links.action_us = options.cluster.action_us;
    // The cores' rates are the machine's, measured on threads whatever the transport calibrated:
    // a gloo run on a cluster calibrated on threads replayed a core each, 35% over simulate's figure.
    links.core_rates = options.cluster.core_rates, links.host_cores = options.cluster.host_cores;
  }
  r.action_us = links.action_us;
  // Rates measured on another count of cores say nothing of this one's (Cluster::core_rate), as
  // simulate takes them: a file calibrated on 1 core predicted 2 workers on 2 at 0.56 of a core
  // each, 29% under simulate's figure for the same run.
  if (cores > 0 && links.host_cores > 0 && links.host_cores != cores && !links.core_rates.empty())
    r.rates_measured_on = links.host_cores, links.core_rates.clear();
  // The cores are the caller's to say (`cores`): emulated compute waits rather than computes,
  // and the first replay gives each worker a core of its own.
  links.host_cores = 0;
  // Over the default minibatches until the window settles and repeats, as `simulate` replays it.
  auto replay = [&](int on_cores) {
    sim::SimOptions sim_options;
    sim_options.bucket_bytes = options.bucket_bytes;
    sim_options.cores = on_cores;
    // As the runtime pinned them, where they were placed on as many cores as this replay's.
    const auto& placed = job.cores_of_workers;
    if (on_cores > 0 && static_cast<int>(placed.size()) == r.workers &&
        *std::max_element(placed.begin(), placed.end()) < on_cores)
      sim_options.placement = placed;
    auto trace_over = [&](int minibatches) { return sim::simulate(*job.schedule_over(minibatches), p, links, sim_options); };
    double steady = referee::settled_replay([&](int minibatches) {
                      r.trace = trace_over(minibatches);  // the last is the settled one
                      return metrics::compute_metrics(r.trace);
                    }).ms_per_minibatch;
    r.steady_ms = steady;
    if (job.typical->flush || job.segments.empty()) return steady;
    // An asynchronous run fills and drains its pipeline in each segment (an epoch, or up to an
    // evaluation or a checkpoint), which its measured rate counts: its own segments, each
    // replayed whole up to kWholeSegment minibatches and at the steady rate beyond (the steady
    // state alone over-promised a short run: pipedream, 6 steps, 4203 samples/s where a replay
    // of its 6 gives 3707).
    // In whole replica rounds, as the segments are: pipedream's 3-1 replayed 128 of a 201-step
    // run's minibatches, not a multiple of its round of 3, and the run failed after training.
    const int round = static_cast<int>(replica_round(*job.typical, job.plan));
    const int whole_segment = std::max(round, 128 / round * round);
    std::map<int, double> segment_ms;  // by length
    double ms = 0;
    int64_t minibatches = 0;
    for (const auto& seg : job.segments) {
      auto [it, fresh] = segment_ms.try_emplace(seg.minibatches, 0.0);
      if (fresh) {
        int whole = std::min(seg.minibatches, whole_segment);
        schedule::Trace t = trace_over(whole);
        it->second = t.end_ms() - t.start_ms() + steady * (seg.minibatches - whole);
      }
      ms += it->second;
      minibatches += seg.minibatches;
    }
    return ms / static_cast<double>(minibatches);
  };
  r.simulated_ms = replay(0);
  // Computes share the cores where they outnumber them, and where calibrate measured how they
  // slow each other down (core_rates: 2 at once on 2 cores ran at 0.83 each here), as plan and
  // simulate weigh them; the prediction replayed a core each there, 21% faster than the plan.
  bool shared = cores > 0 && (cores < r.workers || !links.core_rates.empty());
  if (shared) {
    r.core_each_ms = r.simulated_ms, r.simulated_ms = replay(cores);
    r.core_figures = core_figures(links, r.workers, cores, !job.cores_of_workers.empty());
  }
  return r;
}

}  // namespace

RunPrediction predict_host_run(const Job& job, const profile::Profile& profile, int cores,
                               const std::string& transport) {
  plan::check_plan_fits(job.plan, profile, "plan");
  const plan::Cluster& cluster = job.options.cluster;
  // A cluster calibrated over this transport (calibrate --workers N [--transport gloo]) measured
  // this very hand-over: its latency, rate and all-reduce terms; otherwise tensors cross for free.
  bool same = cluster.calibrated_over() == transport;
  const plan::Cluster* measured = !cluster.levels.empty() && same ? &cluster : nullptr;
  RunPrediction r =
      simulate_run(job, profile::with_batch_size(profile, job.options.train.batch_size), measured, cores);
  r.calibrated_host = measured != nullptr;
  r.transport = transport;
  return r;
}

RunPrediction predict_emulated_run(const Job& job, const profile::Profile& profile,
                                   const profile::EmulationOptions& emulation, const std::string& transport) {
  plan::check_plan_fits(job.plan, profile, "plan");
  profile::Profile p = profile::as_emulated(profile::with_batch_size(profile, job.options.train.batch_size), emulation);
  const plan::Cluster& cluster = job.options.cluster;
  // Threads hand tensors over in memory whatever the --cluster says (its links are crossed by
  // gloo processes, shaped on the testbed): at 0.1 Gbit/s the prediction was 632 samples/s for a
  // threads run that went at 1,772.
  bool links = !cluster.levels.empty() && transport != "threads";
  return simulate_run(job, p, links ? &cluster : nullptr);
}

std::string RunPrediction::describe(const Job& job) const {
  const PipelineOptions& options = job.options;
  std::string s = options.schedule;
  if (options.schedule != "pipedream")
    s += str(", ", options.microbatches, options.microbatches == 1 ? " microbatch" : " microbatches");
  if (schedule::is_interleaved(options.schedule)) s += str(", ", options.chunks, " chunks");
  const std::string w = workers == 1 ? " worker" : " workers";
  std::string on = transport == "threads" ? w + " on threads" : str(w, " as ", transport, " processes");
  s += str(", ", workers,
           calibrated_host          ? on + ", their hand-over as calibrated (--cluster)"
           : on_cluster             ? w + " on the job's --cluster"
           : transport == "threads" ? on + ", transfers in memory"
                                    : on + ", their transfers not charged: no --cluster calibrated over " + transport);
  auto rate = [&](double ms) { return std::llround(options.train.batch_size * 1000.0 / ms); };
  if (core_each_ms > 0)
    s += str(" sharing this machine's ", cores, " cores; ", rate(core_each_ms), " samples/s with a core each");
  if (rates_measured_on > 0)
    s += str("; the --cluster's core_rates, measured on its host_cores ", rates_measured_on, ", left out on this ",
             "machine's ", cores, " (calibrate here to have them)");
  // Without it a model of small layers is simulated as if the runtime's own work were free: an
  // exported 3-layer model of 0.06 ms a minibatch measured 0.25 of its simulation on 3 threads,
  // 0.92 with a calibrated --cluster.
  if (action_us <= 0) s += ", the host's time per action not charged (a --cluster from `pipetrain calibrate` charges it)";
  // The trace written is the steady state's; the figure weighs the segments' fill and drain too.
  if (steady_ms > 0 && std::abs(steady_ms - simulated_ms) > 0.005 * simulated_ms)
    s += str("; its segments' fill and drain included: ", rate(steady_ms),
             " samples/s in the steady state, the replay --prediction-trace holds");
  return s;
}

}  // namespace pt::job
