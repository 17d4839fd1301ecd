// Checks of a user's data against the model it trains (data_checks.h).
#include "model/data_checks.h"

#include "model/check_forward.h"

#include <algorithm>

#include <cmath>
#include <iostream>
#include <optional>
#include <sstream>

#include "core/error.h"

namespace pt::model {

namespace {

// "H, W" of [N, C, H, W] from dimension `from` on.
std::string dims_after(const torch::Tensor& t, int64_t from) {
  std::string out;
  for (int64_t d = from; d < t.dim(); ++d) out += str(d > from ? ", " : "", t.size(d));
  return out;
}

// What the model outputs per minibatch of N, "[N, 10]": the probe's own batch is no figure of
// the model's (a 2-sample probe's [2, 10] was printed as what the model outputs).
std::string per_sample_shape(const torch::Tensor& out) {
  return str("[N", out.dim() > 1 ? ", " : "", dims_after(out, 1), "]");
}

// A NaN or an infinity in float data trained on until the loss turned NaN, and the run then
// blamed the learning rate: the first sample holding one is named instead. In blocks of rows,
// so that a large file does not need a mask of its own size.
struct NonFinite {
  int64_t row;
  float value;
};

std::optional<NonFinite> first_non_finite(const torch::Tensor& t) {
  if (!t.is_floating_point() || t.numel() == 0) return std::nullopt;
  // Blocks of about a million elements: isfinite takes an abs of its input, a float copy of the
  // block beside the data (4096 samples of 3072 floats were 48 MiB).
  const int64_t kRows = std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(1, t.numel() / t.size(0)));
  for (int64_t first = 0; first < t.size(0); first += kRows) {
    torch::Tensor block = t.narrow(0, first, std::min(kRows, t.size(0) - first));
    torch::Tensor bad = block.isfinite().logical_not().reshape({block.size(0), -1}).any(1);
    if (!bad.any().item<bool>()) continue;
    int64_t row = bad.to(torch::kInt64).argmax().item<int64_t>();
    torch::Tensor sample = block[row].reshape({-1});
    return NonFinite{first + row, sample.index({sample.isfinite().logical_not()})[0].item<float>()};
  }
  return std::nullopt;
}

void refuse_non_finite(const NonFinite& bad, const std::string& key, const std::string& source) {
  throw FormatError(str(source, ": '", key, "' holds ", bad.value, " (sample ", bad.row,
                        "): a NaN or an infinity in the data makes the loss NaN; clean or drop such samples"));
}

void check_finite(const torch::Tensor& t, const std::string& key, const std::string& source) {
  if (auto bad = first_non_finite(t)) refuse_non_finite(*bad, key, source);
}

}  // namespace

// The inputs against what the model takes (before any forward, which would fail inside a layer).
void check_inputs(const torch::Tensor& x, const std::string& xk, const LayeredModel& model, const std::string& source) {
  torch::Dtype want = model.integer_input() ? torch::kInt64 : torch::kFloat32;
  if (x.scalar_type() != want)
    throw FormatError(str(source, ": '", xk, "' is ", dtype_of(x), "; ", model.name(), " takes ",
                          c10::toString(want), model.integer_input() ? " token ids" : " (x.float())"));
  std::vector<int64_t> sample(x.sizes().begin() + std::min<int64_t>(1, x.dim()), x.sizes().end());
  if (x.dim() < 1 || sample != model.sample_shape()) {
    std::ostringstream want_shape;
    want_shape << "[N";
    for (int64_t d : model.sample_shape()) want_shape << ", " << d;
    throw FormatError(str(source, ": '", xk, "' has shape ", shape_of(x), "; ", model.name(), " takes ",
                          want_shape.str(), "]"));
  }
  if (x.size(0) == 0) throw FormatError(str(source, ": '", xk, "' holds no samples"));
  check_finite(x, xk, source);
}

