#include "runtime/trainer.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/median.h"
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
  EvaluationTally tally;
  for (int64_t first = 0; first < test.size(); first += batch_size) {
    int64_t n = std::min(batch_size, test.size() - first);
    tally.add(model, model.forward(test.input_rows(first, n)), test.target_rows(first, n));
  }
  model.train(true);
  return tally.result();
}

void EvaluationTally::add(const model::LayeredModel& model, const torch::Tensor& output, const torch::Tensor& target) {
  counts_ = counts_ && model.class_dim(output, target).has_value();
  correct_ += model.correct(output, target);
  targets_ += model.kept_targets(target);
  int64_t weight = model.loss_weight(target);
  loss_ += model.loss(output, target).item<double>() * static_cast<double>(weight);
  weight_ += weight;
}

Evaluation EvaluationTally::result() const {
  Evaluation e;
  if (counts_ && targets_ > 0) e.accuracy = static_cast<double>(correct_) / static_cast<double>(targets_);
  if (weight_ > 0) e.loss = loss_ / static_cast<double>(weight_);
  return e;
}

void check_train_options(const TrainOptions& train_options, const model::DataSplit& data) {
  check_train_values(train_options);
  if (train_options.batch_size > data.train.size())
    throw UsageError(str("--batch-size: ", train_options.batch_size, " is larger than the ", data.train.size(),
                         " training samples of ", data.name, model::held_out_text(data)));
}

void check_train_values(const TrainOptions& train_options) {
  if (train_options.batch_size < 1) throw UsageError(str("--batch-size: must be >= 1, got ", train_options.batch_size));
  if (train_options.epochs < 1 && train_options.steps < 1) throw UsageError(str("--epochs: must be >= 1, got ", train_options.epochs));
  if (train_options.steps < 0) throw UsageError(str("--steps: must be >= 0, got ", train_options.steps));
  if (train_options.eval_every < 0) throw UsageError(str("--eval-every: must be >= 0, got ", train_options.eval_every));
  // The weights are float32: a rate or decay past float's largest failed in the first step.
  constexpr double kFloatMax = std::numeric_limits<float>::max();
  if (!(train_options.sgd.lr > 0 && train_options.sgd.lr <= kFloatMax))
    throw UsageError(str("--lr: must be > 0 and at most ", kFloatMax, " (float32's largest), got ", train_options.sgd.lr));
  if (!(train_options.sgd.momentum >= 0 && train_options.sgd.momentum < 1)) throw UsageError(str("--momentum: must be in [0, 1), got ", train_options.sgd.momentum));
  const auto& schedules = model::lr_schedules();
  if (std::find(schedules.begin(), schedules.end(), train_options.sgd.lr_schedule) == schedules.end())
    throw UsageError(str("--lr-schedule: must be constant, cosine or linear, got '", train_options.sgd.lr_schedule, "'"));
  if (!(train_options.sgd.min_lr >= 0 && train_options.sgd.min_lr <= train_options.sgd.lr))
    throw UsageError(str("--min-lr: must be in [0, --lr] (", train_options.sgd.lr, "), got ", train_options.sgd.min_lr));
  if (train_options.sgd.min_lr > 0 && !model::lr_decays(train_options.sgd.lr_schedule))
    throw UsageError(str("--min-lr is where a decay ends; --lr-schedule ", train_options.sgd.lr_schedule,
                         " keeps --lr (give --lr-schedule cosine or linear)"));
  if (train_options.sgd.warmup_steps < 0) throw UsageError(str("--warmup-steps: must be >= 0, got ", train_options.sgd.warmup_steps));
  const auto& kinds = model::optimizer_kinds();
  if (std::find(kinds.begin(), kinds.end(), train_options.sgd.kind) == kinds.end())
    throw UsageError(str("--optimizer: must be sgd, adam or adamw, got '", train_options.sgd.kind, "'"));
  if (!(train_options.sgd.beta1 >= 0 && train_options.sgd.beta1 < 1 && train_options.sgd.beta2 >= 0 && train_options.sgd.beta2 < 1))
    throw UsageError(str("--betas: each must be in [0, 1), got ", train_options.sgd.beta1, ",", train_options.sgd.beta2));
  if (!(train_options.sgd.eps > 0 && train_options.sgd.eps <= 1)) throw UsageError(str("--eps: must be in (0, 1], got ", train_options.sgd.eps));
  const model::OptimizerOptions defaults;
  if (train_options.sgd.adam() && train_options.sgd.momentum != defaults.momentum)
    throw UsageError(str("--momentum is sgd's; --optimizer ", train_options.sgd.kind, " takes --betas"));
  // As --momentum under adam: a run that meant adamw and forgot --optimizer trained with sgd, its
  // --betas 0.9,0.95 and --eps unread.
  if (!train_options.sgd.adam() && (train_options.sgd.beta1 != defaults.beta1 ||
                                    train_options.sgd.beta2 != defaults.beta2 || train_options.sgd.eps != defaults.eps))
    throw UsageError(str("--betas and --eps are adam's and adamw's; --optimizer ", train_options.sgd.kind,
                         " takes --momentum"));
  if (!(train_options.sgd.clip_grad_norm >= 0 && train_options.sgd.clip_grad_norm <= kFloatMax))
    throw UsageError(str("--clip-grad-norm: must be >= 0 (0: no clipping) and at most ", kFloatMax, ", got ",
                         train_options.sgd.clip_grad_norm));
  if (!(train_options.sgd.weight_decay >= 0 && train_options.sgd.weight_decay <= kFloatMax))
    throw UsageError(str("--weight-decay: must be >= 0 and at most ", kFloatMax, " (float32's largest), got ",
                         train_options.sgd.weight_decay));
  // As the betas under sgd: which parameters a decay of 0 shrinks changes nothing.
  if (train_options.sgd.weight_decay == 0 && train_options.sgd.weight_decay_on != defaults.weight_decay_on)
    throw UsageError(str("--weight-decay-on ", train_options.sgd.weight_decay_on,
                         ": --weight-decay is 0, so it shrinks no parameter; give --weight-decay"));
}

