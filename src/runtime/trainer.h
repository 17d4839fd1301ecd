#pragma once
// Single-worker training: the reference every parallel schedule is tested against, and the
// baseline of the benchmarks. A plain loop: minibatch -> forward -> loss -> backward -> SGD.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/dataset.h"
#include "model/layered_model.h"
#include "model/optimizer.h"

namespace pt::runtime {

struct TrainOptions {
  int64_t epochs = 1;
  int64_t steps = 0;          // > 0: stop after this many minibatches (overrides epochs)
  int64_t batch_size = 64;
  model::OptimizerOptions sgd;
  uint64_t seed = 0;
  bool shuffle = true;  // false: minibatch k is samples [k*B, (k+1)*B) of every epoch (--no-shuffle)
  std::string metrics_path;   // per-step CSV; "" = none
  bool quiet = false;         // no progress output
  bool evaluate = true;       // test accuracy after each epoch and at the end
  int64_t eval_every = 0;     // > 0: also every this many minibatches (pipelines drain there)
};

// The steps a run's final loss is the mean of.
constexpr int64_t kFinalLossSteps = 50;

struct TrainResult {
  int64_t steps = 0;
  double seconds = 0;          // training time, evaluation excluded
  double samples_per_s = 0;
  // The run's first step's loss, the weights' before any step: a resumed run's is its checkpoint's
  // (CheckpointManifest::first_loss), where that records it, so a resume judges the whole run.
  double first_loss = 0;
  double final_loss = 0;       // mean loss of the last kFinalLossSteps steps
  std::vector<double> final_losses;  // those steps' losses, in order (divergence judges their median)
  double test_accuracy = -1;   // -1 when not evaluated
  // The test set's mean loss (a language model's: per token); none: not evaluated.
  std::optional<double> test_loss = std::nullopt;
  bool language_model = false; // its loss is per token: a perplexity is e^test_loss
  bool loss_known = true;       // false: emulated layers compute no loss (final_loss is no figure)
  bool shuffled = true;         // TrainOptions::shuffle: whether a loss's rise can say it diverged
  // Measured peak of the tensor memory each worker holds (model/memory_meter.h): its layers'
  // weights, gradients, optimizer state, stashed versions and activations; by worker, empty
  // when not measured.
  std::vector<int64_t> peak_memory_bytes;
  // The peak resident set of the process each worker ran in, as the OS counts it (VmHWM):
  // one figure repeated for the threads of one process; by worker, empty when not measured.
  std::vector<int64_t> peak_rss_bytes;
  // Gloo processes: of each one's resident set, the shared memory it mapped for its transfers on
  // one host (RssShmem, at the end: mapped for the whole run), which a plan's cap leaves out.
  std::vector<int64_t> shared_memory_bytes;
  bool one_process = false;  // the workers are threads of one process (peak_rss_bytes is its)
  bool one_host = true;      // and on this host, sharing its cores (gloo: GlooTransport::one_host)
};

// Throws RuntimeFailure where `r`'s loss diverged: not finite, or finite and risen by
// kDivergedRise - 1 times its start's size or more (10x a positive start; Adam at SGD's rate ended
// at 2.3e6 from 2.3, exit 0; a loss below 0, MSE less 2, from -0.56 to 5.6e28), in the median of
// its last steps or in that of its last kEndingSteps. A loss that learns falls; one 10x over the
// untrained weights' learned nothing a caller should keep. Medians, not the mean: one spike the
// run came back from (Adam at 0.2: 311,382 at step 2, 2.3 from step 10 on) is no divergence, and
// judged by the mean at a checkpoint it would stop a long run that recovered; the last steps'
// too, since a loss that blows up in its last few is no spike that recovered (0.05 to 2e6 over
// the last 14 of 60 steps passed the median of 50, exit 0, its checkpoint written).
constexpr int64_t kEndingSteps = 3;
constexpr double kDivergedRise = 10;
void check_not_diverged(const TrainResult& r);
// Throws TrainingDiverged where step `step`'s loss is NaN or infinite: a run stops at the first,
// since nothing trains back from NaN weights (mnist-cnn at --lr 1e6 read NaN from step 3 and
// ran its 3,000 steps and 94 test evaluations on, 47 s, to say so at the end).
struct TrainingDiverged : RuntimeFailure {
  using RuntimeFailure::RuntimeFailure;
};
void check_loss_finite(double loss, int64_t step);
// Why a loss that began at `first` and whose last steps (up to kFinalLossSteps of `steps`) read
// `recent` diverged, or "" where it did not: check_not_diverged's rule, which a checkpoint applies
// too before it keeps the weights. Minibatches in the data's order (`shuffled` false) rise and fall
// with it, so only a loss that is not finite says so: one-hot rows sorted by target rose from 7.5
// to 77.5 at a rate of 1e-30, and the run was failed as diverged, its checkpoint unwritten.
std::string divergence(double first, const std::vector<double>& recent, int64_t steps, bool shuffled = true);
// Whether divergence() holds over a whole window of kFinalLossSteps losses (or they are not
// finite): no spike a run comes back from. A checkpoint judged by fewer, or by the last
// kEndingSteps alone, met a spike it could not tell from a divergence (Adam at 0.2: 311,382 at
// step 2, 2.3 from step 10 on) and stopped the run at step 3 with --checkpoint-every 3 where it
// passed without: it skips that checkpoint instead, and the run goes on.
bool diverged_for_good(double first, const std::vector<double>& recent, bool shuffled = true);
// A loss whose mean rose as a divergence would but not its medians (a spike), and one whose last
// steps' median ended no lower than it started, over kLearnedSteps steps or more: "" where
// neither, else a note for each (not an error: a tiny rate ends there too, and a spike may pass).
// 50 steps, a whole window: at 100, mnist-cnn at --lr 0.3 ended 90 steps at chance (2.300 to
// 2.317, 10% accuracy) without a word.
constexpr int64_t kLearnedSteps = kFinalLossSteps;
std::string unlearned_note(const TrainResult& r);

TrainResult train_single_worker(model::LayeredModel& model, const model::DataSplit& data,
                                const TrainOptions& options);

// Accuracy and loss of `model` on data.test, in eval mode, no gradients, `batch_size` samples a forward:
// the training's, which fits. Batches of 1,000 needed 10x mnist-cnn's activations of a training
// step, over glibc's 32 MiB mmap threshold, and faulted them in afresh each time: 10 s to
// evaluate 10,000 samples here, against 0.6 s at the training's 64.
// What an evaluation measures: the share predicted right (-1 where the loss has none: mse) and
// the mean loss over the samples (cross-entropy's over the targets it keeps, a language model's per
// token; its perplexity is e^loss).
// A loss may be negative (a model file's own: a Gaussian NLL, a negative similarity), and NaN
// where training diverged: none means not evaluated (a -1 for it dropped every negative loss,
// and a pipeline's whole evaluation with it where no accuracy was counted).
struct Evaluation {
  double accuracy = -1;
  std::optional<double> loss = std::nullopt;
};
Evaluation evaluate(model::LayeredModel& model, const model::Dataset& test, int64_t batch_size);

// Sums a test set's batches into an Evaluation: each batch's mean loss weighed by what it is a
// mean over (LayeredModel::loss_weight), so that padding counts for nothing; the accuracy over
// the targets kept.
class EvaluationTally {
 public:
  void add(const model::LayeredModel& model, const torch::Tensor& output, const torch::Tensor& target);
  Evaluation result() const;

 private:
  bool counts_ = true;
  int64_t correct_ = 0, targets_ = 0, weight_ = 0;
  double loss_ = 0;
};

// The data rows of `indices` as one minibatch.
torch::Tensor gather(const torch::Tensor& t, const std::vector<int64_t>& indices);

// Checks option values, and the batch against the data; throws UsageError naming the flag.
void check_train_options(const TrainOptions& train_options, const model::DataSplit& data);
// The values alone, before any data or plan is looked at.
void check_train_values(const TrainOptions& train_options);

// The run's minibatch count (--steps, or --epochs of whole minibatches): the span of its
// learning-rate schedule.
int64_t total_steps(const TrainOptions& train_options, int64_t training_samples);

}  // namespace pt::runtime
