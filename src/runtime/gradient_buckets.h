#pragma once
// The all-reduce of a replicated stage's gradients, overlapped with the backward that completes
// them, as PyTorch DDP does. The flat gradient buffer (flat_parameters.h) is cut into buckets of
// about `bucket_bytes`, taking the parameters in reverse order, the order a backward produces
// their gradients. Armed for the last backward before an all-reduce, a hook on each parameter's
// gradient accumulator counts the bucket down; a full bucket's all-reduce starts at once
// (Transport::allreduce_start), buckets strictly in order so every replica starts the same
// collectives in the same order. finish() starts what a backward did not reach (parameters
// without a gradient this time) and waits: only the last bucket's wait remains after the backward.
#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "model/flat_parameters.h"
#include "runtime/transport.h"

namespace pt::runtime {

class GradientBuckets {
 public:
  GradientBuckets(model::FlatParameters& flat, int64_t bucket_bytes, Transport& transport, std::vector<int> group);
  ~GradientBuckets();  // removes the hooks
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  // The next backward completes the gradients: start each bucket's all-reduce once it is full.
  void arm();
  // Starts the buckets not started yet, waits for all, disarms. The gradients are then summed,
  // and where one sums to zero, which replicas a backward reached (FlatParameters::reached).
  void finish();
  int64_t buckets() const { return static_cast<int64_t>(buckets_.size()); }

 private:
  struct Bucket {
    size_t buffer = 0;
    int64_t offset = 0, numel = 0;
    int members = 0, pending = 0;
    std::shared_ptr<PendingTransfer> transfer;
  };
  void accumulated(size_t bucket);  // a member's gradient is final for this backward
  void start_ready();               // starts full buckets, in order, from next_

  model::FlatParameters& flat_;
  Transport& transport_;
  std::vector<int> group_;
  std::vector<Bucket> buckets_;
  size_t next_ = 0;  // the first bucket not started
  bool armed_ = false;
  // The accumulators hold the hooks; kept alive here (a parameter only refers to its weakly).
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks_;
  std::shared_ptr<GradientBuckets*> self_;  // the hooks' way back here, cleared on destruction
};

}  // namespace pt::runtime
