#pragma once
// SGD with momentum and weight decay, as torch::optim::SGD computes it (dampening 0, no
// Nesterov):  d = g + wd * w;  buf = d (first step) or momentum * buf + d;  w -= lr * buf.
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

struct SgdOptions {
  double lr = 0.02;
  double momentum = 0.9;
  double weight_decay = 0.0;
  // Learning rate over the run: "constant", or "cosine" (decays to 0 at total_steps, the run's
  // minibatch count, which the trainer fills in); both after a linear warm-up of warmup_steps.
  std::string lr_schedule = "constant";
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;
};

// The learning rate of the step that applies minibatch `step` (0-based).
double learning_rate(const SgdOptions& o, int64_t step);

// Steps the flat buffers of a stage replica (flat_parameters.h) in place, a few whole-buffer
// passes and no allocation. The momentum buffer starts at zero, which gives the first step
// exactly torch's buf = d (0 * momentum + d == d).
class Sgd {
 public:
  Sgd(FlatParameters& flat, const SgdOptions& options);
  // Applies the accumulated gradients (scaled by `grad_scale`) of minibatch `minibatch` (which
  // picks the learning rate, sgd.lr_schedule) and zeroes them.
  void step(double grad_scale, int64_t minibatch);
  // Weight prediction (SpecTrain, Chen et al. 2018, §4.2): where the gradient computed on
  // `weights` (a copy of the flat weights, flat_parameters.h) will be applied `steps` steps from
  // now, moves the copy to where those steps will likely have taken the weights, w - steps * lr
  // * buf: momentum's velocity is the best estimate of the coming updates. The learning rate is
  // that of the step `minibatch`. No-op without momentum (no velocity to follow).
  void predict(std::vector<torch::Tensor>& weights, int64_t steps, int64_t minibatch) const;
  bool predicts() const { return options_.momentum != 0; }
  // One parameter's momentum (a copy); undefined before the first step, as torch reports it.
  torch::Tensor momentum(const FlatParameters::Slot& s) const;
  // Loads one parameter's momentum (checkpoints); undefined means none yet (zeros).
  void set_momentum(const FlatParameters::Slot& s, const torch::Tensor& m);

 private:
  FlatParameters& flat_;
  std::vector<torch::Tensor> momentum_;  // one per flat buffer
  bool has_momentum_ = false;            // a step ran or a checkpoint loaded some
  SgdOptions options_;
};

}  // namespace pt::model
