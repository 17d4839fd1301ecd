#pragma once
// Trace: what ran, per worker, with times. Both the simulator (src/sim) and the runtime
// (src/runtime) produce it and neither includes the other; metrics (src/metrics) read it.
//
// Times are milliseconds from the start of the run. Compute events (F, B, W) span the compute;
// a transfer appears on both workers (SA/SG on the sender, RA/RG on the receiver) spanning the
// time the bytes were on the wire; AllReduce spans the collective; Step its update.
// `bytes`: for F, the activation bytes stashed until the backward; for sends/receives, the bytes
// moved; for AllReduce, the gradient bytes reduced; 0 when unknown.
// Microbatch indices are global: a runtime that repeats a synchronous schedule records
// microbatch k of its r-th minibatch as r * microbatches + k (and AllReduce/Step ids as r).
//
// JSON: {"format": "pipetrain.trace/1", "source": "simulated" | "measured" | "emulated",
//        "schedule": "1f1b", "stages": 4, "microbatches": 8, "batch_size": 64,
//        "stage_parameter_bytes": [...] (optional),
//        "workers": [[{"action": "0F0", "start_ms": 0, "end_ms": 1.5, "bytes": 1024}, ...], ...]}
// with "chunk" on events of chunks other than 0.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/json_doc.h"
#include "schedule/action.h"

namespace pt::schedule {

struct TraceEvent {
  Action action;
  double start_ms = 0;
  double end_ms = 0;
  int64_t bytes = 0;
};

struct Trace {
  std::string source = "simulated";  // "simulated", "measured" or "emulated"
  std::string schedule;              // the schedule kind
  int num_stages = 1;
  int microbatches = 1;              // per minibatch
  int weight_delay = 0;              // the schedule's (Schedule::weight_delay): versions kept
  // Whether the run predicted weights (Schedule::predicts_weights, with the runtime's
  // weight_prediction on and an optimizer with a velocity): then its copies, not weight_delay's
  // versions, are what it kept.
  bool predicted_weights = false;
  int64_t batch_size = 0;            // samples per minibatch (the profile's batch size)
  std::vector<int64_t> stage_parameter_bytes;     // [stage], optional (empty when unknown)
  std::vector<std::vector<TraceEvent>> workers;   // [worker] -> events in start order
  // When no worker trained (a measured run's test-set evaluations and checkpoints between
  // segments), sorted and disjoint: the steady state leaves them out (metrics.h), as train's
  // own samples/s does. An epoch's evaluation of mnist-cnn took 5.9 s, and a 2-epoch run's
  // steady state read 23.2 ms per minibatch where it trained at 14.0.
  std::vector<std::pair<double, double>> pauses;

  int num_workers() const { return static_cast<int>(workers.size()); }
  double start_ms() const;  // earliest start
  double end_ms() const;    // latest end
};

inline constexpr int kTraceVersion = 1;

json to_json(const Trace& t);
Trace trace_from_json(const json& doc, const std::string& source);
Trace read_trace(const std::string& path);
// A whole run's trace (not one worker's part) has every microbatch it names on every stage, and
// every microbatch of each minibatch it names; FormatError naming `source`, the stage and the
// microbatch. Metrics of a trace missing a stage's work printed the full run's throughput.
void check_complete(const Trace& t, const std::string& source);
void write_trace(const Trace& t, const std::string& path);  // atomic

// The time both lists of pauses (sorted, disjoint) cover: the job paused while no worker trained.
std::vector<std::pair<double, double>> common_pauses(const std::vector<std::pair<double, double>>& a,
                                                     const std::vector<std::pair<double, double>>& b);

// Moves every event and pause of a trace recorded on one steady clock so that the earliest event
// is at 0 (no event: unchanged).
void start_at_first_event(Trace& t);

// Joins the per-worker traces that the workers of one host wrote (trace_path.worker<r>, each
// holding its own worker's events on the host's steady clock) into one trace at trace_path,
// with the earliest event at 0, and removes the parts once it is written. A part that cannot
// be read, or holds events of another worker, is refused with every part left in place.
void merge_worker_traces(int world_size, const std::string& trace_path);

}  // namespace pt::schedule