namespace {

// A file's own loss on the probe's output and the first targets: it must take them, give the
// output a gradient and return one number. A loss that detached the output trained nothing, exit
// 0; one per sample (reduction 'none') failed at the first step in a C++ backtrace.
void check_own_loss_trains(const LayeredModel& model, const torch::Tensor& out, const torch::Tensor& y, const std::string& yk,
                           const std::string& source) {
  torch::AutoGradMode grad(true);
  // Not a leaf, as in training: a loss may change its input in place (out -= out.max(...)).
  torch::Tensor scores = out.is_floating_point() ? out.detach().requires_grad_(true).clone() : out;
  torch::Tensor loss;
  try {
    loss = model.loss(scores, y);
  } catch (const std::exception& e) {
    throw FormatError(str(source, ": the model file's own loss refuses '", yk, "' (", shape_of(y), ", ", dtype_of(y),
                          ") against the output ", shape_of(out), ": ", last_line(e.what())));
  }
  if (loss.numel() != 1)
    throw FormatError(str(source, ": the model file's own loss returns a tensor of shape ", shape_of(loss),
                          ", where a loss is one number (a mean over the samples: reduction 'mean', not 'none')"));
  if (scores.requires_grad() && !loss.requires_grad())
    throw FormatError(str(source, ": the model file's own loss gives the output no gradient, so nothing would train "
                          "(does it detach the output, or score it through argmax or a comparison?)"));
}

// The built-in loss on the probe's output and the first targets, once their shapes and values
// pass: an output LibTorch's CPU kernels cannot take (float16) failed at the first step, named by
// the kernel alone ("log_softmax_lastdim_kernel_impl" not implemented for 'Half').
void check_loss_runs(const LayeredModel& model, const torch::Tensor& out, const torch::Tensor& y, const std::string& source) {
  // The probe's samples: an LM's output flattened to [N x T, V] holds T rows a sample.
  const int64_t rows = model.task() == Task::kLanguageModel && out.dim() == 2 && y.dim() >= 1 && y.size(0) > 0
                           ? std::max<int64_t>(1, y[0].numel())
                           : 1;
  const int64_t n = std::min(out.size(0) / rows, y.size(0));
  std::string why;
  try {
    model.loss(out.narrow(0, 0, n * rows), y.narrow(0, 0, n));
  } catch (const std::exception& e) {
    why = last_line(without_backtrace(e));
  }
  if (!why.empty()) {
    Task task = model.task();
    throw FormatError(str(source, ": the model's output (", dtype_of(out), ", ", per_sample_shape(out), ") fails ",
                          task == Task::kRegression ? "--loss mse" : task == Task::kLanguageModel ? "--loss lm" : "cross-entropy",
                          ": ", why,
                          out.scalar_type() == torch::kHalf
                              ? " (LibTorch's CPU kernels lack float16: return output.float(), or train with --precision bf16)"
                              : ""));
  }
}

}  // namespace

void check_lm_output(const torch::Tensor& out, c10::IntArrayRef sample, const std::string& source) {
  // [N, T, V], [N, T, 1, V] or [N x T, V] (flattened): --loss lm reads its rows of V as the tokens in order.
  const int64_t d = static_cast<int64_t>(sample.size());
  const int64_t per_sample = c10::multiply_integers(sample);
  if (out.dim() == 2 && per_sample > 0 && out.size(0) % per_sample == 0) return;
  bool ones = true;
  for (int64_t k = d + 1; k + 1 < out.dim(); ++k) ones = ones && out.size(k) == 1;
  if (out.dim() >= d + 2 && out.sizes().slice(1, sample.size()) == sample && ones) return;
  std::string tokens = "[N";
  for (int64_t t : sample) tokens += str(", ", t);
  throw FormatError(str(source, ": --loss lm needs the model's output [N, T, V] for tokens [N, T] (a score for each "
                        "id of the vocabulary at every token, the samples first), but it outputs ", shape_of(out),
                        " for tokens ", tokens, "] (a sequence-first model's [T, N, V]: transpose it to [N, T, V])"));
}