int64_t total_steps(const TrainOptions& train_options, int64_t training_samples) {
  return train_options.steps > 0 ? train_options.steps : train_options.epochs * (training_samples / std::max<int64_t>(1, train_options.batch_size));
}

namespace {

// LibTorch's own optimizer of `optimizer`'s kind: one worker trains as PyTorch does, the reference the
// pipelines' flat optimizer (model/optimizer.h) is held to.
// Two groups, as torch.optim users set them: the parameters weight decay shrinks, and the others
// without it (OptimizerOptions::weight_decay_on).
template <typename Optim, typename Options>
std::unique_ptr<torch::optim::Optimizer> with_groups(const std::vector<torch::Tensor>& params,
                                                     const model::OptimizerOptions& optimizer, Options options) {
  std::vector<torch::Tensor> decayed, kept;
  for (const auto& p : params) (optimizer.decays(p) ? decayed : kept).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decayed, std::make_unique<Options>(options));
  if (!kept.empty()) groups.emplace_back(kept, std::make_unique<Options>(Options(options).weight_decay(0)));
  return std::make_unique<Optim>(groups, options);
}

std::unique_ptr<torch::optim::Optimizer> torch_optimizer(const std::vector<torch::Tensor>& params,
                                                         const model::OptimizerOptions& optimizer) {
  if (optimizer.kind == "adam")
    return with_groups<torch::optim::Adam>(params, optimizer,
                                           torch::optim::AdamOptions(optimizer.lr).betas({optimizer.beta1, optimizer.beta2})
                                               .eps(optimizer.eps).weight_decay(optimizer.weight_decay));
  if (optimizer.kind == "adamw")
    return with_groups<torch::optim::AdamW>(params, optimizer,
                                            torch::optim::AdamWOptions(optimizer.lr).betas({optimizer.beta1, optimizer.beta2})
                                                .eps(optimizer.eps).weight_decay(optimizer.weight_decay));
  return with_groups<torch::optim::SGD>(
      params, optimizer, torch::optim::SGDOptions(optimizer.lr).momentum(optimizer.momentum).weight_decay(optimizer.weight_decay));
}

}  // namespace

namespace {
constexpr const char* kNonFiniteCause = "a learning rate too high for the model, or inputs with NaN";
constexpr const char* kDivergedAdvice = "lower --lr, or warm it up over more --warmup-steps";

// A result's last losses: a caller's TrainResult may give only their mean.
std::vector<double> last_losses(const TrainResult& r) {
  return r.final_losses.empty() ? std::vector<double>{r.final_loss} : r.final_losses;
}
bool risen_tenfold(double first, double to) {
  return first != 0 && to - first >= (kDivergedRise - 1) * std::fabs(first);
}
}  // namespace

std::string divergence(double first, const std::vector<double>& recent, int64_t steps, bool shuffled) {
  double mean = std::accumulate(recent.begin(), recent.end(), 0.0) / std::max<size_t>(1, recent.size());
  if (!std::isfinite(mean)) return str("the loss is ", mean, " after ", steps, " steps (", kNonFiniteCause, ")");
  if (!shuffled) return "";
  // The whole window's median, then the ending's (a blow-up in the last few steps).
  for (size_t k : {recent.size(), std::min<size_t>(recent.size(), kEndingSteps)})
    if (double mid = median({recent.end() - static_cast<std::ptrdiff_t>(k), recent.end()}); risen_tenfold(first, mid))
      return str("the loss rose from ", first, " (the first step's) to ", mid, " (the median of the last ", k,
                 " steps), by ", kDivergedRise - 1, " times the first's size or more (a learning rate too high for the "
                 "model or its optimizer)");
  return "";
}

bool diverged_for_good(double first, const std::vector<double>& recent, bool shuffled) {
  double mean = std::accumulate(recent.begin(), recent.end(), 0.0) / std::max<size_t>(1, recent.size());
  if (!std::isfinite(mean)) return true;
  return shuffled && static_cast<int64_t>(recent.size()) >= kFinalLossSteps && risen_tenfold(first, median(recent));
}

