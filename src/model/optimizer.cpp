#include "model/optimizer.h"

#include <algorithm>
#include <cmath>

#include "model/fused_step.h"

namespace pt::model {

const std::vector<std::string>& optimizer_kinds() {
  static const std::vector<std::string> kinds{"sgd", "adam", "adamw"};
  return kinds;
}

const std::vector<std::string>& zero_grad_modes() {
  static const std::vector<std::string> modes{"none", "zeros"};
  return modes;
}

const std::vector<std::string>& lr_schedules() {
  static const std::vector<std::string> schedules{"constant", "cosine", "linear"};
  return schedules;
}

double learning_rate(const OptimizerOptions& optimizer_options, int64_t step) {
  const int64_t warmup = std::max<int64_t>(optimizer_options.warmup_steps, 0), total = optimizer_options.total_steps;
  const int64_t ramp = std::max(warmup, optimizer_options.stale_warmup_steps);
  double lr = optimizer_options.lr;
  if (step < ramp) lr *= static_cast<double>(step + 1) / static_cast<double>(ramp);
  // The decay from the rate to min_lr over the steps after the warm-up, as LM recipes lay them out
  // (the two were multiplied from step 0, so a warm-up of 100 in 150 steps never reached 0.4 of
  // the rate). Not any one recipe's steps exactly: step s < W takes (s+1)/W of the rate
  // (transformers' schedules s/W, nanoGPT's (s+1)/(W+1)), so steps W-1 and W both take the whole
  // rate; after it, transformers' linear schedule (T-s)/(T-W) and nanoGPT's cosine, each to min_lr.
  if (lr_decays(optimizer_options.lr_schedule) && total > 0 && step >= warmup) {
    double span = static_cast<double>(std::max<int64_t>(total - warmup, 1));
    double done = std::clamp(static_cast<double>(step - warmup) / span, 0.0, 1.0);
    double left = optimizer_options.lr_schedule == "cosine" ? 0.5 * (1 + std::cos(M_PI * done)) : 1 - done;
    double floor = std::min(optimizer_options.min_lr, lr);  // never above a stale stage's ramp
    lr = floor + (lr - floor) * left;
  }
  return lr;
}

Optimizer::Optimizer(FlatParameters& flat, const OptimizerOptions& options)
    : flat_(flat), slot_steps_(flat.slots().size(), 0), options_(options) {
  state_.resize(options_.state_copies());
  for (auto& buffers : state_)
    for (const auto& g : flat_.grads()) buffers.push_back(torch::zeros_like(g));
}

int64_t Optimizer::steps_taken() const {
  return slot_steps_.empty() ? 0 : *std::max_element(slot_steps_.begin(), slot_steps_.end());
}

void Optimizer::set_steps_taken(size_t slot, int64_t steps) {
  slot_steps_.at(slot) = steps;
  runs_.clear();
}

const std::vector<std::vector<Optimizer::Run>>& Optimizer::runs() const {
  if (!runs_.empty() || flat_.weights().empty()) return runs_;
  const auto& slots = flat_.slots();
  std::vector<size_t> order(slots.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::make_pair(slots[a].buffer, slots[a].offset) < std::make_pair(slots[b].buffer, slots[b].offset);
  });
  runs_.assign(flat_.weights().size(), {});
  for (size_t i : order) {
    auto& runs = runs_[slots[i].buffer];
    if (runs.empty() || runs.back().steps != slot_steps_[i]) runs.push_back({slots[i].offset, 0, slot_steps_[i]});
  }
  for (size_t b = 0; b < runs_.size(); ++b) {  // each run to the next's start, the first from 0
    auto& runs = runs_[b];
    if (runs.empty()) runs.push_back({0, 0, 0});
    runs.front().offset = 0;
    for (size_t r = 0; r < runs.size(); ++r)
      runs[r].numel = (r + 1 < runs.size() ? runs[r + 1].offset : flat_.weights()[b].numel()) - runs[r].offset;
  }
  return runs_;
}

