#include "model/flat_parameters.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "core/host_allocator.h"

namespace pt::model {
namespace {
constexpr unsigned kNoHook = static_cast<unsigned>(-1);
}  // namespace

FlatParameters::FlatParameters(const std::vector<torch::Tensor>& params,
                               const std::function<bool(const torch::Tensor&)>& first) {
  std::set<const c10::TensorImpl*> seen;
  std::map<c10::ScalarType, size_t> buffer_of;
  std::vector<int64_t> sizes;
  // Two passes where `first` is given: its parameters, then the others; one pass without.
  for (int pass = 0; pass < (first ? 2 : 1); ++pass) {
    for (const auto& p : params) {
      if (first && first(p) != (pass == 0)) continue;
      if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;
      PT_CHECK(p.layout() == torch::kStrided && p.device().is_cpu(), "parameter of shape ", p.sizes(),
               " is not a dense CPU tensor");
      auto [it, added] = buffer_of.emplace(p.scalar_type(), sizes.size());
      if (added) sizes.push_back(0);
      slots_.push_back({p, it->second, sizes[it->second], p.numel()});
      sizes[it->second] += p.numel();
    }
    if (pass == 0) leading_ = sizes;
  }
  leading_.resize(sizes.size(), 0);  // a buffer the first pass did not open leads with none
  weights_.resize(sizes.size());
  grads_.resize(sizes.size());
  for (const auto& [dtype, b] : buffer_of) weights_[b] = torch::empty({sizes[b]}, torch::TensorOptions().dtype(dtype));
  torch::NoGradGuard no_grad;
  for (auto& s : slots_) {
    torch::Tensor w = weights_[s.buffer].narrow(0, s.offset, s.numel).view(s.param.sizes());
    w.copy_(s.param.detach());
    s.param.set_data(w);
  }
  // The gradients once the layers' own weights are gone: made before, all three were alive at
  // once, a peak over training's where no optimizer state follows (sgd without momentum). Their
  // memory goes back to the kernel first: tcmalloc would keep it, beside buffers it cannot fit in.
  release_freed_host_memory();
  for (const auto& [dtype, b] : buffer_of) grads_[b] = torch::zeros({sizes[b]}, torch::TensorOptions().dtype(dtype));
  for (auto& s : slots_)
    s.param.mutable_grad() = grads_[s.buffer].narrow(0, s.offset, s.numel).view(s.param.sizes());
  reached_ = std::make_shared<torch::Tensor>(torch::zeros({static_cast<int64_t>(slots_.size())}));
  for (size_t k = 0; k < slots_.size(); ++k) {
    if (!slots_[k].param.requires_grad()) {
      hooks_.push_back(kNoHook);
      continue;
    }
    // Runs inside AccumulateGrad with a defined gradient only: the split backward's B, whose
    // accumulators drop what reaches them (split_backward.cpp), does not count.
    hooks_.push_back(slots_[k].param.register_hook([reached = reached_, k](const torch::Tensor&) {
      reached->data_ptr<float>()[k] = 1;
    }));
  }
}

FlatParameters::~FlatParameters() {
  for (size_t k = 0; k < slots_.size(); ++k)
    if (hooks_[k] != kNoHook) slots_[k].param.remove_hook(hooks_[k]);
}

bool FlatParameters::gradient_is_zero(size_t slot) const {
  const Slot& s = slots_.at(slot);
  torch::Tensor g = grads_[s.buffer].narrow(0, s.offset, s.numel);
  auto scan = [&](const auto* p) { return std::all_of(p, p + s.numel, [](auto v) { return v == 0; }); };
  if (g.scalar_type() == torch::kFloat) return scan(g.data_ptr<float>());
  if (g.scalar_type() == torch::kDouble) return scan(g.data_ptr<double>());
  return !g.ne(0).any().item<bool>();
}

std::vector<torch::Tensor> FlatParameters::copy_weights(std::vector<torch::Tensor> reuse, bool values) const {
  bool fits = reuse.size() == weights_.size();
  for (size_t b = 0; fits && b < weights_.size(); ++b)
    fits = reuse[b].numel() == weights_[b].numel() && reuse[b].scalar_type() == weights_[b].scalar_type();
  if (!fits) {
    reuse.clear();
    for (const auto& w : weights_) reuse.push_back(torch::empty_like(w));
  }
  for (size_t b = 0; values && b < weights_.size(); ++b) reuse[b].copy_(weights_[b]);
  return reuse;
}

void FlatParameters::swap_weights(std::vector<torch::Tensor>& other) {
  PT_CHECK(other.size() == weights_.size(), "a weight version of ", other.size(), " buffers for ", weights_.size());
  for (size_t b = 0; b < weights_.size(); ++b) {
    c10::StorageImpl* mine = weights_[b].storage().unsafeGetStorageImpl();
    c10::StorageImpl* theirs = other[b].storage().unsafeGetStorageImpl();
    PT_CHECK(mine->nbytes() == theirs->nbytes() && weights_[b].storage_offset() == 0 && other[b].storage_offset() == 0,
             "a weight version of another size");
    c10::DataPtr taken = theirs->set_data_ptr(c10::DataPtr());
    theirs->set_data_ptr(mine->set_data_ptr(std::move(taken)));
  }
}

double FlatParameters::grad_squares() const {
  double sum = 0;
  for (const auto& g : grads_) sum += sum_of_squares(g);
  return sum;
}

double sum_of_squares(const torch::Tensor& t) {
  constexpr int64_t kBlock = 4096;
  if (!t.defined() || t.numel() == 0) return 0;
  torch::NoGradGuard no_grad;
  torch::Tensor flat = t.reshape({-1});
  // A reduced precision (bf16) is summed in float.
  auto in = flat.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  int64_t whole = flat.numel() / kBlock * kBlock;
  double sum = 0;
  if (whole > 0) {
    torch::Tensor norms = at::linalg_vector_norm(flat.narrow(0, 0, whole).view({-1, kBlock}), 2, {1}, false, in);
    sum += norms.to(torch::kDouble).pow(2).sum().item<double>();
  }
  if (whole < flat.numel()) sum += flat.narrow(0, whole, flat.numel() - whole).to(torch::kDouble).pow(2).sum().item<double>();
  return sum;
}

}  // namespace pt::model
