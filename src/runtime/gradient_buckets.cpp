#include "runtime/gradient_buckets.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include "core/error.h"

namespace pt::runtime {

GradientBuckets::GradientBuckets(model::FlatParameters& flat, int64_t bucket_bytes, Transport& transport,
                                 std::vector<int> group)
    : flat_(flat), transport_(transport), group_(std::move(group)),
      self_(std::make_shared<GradientBuckets*>(this)) {
  PT_CHECK(bucket_bytes > 0, "bucket size must be > 0, got ", bucket_bytes);
  const auto& slots = flat_.slots();
  std::vector<size_t> bucket_of(slots.size());
  for (size_t k = slots.size(); k-- > 0;) {
    const auto& s = slots[k];
    int64_t bytes = s.numel * static_cast<int64_t>(flat_.grads()[s.buffer].element_size());
    bool fits = !buckets_.empty() && buckets_.back().buffer == s.buffer &&
                (buckets_.back().numel * static_cast<int64_t>(flat_.grads()[s.buffer].element_size()) + bytes <= bucket_bytes);
    if (!fits) buckets_.push_back({s.buffer, s.offset + s.numel, 0, 0, 0, nullptr});
    Bucket& b = buckets_.back();
    PT_CHECK(s.offset + s.numel == b.offset, "parameter slots are not contiguous in their buffer");
    b.offset = s.offset;
    b.numel += s.numel;
    if (s.param.requires_grad()) ++b.members;
    bucket_of[k] = buckets_.size() - 1;
  }
  std::weak_ptr<GradientBuckets*> weak = self_;
  for (size_t k = 0; k < slots.size(); ++k) {
    if (!slots[k].param.requires_grad()) continue;  // never accumulated: finish() starts its bucket
    auto acc = torch::autograd::impl::grad_accumulator(slots[k].param);
    size_t b = bucket_of[k];
    uintptr_t key = acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [weak, b](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          if (auto self = weak.lock(); self && *self) (*self)->accumulated(b);
          return outputs;
        }));
    hooks_.emplace_back(std::move(acc), key);
  }
}

GradientBuckets::~GradientBuckets() {
  *self_ = nullptr;
  self_.reset();
  for (auto& [acc, key] : hooks_) acc->del_post_hook(key);
}

void GradientBuckets::arm() {
  PT_CHECK(!armed_, "gradient buckets armed twice before an all-reduce");
  armed_ = true;
  next_ = 0;
  for (auto& b : buckets_) {
    b.pending = b.members;
    b.transfer.reset();
  }
  start_ready();  // leading buckets of frozen parameters only
}

void GradientBuckets::accumulated(size_t bucket) {
  if (!armed_) return;
  if (--buckets_[bucket].pending == 0) start_ready();
}

void GradientBuckets::start_ready() {
  for (; next_ < buckets_.size() && buckets_[next_].pending <= 0; ++next_) {
    Bucket& b = buckets_[next_];
    b.transfer = transport_.allreduce_start(flat_.grads()[b.buffer].narrow(0, b.offset, b.numel), group_);
  }
}

void GradientBuckets::finish() {
  if (!armed_) arm();  // an all-reduce with no backward armed: every bucket starts now
  for (auto& b : buckets_) b.pending = 0;
  start_ready();
  armed_ = false;
  for (auto& b : buckets_) {
    b.transfer->wait();
    b.transfer.reset();
  }
  // A slot whose sum is zero in every element was reached by no replica, or with a zero gradient
  // (a zero-initialised layer's first step): the replicas sum which of them it reached, so that
  // each steps it or none does (Optimizer::taken_slots). They hold the same sums, so all ask or
  // none; a slot with a non-zero sum was reached, and none costs a collective.
  for (size_t k = 0; k < flat_.slots().size(); ++k)
    if (flat_.gradient_is_zero(k)) {
      std::vector<torch::Tensor> reached{flat_.reached()};
      transport_.allreduce_sum(reached, group_);
      break;
    }
}

}  // namespace pt::runtime
