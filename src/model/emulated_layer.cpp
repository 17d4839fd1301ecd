#include "model/emulated_layer.h"

#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/error.h"

namespace pt::model {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// Zeros of `sizes` without their memory: a stride-0 view of one float. Intermediate outputs of a
// stage are never read, so materialising them would only cost CPU time the accelerator would not
// spend; tensors that cross a link are made contiguous (real bytes) by the transport.
torch::Tensor virtual_zeros(at::IntArrayRef sizes) {
  for (int64_t d : sizes)
    if (d == 0) return torch::zeros(sizes);
  return torch::zeros({1}).expand(sizes);
}

// One layer's compute. The backward is charged once per microbatch and split as the cost engine
// splits it (profile::kInputGradientShare, set by the caller), so a zero-bubble schedule that
// runs them apart (B, then W) waits each its share. A layer whose input
// needs no gradient (the model's first) charges its whole backward with the weight gradient.
struct EmulatedCompute : torch::autograd::Function<EmulatedCompute> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               double forward_ms, double backward_ms, double b_share, int64_t out_floats,
                               int64_t stash_floats, bool builds_graph) {
    int64_t rows = x.size(0);
    // An input with a grad_fn came from the layer before, in this same forward pass.
    bool chained = x.grad_fn() != nullptr;
    emulated_wait(forward_ms, chained);
    // Freed with the context after the backward; none where no graph is built (a recomputing
    // stage's first forward). Its first rows x out_floats are the output, as a real layer's
    // output is in what its forward keeps (the memory model counts it there): an output of its
    // own, made contiguous by the gloo transport and held by its send until the backward, was
    // held twice (a first stage measured 25 MiB against 16 modelled).
    torch::Tensor out;
    if (stash_floats > 0 && builds_graph) {
      torch::Tensor stash = torch::empty({rows * stash_floats});  // [rows * stash_floats]
      ctx->saved_data["stash"] = stash;
      if (stash_floats >= out_floats) out = stash.narrow(0, 0, rows * out_floats).view({rows, out_floats});
    }
    ctx->saved_data["backward_ms"] = backward_ms;
    ctx->saved_data["b_share"] = b_share;
    ctx->saved_data["x_needs_grad"] = x.requires_grad();
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    ctx->saved_data["chained"] = chained;
    ctx->saved_data["weight"] = weight;
    ctx->saved_data["x_charged"] = false;
    ctx->saved_data["w_charged"] = false;
    return out.defined() ? out : virtual_zeros({rows, out_floats});  // [rows, out_floats]
  }

  static variable_list backward(AutogradContext* ctx, variable_list /*grad_outputs*/) {
    auto& d = ctx->saved_data;
    double total = d["backward_ms"].toDouble(), b_ms = total * d["b_share"].toDouble();
    bool x_needs_grad = d["x_needs_grad"].toBool();
    bool want_x = x_needs_grad && ctx->needs_input_grad(0);
    bool want_w = ctx->needs_input_grad(1);
    double wait = 0;
    if (want_w && !d["w_charged"].toBool()) {
      wait += x_needs_grad ? total - b_ms : total;
      d["w_charged"] = true;
    }
    if (want_x && !d["x_charged"].toBool()) {
      wait += b_ms;
      d["x_charged"] = true;
    }
    // The engine runs this pass's backwards last layer first on this thread: the next one
    // continues this pass when this layer's input came from a layer in it.
    thread_local bool next_continues = false;
    emulated_wait(wait, next_continues);
    next_continues = d["chained"].toBool();
    torch::Tensor gx, gw;
    // A stage's input keeps its gradient (autograd's AccumulateGrad), which copies a stride-0 view
    // into memory of its own: 51 MB a microbatch on vgg16's second stage, which took its backward
    // 2.6x its profiled time. An empty tensor is kept as it is; its values are never read (emulated
    // layers read none, and a link moves only its bytes).
    if (want_x)
      gx = d["chained"].toBool() ? virtual_zeros(d["x_sizes"].toIntVector())
                                 : torch::empty(d["x_sizes"].toIntVector());  // [rows, in_floats]
    // A weight gradient is zeros: added into a gradient the weight already has (a stage's flat
    // buffer), it would cost the host a pass over the weights per microbatch, time the
    // device's backward, which the profile measured, already holds (a vgg16 stage of its 103M-float
    // classifier ran its backward 18x slower than profiled). Only a first one is made.
    if (want_w && !d["weight"].toTensor().grad().defined()) gw = torch::zeros_like(d["weight"].toTensor());
    // Held until both gradients are made, as autograd holds a real layer's saved tensors until its
    // weight gradient: freed at B, a zero-bubble stage measured 15.5 MiB against 23.2 modelled.
    bool w_done = d["w_charged"].toBool() || !d["weight"].toTensor().requires_grad();
    bool x_done = d["x_charged"].toBool() || !x_needs_grad;
    if (w_done && x_done) d.erase("stash");
    return {gx, gw, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// The loss of an emulated model: zero, with a gradient of zeros without their memory. The mean
// it was read all of the last layer's output and its backward wrote all of it: a last layer of
// 4M floats a sample took the last stage's backward 1.5-3x its profiled time.
struct EmulatedLoss : torch::autograd::Function<EmulatedLoss> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& output) {
    ctx->saved_data["sizes"] = output.sizes().vec();
    return torch::zeros({});
  }
  static variable_list backward(AutogradContext* ctx, variable_list /*grad_outputs*/) {
    return {virtual_zeros(ctx->saved_data["sizes"].toIntVector())};
  }
};

}  // namespace