// The targets against x and what the model outputs.
void check_targets(const torch::Tensor& x, const torch::Tensor& y, const std::string& xk, const std::string& yk,
                   const LayeredModel& model, const torch::Tensor& out, const std::string& source) {
  if (y.dim() < 1 || y.size(0) != x.size(0))
    throw FormatError(str(source, ": '", yk, "' has shape ", shape_of(y), " but '", xk, "' holds ", x.size(0), " samples"));
  Task task = model.task();
  if (task == Task::kRegression) {
    if (y.scalar_type() != torch::kFloat32)
      throw FormatError(str(source, ": '", yk, "' is ", dtype_of(y), "; --loss mse needs float32 targets"));
    if (y.sizes().slice(1) != out.sizes().slice(1))
      throw FormatError(str(source, ": '", yk, "' has shape ", shape_of(y), " but the model outputs ", per_sample_shape(out)));
    check_finite(y, yk, source);
    check_loss_runs(model, out, y, source);
    return;
  }
  if (model.has_own_loss()) {
    // The file's own loss decides what targets fit: it runs on the probe's output and the
    // first targets, and its error is the data's. Then on every target, against the first
    // sample's output repeated, where that output is small (a class's scores, not a language
    // model's vocabulary per token): a label past the classes at sample 40 failed at its
    // minibatch, in a traceback that named neither the file nor the sample.
    // Checked on as many samples as both hold: a test set of one sample against a 2-sample probe.
    const int64_t n = std::min(out.size(0), y.size(0));
    check_own_loss_trains(model, out.narrow(0, 0, n), y.narrow(0, 0, n), yk, source);
    // A NaN or an infinity in float targets the loss masks (a missing label) is its business; one
    // that makes the loss NaN is the data's (it trained until the run blamed --lr).
    if (auto bad = first_non_finite(y)) {
      torch::NoGradGuard no_grad;
      bool masked = false;
      try {
        masked = torch::isfinite(model.loss(out.narrow(0, 0, 1), y.narrow(0, bad->row, 1))).all().item<bool>();
      } catch (const std::exception&) {  // refused below, naming the sample
      }
      if (!masked) refuse_non_finite(*bad, yk, source);
    }
    torch::NoGradGuard no_grad;
    constexpr int64_t kMostValues = int64_t{1} << 22;  // a piece's repeated output, 16 MiB of floats
    int64_t per_sample = out.numel() / std::max<int64_t>(1, out.size(0)), rows = kMostValues / std::max<int64_t>(1, per_sample);
    if (out.size(0) < 1 || per_sample > (int64_t{1} << 16)) return;
    std::vector<int64_t> repeat(static_cast<size_t>(out.dim()), 1);
    std::string why;
    auto refuses = [&](int64_t first, int64_t n) {
      repeat[0] = n;
      try {
        model.loss(out.narrow(0, 0, 1).repeat(repeat), y.narrow(0, first, n));
        return false;
      } catch (const std::exception& e) {
        why = last_line(e.what());
        return true;
      }
    };
    for (int64_t first = 0; first < y.size(0); first += rows) {
      int64_t n = std::min(rows, y.size(0) - first);
      if (!refuses(first, n)) continue;
      int64_t passes = 0, fails = n;  // the shortest run of the piece's samples it refuses
      while (fails - passes > 1) {
        int64_t mid = (passes + fails) / 2;
        (refuses(first, mid) ? fails : passes) = mid;
      }
      refuses(first, fails);
      torch::Tensor sample = y[first + fails - 1];
      throw FormatError(str(source, ": the model file's own loss refuses '", yk, "' at sample ", first + fails - 1,
                            sample.numel() == 1 ? str(" (", sample.item<double>(), ")") : std::string(),
                            ", where the first samples passed: ", why));
    }
    return;
  }
  if (y.scalar_type() != torch::kInt64)
    throw FormatError(str(source, ": '", yk, "' is ", dtype_of(y), "; class ids are int64 (y.long())"));
  bool lm = task == Task::kLanguageModel;
  if (lm) check_lm_output(out, x.sizes().slice(1), source);
  if (!lm && out.dim() < 2)
    throw FormatError(str(source, ": cross-entropy needs the model's output [N, C] (a score for each class, or [N, C, "
                          "d1, ...] for one per position), but it outputs ", per_sample_shape(out),
                          " (for a regression model: --loss mse)"));
  // Cross-entropy as PyTorch's: output [N, C, d1..dk] and class ids [N, d1..dk] (one per pixel
  // or token; k = 0 for a class per sample).
  bool fits = lm ? y.sizes() == x.sizes() : out.dim() >= 2 && y.sizes().slice(1) == out.sizes().slice(2);
  // A language model's output [N, T, V] with token targets [N, T] is what --loss lm takes: said,
  // where cross-entropy's own rule left the user with [N, V] to guess from.
  bool looks_like_lm = !lm && model.integer_input() && out.dim() == 3 && y.sizes() == x.sizes();
  if (!fits)
    throw FormatError(str(
        source, ": '", yk, "' has shape ", shape_of(y), "; ",
        lm ? "--loss lm needs one next token per input token, the shape of '" + xk + "'"
           : str("the model outputs ", per_sample_shape(out), ", so cross-entropy needs class ids of shape [N",
                 out.dim() > 2 ? ", " : "", dims_after(out, 2), "]"),
        looks_like_lm ? str(" (a language model's next tokens, the shape of '", xk, "': give --loss lm; '", yk,
                            "' must be '", xk, "' shifted by one token, y[:, t] = the token after x[:, t])")
                      : std::string()));
  int64_t classes = lm ? out.size(-1) : out.size(1);
  int64_t lo = y.min().item<int64_t>(), hi = y.max().item<int64_t>();
  if (lo == LayeredModel::kIgnoredTarget) {  // padding, which cross-entropy skips
    torch::Tensor kept = y.ne(LayeredModel::kIgnoredTarget);
    if (!kept.any().item<bool>())
      throw FormatError(str(source, ": every target of '", yk, "' is ", LayeredModel::kIgnoredTarget,
                            " (padding, which cross-entropy skips): there is nothing to learn or test"));
    lo = y.masked_select(kept).min().item<int64_t>();
  }
  if (lo < 0 || hi >= classes)
    throw FormatError(str(source, ": '", yk, "' holds ", lo < 0 ? lo : hi, " but the model outputs ", classes,
                          lm ? " token scores (ids 0.." : " classes (ids 0..", classes - 1, ", or ",
                          LayeredModel::kIgnoredTarget, " for a target to skip)"));
  check_loss_runs(model, out, y, source);
}

