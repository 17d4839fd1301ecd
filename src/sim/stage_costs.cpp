#include "sim/stage_costs.h"

#include <cmath>

#include "core/error.h"
#include "schedule/memory.h"

namespace pt::sim {

std::vector<StageCost> stage_costs(const schedule::Schedule& s, const profile::Profile& p, int64_t bucket_bytes) {
  std::vector<int> stage_of = schedule::stage_of_layers(s, p);
  std::vector<StageCost> out(s.num_stages);
  for (int st = 0; st < s.num_stages; ++st)
    for (int l : s.stage_layers[st]) {
      // A minibatch in s.microbatches microbatches: each at its own size (profile.h).
      out[st].forward_ms += profile::compute_forward_ms(p, l, s.microbatches);
      out[st].backward_ms += profile::compute_backward_ms(p, l, s.microbatches);
      // A flushing schedule stashes no weights, nor an asynchronous stage none of whose forwards
      // runs ahead of its step: its step makes no copy (runtime::StageReplica).
      out[st].step_ms += profile::compute_step_ms(p, l, s.copies_weights(st));
      out[st].stash_bytes += profile::stash_bytes(p, l);
      out[st].fixed_stash_bytes += std::llround(profile::stash_bytes_at(p, l, 0));
    }
  for (int st = 0; st < s.num_stages; ++st) {
    out[st].parameter_bytes = profile::parameter_bytes(p, s.stage_layers[st]);
    out[st].input_gradient_share = profile::input_gradient_share(p, st, s.stage_layers[st]);
  }
  std::vector<double> cuts = profile::cut_bytes(p, stage_of, s.num_stages);
  for (int st = 0; st < s.num_stages; ++st) {
    out[st].boundary_bytes = static_cast<int64_t>(cuts[st]);
    out[st].input_bytes = st > 0 ? static_cast<int64_t>(cuts[st - 1]) : 0;
    out[st].buckets = profile::gradient_buckets(p, s.stage_layers[st], bucket_bytes);
  }
  return out;
}

double compute_ms(const schedule::Schedule& s, const schedule::Action& a, const StageCost& c) {
  double scale = 1.0 / s.microbatches;
  bool split = s.split_backward[a.stage];
  switch (a.kind) {
    case schedule::ActionKind::kForward: return c.forward_ms * scale;
    case schedule::ActionKind::kBackward:
      return ((s.recomputes(a.stage) ? c.forward_ms : 0) +
              c.backward_ms * (split ? c.input_gradient_share : 1.0)) *
             scale;
    case schedule::ActionKind::kBackwardWeight:
      return c.backward_ms * scale * (1 - c.input_gradient_share);
    default: return 0;
  }
}

}  // namespace pt::sim
