#include "profile/emulation.h"

#include <cmath>
#include <sstream>

#include "core/error.h"

namespace pt::profile {

std::vector<model::EmulatedCost> emulated_costs(const profile::Profile& p, const EmulationOptions& o) {
  if (!(o.time_scale > 0)) throw ConfigError(str("--time-scale: must be > 0, got ", o.time_scale));
  if (!(o.byte_scale > 0)) throw ConfigError(str("--byte-scale: must be > 0, got ", o.byte_scale));
  int n = p.num_layers();
  if (n == 0) throw ConfigError(str("profile of '", p.model, "': no layers to emulate"));
  // last_reader[l]: the latest layer that reads layer l's output (-1: none).
  std::vector<int> last_reader(n, -1);
  for (int l = 0; l < n; ++l)
    for (int in : p.layers[l].inputs) last_reader[in] = std::max(last_reader[in], l);
  double batch = static_cast<double>(p.batch_size);
  auto floats_per_sample = [&](double bytes) {
    return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(bytes * o.byte_scale / batch / 4)));
  };
  std::vector<model::EmulatedCost> out;
  double crossing = 0;  // bytes of outputs of layers <= i still read after i
  std::vector<double> expires(n + 1, 0);  // bytes whose last reader is layer i
  for (int i = 0; i < n; ++i) {
    const auto& l = p.layers[i];
    crossing -= expires[i];
    if (last_reader[i] > i) {
      crossing += static_cast<double>(l.activation_bytes);
      expires[last_reader[i]] += static_cast<double>(l.activation_bytes);
    }
    model::EmulatedCost c;
    c.name = l.name;
    bool input = is_input_layer(p, i);
    c.forward_ms_per_sample = input ? 0 : l.forward_ms * o.time_scale / batch;
    c.backward_ms_per_sample = input ? 0 : l.backward_ms * o.time_scale / batch;
    c.output_floats_per_sample =
        floats_per_sample(i + 1 == n ? static_cast<double>(l.activation_bytes) : std::max(crossing, 0.0));
    c.parameter_floats = std::llround(static_cast<double>(l.parameter_bytes) * o.byte_scale / 4);
    out.push_back(c);
  }
  return out;
}

std::shared_ptr<model::LayeredModel> build_emulated_model(const profile::Profile& p, const EmulationOptions& o) {
  return model::build_emulated_model(p.model, emulated_costs(p, o));
}

model::DataSplit emulated_data(const model::LayeredModel& m, int64_t train_samples, uint64_t seed) {
  model::DataSplit d = model::synthetic_data(m, train_samples, 1, 1, seed);
  d.name = "synthetic (emulated)";
  d.classes = 1;
  return d;
}

std::string emulation_label(const EmulationOptions& o) {
  std::ostringstream s;
  s << "emulated: compute x " << o.time_scale << ", bytes x " << o.byte_scale;
  return s.str();
}

}  // namespace pt::profile
