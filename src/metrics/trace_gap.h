#pragma once
// Where two traces of one run part: each worker's computes (F, B, W) and steps (ST), kind by
// kind, and the rest of its minibatch, in each trace's steady window (metrics.h), per minibatch.
// Made for a measured run against the simulation of it (train --prediction-trace), so that a
// ratio of measured to simulated throughput can be read as "these actions ran slower than the
// profile timed them" or "the workers waited longer than simulated"; any two traces of the same
// schedule, stages, microbatches and workers compare.
//
// Every worker's minibatch is the same length in a trace (its window over its minibatches), so
// for each worker: the gap in time per minibatch = the gap in its computes and steps + the gap
// in the time outside them (waits for its inputs, transfers, all-reduce, the host's own work
// between actions). The worker with the least time outside its computes in the first trace set
// the pace; its split of the gap says which of the two the run lost its time to. The first trace's
// actions are also timed apart by what the other workers did meanwhile (CoRun).
#include <array>
#include <string>
#include <vector>

#include "core/json_doc.h"
#include "schedule/action.h"
#include "schedule/trace.h"

namespace pt::metrics {

// One kind of action on one worker in one trace's window.
struct ActionTimes {
  double per_minibatch_ms = 0;  // the time its actions took, per minibatch
  double count_per_minibatch = 0;
  double mean_ms = 0;           // one action's, on average (0: none ran)
};

// A kind of action in the first trace's window, split by what the other workers did meanwhile:
// "alone", none of them computed (their F, B and W, not their steps, under 5% of its time),
// "beside", one or another computed throughout (over 95%). Meant for workers sharing one host. A compute that slows beside another core's (a shared cache, memory bandwidth) shows
// here, which the simulator, charging each action its profiled time, does not model.
struct CoRun {
  double alone_ms = 0, beside_ms = 0;  // medians (0: none)
  int alone = 0, beside = 0;           // how many
};

struct WorkerGap {
  std::vector<schedule::ActionKind> kinds;          // F, B, W, ST as either trace ran them
  std::vector<std::array<ActionTimes, 2>> times;    // [kind][trace]
  std::vector<CoRun> co_run;                        // [kind], the first trace's
  std::array<double, 2> compute_ms{};               // per minibatch, every kind above
  std::array<double, 2> outside_ms{};               // per minibatch, the rest
};

struct TraceGap {
  // What the report calls each: its source ("measured", "simulated") where they differ, else its file.
  std::array<std::string, 2> names;
  std::array<double, 2> ms_per_minibatch{};
  // The trace holds more than one minibatch but no steady state (no middle window, or one that
  // had not settled, Metrics::settled): its whole length was measured, fill and drain included
  // (one minibatch of a flushing schedule is its period).
  std::array<bool, 2> whole_trace{};
  // The first trace's time per minibatch over its whole length (its pauses left out): its start,
  // fills and drains included.
  double first_whole_ms = 0;
  std::vector<WorkerGap> workers;
  int pace_worker = 0;                 // least time outside its computes in the first trace
};

// `first` against `second`, read from `first_file` and `second_file`. ConfigError naming both
// files and the field where they are not traces of one run's schedule (schedule, stages,
// microbatches, workers, batch size).
TraceGap trace_gap(const schedule::Trace& first, const std::string& first_file, const schedule::Trace& second,
                   const std::string& second_file);

std::string format_trace_gap(const TraceGap& g);
// Its last line: which worker set the pace, and how much of the gap per minibatch lay in its
// computes and steps, how much outside them.
std::string pace_summary(const TraceGap& g);
// What train says where its measured throughput is off its simulation by more than `threshold`
// (a share) over the whole run ("off by more than 10%; ..."): the steady states' times, and, where
// they too are that far apart, pace_summary and what to do; where they are not, that the gap lies
// outside them (a 20-step regnet run: 0.897 over the run, 0.982 in its steady state, and the note
// blamed the layers' speed on the +0.8 ms there was); where the run has no steady state (measured
// whole), that it has none, and not a steady-state split. `run` says what the advice may assume.
struct MissContext {
  bool calibrated = false;         // the run's cluster was calibrated over its transport
  // The calibrated figures for computes at once the prediction took ("core_rates run 2 computes at
  // once at 0.667 of a core each"; "" where none did): it cited core_share, which applies only to
  // workers pinned two to a core, where the run's 2 workers had a core each.
  std::string core_figures;
};
std::string prediction_miss_note(const TraceGap& g, double threshold, const MissContext& run = {});
json to_json(const TraceGap& g);

}  // namespace pt::metrics
