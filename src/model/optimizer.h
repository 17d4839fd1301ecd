#pragma once
// The optimizers a stage steps its flat buffers with (flat_parameters.h), as PyTorch 1.13
// computes them (single tensor, no foreach), so a pipeline's weights are one worker's:
//   sgd    d = g + wd * w;  buf = momentum * buf + d (buf = d at the first step);  w -= lr * buf
//          (dampening 0, no Nesterov);
//   adam   g += wd * w (L2, torch.optim.Adam);  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//          w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)  (t: this parameter's steps);
//   adamw  the same without the L2 term, the decay decoupled first: w *= 1 - lr * wd
//          (Loshchilov and Hutter, torch.optim.AdamW).
// It updates the weights through .data(), outside autograd's version counting: in an
// asynchronous pipeline a minibatch's forward graph still refers to the weights when another
// minibatch's step updates them, and weight stashing (stage_replica.h) restores the values
// that graph used before its backward runs.
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "model/flat_parameters.h"

namespace pt::model {

// The default learning rates: sgd's suits the zoo's models; adam's and adamw's are torch.optim's
// (at sgd's, Adam's loss on mnist-cnn rose from 2.3 to 2.3e6).
constexpr double kSgdLr = 0.02, kAdamLr = 1e-3;

struct OptimizerOptions {
  double lr = kSgdLr;
  double momentum = 0.9;  // sgd
  double weight_decay = 0.0;
  // Which parameters weight decay shrinks: "all" (as torch.optim applies it to a group), or
  // "matrices", those of two or more dimensions (linear and convolution weights, embeddings),
  // not biases and norm scales, as nanoGPT and most LM recipes set their groups.
  std::string weight_decay_on = "all";
  bool decays(const torch::Tensor& p) const { return weight_decay_on != "matrices" || p.dim() >= 2; }
  // Learning rate over the run: "constant", or "cosine" or "linear", which decay from lr to min_lr
  // at total_steps (the run's minibatch count, which the trainer fills in), as nanoGPT's cosine
  // and transformers' linear schedule do; each after a linear warm-up of warmup_steps.
  std::string lr_schedule = "constant";
  double min_lr = 0;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;
  // pipedream: a stale stage's longer ramp (runtime/worker.h, stale_warmup); the cosine still
  // starts after warmup_steps, as on every other stage.
  int64_t stale_warmup_steps = 0;
  // > 0: before each step the gradient is scaled to at most this norm, as PyTorch's
  // clip_grad_norm_ scales it: by max / (norm + 1e-6) where that is under 1. The norm is the whole
  // model's under a synchronous schedule (every stage's gradient, a replicated stage's and a
  // split tie's once: worker.h); under pipedream and 2bw each stage's own (its step has no other).
  double clip_grad_norm = 0;
  std::string kind = "sgd";  // sgd, adam or adamw (train --optimizer)
  // A parameter no backward reached in a step (FlatParameters::reached), as torch.optim treats
  // one after optimizer.zero_grad(set_to_none=...) (train --zero-grad): "none" (torch 2's
  // default) skips it that step: no decay, no momentum, no Adam count; "zeros" (torch 1.13's
  // default) skips it until its first gradient, and steps it with a zero gradient after.
  std::string zero_grad = "none";
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam, adamw (train --betas, --eps)

