// The forwards the data checks run on the model (check_forward.h).
#include "model/check_forward.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "model/data_checks.h"

namespace pt::model {

std::string shape_of(const torch::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

std::string dtype_of(const torch::Tensor& t) { return std::string(c10::toString(t.scalar_type())); }

std::string last_line(const std::string& s) {
  size_t end = s.find_last_not_of(" \n");
  if (end == std::string::npos) return s;
  size_t start = s.rfind('\n', end);
  return s.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

CheckForward::CheckForward(LayeredModel& model) : model_(model) {
  for (int i = 0; i < model.num_layers(); ++i)
    if (model.holds(i))
      for (const auto& b : model.layer(i).module->buffers()) saved_.emplace_back(b, b.clone());
  model_.train(false);
}

CheckForward::~CheckForward() {
  model_.train(true);
  for (auto& [buffer, value] : saved_) buffer.copy_(value);
}

torch::Tensor CheckForward::operator()(const torch::Tensor& x) {
  torch::Tensor h = x.clone();
  for (int i = 0; i < model_.num_layers(); ++i) {
    std::vector<std::tuple<torch::Tensor, torch::Tensor, uint32_t>> weights;
    if (model_.holds(i))
      for (const auto& p : model_.layer(i).module->parameters())
        weights.emplace_back(p, p.detach().clone(), p._version());
    h = model_.forward(h, i, i + 1);
    for (auto& [p, value, version] : weights)
      if (p._version() != version) saved_.emplace_back(p, value);
  }
  return h;
}

namespace {

// The forwards these checks run load every layer of the model, one after another: a gloo worker
// that repeated its launcher's held the model's largest layer at its peak, not only its stage's
// (a 4-stage GPT's middle workers, 282 MiB before they built a layer of their own). A process
// that ran one leaves its result in its environment, which the workers it starts inherit: the
// same command (argv), model and input give the same result, and a worker whose parent recorded
// it takes it instead.
constexpr const char* kCheckedVar = "PIPETRAIN_CHECKED_FORWARDS";

std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string forward_key(const std::string& what, const LayeredModel& model, const torch::Tensor& x) {
  return str(what, " ", std::hash<std::string>()(command_line()), " ", model.name(), " ", model.file_sha256(), " ",
             model.num_layers(), " ", dtype_of(x), shape_of(x));
}

// What this process's parent recorded under `key`; "" when nothing.
std::string recorded_forward(const std::string& key) {
  const char* all = std::getenv(kCheckedVar);
  std::istringstream in(all ? all : "");
  std::string parent = std::to_string(::getppid()) + " ";
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + "=" + parent, 0) == 0) return line.substr(key.size() + 1 + parent.size());
  return "";
}

// One line per key, and none past 32 KiB in all (Linux refuses an environment string over
// 128 KiB to exec: the workers would not start). Past it a worker runs its forwards itself.
void record_forward(const std::string& key, const std::string& result) {
  constexpr size_t kMostBytes = size_t{32} << 10;
  const char* all = std::getenv(kCheckedVar);
  std::istringstream in(all ? all : "");
  std::string kept;
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + "=", 0) != 0) kept += line + "\n";
  kept += str(key, "=", ::getpid(), " ", result, "\n");
  if (kept.size() <= kMostBytes) ::setenv(kCheckedVar, kept.c_str(), 1);
}

// Where a bf16 forward fails and an fp32 one runs, the precision is to blame, not the data.
void blame_bf16(LayeredModel& model, const torch::Tensor& first, const std::string& why) {
  if (model.precision() != Precision::kBFloat16) return;
  model.set_precision(Precision::kFloat32);
  bool fp32_runs = true;
  try {
    CheckForward forward(model);
    forward(first);
  } catch (...) {
    fp32_runs = false;
  }
  model.set_precision(Precision::kBFloat16);
  if (fp32_runs)
    throw UsageError(str("--precision bf16: the model fails under bf16 autocast in evaluation mode without gradients (as "
                         "pipetrain checks and tests it), where it runs in fp32: ", why,
                         ". One known cause: PyTorch 1.13's fused nn.MultiheadAttention path, taken so, mixes bf16 and "
                         "fp32. Train in fp32"));
}

