#include "runtime/trainer.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "model/batch_sampler.h"
#include "model/memory_meter.h"
#include "runtime/progress.h"

namespace pt::runtime {

torch::Tensor gather(const torch::Tensor& t, const std::vector<int64_t>& indices) {
  auto idx = torch::from_blob(const_cast<int64_t*>(indices.data()), {static_cast<int64_t>(indices.size())},
                              torch::kInt64);
  return t.index_select(0, idx);
}

Evaluation evaluate(model::LayeredModel& model, const model::Dataset& test, int64_t batch_size) {
  torch::NoGradGuard no_grad;
  model.train(false);
  int64_t correct = 0, total = 0;
  double loss = 0;
  for (int64_t first = 0; first < test.size(); first += batch_size) {
    int64_t n = std::min(batch_size, test.size() - first);
    auto out = model.forward(test.inputs.narrow(0, first, n));
    auto target = test.targets.narrow(0, first, n);
    correct += model.correct(out, target);
    total += target.numel();
    loss += model.loss(out, target).item<double>() * static_cast<double>(n);  // a batch's mean, weighed by its samples
  }
  model.train(true);
  Evaluation e;
  if (model.has_accuracy() || model.task() == model::Task::kEmulated) e.accuracy = total ? static_cast<double>(correct) / total : 0;
  if (test.size() > 0) e.loss = loss / static_cast<double>(test.size());
  return e;
}

void check_train_options(const TrainOptions& o, const model::DataSplit& data) {
  check_train_values(o);
  if (o.batch_size > data.train.size())
    throw UsageError(str("--batch-size: ", o.batch_size, " is larger than the ", data.train.size(),
                         " training samples of ", data.name));
}

void check_train_values(const TrainOptions& o) {
  if (o.batch_size < 1) throw UsageError(str("--batch-size: must be >= 1, got ", o.batch_size));
  if (o.epochs < 1 && o.steps < 1) throw UsageError(str("--epochs: must be >= 1, got ", o.epochs));
  if (o.steps < 0) throw UsageError(str("--steps: must be >= 0, got ", o.steps));
  if (o.eval_every < 0) throw UsageError(str("--eval-every: must be >= 0, got ", o.eval_every));
  // The weights are float32: a rate or decay past float's largest failed in the first step.
  constexpr double kFloatMax = std::numeric_limits<float>::max();
  if (!(o.sgd.lr > 0 && o.sgd.lr <= kFloatMax))
    throw UsageError(str("--lr: must be > 0 and at most ", kFloatMax, " (float32's largest), got ", o.sgd.lr));
  if (!(o.sgd.momentum >= 0 && o.sgd.momentum < 1)) throw UsageError(str("--momentum: must be in [0, 1), got ", o.sgd.momentum));
  if (o.sgd.lr_schedule != "constant" && o.sgd.lr_schedule != "cosine")
    throw UsageError(str("--lr-schedule: must be constant or cosine, got '", o.sgd.lr_schedule, "'"));
  if (o.sgd.warmup_steps < 0) throw UsageError(str("--warmup-steps: must be >= 0, got ", o.sgd.warmup_steps));
  const auto& kinds = model::optimizer_kinds();
  if (std::find(kinds.begin(), kinds.end(), o.sgd.kind) == kinds.end())
    throw UsageError(str("--optimizer: must be sgd, adam or adamw, got '", o.sgd.kind, "'"));
  if (!(o.sgd.beta1 >= 0 && o.sgd.beta1 < 1 && o.sgd.beta2 >= 0 && o.sgd.beta2 < 1))
    throw UsageError(str("--betas: each must be in [0, 1), got ", o.sgd.beta1, ",", o.sgd.beta2));
  if (!(o.sgd.eps > 0 && o.sgd.eps <= 1)) throw UsageError(str("--eps: must be in (0, 1], got ", o.sgd.eps));
  if (o.sgd.adam() && o.sgd.momentum != model::OptimizerOptions{}.momentum)
    throw UsageError(str("--momentum is sgd's; --optimizer ", o.sgd.kind, " takes --betas"));
  if (!(o.sgd.clip_grad_norm >= 0 && o.sgd.clip_grad_norm <= kFloatMax))
    throw UsageError(str("--clip-grad-norm: must be >= 0 (0: no clipping) and at most ", kFloatMax, ", got ",
                         o.sgd.clip_grad_norm));
  if (!(o.sgd.weight_decay >= 0 && o.sgd.weight_decay <= kFloatMax))
    throw UsageError(str("--weight-decay: must be >= 0 and at most ", kFloatMax, " (float32's largest), got ",
                         o.sgd.weight_decay));
}

int64_t total_steps(const TrainOptions& o, int64_t training_samples) {
  return o.steps > 0 ? o.steps : o.epochs * (training_samples / std::max<int64_t>(1, o.batch_size));
}

namespace {

// LibTorch's own optimizer of `o`'s kind: one worker trains as PyTorch does, the reference the
// pipelines' flat optimizer (model/optimizer.h) is held to.
std::unique_ptr<torch::optim::Optimizer> torch_optimizer(const std::vector<torch::Tensor>& params,
                                                         const model::OptimizerOptions& o) {
  if (o.kind == "adam")
    return std::make_unique<torch::optim::Adam>(
        params, torch::optim::AdamOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
  if (o.kind == "adamw")
    return std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
  return std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
}

}  // namespace

TrainResult train_single_worker(model::LayeredModel& model, const model::DataSplit& data, const TrainOptions& o) {
  check_train_options(o, data);
  model::BatchSampler sampler(data.train.size(), o.batch_size, o.seed, o.shuffle, data.train.shard_sizes());
  int64_t per_epoch = sampler.batches_per_epoch();
  int64_t total = total_steps(o, data.train.size());
  std::unique_ptr<torch::optim::Optimizer> optimizer = torch_optimizer(model.unique_parameters(), o.sgd);
  Progress progress(total, o.metrics_path, o.quiet);
  model.train(true);
  TrainResult result;
  std::deque<double> recent;
  double train_ms = 0;
  for (int64_t step = 0; step < total; ++step) {
    double t0 = wall_ms();
    auto idx = sampler.batch(step);
    auto x = data.train.gather_inputs(idx);
    auto y = data.train.gather_targets(idx);
    for (auto& group : optimizer->param_groups()) {
      model::OptimizerOptions schedule = o.sgd;
      schedule.total_steps = total;
      group.options().set_lr(model::learning_rate(schedule, step));
    }
    optimizer->zero_grad();
    auto loss = model.loss(model.forward(x), y);
    loss.backward();
    double grad_norm = -1;
    if (o.sgd.clip_grad_norm > 0)
      grad_norm = torch::nn::utils::clip_grad_norm_(model.unique_parameters(), o.sgd.clip_grad_norm);
    double step_t0 = wall_ms();
    optimizer->step();
    model.device_step(0, model.num_layers(), wall_ms() - step_t0);
    double loss_value = loss.item<double>();
    train_ms += wall_ms() - t0;
    recent.push_back(loss_value);
    if (recent.size() > 50) recent.pop_front();
    StepRecord rec{step + 1, step / per_epoch, loss_value, (step + 1) * o.batch_size / (train_ms / 1000), -1,
                   train_ms / 1000};
    rec.grad_norm = grad_norm;
    progress.step(rec);
    bool epoch_end = (step + 1) % per_epoch == 0 || step + 1 == total;
    if (o.evaluate && (epoch_end || (o.eval_every > 0 && (step + 1) % o.eval_every == 0))) {
      Evaluation e = evaluate(model, data.test, o.batch_size);
      rec.test_accuracy = e.accuracy;
      rec.test_loss = e.loss;
      result.test_accuracy = e.accuracy;
      result.test_loss = e.loss;
      progress.evaluated(rec);
    }
  }
  progress.finish();
  result.steps = total;
  result.seconds = train_ms / 1000;
  result.samples_per_s = total * o.batch_size / result.seconds;
  result.final_loss = std::accumulate(recent.begin(), recent.end(), 0.0) / std::max<size_t>(1, recent.size());
  result.peak_rss_bytes = {model::process_peak_rss_bytes()};
  result.one_process = true;
  result.language_model = model.task() == model::Task::kLanguageModel;
  return result;
}

}  // namespace pt::runtime