  bool adam() const { return kind == "adam" || kind == "adamw"; }
  // The state tensors it keeps per parameter: sgd's momentum buffer (none without momentum),
  // adam's two moments.
  int state_copies() const { return adam() ? 2 : momentum != 0 ? 1 : 0; }
};

// The optimizer kinds train accepts, for its flag and its errors.
const std::vector<std::string>& optimizer_kinds();
// OptimizerOptions::zero_grad's values.
const std::vector<std::string>& zero_grad_modes();
// The learning-rate schedules (OptimizerOptions::lr_schedule), and whether one decays to min_lr.
const std::vector<std::string>& lr_schedules();
inline bool lr_decays(const std::string& schedule) { return schedule == "cosine" || schedule == "linear"; }

// The learning rate of the step that applies minibatch `step` (0-based): a linear warm-up over
// warmup_steps (or a stale stage's longer one) to lr, then (cosine) half a cosine from lr to 0
// over the steps of total_steps after warmup_steps.
double learning_rate(const OptimizerOptions& optimizer_options, int64_t step);

// Steps the flat buffers of a stage replica in place: one pass over float and double buffers
// (fused_step.h), a pass per operation over others, no allocation. The state buffers start at zero, which gives sgd's first step exactly torch's
// buf = d (0 * momentum + d == d) and adam's its zero-initialised moments.
class Optimizer {
 public:
  Optimizer(FlatParameters& flat, const OptimizerOptions& options);
  // Applies the accumulated gradients (scaled by `grad_scale`) of minibatch `minibatch` (which
  // picks the learning rate, lr_schedule) to the parameters they reached (OptimizerOptions::
  // zero_grad) and zeroes them.
  void step(double grad_scale, int64_t minibatch);
  // A step of weights that hold no values (an emulated model's, emulated_layer.h): counted as
  // step counts it, with no pass over the buffers; the device's time for it is waited instead
  // (LayeredModel::device_step). The host's passes took 0.46 s a step on vgg16's last stage (132M floats), where
  // the profile's device took 5 ms.
  void count_step();
  // Weight prediction (SpecTrain, Chen et al. 2018, §4.2): where the gradient computed on
  // `weights` (a copy of the flat weights, flat_parameters.h) will be applied `steps` steps from
  // now, moves the copy to where those steps will likely have taken the weights: sgd follows its
  // velocity, w - steps * lr * buf; adam its last step's direction, w - steps * lr * m^ / (sqrt(v^)
  // + eps) with the moments' bias corrections at its step count (the decay left out). The
  // learning rate is that of the step `minibatch`. No-op before a first step, or for sgd without
  // momentum (no velocity to follow).
  void predict(std::vector<torch::Tensor>& weights, int64_t steps, int64_t minibatch) const;
  bool predicts() const { return options_.state_copies() > 0; }
  const OptimizerOptions& options() const { return options_; }

  // One parameter's state `which` (0: sgd's momentum or adam's first moment, 1: adam's second),
  // a view of the live state (the next step changes it); undefined before the first step, as
  // torch reports it.
  // `storage`: the view even before the first step (zeros), where a checkpoint loads into.
  torch::Tensor state(const FlatParameters::Slot& s, int which, bool storage = false) const;
  // Loads one parameter's state `which` (checkpoints); undefined means none yet (zeros).
  void set_state(const FlatParameters::Slot& s, int which, const torch::Tensor& m);
  // adam's steps so far of slot `slot` (its bias corrections'), as torch.optim keeps a count per
  // parameter; a checkpoint carries one per layer. Layers resumed into one stage from a plan
  // whose stages stepped at other rates (pipedream's replicated stage steps once a round) keep
  // their own: one count for the stage restarted a layer's bias correction (0.12 of a weight off).
  int64_t steps_taken(size_t slot) const { return slot_steps_.at(slot); }
  int64_t steps_taken() const;  // the largest
  void set_steps_taken(size_t slot, int64_t steps);

 private:
  // A range of a flat buffer whose parameters have taken the same number of steps.
  struct Run {
    int64_t offset = 0, numel = 0, steps = 0;
  };
  const std::vector<std::vector<Run>>& runs() const;  // per buffer, covering it
  // Per slot, whether this step takes it: a gradient reached it, here or (its sum non-zero) on a
  // replica or a tie's other stage; under zero_grad "zeros", also any slot stepped before.
  std::vector<char> taken_slots() const;
  void step_taken(const std::vector<char>& taken, double grad_scale, int64_t minibatch);
  void step_run(size_t buffer, const Run& run, double grad_scale, int64_t minibatch);

  FlatParameters& flat_;
  std::vector<std::vector<torch::Tensor>> state_;  // [which][flat buffer]
  bool has_state_ = false;                         // a step ran or a checkpoint loaded some
  std::vector<int64_t> slot_steps_;                // per slot of flat_
  mutable std::vector<std::vector<Run>> runs_;     // of slot_steps_; empty: to be formed
  OptimizerOptions options_;
};

}  // namespace pt::model
