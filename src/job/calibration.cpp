#include "job/calibration.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "core/error.h"
#include "core/median.h"
#include "core/host_allocator.h"
#include "core/units.h"
#include "model/emulated_layer.h"
#include "model/memory_meter.h"
#include "model/zoo.h"
#include "job/core_pinning.h"
#include "job/threads_job.h"

namespace pt::job {

using runtime::PendingTransfer;
using runtime::Transport;

std::vector<int64_t> default_calibration_sizes() {
  std::vector<int64_t> sizes;
  for (int64_t s = 1 << 10; s <= (int64_t{64} << 20); s *= 4) sizes.push_back(s);
  return sizes;
}

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }


// Repetitions of a size: about bytes_per_size in all, at least 3 and at most 30.
int repetitions(int64_t bytes, const CalibrationOptions& options) {
  return static_cast<int>(std::clamp<int64_t>(options.bytes_per_size / std::max<int64_t>(bytes, 1), 3, 30));
}

// Ping-pong between a and b; half the round trip's median on a, per size (b returns nothing).
// Only worker a times, and prints progress where it has a callback (worker 0's). Each receive is
// posted before the message it takes is sent, as the runtime posts its receives ahead: gloo
// sends a message only once its receiver has said it is ready, so a receive posted late added a
// trip to every message (2 ms held on each packet of the testbed's links read as 4.4 ms a message).
std::vector<plan::LinkPoint> ping_pong(Transport& t, int a, int b, const CalibrationOptions& options, int64_t tag) {
  std::vector<plan::LinkPoint> points;
  int me = t.rank(), peer = me == a ? b : a;
  for (int64_t bytes : options.sizes) {
    Transport::Known known{{bytes / 4}, torch::kFloat32};
    torch::Tensor message = torch::zeros({bytes / 4});
    std::vector<double> trips;
    int reps = repetitions(bytes, options);
    std::shared_ptr<PendingTransfer> next;  // b: the next message's receive
    if (me == b) next = t.irecv_known(peer, tag, known);
    for (int i = -1; i < reps; ++i) {  // the first goes untimed: channels open, buffers warm
      auto start = Clock::now();
      if (me == a) {
        auto back = t.irecv_known(peer, tag + 1, known);
        t.isend_known(message, peer, tag)->wait();
        back->wait();
      } else {
        next->wait();
        if (i + 1 < reps) next = t.irecv_known(peer, tag, known);
        t.isend_known(message, peer, tag + 1)->wait();
      }
      if (i >= 0) trips.push_back(ms_since(start));
    }
    if (me == a) {
      points.push_back({static_cast<double>(bytes), median(trips) / 2});
      if (options.progress)
        options.progress(str("workers ", a, "-", b, ": ", human_bytes(static_cast<double>(bytes)), " in ",
                       points.back().ms, " ms one way (", reps, " round trips)"));
    }
    tag += 2;
  }
  return points;
}

}  // namespace

std::vector<std::pair<int, int>> calibration_pairs(const plan::Cluster& shape) {
  std::vector<std::pair<int, int>> out;
  for (int level = 0; level < static_cast<int>(shape.levels.size()); ++level)
    if (shape.levels[level].fan_out >= 2) out.emplace_back(0, shape.workers_per_unit_below(level));
  return out;
}

