// The climb over a configuration's split (split_climb.h).
#include "referee/split_climb.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "core/error.h"

namespace pt::referee::detail {

namespace {
bool contiguous(const std::vector<int>& layers) {
  return !layers.empty() && layers.back() - layers.front() + 1 == static_cast<int>(layers.size());
}

// Cuts after a layer whose bytes crossing are below a neighbour's: where a valley of the bytes
// begins or ends (after a pooling, before an expanding layer, between an encoder and a decoder).
bool valley_edge(const std::vector<double>& bytes_after, int c) {
  int n = static_cast<int>(bytes_after.size());
  return (c > 0 && bytes_after[c] < bytes_after[c - 1]) || (c + 2 < n && bytes_after[c] < bytes_after[c + 1]);
}
}  // namespace

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

std::vector<plan::Plan> jumped_boundaries(const plan::Plan& p, const std::vector<double>& bytes_after) {
  std::vector<plan::Plan> out;
  for (int i = 0; i + 1 < p.num_stages(); ++i) {
    const auto& a = p.stages[i].layers;
    const auto& b = p.stages[i + 1].layers;
    if (!contiguous(a) || !contiguous(b) || a.back() + 1 != b.front() || static_cast<int>(bytes_after.size()) <= b.back())
      continue;
    int now = a.back();
    auto cheaper = [&](int c) { return valley_edge(bytes_after, c) && bytes_after[c] <= bytes_after[now] / 2; };
    for (int step : {-1, 1}) {
      int c = now + 2 * step;
      while (c >= a.front() && c < b.back() && !cheaper(c)) c += step;
      if (c < a.front() || c >= b.back()) continue;
      plan::Plan q = p;
      q.stages[i].layers.clear(), q.stages[i + 1].layers.clear();
      for (int l = a.front(); l <= b.back(); ++l) q.stages[l <= c ? i : i + 1].layers.push_back(l);
      out.push_back(std::move(q));
    }
  }
  return out;
}

Trial climb_split(const Trial& start, double start_objective, const WeighTrial& weigh,
                  const std::vector<double>& bytes_after, std::chrono::steady_clock::time_point deadline,
                  bool& timed_out) {
  Trial at = start;
  double best = start_objective;
  // Each move leaves the split better: the climb ends; the bound only guards against a replay
  // that ranks two splits each ahead of the other.
  size_t layers = 0;
  for (const auto& st : at.plan.stages) layers += st.layers.size();
  for (size_t step = 0; step < 4 * layers; ++step) {
    Trial next;
    bool moved = false;
    // The jumps only where no layer's move gains: weighed at every step, they doubled
    // DenseNet-121's search on 4x4.
    for (bool jump : {false, true}) {
      for (plan::Plan& q : jump ? jumped_boundaries(at.plan, bytes_after) : moved_boundaries(at.plan)) {
        if (std::chrono::steady_clock::now() > deadline) {
          timed_out = true;
          return moved ? next : at;
        }
        Trial t = at;
        t.plan = std::move(q);
        double o = weigh(t);
        if (o < best * (1 - 1e-9)) best = o, next = std::move(t), moved = true;
      }
      if (moved) break;
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
