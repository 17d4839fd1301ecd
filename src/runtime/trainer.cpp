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

double evaluate_accuracy(model::LayeredModel& model, const model::Dataset& test, int64_t batch_size) {
  torch::NoGradGuard no_grad;
  model.train(false);
  int64_t correct = 0, total = 0;
  for (int64_t first = 0; first < test.size(); first += batch_size) {
    int64_t n = std::min(batch_size, test.size() - first);
    auto out = model.forward(test.inputs.narrow(0, first, n));
    auto target = test.targets.narrow(0, first, n);
    correct += model.correct(out, target);
    total += target.numel();
  }
  model.train(true);
  if (!model.has_accuracy() && model.task() != model::Task::kEmulated) return -1;  // mse: no accuracy
  return total ? static_cast<double>(correct) / total : 0;
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
  if (!(o.sgd.weight_decay >= 0 && o.sgd.weight_decay <= kFloatMax))
    throw UsageError(str("--weight-decay: must be >= 0 and at most ", kFloatMax, " (float32's largest), got ",
                         o.sgd.weight_decay));
}

int64_t total_steps(const TrainOptions& o, int64_t training_samples) {
  return o.steps > 0 ? o.steps : o.epochs * (training_samples / std::max<int64_t>(1, o.batch_size));
}

TrainResult train_single_worker(model::LayeredModel& model, const model::DataSplit& data, const TrainOptions& o) {
  check_train_options(o, data);
  model::BatchSampler sampler(data.train.size(), o.batch_size, o.seed, o.shuffle, data.train.shard_sizes());
  int64_t per_epoch = sampler.batches_per_epoch();
  int64_t total = total_steps(o, data.train.size());
  torch::optim::SGD sgd(model.unique_parameters(),
                        torch::optim::SGDOptions(o.sgd.lr).momentum(o.sgd.momentum).weight_decay(o.sgd.weight_decay));
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
    for (auto& group : sgd.param_groups()) {
      model::SgdOptions schedule = o.sgd;
      schedule.total_steps = total;
      static_cast<torch::optim::SGDOptions&>(group.options()).lr(model::learning_rate(schedule, step));
    }
    sgd.zero_grad();
    auto loss = model.loss(model.forward(x), y);
    loss.backward();
    double step_t0 = wall_ms();
    sgd.step();
    model.device_step(0, model.num_layers(), wall_ms() - step_t0);
    double loss_value = loss.item<double>();
    train_ms += wall_ms() - t0;
    recent.push_back(loss_value);
    if (recent.size() > 50) recent.pop_front();
    StepRecord rec{step + 1, step / per_epoch, loss_value, (step + 1) * o.batch_size / (train_ms / 1000), -1,
                   train_ms / 1000};
    progress.step(rec);
    bool epoch_end = (step + 1) % per_epoch == 0 || step + 1 == total;
    if (o.evaluate && (epoch_end || (o.eval_every > 0 && (step + 1) % o.eval_every == 0))) {
      rec.test_accuracy = evaluate_accuracy(model, data.test, o.batch_size);
      result.test_accuracy = rec.test_accuracy;
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
  return result;
}

}  // namespace pt::runtime
