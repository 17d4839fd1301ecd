#pragma once
// Training samples that stay on disk, read as minibatches need them: shards of (x, y) dicts
// (shard_store.h, --data DIR) or a flat file of token ids (token_stream.h, --data FILE.bin).
// Safe to share between the worker threads of one process.
#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace pt::model {

class SampleStore {
 public:
  virtual ~SampleStore() = default;
  virtual int64_t size() const = 0;
  // Rows `indices` (global sample numbers) of the inputs (targets false) or the targets.
  virtual torch::Tensor gather(const std::vector<int64_t>& indices, bool targets) const = 0;
  // Samples per shard, which the batch sampler walks one at a time (batch_sampler.h); empty:
  // any sample is as cheap to read as any other.
  virtual std::vector<int64_t> shard_sizes() const = 0;
  // CRC-32 of each file it reads (job digests, checkpoints' data identity).
  virtual std::vector<uint32_t> crcs() const = 0;
  // Whether a target may be padding (LayeredModel::kIgnoredTarget): a token file's unsigned ids are not.
  virtual bool may_pad() const { return true; }
};

}  // namespace pt::model