namespace {

// One flat buffer's step in one pass (fused_step.h) where its dtype is float or double.
template <typename T>
void fused_step(torch::Tensor& w, torch::Tensor& d, std::vector<torch::Tensor>& state, int64_t decayed,
                const OptimizerOptions& o, double grad_scale, double lr, double correction1, double correction2_sqrt) {
  T* state0 = state.empty() ? nullptr : state[0].data_ptr<T>();
  if (!o.adam()) {
    SgdStepArgs a{grad_scale, lr, o.weight_decay, o.momentum};
    sgd_step<T>(w.data_ptr<T>(), d.data_ptr<T>(), state0, w.numel(), decayed, a);
    return;
  }
  AdamStepArgs a{grad_scale, lr, o.weight_decay, o.kind == "adamw", o.beta1, o.beta2, o.eps, correction1,
                 correction2_sqrt};
  adam_step<T>(w.data_ptr<T>(), d.data_ptr<T>(), state0, state[1].data_ptr<T>(), w.numel(), decayed, a);
}

}  // namespace

void Optimizer::step(double grad_scale, int64_t minibatch) {
  torch::NoGradGuard no_grad;
  std::vector<char> taken = taken_slots();
  if (std::find(taken.begin(), taken.end(), 0) == taken.end()) {
    count_step();
    for (size_t b = 0; b < flat_.grads().size(); ++b)
      for (const Run& r : runs()[b]) step_run(b, r, grad_scale, minibatch);
  } else {
    step_taken(taken, grad_scale, minibatch);
  }
  flat_.clear_reached();
}

std::vector<char> Optimizer::taken_slots() const {
  std::vector<char> taken(flat_.slots().size());
  for (size_t k = 0; k < taken.size(); ++k)
    taken[k] = flat_.reached(k) || (options_.zero_grad == "zeros" && slot_steps_[k] > 0) || !flat_.gradient_is_zero(k);
  return taken;
}

void Optimizer::step_taken(const std::vector<char>& taken, double grad_scale, int64_t minibatch) {
  const auto& slots = flat_.slots();
  for (size_t k = 0; k < slots.size(); ++k)  // a slot not taken holds a zero gradient (taken_slots)
    if (taken[k]) {
      ++slot_steps_[k];
      has_state_ = !state_.empty();
    }
  runs_.clear();
  // The taken slots in buffer order, neighbours of one step count stepped as one range.
  std::vector<size_t> order;
  for (size_t k = 0; k < slots.size(); ++k)
    if (taken[k]) order.push_back(k);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::make_pair(slots[a].buffer, slots[a].offset) < std::make_pair(slots[b].buffer, slots[b].offset);
  });
  for (size_t i = 0; i < order.size();) {
    const auto& first = slots[order[i]];
    Run r{first.offset, first.numel, slot_steps_[order[i]]};
    size_t j = i + 1;
    for (; j < order.size(); ++j) {
      const auto& s = slots[order[j]];
      if (s.buffer != first.buffer || s.offset != r.offset + r.numel || slot_steps_[order[j]] != r.steps) break;
      r.numel += s.numel;
    }
    step_run(first.buffer, r, grad_scale, minibatch);
    i = j;
  }
}

