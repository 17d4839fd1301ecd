#pragma once
// The reporting worker's account of the minibatches' losses and training time (worker_runner).
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <utility>
#include <vector>

#include "job/training_clock.h"
#include "model/optimizer.h"
#include "runtime/checkpoint.h"
#include "runtime/progress.h"
#include "runtime/trainer.h"

namespace pt::job {

// Minibatch losses on the reporting worker (the last stage's replica 0), from the microbatch
// losses it computes and, with a replicated last stage, those its other replicas send it after
// each segment (gathered: it sees only its share of a minibatch's microbatches, or of the
// minibatches, and a share scaled to the minibatch is a sample, not the loss). A minibatch's
// loss is the mean over its microbatches, scaled to the whole minibatch. The reporter's own
// microbatches arrive in minibatch order, so ungathered a minibatch is complete when the next
// one starts; gathered, at the segment's end.
class LossReport {
 public:
  // `losses_known` false: emulated layers, whose "losses" are no figure (they printed 0).
  // `rate_step`: the minibatch whose learning rate the last stage applied to a minibatch's step.
  // `stamped_at_steps`: each minibatch's row takes the time of the step that closes it (stepped()),
  // as gathered losses do. An asynchronous schedule's last stage runs the next minibatch's forward
  // before its row is written: stamped then, pipedream's first row read 27.6 ms where its step
  // ended at 20.3.
  // `clock`: the job's training time (the rows' train_s), which outlives this.
  LossReport(runtime::Progress& progress, const TrainingClock& clock, int64_t per_epoch, int64_t batch_size,
             int microbatches, bool gathered, const model::OptimizerOptions& schedule, bool losses_known,
             std::function<int64_t(int64_t)> rate_step, bool stamped_at_steps = false)
      : progress_(progress), clock_(clock), per_epoch_(per_epoch), batch_size_(batch_size), microbatches_(microbatches),
        gathered_(gathered), stamped_(gathered || stamped_at_steps), losses_known_(losses_known), schedule_(schedule),
        rate_step_(std::move(rate_step)) {}
  bool losses_known() const { return losses_known_; }

  // `secs`: the training time its replica had when it ended (gathered losses, which arrive later).
  void add(int64_t minibatch, double loss, double secs = -1) {
    if (!gathered_) {
      while (!pending_.empty() && pending_.begin()->first < minibatch) report(pending_.begin());
    }
    auto& [sum, seen] = pending_[minibatch];
    sum += loss;
    ++seen;
    if (secs >= 0)
      step_secs_[minibatch] = std::max(step_secs_[minibatch], secs);
    else if (stamped_)
      unstamped_.insert(minibatch);
  }
  // This replica stepped minibatch `minibatch` (the last its step closes) `secs` into training:
  // the time of its own losses up to it (added without one). Stamped at the loss, a replicated
  // last stage's rows came before their backward, all-reduce and step: the last row of a dp run
  // read 0.700 s where the run took 0.746.
  void stepped(int64_t minibatch, double secs) {
    for (auto it = unstamped_.begin(); it != unstamped_.end() && *it <= minibatch; it = unstamped_.erase(it))
      step_secs_[*it] = std::max(step_secs_[*it], secs);
  }
  // Before the minibatch's losses are reported (its step follows its last forward).
  void add_grad_norm(int64_t minibatch, double norm) { grad_norms_[minibatch] = norm; }
  void flush() {
    while (!pending_.empty()) report(pending_.begin());
  }
  // Reports the minibatches before `minibatch` (gathered: the segments whose losses are all in).
  void flush_before(int64_t minibatch) {
    while (!pending_.empty() && pending_.begin()->first < minibatch) report(pending_.begin());
  }
  // Training ended at minibatch `end` (exclusive) now: a row reported later keeps this time.
  // `drained`: every worker has ended it (a pause or the run's end follows), so its last row is
  // stamped now, not when a replica stepped it: the stages before the last drain after that step
  // (a replicated last stage's last row read 0.085 s where the run took 0.088, 1f1b on 3 stages).
  void trained_until(int64_t end, bool drained) {
    trained_secs_[end] = train_seconds();
    if (drained) drained_.insert(end);
  }
  // A resumed run's first loss is its checkpoint's, where that records one.
  void resumed_from(double first_loss) { resumed_first_ = first_loss, resumed_ = true; }
  double first_loss() const {
    if (std::isfinite(resumed_first_)) return resumed_first_;
    return recent_.empty() ? 0 : recent_.front();
  }
  // The last kFinalLossSteps losses, and their mean.
  std::vector<double> final_losses() const {
    size_t k = std::min<size_t>(runtime::kFinalLossSteps, recent_.size());
    return {recent_.end() - static_cast<std::ptrdiff_t>(k), recent_.end()};
  }
  double final_loss() const {
    std::vector<double> last = final_losses();
    return last.empty() ? 0 : std::accumulate(last.begin(), last.end(), 0.0) / static_cast<double>(last.size());
  }
  runtime::RunLoss so_far() const {
    if (!losses_known_ || recent_.empty()) return {};
    return {true, first_loss(), final_losses(), static_cast<int64_t>(recent_.size()),
            !resumed_ || std::isfinite(resumed_first_)};
  }
  double last_loss() const { return last_loss_; }
  double train_seconds() const { return clock_.seconds(); }

 private:
  using Pending = std::map<int64_t, std::pair<double, int>>;  // minibatch -> (loss sum, microbatches)
  void report(Pending::iterator it);

  runtime::Progress& progress_;
  const TrainingClock& clock_;
  int64_t per_epoch_, batch_size_;
  int microbatches_;
  int64_t reported_ = 0;  // minibatches reported by this run
  bool gathered_, stamped_;
  bool losses_known_;
  model::OptimizerOptions schedule_;  // the last stage's learning-rate schedule (its stale warm-up too)
  std::function<int64_t(int64_t)> rate_step_;
  Pending pending_;
  std::map<int64_t, double> grad_norms_;  // minibatch -> its gradient norm, until reported
  std::map<int64_t, double> trained_secs_;  // segment end (minibatch, exclusive) -> train_seconds() then
  std::map<int64_t, double> step_secs_;     // minibatch -> its replica's training time at its end (stamped_)
  std::set<int64_t> unstamped_;             // this replica's minibatches not yet stepped (stamped_)
  std::set<int64_t> drained_;               // segment ends every worker had reached when stamped
  double last_loss_ = 0, last_secs_ = 0;
  double resumed_first_ = std::numeric_limits<double>::quiet_NaN();
  bool resumed_ = false;
  std::vector<double> recent_;
};

}  // namespace pt::job