void check_not_diverged(const TrainResult& r) {
  if (r.steps <= 0 || !r.loss_known) return;
  if (std::string why = divergence(r.first_loss, last_losses(r), r.steps, r.shuffled); !why.empty())
    throw RuntimeFailure(str("training diverged: ", why, "; ", kDivergedAdvice));
}

void check_loss_finite(double loss, int64_t step) {
  if (!std::isfinite(loss))
    throw TrainingDiverged(str("training diverged: the loss is ", loss, " at step ", step, " (", kNonFiniteCause,
                             "); the run stopped there; ", kDivergedAdvice));
}

std::string unlearned_note(const TrainResult& r) {
  if (r.steps <= 0 || !r.loss_known) return "";
  std::vector<double> last = last_losses(r);
  double mid = median(last);
  std::string notes;
  if (risen_tenfold(r.first_loss, r.final_loss) && divergence(r.first_loss, last, r.steps, r.shuffled).empty())
    notes = str("note: the loss spiked: the mean of the last ", last.size(), " steps is ", r.final_loss,
                ", their median ", mid, ", from ", r.first_loss, " at the first step (a learning rate that overshoots "
                "at times; a lower --lr or more --warmup-steps steadies it)");
  if (r.steps >= kLearnedSteps && mid >= r.first_loss)
    notes += str(notes.empty() ? "" : "\n", "note: the loss did not fall: ", r.first_loss, " at the first step, ", mid,
                 " over the last ", last.size(), " (their median; a learning rate too high, which a lower --lr or more "
                 "--warmup-steps mends, or one too low to move it in ", r.steps, " steps)");
  return notes;
}

TrainResult train_single_worker(model::LayeredModel& model, const model::DataSplit& data, const TrainOptions& train_options) {
  check_train_options(train_options, data);
  model::BatchSampler sampler(data.train.size(), train_options.batch_size, train_options.seed, train_options.shuffle, data.train.shard_sizes());
  int64_t per_epoch = sampler.batches_per_epoch();
  int64_t total = total_steps(train_options, data.train.size());
  std::unique_ptr<torch::optim::Optimizer> optimizer = torch_optimizer(model.unique_parameters(), train_options.sgd);
  Progress progress(total, train_options.metrics_path, train_options.quiet);
  model.train(true);
  TrainResult result;
  result.shuffled = train_options.shuffle;
  std::deque<double> recent;
  double train_ms = 0;
  model::OptimizerOptions schedule = train_options.sgd;
  schedule.total_steps = total;
  for (int64_t step = 0; step < total; ++step) {
    double t0 = wall_ms();
    auto idx = sampler.batch(step);
    auto x = data.train.gather_inputs(idx);
    auto y = data.train.gather_targets(idx);
    double lr = model::learning_rate(schedule, step);
    for (auto& group : optimizer->param_groups()) group.options().set_lr(lr);
    optimizer->zero_grad();
    model.set_draw_key(step);  // as a one-stage pipeline of one microbatch keys it
    auto loss = model.loss(model.forward(x), y);
    loss.backward();
    double grad_norm = -1;
    if (train_options.sgd.clip_grad_norm > 0)
      grad_norm = torch::nn::utils::clip_grad_norm_(model.unique_parameters(), train_options.sgd.clip_grad_norm);
    double step_t0 = wall_ms();
    optimizer->step();
    model.device_step(0, model.num_layers(), wall_ms() - step_t0, /*stashed=*/false);
    double loss_value = loss.item<double>();
    train_ms += wall_ms() - t0;
    if (step == 0) result.first_loss = loss_value;
    recent.push_back(loss_value);
    if (static_cast<int64_t>(recent.size()) > kFinalLossSteps) recent.pop_front();
    StepRecord rec{step + 1, step / per_epoch, loss_value, (step + 1) * train_options.batch_size / (train_ms / 1000), -1,
                   train_ms / 1000};
    rec.grad_norm = grad_norm;
    rec.lr = lr;
    progress.step(rec);
    check_loss_finite(loss_value, step + 1);
    bool epoch_end = (step + 1) % per_epoch == 0 || step + 1 == total;
    if (train_options.evaluate && (epoch_end || (train_options.eval_every > 0 && (step + 1) % train_options.eval_every == 0))) {
      Evaluation e = evaluate(model, data.test, train_options.batch_size);
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
  result.samples_per_s = total * train_options.batch_size / result.seconds;
  result.final_losses.assign(recent.begin(), recent.end());
  result.final_loss = std::accumulate(recent.begin(), recent.end(), 0.0) / std::max<size_t>(1, recent.size());
  result.peak_rss_bytes = {model::process_peak_rss_bytes()};
  result.one_process = true;
  result.language_model = model.task() == model::Task::kLanguageModel;
  return result;
}

}  // namespace pt::runtime
