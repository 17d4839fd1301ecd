#include "sim/stage_costs.h"

#include "core/error.h"

namespace pt::sim {

std::vector<StageCost> stage_costs(const schedule::Schedule& s, const profile::Profile& p) {
  std::vector<int> stage_of(p.num_layers(), -1);
  std::vector<StageCost> out(s.num_stages);
  for (int st = 0; st < s.num_stages; ++st)
    for (int l : s.stage_layers[st]) {
      if (l < 0 || l >= p.num_layers())
        throw ConfigError(str("schedule stage ", st, " holds layer ", l, " but the profile of '", p.model, "' has ",
                              p.num_layers(), " layers"));
      stage_of[l] = st;
      const auto& layer = p.layers[l];
      out[st].forward_ms += layer.forward_ms;
      out[st].backward_ms += layer.backward_ms;
      out[st].stash_bytes += layer.activation_bytes;
      out[st].parameter_bytes += layer.parameter_bytes;
    }
  for (int l = 0; l < p.num_layers(); ++l)
    if (stage_of[l] < 0) throw ConfigError(str("layer ", l, " (", p.layers[l].name, ") is in no stage of the schedule"));
  // last_reader[l]: the latest stage that reads layer l's output.
  std::vector<int> last_reader(p.num_layers(), -1);
  for (int l = 0; l < p.num_layers(); ++l)
    for (int in : p.layers[l].inputs) last_reader[in] = std::max(last_reader[in], stage_of[l]);
  for (int l = 0; l < p.num_layers(); ++l)
    for (int st = stage_of[l]; st < last_reader[l]; ++st) out[st].boundary_bytes += p.layers[l].activation_bytes;
  return out;
}

}  // namespace pt::sim
