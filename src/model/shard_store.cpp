#include "model/shard_store.h"

#include <algorithm>

#include "core/error.h"

namespace pt::model {

ShardStore::ShardStore(std::vector<std::string> files, std::vector<int64_t> sizes, std::vector<uint32_t> crcs,
                       Loader load)
    : files_(std::move(files)), sizes_(std::move(sizes)), crcs_(std::move(crcs)), load_(std::move(load)) {
  PT_CHECK(!files_.empty() && files_.size() == sizes_.size(), files_.size(), " shard files, ", sizes_.size(), " sizes");
  offsets_.push_back(0);
  for (int64_t n : sizes_) offsets_.push_back(offsets_.back() + n);
}

const std::pair<torch::Tensor, torch::Tensor>& ShardStore::shard(int k) const {
  for (const auto& [id, tensors] : loaded_)
    if (id == k) return tensors;
  auto tensors = load_(files_[k]);
  PT_CHECK(tensors.first.size(0) == sizes_[k], files_[k], " changed since it was checked: ", tensors.first.size(0),
           " samples, was ", sizes_[k]);
  ++loads_;
  if (loaded_.size() == 2) loaded_.pop_front();
  loaded_.emplace_back(k, std::move(tensors));
  return loaded_.back().second;
}

torch::Tensor ShardStore::gather(const std::vector<int64_t>& indices, bool targets) const {
  std::lock_guard<std::mutex> lock(mu_);
  // Group the rows by shard; shards in the order the rows first need them.
  std::vector<int> order;
  std::vector<std::vector<int64_t>> positions(files_.size()), locals(files_.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    int64_t g = indices[i];
    PT_CHECK(g >= 0 && g < size(), "sample ", g, " of ", size());
    int k = static_cast<int>(std::upper_bound(offsets_.begin(), offsets_.end(), g) - offsets_.begin()) - 1;
    if (positions[k].empty()) order.push_back(k);
    positions[k].push_back(static_cast<int64_t>(i));
    locals[k].push_back(g - offsets_[k]);
  }
  torch::Tensor out;
  for (int k : order) {
    const torch::Tensor& all = targets ? shard(k).second : shard(k).first;
    auto idx = torch::tensor(locals[k], torch::kInt64);
    torch::Tensor part = all.index_select(0, idx);
    if (!out.defined()) {
      std::vector<int64_t> shape = part.sizes().vec();
      shape[0] = static_cast<int64_t>(indices.size());
      out = torch::empty(shape, part.options());
    }
    out.index_copy_(0, torch::tensor(positions[k], torch::kInt64), part);
  }
  return out;
}

int64_t ShardStore::loads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return loads_;
}

}  // namespace pt::model