torch::Tensor probe_forward(LayeredModel& model, const torch::Tensor& first, const torch::Tensor& x,
                            const std::string& source) {
  std::string why;
  try {
    CheckForward forward(model);
    return forward(first);
  } catch (const Error&) {  // pipetrain's own: the model file's (a layer's archive read late), named already
    throw;
  } catch (const c10::Error& e) {
    why = e.what_without_backtrace();
  } catch (const std::exception& e) {  // TorchScript's interpreter raises its own kind, its traceback in what()
    why = e.what();
    size_t last = why.find_last_not_of("\n");
    size_t line = why.rfind('\n', last == std::string::npos ? 0 : last);
    if (line != std::string::npos) why = why.substr(line + 1);
  }
  why.erase(why.find_last_not_of(" \n") + 1);
  blame_bf16(model, first, why);
  throw FormatError(str(source, ": the model fails on 'x' of shape ", shape_of(x), ": ", why));
}

}  // namespace

// What the model computes on two samples: the targets are checked against it.
torch::Tensor probe_output(LayeredModel& model, const torch::Tensor& x, const std::string& source) {
  torch::Tensor first = x.narrow(0, 0, std::min<int64_t>(2, x.size(0)));
  std::string key = forward_key("output", model, first), known = recorded_forward(key);
  if (!known.empty()) {  // "<dtype index> <d0> <d1> ...": zeros of that shape stand for it
    std::istringstream in(known);
    int dtype = 0;
    in >> dtype;
    std::vector<int64_t> shape;
    for (int64_t d; in >> d;) shape.push_back(d);
    return torch::zeros(shape, torch::TensorOptions().dtype(static_cast<torch::ScalarType>(dtype)));
  }
  torch::Tensor out = probe_forward(model, first, x, source);
  std::string shape = std::to_string(static_cast<int>(out.scalar_type()));
  for (int64_t d : out.sizes()) shape += " " + std::to_string(d);
  record_forward(key, shape);
  return out;
}


// Token ids against what the model takes: the sample holding the largest id is run through it,
// and where the positions' largest ids differ, a sample of each position's largest: a packed
// input (a segment id in column 0 beside the tokens) gives each position an embedding of its own,
// and a segment id past its 3 rows passed the check of the sample holding the largest token. An id
// beyond an embedding's rows failed only when its minibatch came, after hours of training or at
// the final evaluation, in a traceback naming neither the file nor the id.
void check_token_ids(LayeredModel& model, const torch::Tensor& x, const std::string& xk, const std::string& source) {
  if (!model.integer_input()) return;
  int64_t lo = x.min().item<int64_t>(), hi = x.max().item<int64_t>();
  if (lo < 0) throw FormatError(str(source, ": '", xk, "' holds token id ", lo, "; ids are >= 0"));
  const torch::Tensor flat = x.reshape({x.size(0), -1});
  auto refused = [&](const torch::Tensor& sample, const std::string& what) -> std::string {
    std::string key = forward_key(str("token ", what), model, sample);
    if (recorded_forward(key) == "ok") return "";
    try {
      CheckForward forward(model);
      forward(sample);
    } catch (const std::exception& e) {
      const std::string why = last_line(without_backtrace(e));
      blame_bf16(model, sample, why);
      return why;
    }
    record_forward(key, "ok");
    return "";
  };
  int64_t row = flat.eq(hi).any(1).to(torch::kInt64).argmax().item<int64_t>();
  std::string why = refused(x.narrow(0, row, 1), str(hi));
  if (!why.empty())
    throw FormatError(str(source, ": '", xk, "' holds token id ", hi, " (sample ", row, "), which the model refuses: ",
                          why, " (ids 0..", hi, ": is the vocabulary larger than the model's?)"));
  if (x.size(0) == 1) return;
  auto [top, rows] = flat.max(0);  // each position's largest id, and a sample holding it
  // Where the sample run holds every position's largest, the data holds no larger id anywhere. (Each
  // position's largest all being the largest id is not that: a segment id of 19 in another sample
  // than the one holding 19 in its tokens went unchecked.)
  if (flat[row].eq(top).all().item<bool>()) return;
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape[0] = 1;
  if (refused(top.reshape(shape), "positions' largest").empty()) return;
  // Which sample the model refuses: one holding a position's largest id, positions in order.
  std::vector<int64_t> tried;
  for (int64_t p = 0; p < top.size(0); ++p) {
    int64_t r = rows[p].item<int64_t>();
    if (std::find(tried.begin(), tried.end(), r) != tried.end()) continue;
    tried.push_back(r);
    why = refused(x.narrow(0, r, 1), str("sample ", r));
    if (!why.empty())
      throw FormatError(str(source, ": '", xk, "' holds token id ", top[p].item<int64_t>(), " at position ", p,
                            " of sample ", r, ", which the model refuses: ", why, " (the largest id at that position; ",
                            "is an embedding there smaller than the ids it is given?)"));
  }
  // None of the data's own samples is refused: a sample of positions' maxima no sample holds is none.
}

}  // namespace pt::model
