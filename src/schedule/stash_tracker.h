#pragma once
// Counts, along one worker's actions in execution order, the activations stashed between a
// forward and its last backward and the weight versions alive. Shared by the validator (on a
// schedule's lists) and metrics (on a trace's events, simulated or measured).
//
// A microbatch's version on a stage is the number of Steps the worker ran on that stage before
// its forward; the versions alive are those of the microbatches in flight plus the current
// one. Synchronous schedules never step with microbatches in flight, so they keep 1; PipeDream
// keeps one per minibatch in flight; 2BW two.
#include <cstdint>
#include <map>
#include <set>
#include <utility>

#include "schedule/action.h"

namespace pt::schedule {

class StashTracker {
 public:
  // `split`: the stage's stash is released by W (split backward) rather than by B.
  // `bytes`: the activation bytes a forward stashes (0 when only counting).
  void on(const Action& a, bool split, int64_t bytes = 0);

  int peak_stash() const { return peak_stash_; }
  int64_t peak_bytes() const { return peak_bytes_; }
  // A microbatch whose forward ran on weights of its own (weight prediction) holds its own copy
  // until its backward, besides the newest: call before its Forward. `steps`: its stage's Steps
  // between its Forward and its Backward (Schedule::steps_in_flight), > 0.
  void predicted(int stage, int mb, int steps) { predicted_[{stage, mb}] = steps; }
  // 2bw's prediction (StageReplica::predict_per_minibatch): a minibatch's microbatches share the
  // copy its first predicted forward makes, until the Step that applies their gradient (the
  // first after those `steps`); the others run on the newest. Call before the first action,
  // instead of delay_weights.
  void share_predictions(int microbatches) { per_minibatch_ = true, microbatches_ = microbatches; }
  int weight_versions(int stage) const;  // most weight copies alive at once on `stage` (>= 1)
  int max_weight_versions() const;
  // Schedule::weight_delay: a forward of microbatch mb runs on the weights after the stage's
  // first max(0, mb / microbatches - delay) steps, and each stage keeps the newest and the
  // `delay` versions before, as the runtime does. Call before the first action.
  void delay_weights(int delay, int microbatches) { keep_ = delay_ = delay, microbatches_ = microbatches; }
  // Only the keeping, for a trace, whose microbatches may be numbered from where a run resumed.
  void keep_versions_before(int delay) { keep_ = delay; }
  // Whether a forward so far asked for weights its stage had not made yet (a schedule that
  // cannot run with its delay).
  bool ran_ahead() const { return ran_ahead_; }

 private:
  struct InFlight {
    int version;
    int64_t bytes;
    bool own_copy;  // predicted: its weights are a copy of their own
    bool minibatch_copy = false;  // share_predictions: its minibatch's copy
  };
  struct StageState {
    int steps = 0;
    std::map<int, InFlight> in_flight;  // by microbatch
    std::map<int, int> shared;          // version -> in-flight microbatches on it (no copy of their own)
    int own_copies = 0;
    std::map<int, int> minibatch_copies;  // share_predictions: minibatch -> the Steps that free its copy
    int peak_versions = 1;
  };
  static void forget(StageState& st, const InFlight& f);  // f leaves the stage's in-flight set
  std::map<int, StageState> stages_;
  std::map<std::pair<int, int>, int> predicted_;  // (stage, microbatch) -> its steps in flight
  int stash_ = 0, peak_stash_ = 0;
  int64_t bytes_ = 0, peak_bytes_ = 0;
  int delay_ = 0, keep_ = 0, microbatches_ = 1;
  bool ran_ahead_ = false;
  bool per_minibatch_ = false;
};

}  // namespace pt::schedule