std::string no_accuracy_reason(const LayeredModel& model, const torch::Tensor& out, const torch::Tensor& y) {
  if (!model.has_own_loss() || !y.defined() || y.is_floating_point() || model.class_dim(out, y)) return "";
  std::string shapes = str("the model outputs ", per_sample_shape(out), " against targets [N",
                           y.dim() > 1 ? ", " : "", dims_after(y, 1), "]");
  bool both = LayeredModel::classes_along(out, y, 1);  // and so the last, or class_dim had taken it
  return str("no test accuracy is counted (the test loss is): the model file's own loss does not say which of its "
             "output's dimensions holds the classes, and ", shapes, ", where ",
             both ? str("dimension 1 and the last (", out.dim() - 1, ") both fit") : std::string("neither dimension 1 nor the last fits"),
             " (--loss lm or cross-entropy, which replace the file's loss, count along the last or dimension 1)");
}

void say_if_no_accuracy(const DataSplit& split, const LayeredModel& model, const torch::Tensor& out) {
  std::string why = no_accuracy_reason(model, out, split.test.targets);
  if (!why.empty()) std::cerr << "note: " << why << "\n";
}

// The runtime scales each microbatch's loss by 1/m, so a minibatch's loss is the mean of its
// microbatches': the whole minibatch's only for a loss that averages over its samples. A file's
// own loss that sums them, or averages over the targets it does not ignore, trained another
// model once split (8x the gradient of a padded batch, 1/m of a summed one), exit 0. Tried in
// eval mode (each sample's output its own), whole and in two halves: on the first samples, or
// where targets are skipped (-100), on those keeping the fewest of them beside those keeping the
// most: the first 8 of data sorted longest first kept all theirs, and its padded minibatches
// later trained another model (2.6e-2 off eager's weights). The first half holds the sample
// keeping the most too: a half of padding alone has no mean (NaN), a refusal naming nothing.
torch::Tensor loss_check_rows(const torch::Tensor& x, const torch::Tensor& y) {
  const int64_t count = x.size(0), n = std::min<int64_t>(8, count) / 2 * 2, h = n / 2;
  if (n >= 2 && !y.is_floating_point() && y.size(0) == count) {
    torch::Tensor kept = y.reshape({count, -1}).ne(LayeredModel::kIgnoredTarget).sum(1);
    if (kept.ne(kept.max()).any().item<bool>()) {
      torch::Tensor order = kept.argsort();
      return torch::cat({order.narrow(0, 0, h - 1), order.narrow(0, count - 1, 1), order.narrow(0, count - 1 - h, h)});
    }
  }
  return torch::arange(n);
}

