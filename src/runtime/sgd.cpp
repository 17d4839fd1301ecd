#include "runtime/sgd.h"

#include <algorithm>
#include <cmath>

namespace pt::runtime {

double learning_rate(const SgdOptions& o, int64_t step) {
  double lr = o.lr;
  if (o.warmup_steps > 0 && step < o.warmup_steps) lr *= static_cast<double>(step + 1) / o.warmup_steps;
  if (o.lr_schedule == "cosine" && o.total_steps > 0) {
    double t = std::clamp(static_cast<double>(step) / o.total_steps, 0.0, 1.0);
    lr *= 0.5 * (1 + std::cos(M_PI * t));
  }
  return lr;
}

Sgd::Sgd(std::vector<torch::Tensor> params, const SgdOptions& options)
    : params_(std::move(params)), momentum_(params_.size()), options_(options) {}

void Sgd::step(double grad_scale, int64_t minibatch) {
  torch::NoGradGuard no_grad;
  double lr = learning_rate(options_, minibatch);
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    if (!p.grad().defined()) continue;
    torch::Tensor w = p.data();
    torch::Tensor d = grad_scale == 1.0 ? p.grad().clone() : p.grad() * grad_scale;
    if (options_.weight_decay != 0) d.add_(w, options_.weight_decay);
    if (options_.momentum != 0) {
      if (!momentum_[i].defined()) momentum_[i] = d.clone();
      else momentum_[i].mul_(options_.momentum).add_(d);
      d = momentum_[i];
    }
    w.add_(d, -lr);
    p.mutable_grad().zero_();
  }
}

}  // namespace pt::runtime
