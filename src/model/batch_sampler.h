#pragma once
// Which samples form each minibatch: a seeded shuffle per epoch (std::mt19937_64, so the
// order does not depend on LibTorch's RNG and every runtime sees the same minibatches).
// Samples kept on disk in shards (shard_store.h) are walked shard by shard: the shards in a
// shuffled order, the samples shuffled within each, so a minibatch needs at most two shards.
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace pt::model {

class BatchSampler {
 public:
  BatchSampler(int64_t samples, int64_t batch_size, uint64_t seed, bool shuffle = true,
               std::vector<int64_t> shard_sizes = {})
      : samples_(samples), batch_size_(batch_size), seed_(seed), shuffle_(shuffle),
        shard_sizes_(std::move(shard_sizes)) {}

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
    std::mt19937_64 rng(seed_ * 1000003u + static_cast<uint64_t>(epoch));
    auto shuffle = [&](int64_t* first, int64_t n) {
      for (int64_t i = n - 1; i > 0; --i) std::swap(first[i], first[rng() % static_cast<uint64_t>(i + 1)]);
    };
    if (shuffle_ && shard_sizes_.empty()) shuffle(order_.data(), samples_);
    if (shuffle_ && !shard_sizes_.empty()) {
      std::vector<int64_t> firsts{0}, shards(shard_sizes_.size());
      for (int64_t n : shard_sizes_) firsts.push_back(firsts.back() + n);
      std::iota(shards.begin(), shards.end(), 0);
      shuffle(shards.data(), static_cast<int64_t>(shards.size()));
      size_t at = 0;
      for (int64_t k : shards) {
        std::iota(order_.begin() + at, order_.begin() + at + shard_sizes_[k], firsts[k]);
        shuffle(order_.data() + at, shard_sizes_[k]);
        at += shard_sizes_[k];
      }
    }
    epoch_ = epoch;
  }

  int64_t samples_, batch_size_;
  uint64_t seed_;
  bool shuffle_;
  std::vector<int64_t> shard_sizes_;
  int64_t epoch_ = -1;
  std::vector<int64_t> order_;
};

}  // namespace pt::model