std::string loss_not_a_mean(LayeredModel& model, const torch::Tensor& x, const torch::Tensor& y) {
  if (!model.has_own_loss()) return "";
  const torch::Tensor rows = loss_check_rows(x, y);
  const int64_t n = rows.size(0), h = n / 2;
  if (n < 2) return "";
  const std::string which =
      rows.equal(torch::arange(n)) ? str("the first ", n, " samples") : str(n, " samples keeping unequal numbers of targets");
  CheckForward forward(model);
  double whole = 0, halves = 0;
  try {
    torch::Tensor out = forward(x.index_select(0, rows)), target = y.index_select(0, rows);
    whole = model.loss(out, target).item<double>();
    halves = (model.loss(out.narrow(0, 0, h), target.narrow(0, 0, h)).item<double>() +
              model.loss(out.narrow(0, h, h), target.narrow(0, h, h)).item<double>()) / 2;
  } catch (const std::exception&) {  // the checks before name what fails
    return "";
  }
  if (std::abs(whole - halves) <= 1e-4 * std::max({1.0, std::abs(whole), std::abs(halves)})) return "";
  return str("its loss on ", which, " is ", whole, ", but the mean of its losses on their two halves is ", halves);
}

std::string without_backtrace(const std::exception& e) {
  const auto* c10 = dynamic_cast<const c10::Error*>(&e);
  return c10 ? c10->what_without_backtrace() : e.what();
}

std::string explain_training_error(const std::exception& e, const std::string& remedy) {
  const std::string error = without_backtrace(e);
  // Autograd's check that what a backward saved was not changed since: in a pipeline, by a later
  // microbatch's forward on the same stage (an embedding's max_norm renormalises its weight).
  if (error.find("has been modified by an inplace operation") != std::string::npos)
    return "a layer changes in place, at each forward, a tensor an earlier microbatch's backward needs (an embedding "
           "with max_norm renormalises its weight so): its stage must run each backward before its next forward, as "
           "eager PyTorch does: one worker, or --schedule 1f1b or gpipe with --microbatches 1 (LibTorch said: " +
           error.substr(0, error.find('\n')) + ")";
  const std::string said = "Expected more than 1 value per channel when training";
  size_t at = error.rfind(said);
  if (at == std::string::npos) return error;
  // TorchScript's traceback only walks down to BatchNorm's own check: its last line says it all.
  std::string line = error.substr(at, error.find('\n', at) - at);
  return "a BatchNorm layer got one value per channel: " + remedy + " (LibTorch said: " + line + ")";
}

}  // namespace pt::model
