#pragma once
// Metrics from a Trace, simulated or measured alike (this library does not link the
// simulator): time per minibatch, throughput, bubble fraction, peak memory, bytes per link.
//
// Time per minibatch: a trace of one minibatch (synchronous schedules) takes its makespan.
// A trace of K >= 2 minibatches (asynchronous schedules, or a runtime repeating a synchronous
// one) measures the steady state: with done(k) the end of the k-th minibatch to finish (its
// last compute; replicated stages finish them out of order), the window is
// [done(e), done(K-1-e)] with e = K/3 (asynchronous schedules: at least workers / microbatches
// and the most minibatches in flight at once, which warm-up and drain each span; they fill and
// drain at each of a measured run's pauses too, so e and K count in its longest segment),
// shortened to whole periods of the steady state (the least common multiple of the replica counts of the
// stages whose replicas take whole minibatches in turn; 1 where they split each minibatch),
// and the time per minibatch its length over the minibatches finished in it, which leaves
// warm-up and drain out. A trace too short for a whole period there is measured whole (an upper
// bound: warm-up and drain included; `steady` is false).
// Bubble fraction of a worker: the part of the window in which it runs no compute (F, B, W)
// and no optimizer step (ST: work, not a wait); all-reduce waits count as bubble. Memory: peak stashed activation bytes plus parameter bytes
// x weight versions of its stages (gradients and optimizer state are not counted).
#include <cstdint>
#include <string>
#include <vector>

#include "core/json_doc.h"
#include "schedule/trace.h"

namespace pt::metrics {

struct WorkerMetrics {
  double busy_ms = 0;            // compute and optimizer steps within the window
  double bubble_fraction = 0;
  int peak_stash = 0;            // microbatches stashed at once
  int64_t peak_activation_bytes = 0;
  int weight_versions = 1;       // most versions alive on one of its stages
  int64_t weight_bytes = 0;      // sum over its stages of parameter bytes x versions
  int64_t peak_memory_bytes = 0; // peak_activation_bytes + weight_bytes
};

struct LinkBytes {
  int from = 0;
  int to = 0;
  int64_t bytes = 0;
};

struct Metrics {
  std::string schedule;
  std::string source;
  int minibatches = 1;           // minibatches in the trace
  bool steady = false;           // the window is a steady state (not the whole trace)
  double window_start_ms = 0;
  double window_end_ms = 0;
  double paused_ms = 0;          // of the window, the trace's pauses (Trace::pauses): left out
  double ms_per_minibatch = 0;
  // Whether the window's time per minibatch is at least the busiest worker's compute and steps
  // per minibatch over the whole trace (each kind and stage at its median time), as every steady
  // state is. An asynchronous pipeline whose
  // bottleneck's queue is still filling runs its first minibatches faster than that (VGG-16 9-1
  // on 16 workers with a deferred step: 38.34 ms per minibatch over the default 63 minibatches,
  // 39.56 from 126 on, its last stage's compute); a longer replay settles it.
  bool settled = true;
  // Whether the window's gaps between completions repeat (every c of them, seen at least twice),
  // so that it measures whole periods of a steady state. A replay can sit in a transient that
  // the rule above passes: GNMT-Large 1x9-2-4-1 on 16 workers finishes minibatches in a pattern
  // of 40 from about the 30th on, and its default 60 minibatches measured 75.34 ms per minibatch
  // where it runs at 77.3 (-2.5%); VGG-16 on 4 workers 188.1 where it runs at 185.3 (+1.5%).
  // (A window can also repeat in a plateau before the steady state: GNMT-Large 1x9-2-4-1
  // @LSTM runs at 79.90 ms from the 10th minibatch to the 42nd, at 80.37 from the 48th on.)
  bool periodic = true;
  double samples_per_s = 0;      // batch_size / ms_per_minibatch (0 when batch size unknown)
  double bubble_fraction = 0;    // mean over workers
  std::vector<WorkerMetrics> workers;
  std::vector<LinkBytes> links;  // point-to-point bytes per directed link, whole trace
  int64_t allreduce_bytes = 0;   // gradient bytes all-reduced, summed over collectives
  // Whether the trace holds the bytes its memory columns need: a simulated one does; the
  // runtime's records each forward's output alone (not what autograd keeps for the backward)
  // and no parameter bytes, so a measured run's memory is train's report, not these columns.
  bool memory_known = true;
  int64_t peak_memory_bytes() const;  // max over workers
};

// kTiming leaves out memory, link bytes and all-reduce bytes (zero in the result): the planner
// ranks hundreds of replays by their time alone, and memory from the memory model.
enum class Detail { kAll, kTiming };
Metrics compute_metrics(const schedule::Trace& t, Detail detail = Detail::kAll);

json to_json(const Metrics& m);
// A human-readable report: totals, then one line per worker, then the links.
std::string format_metrics(const Metrics& m);

}  // namespace pt::metrics
