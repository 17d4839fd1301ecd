#pragma once
// A user's data checked against the model before training (own_data.h loads it; the forwards
// that run the model on it are check_forward.h's): the inputs' dtype and shape, the targets against
// what the model outputs, and a loss kept in the model file against the way a pipeline averages
// microbatches. Each error is a FormatError naming the file (`source`), the key and what the model
// expects.
#include <string>

#include <torch/torch.h>

#include "model/dataset.h"
#include "model/layered_model.h"

namespace pt::model {

// `x` (key `xk`) against the model's input: dtype, shape, finite values.
void check_inputs(const torch::Tensor& x, const std::string& xk, const LayeredModel& model, const std::string& source);
// `y` (key `yk`) against `x` and the model's output `out`: the task's targets, or the file's own loss.
// A language model's output for windows of `sample` tokens: [N, T, V], the samples first.
void check_lm_output(const torch::Tensor& out, c10::IntArrayRef sample, const std::string& source);
void check_targets(const torch::Tensor& x, const torch::Tensor& y, const std::string& xk, const std::string& yk,
                   const LayeredModel& model, const torch::Tensor& out, const std::string& source);
// Why a model file's own loss leaves no test accuracy for integer targets `y` against its output
// `out` (LayeredModel::class_dim): its shapes fit no class dimension, or two; "" where one fits,
// and for every other loss and float targets (mse's, which have none to count).
std::string no_accuracy_reason(const LayeredModel& model, const torch::Tensor& out, const torch::Tensor& y);
// The note of no_accuracy_reason on the test set's targets, where there is one: it printed the
// argmax along dimension 1 of an LM's [N, T, V] against [N, T] targets, 0.00% or a figure of no meaning.
void say_if_no_accuracy(const DataSplit& split, const LayeredModel& model, const torch::Tensor& out);
// A model file's own loss tried on 8 samples whole and in two halves: "" where it is a mean over
// samples, else how it showed otherwise (DataSplit::loss_not_a_mean).
std::string loss_not_a_mean(LayeredModel& model, const torch::Tensor& x, const torch::Tensor& y);
// The rows of (x, y) loss_not_a_mean tries, in its halves' order: the first 8, or where samples
// keep unequal numbers of targets (-100 skipped), those keeping the fewest beside those keeping the
// most. A folder of shards offers each shard's and tries them together.
torch::Tensor loss_check_rows(const torch::Tensor& x, const torch::Tensor& y);

// A model's error at a forward in training, said in the user's terms first where LibTorch's (a
// TorchScript traceback) does not: BatchNorm needs two values per channel or more, which a
// microbatch of one sample without spatial extent does not give; `remedy` says why the batch holds
// one and which flags give it more. Other errors as they are.
inline constexpr const char* kMicrobatchOfOne =
    "its microbatch holds one sample (a replica's share of --batch-size over --microbatches); give a larger "
    "--batch-size or fewer --microbatches";
// LibTorch's own errors without their C++ backtrace, which says nothing to the user.
std::string without_backtrace(const std::exception& e);
std::string explain_training_error(const std::exception& error, const std::string& remedy = kMicrobatchOfOne);

}  // namespace pt::model
