#include "schedule/stash_tracker.h"

#include <algorithm>
#include <set>

namespace pt::schedule {

void StashTracker::on(const Action& a, bool split, int64_t bytes) {
  StageState& st = stages_[a.stage];
  bool last_backward = a.kind == ActionKind::kBackwardWeight || (a.kind == ActionKind::kBackward && !split);
  if (a.kind == ActionKind::kForward) {
    st.in_flight[a.microbatch] = {st.steps, bytes};
    peak_stash_ = std::max(peak_stash_, ++stash_);
    peak_bytes_ = std::max(peak_bytes_, bytes_ += bytes);
  } else if (last_backward) {
    auto it = st.in_flight.find(a.microbatch);
    if (it == st.in_flight.end()) return;
    --stash_;
    bytes_ -= it->second.second;
    st.in_flight.erase(it);
  } else if (a.kind == ActionKind::kStep) {
    ++st.steps;
  }
  std::set<int> versions = {st.steps};
  for (const auto& [mb, entry] : st.in_flight)
    versions.insert(predicted_.count({a.stage, mb}) ? -1 - mb : entry.first);  // a copy of its own
  st.peak_versions = std::max(st.peak_versions, static_cast<int>(versions.size()));
}

int StashTracker::weight_versions(int stage) const {
  auto it = stages_.find(stage);
  return it == stages_.end() ? 1 : it->second.peak_versions;
}

int StashTracker::max_weight_versions() const {
  int v = 1;
  for (const auto& [s, st] : stages_) v = std::max(v, st.peak_versions);
  return v;
}

}  // namespace pt::schedule
