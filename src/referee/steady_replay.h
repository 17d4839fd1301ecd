#pragma once
// A plan's steady state in the simulator: its schedule replayed, and again over more minibatches
// until the window settles and repeats (docs/design.md: the time of a plan is the steady state of
// the action lists the runtime executes). `plan`, `simulate`, `compare`, the referee's bucket
// choice and the joint search all take a plan's figure so.
#include <functional>
#include <optional>
#include <string>

#include "metrics/metrics.h"
#include "plan/cluster.h"
#include "plan/plan.h"
#include "profile/profile.h"
#include "schedule/generators.h"
#include "schedule/schedule.h"
#include "schedule/trace.h"
#include "sim/simulator.h"

namespace pt::referee {

// How many times a replay's minibatches may double until its window settles
// (metrics::Metrics::settled): up to 8 times the default.
inline constexpr int kSettleDoublings = 3;
// `replay_over(n)`: a replay over n minibatches (0: its schedule's default), replayed again over
// twice as many while its window has not settled, or, with `periodic`, does not repeat
// (metrics::Metrics::periodic), up to kSettleDoublings times. The referee ranks its many replays
// by their settled figure and takes the periodic one of those it may choose (periodic_replay,
// replay_ahead.h). `from`: a replay already run on the way, whose schedule's default is
// `default_minibatches`: the same steps from there. A window under `floor_ms` (the plan's
// replay_floor_ms, replay_floor.h) is not yet the steady state either, periodic or not.
metrics::Metrics settled_replay(const std::function<metrics::Metrics(int minibatches)>& replay_over,
                                bool periodic = true, const metrics::Metrics* from = nullptr,
                                int default_minibatches = 0, double floor_ms = 0);

struct SteadyReplayOptions {
  sim::SimOptions sim;  // the bucket, shared cores; computes_only where only the timing is read
  metrics::Detail detail = metrics::Detail::kAll;
  // Longer replays until the window settles and repeats, from the options' minibatches (0: the
  // schedule's default); false: the options' minibatches are the run (`--minibatches N`).
  bool lengthen = true;
  // The floor a settled window must reach (replay_floor.h); unset: the plan's replay_floor_ms
  // under the kind, with the first schedule's cycle time. 0 where the plan is not the one
  // replayed (data parallelism's schedule makes its own).
  std::optional<double> floor_ms;
};

struct SteadyReplay {
  metrics::Metrics metrics;  // the steady state's (periodic_first's figure)
  schedule::Trace trace;     // the last replay's
  // The minibatches the last replay's schedule was made for: the first's own, or the count asked
  // of a longer one (a synchronous schedule covers one, whatever it is asked).
  int minibatches = 0;
  // The last replay's schedule, where it was lengthened past the first.
  std::optional<schedule::Schedule> lengthened;
};

// `plan` under `kind` with `options`: `first` (its schedule with these options, where the caller
// has it; else made here) replayed, then lengthened as settled_replay does. Longer schedules are
// made unvalidated, as every replay's: the same actions over more minibatches.
SteadyReplay steady_replay(const std::string& kind, const plan::Plan& plan, const schedule::ScheduleOptions& options,
                           const profile::Profile& profile, const plan::Cluster& cluster,
                           const SteadyReplayOptions& how = {}, const schedule::Schedule* first = nullptr);

}  // namespace pt::referee
