#include "schedule/stash_tracker.h"

#include <algorithm>
#include <set>

namespace pt::schedule {

void StashTracker::on(const Action& a, bool split, int64_t bytes) {
  StageState& st = stages_[a.stage];
  bool last_backward = a.kind == ActionKind::kBackwardWeight || (a.kind == ActionKind::kBackward && !split);
  if (a.kind == ActionKind::kForward) {
    bool own = predicted_.count({a.stage, a.microbatch}) > 0;
    int version = delay_ > 0 ? std::max(0, a.microbatch / microbatches_ - delay_) : st.steps;
    ran_ahead_ = ran_ahead_ || version > st.steps;
    InFlight f{version, bytes, own};
    if (per_minibatch_) {
      int minibatch = a.microbatch / microbatches_;
      f.minibatch_copy = st.minibatch_copies.count(minibatch) > 0 || own;
      f.own_copy = false;
      if (own && st.minibatch_copies.emplace(minibatch, st.steps + predicted_.at({a.stage, a.microbatch}) + 1).second)
        ++st.own_copies;
    }
    auto [it, fresh] = st.in_flight.insert({a.microbatch, f});
    if (!fresh) forget(st, it->second), it->second = f;
    if (!f.minibatch_copy) f.own_copy ? ++st.own_copies : ++st.shared[version];
    peak_stash_ = std::max(peak_stash_, ++stash_);
    peak_bytes_ = std::max(peak_bytes_, bytes_ += bytes);
  } else if (last_backward) {
    auto it = st.in_flight.find(a.microbatch);
    if (it == st.in_flight.end()) return;
    --stash_;
    bytes_ -= it->second.bytes;
    forget(st, it->second);
    st.in_flight.erase(it);
  } else if (a.kind == ActionKind::kStep) {
    ++st.steps;
    // Counted in Steps, not by the Step's minibatch: a measured trace numbers a flush's Steps by
    // minibatch and its forwards by microbatch.
    for (auto c = st.minibatch_copies.begin(); c != st.minibatch_copies.end();)
      if (c->second <= st.steps) c = st.minibatch_copies.erase(c), --st.own_copies;
      else ++c;
  }
  // The versions alive: the current one (and with a delay the `delay` before it), those
  // in-flight microbatches share, and own copies.
  int kept_from = std::max(0, st.steps - keep_), versions = st.steps - kept_from + 1 + st.own_copies;
  for (const auto& [version, users] : st.shared) versions += version < kept_from || version > st.steps;
  st.peak_versions = std::max(st.peak_versions, versions);
}

void StashTracker::forget(StageState& st, const InFlight& f) {
  if (f.minibatch_copy) return;  // its minibatch's Step frees the copy
  if (f.own_copy) {
    --st.own_copies;
    return;
  }
  auto it = st.shared.find(f.version);
  if (--it->second == 0) st.shared.erase(it);
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
