// The bytes a schedule's stages hold, from its profile's layers (stage_bytes.h).
#include "schedule/stage_bytes.h"

#include <algorithm>

#include "core/error.h"
#include "schedule/memory.h"

namespace pt::schedule {

std::vector<int> stage_of_layers(const Schedule& s, const profile::Profile& p) {
  std::vector<int> stage_of(p.num_layers(), -1);
  for (int st = 0; st < s.num_stages; ++st)
    for (int l : s.stage_layers[st]) {
      if (l < 0 || l >= p.num_layers())
        throw ConfigError(str("schedule stage ", st, " holds layer ", l, " but the profile of '", p.model, "' has ",
                              p.num_layers(), " layers"));
      stage_of[l] = st;
    }
  for (int l = 0; l < p.num_layers(); ++l)
    if (stage_of[l] < 0) throw ConfigError(str("layer ", l, " (", p.layers[l].name, ") is in no stage of the schedule"));
  return stage_of;
}

namespace {


// Layer::split_bytes summed over the stage's layers; -1 where the runtime holds the stash instead.
double stage_split(const profile::Profile& p, int stage, const std::vector<int>& layers, double scale) {
  if (stage == 0) return -1;
  for (const auto& tie : p.ties) {
    int inside = 0;
    for (int l : tie.layers) inside += std::count(layers.begin(), layers.end(), l) > 0;
    if (inside > 1) return -1;
  }
  double sum = 0;
  for (int l : layers) {
    double b = profile::split_bytes_at(p, l, scale);
    if (b < 0) return -1;
    sum += b;
  }
  return sum;
}

std::vector<StageBytes> stage_bytes(const Schedule& s, const profile::Profile& p) {
  std::vector<int> stage_of = stage_of_layers(s, p);
  std::vector<StageBytes> out(s.num_stages);
  for (int st = 0; st < s.num_stages; ++st)
    for (int l : s.stage_layers[st]) {
      out[st].layers.push_back(l);
      out[st].stash += static_cast<double>(profile::stash_bytes(p, l));
      out[st].fixed_stash += profile::stash_bytes_at(p, l, 0);
    }
  for (int st = 0; st < s.num_stages; ++st) {
    out[st].split = stage_split(p, st, s.stage_layers[st], 1);
    out[st].fixed_split = std::max(0.0, stage_split(p, st, s.stage_layers[st], 0));
    out[st].params = static_cast<double>(profile::parameter_bytes(p, s.stage_layers[st]));
    out[st].buffers = static_cast<double>(profile::buffer_bytes(p, s.stage_layers[st]));
  }
  std::vector<double> cuts = profile::cut_bytes(p, stage_of, s.num_stages);
  for (int st = 0; st < s.num_stages; ++st) {
    out[st].output = cuts[st];
    out[st].input = st > 0 ? cuts[st - 1] : static_cast<double>(p.input_bytes);
  }
  return out;
}

// What a forward or backward of one microbatch (`scale` of the profile's batch) holds beyond
// its stash: layer l runs with the stashes of the layers before it (forward) or still to do
// (backward) alive, those after it not yet made or already freed, plus its workspace and its
// weight gradient before it is added in.
double busy_bytes(const profile::Profile& p, const StageBytes& b, double scale) {
  double most = 0, after = 0;  // after: stash of the layers after l
  for (auto it = b.layers.rbegin(); it != b.layers.rend(); ++it) {
    const auto& l = p.layers[*it];
    most = std::max(most, profile::workspace_bytes_at(p, *it, scale) + static_cast<double>(l.parameter_bytes) - after);
    after += profile::stash_bytes_at(p, *it, scale);
  }
  return most;
}

// The same for a split B (zero-bubble's, b.split >= 0): layer l runs its B with what it keeps
// for W beside what its chain has not yet freed (Layer::split_workspace_bytes), and the layers
// after l hold what their W needs (Layer::split_bytes) in place of their stash. Counted as a
// whole backward, gpt's second stage (zb-h1, real compute) was modelled at 26.8 MiB of tensors
// and measured 29.6-30.1.
double split_busy_bytes(const profile::Profile& p, const StageBytes& b, double scale) {
  double most = 0, freed = 0;  // freed: what the layers after l let go of at their B
  for (auto it = b.layers.rbegin(); it != b.layers.rend(); ++it) {
    const auto& l = p.layers[*it];
    double workspace = static_cast<double>(l.split_workspace_bytes > 0 ? l.split_workspace_bytes : l.workspace_bytes);
    most = std::max(most, workspace * scale - freed);
    freed += profile::stash_bytes_at(p, *it, scale) - std::max(0.0, profile::split_bytes_at(p, *it, scale));
  }
  return most;
}

// What a W holds beyond what its B kept: split, one layer's weight gradient before it is added
// in; the first stage's, nothing (its B ran the whole backward); else (W a backward to the
// weights, model/split_backward.h), a backward's.
double weight_busy_bytes(const profile::Profile& p, int stage, const StageBytes& b, double busy) {
  if (stage == 0) return 0;
  if (b.split < 0) return busy;
  double most = 0;
  for (int l : b.layers) most = std::max(most, static_cast<double>(p.layers[l].parameter_bytes));
  return most;
}

}  // namespace


LayerBytes layer_bytes(const Schedule& s, const profile::Profile& p) {
  LayerBytes lb;
  lb.bytes = stage_bytes(s, p);
  lb.scale = 1.0 / s.microbatches;
  lb.busy.resize(s.num_stages), lb.split_busy.resize(s.num_stages), lb.weight_busy.resize(s.num_stages);
  for (int st = 0; st < s.num_stages; ++st) {
    lb.busy[st] = busy_bytes(p, lb.bytes[st], lb.scale);
    lb.split_busy[st] = lb.bytes[st].split >= 0 ? split_busy_bytes(p, lb.bytes[st], lb.scale) : lb.busy[st];
    lb.weight_busy[st] = weight_busy_bytes(p, st, lb.bytes[st], lb.busy[st]);
  }
  return lb;
}

}  // namespace pt::schedule
