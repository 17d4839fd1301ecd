#include "profile/profiler.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

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

}  // namespace

Profile measure_profile(model::LayeredModel& model, const torch::Tensor& batch, const ProfilerOptions& o) {
  PT_CHECK(o.repeats >= 1 && o.warmup >= 0);
  Profile p;
  p.model = model.name();
  p.batch_size = batch.size(0);
  p.device = "cpu";
  model.train(true);
  torch::Tensor x = batch;
  for (int i = 0; i < model.num_layers(); ++i) {
    auto& layer = model.layer(i);
    torch::Tensor input = x.detach();
    if (i > 0 && input.is_floating_point()) input.requires_grad_(true);
    std::vector<double> fwd, bwd;
    torch::Tensor out;
    for (int r = 0; r < o.warmup + o.repeats; ++r) {
      if (input.requires_grad()) input.mutable_grad() = torch::Tensor();
      for (auto& param : layer.module->parameters()) param.mutable_grad() = torch::Tensor();
      double t0 = now_ms();
      out = layer.module->forward(input);
      double t1 = now_ms();
      auto grad = torch::ones_like(out);
      double t2 = now_ms();
      if (out.requires_grad()) out.backward(grad);
      double t3 = now_ms();
      if (r >= o.warmup) {
        fwd.push_back(t1 - t0);
        bwd.push_back(t3 - t2);
      }
    }
    Layer l;
    l.name = layer.name;
    l.forward_ms = median(fwd);
    l.backward_ms = median(bwd);
    l.activation_bytes = out.numel() * static_cast<int64_t>(out.element_size());
    l.parameter_bytes = model.parameter_bytes(i);
    l.inputs = layer.inputs;
    p.layers.push_back(std::move(l));
    x = out.detach();
  }
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
  return p;
}

}  // namespace pt::profile
