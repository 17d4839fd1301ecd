#pragma once
// A stage replica's parameters and their gradients in contiguous buffers (one per dtype, nearly
// always one), each parameter and its .grad a view into them: the optimizer step is a few
// passes over one tensor instead of a loop over many small ones, a weight stash is one copy,
// and an all-reduce sums the gradient buffer in place, in buckets that are ranges of it.
// The views survive backward passes because autograd accumulates into a defined .grad in place
// (AccumulateGrad with grad mode off), as PyTorch DDP's gradient_as_bucket_view relies on.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <torch/torch.h>

namespace pt::model {

class FlatParameters {
 public:
  // Moves the values of `params` into the buffers and points each parameter (and a zeroed
  // .grad) at its slice. A parameter listed twice (tied weights) gets one slice. With `first`,
  // the parameters it holds true for go first in each buffer (those weight decay shrinks), so
  // that a step treats them as one range: leading(b) elements of buffer b.
  explicit FlatParameters(const std::vector<torch::Tensor>& params,
                          const std::function<bool(const torch::Tensor&)>& first = {});
  ~FlatParameters();  // removes the parameters' hooks
  FlatParameters(const FlatParameters&) = delete;
  FlatParameters& operator=(const FlatParameters&) = delete;

  // Where one distinct parameter lives: buffer, first element, element count.
  struct Slot {
    torch::Tensor param;
    size_t buffer = 0;
    int64_t offset = 0, numel = 0;
  };
  const std::vector<Slot>& slots() const { return slots_; }
  std::vector<torch::Tensor>& weights() { return weights_; }  // one flat tensor per buffer
  std::vector<torch::Tensor>& grads() { return grads_; }
  int64_t leading(size_t buffer) const { return leading_[buffer]; }  // elements of `first`'s parameters

  // A copy of the weights (a stashed version), written into `reuse` when it holds buffers of
  // the right sizes (a released stash), so steady state allocates nothing. `values` false: the
  // buffers without their values (an emulated model's weights hold none, and the device's copy
  // is in the profile's step time).
  std::vector<torch::Tensor> copy_weights(std::vector<torch::Tensor> reuse = {}, bool values = true) const;
  // Exchanges the memory of the weight buffers with `other` (a copy_weights result): no copy,
  // and every view of the buffers sees the other version, the parameters and what autograd
  // saved of them alike (a Linear's backward reads the weight.t() its forward saved, a view of
  // the buffer). Swapping again restores.
  void swap_weights(std::vector<torch::Tensor>& other);
  // The sum of every gradient's square (sum_of_squares over the buffers): --clip-grad-norm's norm.
  double grad_squares() const;

  // Which slots a backward reached since clear_reached(): one float per slot, 1 where autograd
  // delivered a gradient (a hook on the parameter). torch.optim skips a parameter whose .grad is
  // None, an expert no row was routed to, where the flat .grad is zeros and was stepped (decayed,
  // its Adam count advanced: a helper's audit). A replicated stage sums it over its replicas.
  torch::Tensor& reached() { return *reached_; }
  bool reached(size_t slot) const { return reached_->data_ptr<float>()[slot] > 0; }
  void clear_reached() { reached_->zero_(); }
  // Whether slot `slot`'s gradient is zero in every element (it stops at the first that is not).
  bool gradient_is_zero(size_t slot) const;

 private:
  std::vector<Slot> slots_;
  std::vector<torch::Tensor> weights_, grads_;
  std::vector<int64_t> leading_;
  std::shared_ptr<torch::Tensor> reached_;  // shared with the hooks
  std::vector<unsigned> hooks_;             // per slot; kNoHook where the parameter takes no gradient
};

// The sum of t's squared elements in double precision, without copying t: blocks of a few
// thousand elements are summed in t's precision (float's error grows with the count: 4e-4 of a
// norm over 10M elements) and the blocks in double. A double copy and its square, as this was
// computed before, held four times a stage's gradient bytes beside what the memory model counts.
double sum_of_squares(const torch::Tensor& t);

}  // namespace pt::model
