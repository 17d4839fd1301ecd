#include "model/sgd.h"

#include <algorithm>
#include <cmath>

namespace pt::model {

double learning_rate(const SgdOptions& o, int64_t step) {
  double lr = o.lr;
  if (o.warmup_steps > 0 && step < o.warmup_steps) lr *= static_cast<double>(step + 1) / o.warmup_steps;
  if (o.lr_schedule == "cosine" && o.total_steps > 0) {
    double t = std::clamp(static_cast<double>(step) / o.total_steps, 0.0, 1.0);
    lr *= 0.5 * (1 + std::cos(M_PI * t));
  }
  return lr;
}

Sgd::Sgd(FlatParameters& flat, const SgdOptions& options) : flat_(flat), options_(options) {
  if (options_.momentum != 0)
    for (const auto& g : flat_.grads()) momentum_.push_back(torch::zeros_like(g));
}

void Sgd::step(double grad_scale, int64_t minibatch) {
  torch::NoGradGuard no_grad;
  double lr = learning_rate(options_, minibatch);
  for (size_t b = 0; b < flat_.grads().size(); ++b) {
    // d = g * scale + wd * w, formed in the gradient buffer, which is zeroed after.
    torch::Tensor d = flat_.grads()[b], w = flat_.weights()[b];
    if (grad_scale != 1.0) d.mul_(grad_scale);
    if (options_.weight_decay != 0) d.add_(w, options_.weight_decay);
    if (options_.momentum != 0) {
      momentum_[b].mul_(options_.momentum).add_(d);
      w.add_(momentum_[b], -lr);
    } else {
      w.add_(d, -lr);
    }
    d.zero_();
  }
  has_momentum_ = options_.momentum != 0;
}

void Sgd::predict(std::vector<torch::Tensor>& weights, int64_t steps, int64_t minibatch) const {
  if (momentum_.empty() || !has_momentum_ || steps <= 0) return;
  torch::NoGradGuard no_grad;
  double lr = learning_rate(options_, minibatch);
  for (size_t b = 0; b < weights.size(); ++b) weights[b].add_(momentum_[b], -lr * static_cast<double>(steps));
}

torch::Tensor Sgd::momentum(const FlatParameters::Slot& s) const {
  if (!has_momentum_) return {};
  return momentum_[s.buffer].narrow(0, s.offset, s.numel).view(s.param.sizes()).clone();
}

void Sgd::set_momentum(const FlatParameters::Slot& s, const torch::Tensor& m) {
  if (momentum_.empty()) return;  // plain SGD keeps none
  torch::Tensor view = momentum_[s.buffer].narrow(0, s.offset, s.numel).view(s.param.sizes());
  if (!m.defined()) {
    view.zero_();
    return;
  }
  view.copy_(m);
  has_momentum_ = true;
}

}  // namespace pt::model
