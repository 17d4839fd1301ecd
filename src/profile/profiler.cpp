#include "profile/profiler.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/host_allocator.h"
#include "model/flat_parameters.h"
#include "model/memory_meter.h"
#include "model/optimizer.h"

namespace pt::profile {

namespace {

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The runtime's own work on one layer's weights per minibatch (Layer::optimizer_ms): the
// optimizer's step on flat buffers (SGD with momentum, or Adam's: 2-3x its passes over the
// weights) and one copy of the weights (a stash), as StageReplica does them; on copies, so the
// model's weights stay as they are.
double measure_step_ms(const std::vector<torch::Tensor>& params, const ProfilerOptions& profiler_options) {
  if (params.empty()) return 0;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> copies;
  for (const auto& p : params) copies.push_back(p.detach().clone().requires_grad_(p.requires_grad()));
  model::FlatParameters flat(copies);
  model::OptimizerOptions options;
  options.kind = profiler_options.optimizer;
  model::Optimizer optimizer(flat, options);
  std::vector<torch::Tensor> stash;
  std::vector<double> times;
  for (int r = 0; r < profiler_options.warmup + profiler_options.repeats; ++r) {
    double t0 = now_ms();
    stash = flat.copy_weights(std::move(stash));
    optimizer.step(1.0, r);
    if (r >= profiler_options.warmup) times.push_back(now_ms() - t0);
  }
  return median(times);
}

// The layer's forward into `out`; where `targets` is defined (the last layer), the model's loss
// after it too, as the last stage computes it. Returns what the backward starts from.
torch::Tensor forward(model::LayeredModel& model, torch::nn::Sequential& module, const torch::Tensor& input,
                      const torch::Tensor& targets, torch::Tensor& out) {
  {
    model::ComputeScope scope(model.precision());
    out = module->forward(input);
  }
  return targets.defined() ? model.loss(out, targets) : out;
}

// The layer's median forward and backward times on `input` (with the loss after it where
// `targets` is defined), after o.warmup untimed runs; `out` gets its output. The parameters'
// gradients stay defined (zeros plus the runs'), as the memory measurement wants them.
Timing time_layer(model::LayeredModel& model, torch::nn::Sequential& module, const torch::Tensor& input,
                  const torch::Tensor& targets, const ProfilerOptions& profiler_options, torch::Tensor& out) {
  std::vector<double> fwd, bwd;
  torch::Tensor top;  // what the backward starts from
  // Gradients accumulate into a defined .grad, as in the runtime (its flat buffers): the
  // backward's time includes adding them up.
  for (auto& param : module->parameters()) param.mutable_grad() = torch::zeros_like(param);
  for (int r = 0; r < profiler_options.warmup + profiler_options.repeats; ++r) {
    if (input.requires_grad()) input.mutable_grad() = torch::Tensor();
    double t0 = now_ms();
    top = forward(model, module, input, targets, out);
    double t1 = now_ms();
    auto grad = torch::ones_like(top);
    double t2 = now_ms();
    if (top.requires_grad()) top.backward(grad);
    double t3 = now_ms();
    if (r >= profiler_options.warmup) {
      fwd.push_back(t1 - t0);
      bwd.push_back(t3 - t2);
    }
  }
  if (input.requires_grad()) input.mutable_grad() = torch::Tensor();
  return {input.size(0), median(fwd), median(bwd)};
}

// The layer's memory as the meter sees it allocated on this thread: what one forward leaves
// alive for the backward (Layer::stash_bytes: its output and what autograd saves), and the most
// its forward or backward holds beyond that while running (Layer::workspace_bytes: scratch
// buffers, the input gradient). The parameters' gradients exist beforehand, as in the runtime.
// With `targets`, the loss's share too (measure_profile).
void measure_layer_memory(model::LayeredModel& model, torch::nn::Sequential& module, const torch::Tensor& input,
                          const torch::Tensor& targets, Layer& l) {
  model::install_memory_meter();
  auto account = std::make_shared<model::MemoryAccount>();
  torch::Tensor out;
  {
    model::ChargeTo charge(account);
    torch::Tensor output;
    out = forward(model, module, input, targets, output);
  }
  l.stash_bytes = account->live();
  int64_t workspace = account->peak() - l.stash_bytes;
  if (out.requires_grad()) {
    torch::Tensor grad = torch::ones_like(out);
    account->reset_peak();
    int64_t before = account->live();
    {
      model::ChargeTo charge(account);
      out.backward(grad);
    }
    workspace = std::max(workspace, account->peak() - before);
  }
  l.workspace_bytes = std::max<int64_t>(0, workspace - l.parameter_bytes);
}

std::vector<Tie> ties_of(const model::LayeredModel& model) {
  std::vector<Tie> out;
  for (const auto& g : model.tie_groups()) out.push_back({g.layers(), g.bytes});
  return out;
}

}  // namespace

std::vector<int64_t> timed_batch_sizes(int64_t batch, const ProfilerOptions& profiler_options) {
  std::vector<int64_t> out;
  if (profiler_options.batch_sizes.empty()) {
    for (int64_t d = 16; d >= 2; d /= 2)
      if (batch / d >= 1 && (out.empty() || out.back() != batch / d)) out.push_back(batch / d);
  } else {
    for (int64_t b : profiler_options.batch_sizes)
      if (b >= 1 && b < batch) out.push_back(b);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }
  out.push_back(batch);
  return out;
}

Profile measure_profile(model::LayeredModel& model, const torch::Tensor& batch, const ProfilerOptions& profiler_options,
                        const torch::Tensor& targets) {
  PT_CHECK(profiler_options.repeats >= 1 && profiler_options.warmup >= 0);
  Profile p;
  p.model = model.name();
  p.batch_size = batch.size(0);
  p.device = "cpu";
  p.precision = model::to_string(model.precision());
  p.optimizer = profiler_options.optimizer;
  model.train(true);
  torch::Tensor x = batch;
  // The smaller batches' own inputs, each the first samples of the batch through the layers so far.
  std::vector<int64_t> sizes = timed_batch_sizes(p.batch_size, profiler_options);
  sizes.pop_back();  // the batch itself is x
  std::vector<torch::Tensor> xs;
  for (int64_t b : sizes) xs.push_back(batch.narrow(0, 0, b));
  auto on_the_wire = [&](const torch::Tensor& t) {  // what the next stage receives (precision.h)
    return model::from_wire(model::to_wire(t.detach(), model.precision()), model.precision());
  };
  for (int i = 0; i < model.num_layers(); ++i) {
    const auto& layer = model.layer(i);
    // A layer the model does not hold is built for its measurement and dropped after it: a model
    // larger than this machine's memory is profiled one layer at a time.
    torch::nn::Sequential module = model.holds(i) ? layer.module : model.make_layer(i);
    torch::Tensor input = x.detach();
    if (i > 0 && input.is_floating_point()) input.requires_grad_(true);
    torch::Tensor out;
    // The last stage computes the loss after the last layer: its time and memory are the layer's.
    torch::Tensor loss_targets = i + 1 == model.num_layers() ? targets : torch::Tensor();
    Layer l;
    for (size_t k = 0; k < sizes.size(); ++k) {
      torch::Tensor in = xs[k].detach(), small;
      if (i > 0 && in.is_floating_point()) in.requires_grad_(true);
      l.timings.push_back(time_layer(model, module, in,
                                     loss_targets.defined() ? loss_targets.narrow(0, 0, sizes[k]) : torch::Tensor(), profiler_options,
                                     small));
      xs[k] = on_the_wire(small);
    }
    Timing main = time_layer(model, module, input, loss_targets, profiler_options, out);
    if (!l.timings.empty()) l.timings.push_back(main);
    l.name = layer.name;
    l.forward_ms = main.forward_ms;
    l.backward_ms = main.backward_ms;
    l.activation_bytes = model::wire_bytes(out, model.precision());  // what crosses to the next stage
    for (const auto& param : module->parameters()) l.parameter_bytes += param.numel() * static_cast<int64_t>(param.element_size());
    l.optimizer_ms = measure_step_ms(module->parameters(), profiler_options);
    torch::Tensor next = on_the_wire(out);
    out = torch::Tensor();  // the timed runs' graph goes before the stash is measured
    if (input.requires_grad()) input.mutable_grad() = torch::Tensor();  // each microbatch makes its own
    measure_layer_memory(model, module, input, loss_targets, l);
    if (input.requires_grad()) input.mutable_grad() = torch::Tensor();
    for (auto& param : module->parameters()) param.mutable_grad() = torch::Tensor();
    l.inputs = layer.inputs;
    p.layers.push_back(std::move(l));
    x = next;
    if (!model.holds(i)) {  // the layer built for its measurement goes, and the memory with it
      module = torch::nn::Sequential(nullptr);
      release_freed_host_memory();
    }
  }
  p.ties = ties_of(model);
  return p;
}

Profile layer_graph(const model::LayeredModel& model) {
  Profile p;
  p.model = model.name();
  for (int i = 0; i < model.num_layers(); ++i) {
    Layer l;
    l.name = model.layer(i).name;
    l.inputs = model.layer(i).inputs;
    p.layers.push_back(std::move(l));
  }
  p.ties = ties_of(model);
  return p;
}

}  // namespace pt::profile
