#pragma once
// `pipetrain calibrate` over a job's own transport (issue 33): every worker of the job calls
// measure_cluster with its transport; per cluster level one pair of workers that talks over it
// (worker 0 and the first worker of the next unit) times messages to and fro over sizes from
// 1 KiB up, while the others wait at a barrier; then groups all-reduce. The fit and the file
// are plan/link_fit.h's.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "plan/cluster.h"
#include "plan/link_fit.h"
#include "runtime/transport.h"

namespace pt::job {

struct CalibrationOptions {
  std::vector<int64_t> sizes;            // message sizes, bytes (default: 1 KiB .. 64 MiB, x4)
  int64_t bytes_per_size = 64 << 20;     // a size repeats about this many bytes' worth, 3..30 times
  std::function<void(const std::string&)> progress;  // worker 0's lines while it runs
  bool one_host = false;  // every worker runs on this host: measure how two share a core (Measured::core_share)
};
std::vector<int64_t> default_calibration_sizes();

struct Measured {
  std::vector<plan::LevelCalibration> levels;  // points, each fitted
  std::vector<plan::AllreduceCheck> allreduces;  // measured; modelled_ms left for the caller
  double action_us = 0;  // measure_action_us, on worker 0
  std::vector<double> core_rates;  // measure_core_rates, on worker 0 (plan::Cluster::core_rates)
  double core_rates_spread = 0;    // and how far its rounds disagreed
  double core_share = 1;           // measure_core_share, on worker 0 where one_host (plan::Cluster::core_share)
  int64_t process_bytes = 0;       // resident_besides_tensors on worker 0, before measure_core_rates (gloo's)
  std::vector<double> core_speeds;  // measure_core_speeds, on worker 0
};

// What this process holds resident besides tensors, once its transfers and the action time are
// measured (measure_cluster, worker 0; plan::Cluster::process_bytes): LibTorch, the transport's connections, what a pipeline run left;
// not the blocks its messages freed for malloc to reuse (a training process reuses them), nor the
// shared memory its transfers touched.
int64_t resident_besides_tensors();

// The host's time per action of a worker (a forward, a backward or a step), compute aside
// (plan::Cluster::action_us): a one-stage pipeline of two layers that compute nothing
// (model/emulated_layer.h), trained on threads for `steps` minibatches of `microbatches`
// microbatches, the span of its trace over the actions in it, median of 3 runs.
double measure_action_us(int steps = 30, int microbatches = 8);

// The rate of each of n computes running at once on this host's cores, relative to one alone,
// for n = 1..most (plan::Cluster::core_rates; the first is 1): n threads each train mnist-cnn's
// layers on a microbatch of 16 for `seconds`, all started together; per n, the mean of their
// iterations per second over one thread's alone in the same round, median of 5 rounds.
// `spread`, where given: the largest (highest - lowest) / median of the rounds over the n.
std::vector<double> measure_core_rates(int most, double seconds = 0.25, double* spread = nullptr);

// Each of the cores this process may use (usable_cpu_ids' order), alone, against the fastest (1):
// one thread pinned to it trains mnist-cnn's layers on a microbatch of 16 for `seconds` (less on
// a host of many: about 2 s in all), cores in turn, median of 3 rounds; none under 2 cores. A host's cores need not run alike: on this machine's 2 (a VM's) the same profile pinned
// to core 0 took 13.3 ms and to core 1 11.2 (twice), minutes later 11.9 and 11.1, and a worker on
// the slower core fell that far behind its profile. Printed by calibrate, which the prediction
// does not use: which worker the kernel puts on which core is its own choice.
std::vector<double> measure_core_speeds(int cores, double seconds = 0.2);

// What one core gives two workers of the job pinned to it at once (workers 0 and 1: threads or
// processes, as the transport runs them), against worker 0 alone on it (plan::Cluster::core_share):
// each trains mnist-cnn's layers on a microbatch of 16 for `seconds`; twice the rate of worker 0
// among the two over its rate alone, at most 1, median of 3 rounds. A collective: every worker of
// the transport calls it; worker 0 gets the share, the others 1.
double measure_core_share(runtime::Transport& t, double seconds = 0.3);

// Runs on every worker of the job with the same `shape` (its levels' fan-outs; their rates are
// what is measured) and options; returns the measurements on worker 0 (the others: empty). Each
// point is the median over its repetitions of half a round trip. Worker 0 measures the host's
// time per action last, alone. Throws what the transport throws.
Measured measure_cluster(runtime::Transport& t, const plan::Cluster& shape, const CalibrationOptions& options);
// The pairs of workers measure_cluster's ping-pongs use, one per level of `shape` with more than
// one unit below it: the first workers of its first two units.
std::vector<std::pair<int, int>> calibration_pairs(const plan::Cluster& shape);

}  // namespace pt::job
