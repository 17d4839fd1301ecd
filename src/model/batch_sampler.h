#pragma once
// Which samples form each minibatch: a seeded shuffle per epoch (std::mt19937_64, so the
// order does not depend on LibTorch's RNG and every runtime sees the same minibatches).
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace pt::model {

class BatchSampler {
 public:
  BatchSampler(int64_t samples, int64_t batch_size, uint64_t seed, bool shuffle = true)
      : samples_(samples), batch_size_(batch_size), seed_(seed), shuffle_(shuffle) {}

  // Full minibatches per epoch (the last partial one is dropped, so every step has the same
  // size: pipeline microbatches then split evenly).
  int64_t batches_per_epoch() const { return samples_ / batch_size_; }

  // Sample indices of global step `step` (epoch = step / batches_per_epoch()).
  std::vector<int64_t> batch(int64_t step) {
    int64_t epoch = step / batches_per_epoch();
    if (epoch != epoch_) reshuffle(epoch);
    int64_t first = (step % batches_per_epoch()) * batch_size_;
    return std::vector<int64_t>(order_.begin() + first, order_.begin() + first + batch_size_);
  }

 private:
  void reshuffle(int64_t epoch) {
    order_.resize(samples_);
    std::iota(order_.begin(), order_.end(), 0);
    if (shuffle_) {
      std::mt19937_64 rng(seed_ * 1000003u + static_cast<uint64_t>(epoch));
      for (int64_t i = samples_ - 1; i > 0; --i) {
        int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
        std::swap(order_[i], order_[j]);
      }
    }
    epoch_ = epoch;
  }

  int64_t samples_, batch_size_;
  uint64_t seed_;
  bool shuffle_;
  int64_t epoch_ = -1;
  std::vector<int64_t> order_;
};

}  // namespace pt::model
