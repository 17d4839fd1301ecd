#include "model/deferred_batch_norm.h"

#include <limits>

namespace pt::model {

void DeferredBatchNorm::fold() {
  torch::NoGradGuard no_grad;
  double n = count.item<double>();
  if (n >= 2) {
    torch::Tensor mean = sum / n;
    torch::Tensor var = (sum_sq / n - mean * mean) * (n / (n - 1));
    num_batches_tracked.add_(1);
    double factor = cumulative ? 1.0 / num_batches_tracked.item<double>() : momentum;
    running_mean.mul_(1 - factor).add_(mean.to(running_mean.scalar_type()), factor);
    running_var.mul_(1 - factor).add_(var.to(running_var.scalar_type()), factor);
  }
  for (torch::Tensor* t : {&seen, &count, &sum, &sum_sq}) t->zero_();
}

void DeferredBatchNorm::set_deferred(bool deferred) {
  torch::NoGradGuard no_grad;
  // Files exported before the runtime folded fold themselves once pt_seen reaches the mode:
  // deferred, it never does.
  mode.fill_(deferred ? std::numeric_limits<int64_t>::max() : 1);
  for (torch::Tensor* t : {&seen, &count, &sum, &sum_sq}) t->zero_();
}

}  // namespace pt::model
