#include "profile/emulation.h"

#include <cmath>
#include <sstream>

#include "core/error.h"

namespace pt::profile {

std::vector<model::EmulatedCost> emulated_costs(const profile::Profile& p, const EmulationOptions& emulation_options) {
  if (!(emulation_options.time_scale > 0)) throw ConfigError(str("--time-scale: must be > 0, got ", emulation_options.time_scale));
  if (!(emulation_options.byte_scale > 0)) throw ConfigError(str("--byte-scale: must be > 0, got ", emulation_options.byte_scale));
  int n = p.num_layers();
  if (n == 0) throw ConfigError(str("profile of '", p.model, "': no layers to emulate"));
  double batch = static_cast<double>(p.batch_size);
  auto floats_per_sample = [&](double bytes) {
    return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(bytes * emulation_options.byte_scale / batch / 4)));
  };
  // Each layer's output tensor carries what crosses the cut after it (skip tensors included),
  // so that every stage boundary sends the bytes the cost engine charges for it.
  std::vector<double> crossing = bytes_after_each_layer(p);
  std::vector<model::EmulatedCost> out;
  for (int i = 0; i < n; ++i) {
    const auto& l = p.layers[i];
    model::EmulatedCost c;
    c.name = l.name;
    c.forward_ms_per_sample = compute_forward_ms(p, i) * emulation_options.time_scale / batch;
    c.backward_ms_per_sample = compute_backward_ms(p, i) * emulation_options.time_scale / batch;
    // A microbatch waits what the cost engine charges it: the layer's timings at its size.
    if (!is_input_layer(p, i) && l.timings.size() >= 2) {
      double scale = emulation_options.time_scale;
      int64_t at = p.batch_size;
      c.forward_ms_at_rows = [l, scale, at](int64_t rows) { return forward_ms_at(l, static_cast<double>(rows), at) * scale; };
      c.backward_ms_at_rows = [l, scale, at](int64_t rows) { return backward_ms_at(l, static_cast<double>(rows), at) * scale; };
    }
    c.input_gradient_share = input_gradient_share(p, i);
    c.step_ms = compute_step_ms(p, i) * emulation_options.time_scale;
    c.stash_copy_ms = (c.step_ms > 0 ? l.stash_copy_ms : 0) * emulation_options.time_scale;  // none on an Input
    c.output_floats_per_sample = floats_per_sample(i + 1 == n ? static_cast<double>(l.activation_bytes) : crossing[i]);
    c.parameter_floats = std::llround(static_cast<double>(l.parameter_bytes) * emulation_options.byte_scale / 4);
    c.stash_floats_per_sample = std::llround(static_cast<double>(stash_bytes(p, i)) * emulation_options.byte_scale / batch / 4);
    out.push_back(c);
  }
  return out;
}

Profile as_emulated(const Profile& p, const EmulationOptions& emulation_options) {
  const double time = emulation_options.time_scale, bytes = emulation_options.byte_scale;
  auto scaled = [bytes](int64_t& b) { b = std::llround(static_cast<double>(b) * bytes); };
  Profile out = p;
  for (auto& l : out.layers) {
    for (double* ms : {&l.forward_ms, &l.backward_ms, &l.optimizer_ms, &l.stash_copy_ms, &l.input_gradient_ms}) *ms *= time;
    for (auto& t : l.timings) t.forward_ms *= time, t.backward_ms *= time;
    for (int64_t* b : {&l.activation_bytes, &l.parameter_bytes, &l.stash_bytes, &l.fixed_stash_bytes, &l.split_bytes,
                       &l.workspace_bytes, &l.fixed_workspace_bytes, &l.split_workspace_bytes, &l.buffer_bytes})
      scaled(*b);
  }
  for (auto* ties : {&out.ties, &out.frozen_ties})
    for (auto& tie : *ties) scaled(tie.bytes);
  return out;
}

std::shared_ptr<model::LayeredModel> build_emulated_model(const profile::Profile& p, const EmulationOptions& emulation_options,
                                                          const model::LayerSet& held) {
  return model::build_emulated_model(p.model, emulated_costs(p, emulation_options), held);
}

model::DataSplit emulated_data(const model::LayeredModel& m, int64_t train_samples, uint64_t seed) {
  model::DataSplit d = model::synthetic_data(m, train_samples, 1, 1, seed);
  d.name = "synthetic (emulated)";
  d.classes = 1;
  return d;
}

std::string emulation_label(const EmulationOptions& emulation_options) {
  std::ostringstream s;
  s << "emulated: compute x " << emulation_options.time_scale << ", bytes x " << emulation_options.byte_scale;
  return s.str();
}

}  // namespace pt::profile
