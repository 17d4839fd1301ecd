#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/median.h"
#include "profile/profile.h"

namespace pt::profile {

void time_alike(Profile& profile, const std::vector<std::string>& keys) {
  PT_CHECK(keys.size() == profile.layers.size(), keys.size(), " keys for ", profile.layers.size(), " layers");
  std::map<std::string, std::vector<int>> groups;
  for (int i = 0; i < profile.num_layers(); ++i) groups[keys[i]].push_back(i);
  profile.alike.clear();
  for (const auto& [key, members] : groups) {
    if (members.size() < 2) continue;
    // Each figure's median apart: an input gradient at most its backward in every member stays
    // so in the medians, and a timing at the profile's batch stays its forward and backward.
    auto pool = [&](auto field) {
      std::vector<double> v;
      for (int l : members) v.push_back(field(profile.layers[l]));
      double m = median(v);
      for (int l : members) field(profile.layers[l]) = m;
    };
    pool([](Layer& l) -> double& { return l.forward_ms; });
    pool([](Layer& l) -> double& { return l.backward_ms; });
    pool([](Layer& l) -> double& { return l.input_gradient_ms; });
    pool([](Layer& l) -> double& { return l.optimizer_ms; });
    pool([](Layer& l) -> double& { return l.stash_copy_ms; });  // at most the pooled optimizer_ms, as in each
    const size_t timings = profile.layers[members[0]].timings.size();
    for (int l : members) PT_CHECK(profile.layers[l].timings.size() == timings, "layer ", l, "'s timings");
    for (size_t k = 0; k < timings; ++k) {
      pool([k](Layer& l) -> double& { return l.timings.at(k).forward_ms; });
      pool([k](Layer& l) -> double& { return l.timings.at(k).backward_ms; });
    }
    profile.alike.push_back(members);
  }
  std::sort(profile.alike.begin(), profile.alike.end());
}

}  // namespace pt::profile
