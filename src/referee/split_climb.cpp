// The climb over a configuration's split (split_climb.h).
#include "referee/split_climb.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "core/error.h"

namespace pt::referee::detail {

std::vector<plan::Plan> moved_boundaries(const plan::Plan& p) {
  std::vector<plan::Plan> out;
  for (int i = 0; i + 1 < p.num_stages(); ++i) {
    const auto& a = p.stages[i].layers;
    const auto& b = p.stages[i + 1].layers;
    if (a.empty() || b.empty() || a.back() + 1 != b.front()) continue;  // not a chain's cut
    if (a.size() > 1) {
      plan::Plan q = p;
      q.stages[i + 1].layers.insert(q.stages[i + 1].layers.begin(), a.back());
      q.stages[i].layers.pop_back();
      out.push_back(std::move(q));
    }
    if (b.size() > 1) {
      plan::Plan q = p;
      q.stages[i].layers.push_back(b.front());
      q.stages[i + 1].layers.erase(q.stages[i + 1].layers.begin());
      out.push_back(std::move(q));
    }
  }
  return out;
}

Trial climb_split(const Trial& start, double start_objective, const WeighTrial& weigh,
                  std::chrono::steady_clock::time_point deadline, bool& timed_out) {
  Trial at = start;
  double best = start_objective;
  // Each move leaves the split better: the climb ends; the bound only guards against a replay
  // that ranks two splits each ahead of the other.
  size_t layers = 0;
  for (const auto& st : at.plan.stages) layers += st.layers.size();
  for (size_t step = 0; step < 4 * layers; ++step) {
    Trial next;
    bool moved = false;
    for (plan::Plan& q : moved_boundaries(at.plan)) {
      if (std::chrono::steady_clock::now() > deadline) {
        timed_out = true;
        return moved ? next : at;
      }
      Trial t = at;
      t.plan = std::move(q);
      double o = weigh(t);
      if (o < best * (1 - 1e-9)) best = o, next = std::move(t), moved = true;
    }
    if (!moved) break;
    at = std::move(next);
  }
  return at;
}

std::vector<Weighed> climb_starts(const std::vector<Weighed>& fits, int per_kind) {
  // Ranked as the search ranks: few BatchNorm samples last, then by the objective.
  auto before = [](const Weighed& a, const Weighed& b) {
    if (a.few_batch_norm_samples != b.few_batch_norm_samples) return b.few_batch_norm_samples;
    return a.objective < b.objective;
  };
  std::map<std::string, Weighed> best_of_shape;
  for (const Weighed& w : fits) {
    const Trial& t = w.trial;
    if (t.kind == "pipedream" || t.kind == "dp" || t.plan.num_stages() < 2) continue;
    std::string shape = str(t.kind, " m", t.microbatches, " v", t.chunks, " B", t.batch);
    for (const auto& st : t.plan.stages) {
      shape += str(" | f", st.in_flight, " w");
      for (int w : st.workers) shape += str(",", w);
    }
    auto [it, fresh] = best_of_shape.try_emplace(shape, w);
    if (!fresh && before(w, it->second)) it->second = w;
  }
  std::vector<Weighed> all;
  for (auto& [shape, entry] : best_of_shape) all.push_back(std::move(entry));
  std::stable_sort(all.begin(), all.end(), before);
  std::map<std::string, int> taken;
  std::vector<Weighed> out;
  for (Weighed& entry : all)
    if (taken[entry.trial.kind]++ < per_kind) out.push_back(std::move(entry));
  return out;
}

}  // namespace pt::referee::detail