void Optimizer::step_run(size_t b, const Run& r, double grad_scale, int64_t minibatch) {
  double lr = learning_rate(options_, minibatch), wd = options_.weight_decay;
  double correction1 = 1 - std::pow(options_.beta1, static_cast<double>(r.steps));
  double correction2_sqrt = std::sqrt(1 - std::pow(options_.beta2, static_cast<double>(r.steps)));
  torch::Tensor d = flat_.grads()[b], w = flat_.weights()[b];
  std::vector<torch::Tensor> state;
  for (auto& s : state_) state.push_back(s[b]);
  if (r.numel != w.numel()) {  // a part of the buffer (other counts beside it)
    d = d.narrow(0, r.offset, r.numel);
    w = w.narrow(0, r.offset, r.numel);
    for (auto& s : state) s = s.narrow(0, r.offset, r.numel);
  }
  // The parameters weight decay shrinks lead the buffer (OptimizerOptions::decays).
  int64_t decayed = std::clamp<int64_t>(flat_.leading(b) - r.offset, 0, r.numel);
  if (w.scalar_type() == torch::kFloat || w.scalar_type() == torch::kDouble) {
    if (w.scalar_type() == torch::kFloat)
      fused_step<float>(w, d, state, decayed, options_, grad_scale, lr, correction1, correction2_sqrt);
    else
      fused_step<double>(w, d, state, decayed, options_, grad_scale, lr, correction1, correction2_sqrt);
    return;
  }
  // Other dtypes (a model's own half or bfloat16 weights): the same formula a pass per operation,
  // each rounded to the dtype as LibTorch rounds it. The update is formed in the gradient
  // buffer, which is zeroed after.
  if (grad_scale != 1.0) d.mul_(grad_scale);
  torch::Tensor d_decayed = d.narrow(0, 0, decayed), w_decayed = w.narrow(0, 0, decayed);
  if (!options_.adam()) {
    if (wd != 0) d_decayed.add_(w_decayed, wd);
    if (options_.momentum != 0) {
      state[0].mul_(options_.momentum).add_(d);
      w.add_(state[0], -lr);
    } else {
      w.add_(d, -lr);
    }
  } else {
    if (options_.kind == "adamw") {
      w_decayed.mul_(1 - lr * wd);
    } else if (wd != 0) {
      d_decayed.add_(w_decayed, wd);
    }
    torch::Tensor &m = state[0], &v = state[1];
    m.mul_(options_.beta1).add_(d, 1 - options_.beta1);
    v.mul_(options_.beta2).addcmul_(d, d, 1 - options_.beta2);
    // denom formed in the gradient buffer, which is done with: no allocation.
    torch::sqrt_out(d, v).div_(correction2_sqrt).add_(options_.eps);
    w.addcdiv_(m, d, -lr / correction1);
  }
  d.zero_();
}

void Optimizer::count_step() {
  for (auto& s : slot_steps_) ++s;
  for (auto& runs : runs_)
    for (auto& r : runs) ++r.steps;
  has_state_ = !state_.empty();
}

void Optimizer::predict(std::vector<torch::Tensor>& weights, int64_t steps, int64_t minibatch) const {
  if (state_.empty() || !has_state_ || steps <= 0) return;
  torch::NoGradGuard no_grad;
  double lr = learning_rate(options_, minibatch) * static_cast<double>(steps);
  if (!options_.adam()) {
    for (size_t b = 0; b < weights.size(); ++b) weights[b].add_(state_[0][b], -lr);
    return;
  }
  // The denominator a piece at a time: whole, it was a buffer-sized tensor on every prediction,
  // over what the memory model counts (4 MiB on a stage of 1M parameters). The gradient buffer,
  // where step forms it, may hold gradients still being summed.
  constexpr int64_t kPiece = 1 << 18;
  for (size_t b = 0; b < weights.size(); ++b) {
    torch::Tensor denom = torch::empty({std::min(weights[b].numel(), kPiece)}, weights[b].options());
    for (const Run& r : runs()[b]) {
      double t = static_cast<double>(std::max<int64_t>(r.steps, 1));
      double correction1 = 1 - std::pow(options_.beta1, t);
      double correction2_sqrt = std::sqrt(1 - std::pow(options_.beta2, t));
      for (int64_t at = r.offset; at < r.offset + r.numel; at += kPiece) {
        int64_t len = std::min(kPiece, r.offset + r.numel - at);
        torch::Tensor d = denom.narrow(0, 0, len);
        torch::sqrt_out(d, state_[1][b].narrow(0, at, len)).div_(correction2_sqrt).add_(options_.eps);
        weights[b].narrow(0, at, len).addcdiv_(state_[0][b].narrow(0, at, len), d, -lr / correction1);
      }
    }
  }
}

torch::Tensor Optimizer::state(const FlatParameters::Slot& s, int which, bool storage) const {
  if ((!has_state_ && !storage) || which >= static_cast<int>(state_.size())) return {};
  return state_[which][s.buffer].narrow(0, s.offset, s.numel).view(s.param.sizes());
}

void Optimizer::set_state(const FlatParameters::Slot& s, int which, const torch::Tensor& m) {
  if (which >= static_cast<int>(state_.size())) return;  // plain SGD keeps none; sgd no second
  torch::Tensor view = state_[which][s.buffer].narrow(0, s.offset, s.numel).view(s.param.sizes());
  if (!m.defined()) {
    view.zero_();
    return;
  }
  view.copy_(m);
  has_state_ = true;
}

}  // namespace pt::model