torch::Tensor emulated_loss(const torch::Tensor& output) { return EmulatedLoss::apply(output); }

EmulatedLayerImpl::EmulatedLayerImpl(EmulatedCost cost) : cost_(std::move(cost)) {
  if (cost_.output_floats_per_sample < 1 || cost_.parameter_floats < 0 || cost_.forward_ms_per_sample < 0 ||
      cost_.backward_ms_per_sample < 0 || cost_.step_ms < 0 || cost_.stash_copy_ms < 0 ||
      cost_.stash_copy_ms > cost_.step_ms ||
      !(cost_.input_gradient_share >= 0 && cost_.input_gradient_share <= 1))
    throw ConfigError(str("emulated layer '", cost_.name, "': output floats ", cost_.output_floats_per_sample,
                          " (must be >= 1), parameter floats ", cost_.parameter_floats, ", forward ",
                          cost_.forward_ms_per_sample, " ms, backward ", cost_.backward_ms_per_sample, " ms, step ",
                          cost_.step_ms, " ms (must be >= 0) of which its stash copy ", cost_.stash_copy_ms,
                          " ms (must be in 0..step), input-gradient share ", cost_.input_gradient_share,
                          " (must be in 0..1)"));
  // Every layer holds a weight, even an empty one, so that its backward has a weight gradient
  // to charge the weight half of its time to (see EmulatedCompute).
  weight_ = register_parameter("weight", torch::zeros({cost_.parameter_floats}));  // [parameter_floats]
}

double EmulatedLayerImpl::forward_ms(int64_t rows) const {
  return cost_.forward_ms_at_rows ? cost_.forward_ms_at_rows(rows) : cost_.forward_ms_per_sample * static_cast<double>(rows);
}

double EmulatedLayerImpl::backward_ms(int64_t rows) const {
  return cost_.backward_ms_at_rows ? cost_.backward_ms_at_rows(rows)
                                   : cost_.backward_ms_per_sample * static_cast<double>(rows);
}

void EmulatedLayerImpl::pretty_print(std::ostream& stream) const {
  stream << "EmulatedLayer(waits";
  for (int64_t rows : {1, 16, 256}) stream << ' ' << forward_ms(rows) << ' ' << backward_ms(rows);
  stream << ", step " << cost_.step_ms << ", input gradient " << cost_.input_gradient_share << ")";
}

torch::Tensor EmulatedLayerImpl::forward(torch::Tensor x) {
  int64_t rows = x.size(0);
  bool builds_graph = torch::GradMode::is_enabled() && (x.requires_grad() || weight_.requires_grad());
  return EmulatedCompute::apply(x, weight_, forward_ms(rows), backward_ms(rows), cost_.input_gradient_share,
                                cost_.output_floats_per_sample, cost_.stash_floats_per_sample, builds_graph);
}

std::shared_ptr<LayeredModel> build_emulated_model(const std::string& name, const std::vector<EmulatedCost>& costs,
                                                   const LayerSet& held) {
  if (costs.empty()) throw ConfigError(str("emulated model '", name, "': no layers"));
  auto m = std::make_shared<LayeredModel>(name, Task::kEmulated, std::vector<int64_t>{1}, false, held);
  for (const auto& c : costs) m->add(c.name, [c] { return torch::nn::Sequential(EmulatedLayer(c)); });
  std::vector<double> step_ms, copy_ms;
  for (const auto& c : costs) step_ms.push_back(c.step_ms), copy_ms.push_back(c.stash_copy_ms);
  m->set_device_step([step_ms, copy_ms](int first, int last, double host_ms, bool stashed) {
    double device_ms = 0;
    for (int l = first; l < last; ++l) device_ms += step_ms[l] - (stashed ? 0 : copy_ms[l]);
    // The host's step is the device's in this emulation; only the rest is waited.
    if (device_ms > host_ms) emulated_wait(device_ms - host_ms);
  });
  return m;
}

void emulated_wait(double ms, bool continues_previous) {
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); };
  // The default timer slack (50 us) would add to every sleep; 1 us keeps short layers honest.
  thread_local bool slack_set = (prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0), true);
  thread_local double carry_ms = 0;  // how much earlier waits overshot
  thread_local Clock::time_point last_end;
  thread_local bool has_last = false;
  (void)slack_set;
  // Between actions a late wake-up is not paid back (at most 1 ms is): the action waited on a
  // message or a step, and so would a device. Within a pass it is paid back in full: a device
  // runs the kernels its host launched ahead while the host is descheduled (here: 16 workers
  // on 2 cores), so only a wake-up late past the pass's last layer costs device time.
  constexpr double kMaxCarryMs = 1.0;
  // The host's own work between two layers of one pass (autograd, the module call) is hidden
  // the same way.
  if (continues_previous && has_last)
    carry_ms += ms_since(last_end);
  else
    carry_ms = std::min(carry_ms, kMaxCarryMs);
  double want = ms - carry_ms;
  if (want <= 0) {
    carry_ms = -want;
  } else {
    auto t0 = Clock::now();
    std::this_thread::sleep_until(t0 + std::chrono::duration<double, std::milli>(want));
    carry_ms = std::max(ms_since(t0) - want, 0.0);
  }
  last_end = Clock::now();
  has_last = true;
}

}  // namespace pt::model