Measured measure_cluster(runtime::Transport& t, const plan::Cluster& shape, const CalibrationOptions& options) {
  CalibrationOptions sized = options;
  if (sized.sizes.empty()) sized.sizes = default_calibration_sizes();
  for (auto& s : sized.sizes) s = std::max<int64_t>(4, s / 4 * 4);  // whole floats
  Measured out;
  int64_t tag = 1 << 20;  // clear of anything a job sends
  t.barrier();
  std::vector<std::pair<int, int>> pairs = calibration_pairs(shape);
  for (int level = 0; level < static_cast<int>(shape.levels.size()); ++level) {
    if (shape.levels[level].fan_out < 2) continue;
    auto [a, b] = pairs.front();
    pairs.erase(pairs.begin());
    if (t.rank() == a || t.rank() == b) {
      auto points = ping_pong(t, a, b, sized, tag);
      if (t.rank() == 0) {
        plan::LevelCalibration lc{level, a, b, points, {}};
        lc.fit = plan::fit_alpha_beta(points);
        out.levels.push_back(lc);
      }
    }
    tag += 2 * static_cast<int64_t>(sized.sizes.size());
    t.barrier();
  }
  // All-reduces: every worker, and (with several levels) the first unit of the innermost level.
  std::vector<std::vector<int>> groups;
  std::vector<int> all(t.world_size());
  for (int r = 0; r < t.world_size(); ++r) all[r] = r;
  if (all.size() > 1) groups.push_back(all);
  if (shape.levels.size() > 1 && shape.levels[0].fan_out > 1 && shape.levels[0].fan_out < t.world_size()) {
    std::vector<int> unit(shape.levels[0].fan_out);
    for (int r = 0; r < shape.levels[0].fan_out; ++r) unit[r] = r;
    groups.push_back(unit);
  }
  // 16 KiB too: a ring of small buckets is its steps' latency and the host's time per step,
  // which the large all-reduces hide (ResNet-50 on the 4x4 testbed, fitted to 1 and 16 MiB alone:
  // 0 us per step, so the planner chose 1 MiB buckets, 20 KiB there, and the run took 60% over its
  // simulation). None over the largest message (--max-mb), or that size alone where it is under
  // 16 KiB: 16 MiB over the testbed's delayed links took 2.6 s an all-reduce, 15 s of a
  // calibrate asked for messages of 4 KiB.
  const int64_t largest = *std::max_element(sized.sizes.begin(), sized.sizes.end());
  std::vector<int64_t> reduce_sizes;
  for (int64_t bytes : {int64_t{16} << 10, int64_t{1} << 20, int64_t{16} << 20})
    if (bytes <= largest) reduce_sizes.push_back(bytes);
  if (reduce_sizes.empty()) reduce_sizes.push_back(largest);
  for (const auto& group : groups) {
    bool member = std::find(group.begin(), group.end(), t.rank()) != group.end();
    for (int64_t bytes : reduce_sizes) {
      // Medians of 15 up to 1 MiB: over 2 gloo processes on 2 cores, medians of 5 put 1 MiB at
      // 1.5-3.9 ms from one calibrate to the next. 16 MiB takes seconds on the testbed's links.
      const int rounds = bytes <= (int64_t{1} << 20) ? 15 : 5;
      std::vector<double> times;
      for (int i = -1; i < rounds && member; ++i) {
        std::vector<torch::Tensor> v{torch::ones({bytes / 4})};
        auto start = Clock::now();
        t.allreduce_sum(v, group);
        if (i >= 0) times.push_back(ms_since(start));
      }
      if (t.rank() == 0) out.allreduces.push_back({group, static_cast<double>(bytes), median(times), 0});
      t.barrier();
    }
  }
  if (sized.one_host && t.world_size() > 1) out.core_share = measure_core_share(t);
  if (t.rank() == 0) {
    out.action_us = measure_action_us();
    if (sized.progress) sized.progress(str("the host's time per action: ", out.action_us, " us"));
    // Before the core rates' threads, each an mnist-cnn of its own, leave their allocations
    // behind (7-25 MiB more on 4 gloo processes), which a worker's one computing thread does not.
    out.process_bytes = resident_besides_tensors();
    // Every worker waits at the end barrier: worker 0 computes alone, with threads of its own.
    // Workers on several hosts share no cores: rates of worker 0's host running them all there
    // were taken for theirs (`train` predicted 1069 samples/s for a run of 1810 over 2 hosts).
    if (sized.one_host) out.core_rates = measure_core_rates(t.world_size(), 0.2, &out.core_rates_spread);
    out.core_speeds = measure_core_speeds(usable_cores());
  }
  return out;
}

int64_t resident_besides_tensors() {
  release_freed_host_memory();
  // Not the shared memory calibrate's own transfers touched: a job's differ (its pairs and
  // groups), and the train report models them (shared_memory_per_worker).
  return model::process_rss_bytes() - model::process_shared_memory_bytes();
}

namespace {

// Iterations per second of each of n threads training mnist-cnn's layers at once for `seconds`.
double per_thread_rate(int n, double seconds) {
  std::vector<int64_t> done(n, 0);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false}, stop{false};
  std::vector<std::thread> threads;
  for (int k = 0; k < n; ++k)
    threads.emplace_back([&, k] {
      model::ModelOptions options;
      options.seed = static_cast<uint64_t>(k);
      auto m = model::build_mnist_cnn(options);
      torch::Tensor x = torch::randn({16, 1, 28, 28}), y = torch::randint(0, 10, {16});
      auto iterate = [&] {
        for (auto& p : m->parameters()) p.mutable_grad() = torch::Tensor();
        m->loss(m->forward(x), y).backward();
      };
      iterate();  // warm: the allocator's blocks, the kernels' first calls
      ++ready;
      while (!go) std::this_thread::yield();
      while (!stop) iterate(), ++done[k];
    });
  while (ready < n) std::this_thread::yield();
  go = true;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  double sum = 0;
  for (int64_t d : done) sum += static_cast<double>(d);
  return sum / n / seconds;
}

}  // namespace

