// What each layer of a profile is to the planner: an Input source, a detached sink, or a layer to
// plan (profile.h).
#include "profile/profile.h"

namespace pt::profile {

bool is_input_layer(const Profile& profile, int layer) {
  const auto& l = profile.layers[layer];
  return l.inputs.empty() && l.name.rfind("Input", 0) == 0;
}

bool is_detached_sink(const Profile& profile, int layer) {
  if (profile.layers[layer].name.rfind("__getitem__", 0) != 0 || profile.layers[layer].inputs.empty()) return false;
  for (int r = layer + 1; r < profile.num_layers(); ++r)
    for (int in : profile.layers[r].inputs)
      if (in == layer) return false;
  return true;
}

std::vector<char> detached_sinks(const Profile& profile) {
  int L = profile.num_layers();
  std::vector<char> read(L, 0), out(L, 0);
  for (int r = 0; r < L; ++r)
    for (int in : profile.layers[r].inputs)
      if (in >= 0 && in < r) read[in] = 1;
  for (int l = 0; l < L; ++l)
    out[l] = !read[l] && !profile.layers[l].inputs.empty() && profile.layers[l].name.rfind("__getitem__", 0) == 0;
  return out;
}

bool has_layer_to_plan(const Profile& profile) {
  std::vector<char> detached = detached_sinks(profile);
  for (int l = 0; l < profile.num_layers(); ++l)
    if (!is_input_layer(profile, l) && !detached[l]) return true;
  return false;
}

}  // namespace pt::profile
