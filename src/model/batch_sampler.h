#pragma once
// Which samples form each minibatch: a seeded shuffle per epoch (std::mt19937_64, so the
// order does not depend on LibTorch's RNG and every runtime sees the same minibatches).
// Samples kept on disk in shards (shard_store.h) are walked shard by shard: the shards in a
// shuffled order, the samples shuffled within each, so a minibatch needs at most two shards.
// An epoch of more than kStoredOrderMost samples (a token file's windows: 4 GiB of uint16 ids
// are 134 M windows of 17, whose order took 1 GB in each sampler) is shuffled by a keyed
// bijection worked out per sample instead of a stored order.
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

  static constexpr int64_t kStoredOrderMost = int64_t{1} << 24;

  // Sample indices of global step `step` (epoch = step / batches_per_epoch()).
  std::vector<int64_t> batch(int64_t step) {
    int64_t epoch = step / batches_per_epoch();
    int64_t first = (step % batches_per_epoch()) * batch_size_;
    // In the data's order, none stored: --no-shuffle stored every index (a token file of 17 M
    // windows: 122 MiB more, filled in the first step's time).
    if (!shuffle_) {
      std::vector<int64_t> out(static_cast<size_t>(batch_size_));
      std::iota(out.begin(), out.end(), first);
      return out;
    }
    if (shard_sizes_.empty() && samples_ > kStoredOrderMost) {
      std::vector<int64_t> out;
      for (int64_t i = first; i < first + batch_size_; ++i) out.push_back(permuted(i, epoch));
      return out;
    }
    if (epoch != epoch_) reshuffle(epoch);
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
    if (shard_sizes_.empty()) shuffle(order_.data(), samples_);
    if (!shard_sizes_.empty()) {
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

  // Position i of epoch `epoch`'s order: a 4-round Feistel network over the bits that cover the
  // samples (a bijection on [0, 2^bits)), walked again from any value past the last sample until
  // it lands inside (so a bijection on [0, samples_); 2^bits < 4 samples_, a few steps at most).
  int64_t permuted(int64_t i, int64_t epoch) const {
    int bits = 2;
    while ((int64_t{1} << bits) < samples_) bits += 2;
    int half = bits / 2;
    uint64_t mask = (uint64_t{1} << half) - 1, key = seed_ * 1000003u + static_cast<uint64_t>(epoch);
    auto round = [&](uint64_t x, uint64_t r) {  // splitmix64 of (key, round, half)
      uint64_t z = key + r * 0x9E3779B97F4A7C15ull + x * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return (z ^ (z >> 31)) & mask;
    };
    uint64_t x = static_cast<uint64_t>(i);
    do {
      uint64_t left = x >> half, right = x & mask;
      for (uint64_t r = 0; r < 4; ++r) {
        uint64_t next = left ^ round(right, r);
        left = right;
        right = next;
      }
      x = (left << half) | right;
    } while (x >= static_cast<uint64_t>(samples_));
    return static_cast<int64_t>(x);
  }

  int64_t samples_, batch_size_;
  uint64_t seed_;
  bool shuffle_;
  std::vector<int64_t> shard_sizes_;
  int64_t epoch_ = -1;
  std::vector<int64_t> order_;
};

}  // namespace pt::model
