#pragma once
// Deferred BatchNorm (train --deferred-batch-norm; torchgpipe's meaning): the running statistics
// follow the whole minibatch, not each microbatch. python/pipetrain/batch_norm.py, which `pipetrain
// export` puts in place of nn.BatchNorm, normalises each microbatch by its own statistics (so the
// gradients do not change) and, while deferred, only adds the microbatch's sums to its pt_*
// buffers; once per minibatch the runtime sums them over the stage's replicas and folds them into
// the running statistics here, so every replica keeps the statistics of the whole minibatch.
#include <torch/torch.h>

#include <vector>

namespace pt::model {

struct DeferredBatchNorm {
  torch::Tensor mode;                   // pt_microbatches: 1 plain (nn.BatchNorm's update), above 1 deferred
  torch::Tensor seen, count, sum, sum_sq;  // pt_seen, pt_count, pt_sum, pt_sum_sq: the minibatch's so far
  torch::Tensor running_mean, running_var, num_batches_tracked;
  double momentum = 0.1;
  bool cumulative = false;  // momentum=None: nn.BatchNorm's cumulative moving average

  // The sums to add up over a stage's replicas before fold() (float64).
  std::vector<torch::Tensor> sums() const { return {count, sum, sum_sq}; }
  // One update of the running statistics from the sums, as nn.BatchNorm makes it from one batch
  // (its variance unbiased); clears the sums. Nothing where fewer than 2 values per channel came.
  void fold();
  // Plain or deferred from now on; clears the sums (a checkpoint restores the mode it was saved in).
  void set_deferred(bool deferred);
};

// A layer that holds deferrable BatchNorms (scripted_model.cpp's layers of an exported file).
class DeferrableLayer {
 public:
  virtual ~DeferrableLayer() = default;
  virtual std::vector<DeferredBatchNorm> deferred_batch_norms() = 0;
};

}  // namespace pt::model