double measure_core_share(runtime::Transport& t, double seconds) {
  constexpr int kRounds = 3;
  const int me = t.rank();
  const bool pair = me < 2;
  if (pair) pin_to_core(0);  // the threads per_thread_rate starts inherit it
  std::vector<double> shares;
  for (int round = 0; round < kRounds; ++round) {
    t.barrier();
    const double alone = me == 0 ? per_thread_rate(1, seconds) : 0;
    t.barrier();
    const double together = pair ? per_thread_rate(1, seconds) : 0;
    if (me == 0 && alone > 0) shares.push_back(std::min(1.0, 2 * together / alone));
  }
  if (pair) unpin();
  t.barrier();
  return me == 0 && !shares.empty() ? median(shares) : 1;
}

std::vector<double> measure_core_rates(int most, double seconds, double* spread) {
  // Rounds of every n, each against its own round's one thread alone (a machine's speed drifts
  // between sittings: one measurement of each put 2 threads at 1.11 of one), median per n. Five
  // rounds: a busy spell on the host over some of three put 2 threads on 2 cores at 0.64 of one
  // alone (0.89-1.0 otherwise), and the demo's prediction 30% under what it then measured.
  constexpr int kRounds = 5;
  std::vector<std::vector<double>> by_n(most);
  for (int round = 0; round < kRounds; ++round) {
    double alone = per_thread_rate(1, seconds);
    by_n[0].push_back(1);
    for (int n = 2; n <= most; ++n) by_n[n - 1].push_back(alone > 0 ? per_thread_rate(n, seconds) / alone : 1);
  }
  std::vector<double> rates;
  if (spread) *spread = 0;
  // Never above one alone: a median over 1 (1.04 for 2 threads on 2 cores here) is the noise.
  for (auto& r : by_n) {
    rates.push_back(std::min(1.0, median(r)));
    const auto [lo, hi] = std::minmax_element(r.begin(), r.end());
    if (spread && rates.back() > 0) *spread = std::max(*spread, (*hi - *lo) / median(r));
  }
  return rates;
}

std::vector<double> measure_core_speeds(int cores, double seconds) {
  if (cores < 2) return {};
  constexpr int kRounds = 3;
  // At most about 2 s in all on a host of many cores, never under 50 ms a core.
  seconds = std::max(0.05, std::min(seconds, 2.0 / kRounds / cores));
  struct Unpin {
    ~Unpin() { unpin(); }
  } unpin_after;  // also where a measurement throws
  std::vector<std::vector<double>> rates(static_cast<size_t>(cores));
  for (int round = 0; round < kRounds; ++round)
    for (int c = 0; c < cores; ++c) {
      pin_to_core(c);  // the thread per_thread_rate starts inherits it
      rates[c].push_back(per_thread_rate(1, seconds));
    }
  std::vector<double> speeds;
  for (const auto& r : rates) speeds.push_back(median(r));
  double fastest = speeds.empty() ? 0 : *std::max_element(speeds.begin(), speeds.end());
  for (double& v : speeds) v = fastest > 0 ? v / fastest : 1;
  return speeds;
}

double measure_action_us(int steps, int microbatches) {
  std::vector<model::EmulatedCost> layers(2);
  layers[0].name = "first", layers[1].name = "second";  // no time, one float out per sample
  auto build = [&](const model::LayerSet& held = {}) { return model::build_emulated_model("host", layers, held); };
  model::DataSplit data = model::synthetic_data(*build(), int64_t{steps} * microbatches, 1, 1, 1);
  plan::Plan one;
  one.workers = 1;
  one.stages.push_back({{0, 1}, 1, {0}});
  PipelineOptions options;
  options.schedule = "1f1b";
  options.microbatches = microbatches;
  options.train.batch_size = microbatches;
  options.train.steps = steps;
  options.train.quiet = true;
  options.train.evaluate = false;
  std::vector<double> runs;
  for (int r = 0; r < 3; ++r) {
    PipelineResult ran = train_pipeline(build, data, one, options);
    const auto& events = ran.trace.workers.at(0);
    PT_CHECK(!events.empty(), "the host's pipeline ran no action");
    runs.push_back(1e3 * (events.back().end_ms - events.front().start_ms) / static_cast<double>(events.size()));
  }
  return median(runs);
}

}  // namespace pt::job
