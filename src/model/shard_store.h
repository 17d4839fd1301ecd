#pragma once
// Training samples that stay on disk (--data DIR, own_data.h): shards of (x, y) loaded when a
// minibatch needs them, at most two in memory at once. The batch sampler walks them shard by
// shard (batch_sampler.h: shards in a seeded order each epoch, samples shuffled within each),
// so a minibatch touches at most two shards and each is read once per epoch. Safe to share
// between the worker threads of one process.
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "model/sample_store.h"

namespace pt::model {

class ShardStore : public SampleStore {
 public:
  // Reads one shard's (x, y), already checked when the store was built.
  using Loader = std::function<std::pair<torch::Tensor, torch::Tensor>(const std::string& file)>;
  ShardStore(std::vector<std::string> files, std::vector<int64_t> sizes, std::vector<uint32_t> crcs, Loader load);

  int64_t size() const override { return offsets_.back(); }
  std::vector<int64_t> shard_sizes() const override { return sizes_; }
  std::vector<uint32_t> crcs() const override { return crcs_; }  // of each shard's file
  // Rows `indices` (global sample numbers) of x (targets false) or y, in that order.
  torch::Tensor gather(const std::vector<int64_t>& indices, bool targets) const override;
  int64_t loads() const;  // shards read so far (tests: each once per epoch)

 private:
  const std::pair<torch::Tensor, torch::Tensor>& shard(int k) const;  // under mu_

  std::vector<std::string> files_;
  std::vector<int64_t> sizes_, offsets_;  // offsets_[k]: first sample of shard k; back(): total
  std::vector<uint32_t> crcs_;
  Loader load_;
  mutable std::mutex mu_;
  mutable std::deque<std::pair<int, std::pair<torch::Tensor, torch::Tensor>>> loaded_;  // newest last
  mutable int64_t loads_ = 0;
};

}  // namespace pt::model
