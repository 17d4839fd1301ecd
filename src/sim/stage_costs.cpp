#include "sim/stage_costs.h"

#include "core/error.h"

namespace pt::sim {

std::vector<StageCost> stage_costs(const schedule::Schedule& s, const profile::Profile& p, int64_t bucket_bytes) {
  std::vector<int> stage_of(p.num_layers(), -1);
  std::vector<StageCost> out(s.num_stages);
  for (int st = 0; st < s.num_stages; ++st)
    for (int l : s.stage_layers[st]) {
      if (l < 0 || l >= p.num_layers())
        throw ConfigError(str("schedule stage ", st, " holds layer ", l, " but the profile of '", p.model, "' has ",
                              p.num_layers(), " layers"));
      stage_of[l] = st;
      const auto& layer = p.layers[l];
      out[st].forward_ms += profile::compute_forward_ms(p, l);
      out[st].backward_ms += profile::compute_backward_ms(p, l);
      out[st].step_ms += profile::compute_step_ms(p, l);
      out[st].stash_bytes += layer.activation_bytes;
      out[st].parameter_bytes += layer.parameter_bytes;
    }
  for (int l = 0; l < p.num_layers(); ++l)
    if (stage_of[l] < 0) throw ConfigError(str("layer ", l, " (", p.layers[l].name, ") is in no stage of the schedule"));
  std::vector<double> cuts = profile::cut_bytes(p, stage_of, s.num_stages);
  for (int st = 0; st < s.num_stages; ++st) {
    out[st].boundary_bytes = static_cast<int64_t>(cuts[st]);
    out[st].buckets = profile::gradient_buckets(p, s.stage_layers[st], bucket_bytes);
  }
  return out;
}

}  // namespace pt::sim
