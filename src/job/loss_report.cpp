#include "job/loss_report.h"

#include <algorithm>

#include "model/memory_meter.h"
#include "runtime/worker.h"

namespace pt::job {

void LossReport::report(Pending::iterator it) {
  int64_t minibatch = it->first;
  double loss = it->second.first * microbatches_ / it->second.second;
  pending_.erase(it);
  // A minibatch of padding alone (runtime::Worker::kNoTargets): a row without a loss, left out of
  // the run's mean and its divergence checks (it counted 0).
  const bool keeps_none = loss == runtime::Worker::kNoTargets;
  double grad_norm = -1;
  if (auto n = grad_norms_.find(minibatch); n != grad_norms_.end()) {
    grad_norm = n->second;
    grad_norms_.erase(n);
  }
  if (!keeps_none) recent_.push_back(loss), last_loss_ = loss;
  ++reported_;
  double secs = train_seconds();
  // Gathered losses: the time its replica ended it, else its segment's end. A pipedream
  // segment runs to the next evaluation, and every row of an epoch carried its end (row 1 of
  // 1,000 read 34 samples/s where the run went at 3,400).
  if (auto t = trained_secs_.upper_bound(minibatch); t != trained_secs_.end()) secs = t->second;
  trained_secs_.erase(trained_secs_.begin(), trained_secs_.upper_bound(minibatch + 1));
  bool drained = drained_.erase(minibatch + 1) > 0;  // the last of a segment every worker had ended
  if (auto s = step_secs_.find(minibatch); s != step_secs_.end()) {
    if (!drained) secs = std::min(secs, s->second);
    step_secs_.erase(s);
  }
  secs = last_secs_ = std::max(secs, last_secs_);  // the replicas' clocks differ a little
  auto account = model::charged_account();
  // Samples of the minibatches trained: an asynchronous run with replicas skips a few at each
  // epoch's end, which the step numbers (positions in the data's order) count.
  double samples_per_s = reported_ * batch_size_ / std::max(secs, 1e-9);
  runtime::StepRecord rec{minibatch + 1, minibatch / per_epoch_, loss, samples_per_s, -1, secs,
                          account ? account->peak() : -1};
  rec.grad_norm = grad_norm;
  rec.lr = model::learning_rate(schedule_, rate_step_(minibatch));
  rec.loss_known = losses_known_ && !keeps_none;
  progress_.step(rec);
  if (rec.loss_known) runtime::check_loss_finite(loss, minibatch + 1);
}

}  // namespace pt::job
