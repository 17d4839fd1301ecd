#pragma once
// The job's training time, one figure on every worker (worker_runner): from the first worker's
// start to the end of the last one's training, less the pauses every worker took (evaluations,
// checkpoints), each from the last worker's stop to the first one's resume.
#include "runtime/transport.h"

namespace pt::job {

class TrainingClock {
 public:
  // Training starts now on this worker (after the job's start barrier).
  TrainingClock();
  // Collective over every worker, the barrier before a pause or the job's end: each worker's
  // stop (now) and last resume meet, and the training time so far becomes the common one. Workers
  // whose steady clocks differ (other hosts) count their own, from their resume to the exchange.
  void stop(runtime::Transport& transport);
  // Training goes on from now.
  void resume();
  // The training time so far: common up to the last stop; since this worker's resume, its own.
  double seconds() const;

 private:
  double key_;  // the host's boot, hashed (0: unknown): its workers share the steady clock
  double trained_ms_ = 0, resumed_ms_;
  bool stopped_ = false;
};

}  // namespace pt::job
