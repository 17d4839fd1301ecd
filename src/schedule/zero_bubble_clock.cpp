#include "schedule/zero_bubble_clock.h"

#include <deque>

#include "core/error.h"

namespace pt::schedule::detail {

namespace {

constexpr int kNotYet = -1;

struct ChunkWorker {
  std::vector<int> stages;      // [chunk] in pipeline order
  std::vector<int> next_f, next_b;  // [chunk] -> its next forward's (backward's) microbatch
  std::vector<double> room_after;   // [chunk] -> what one microbatch holds in the chunks after it
  std::deque<std::pair<int, int>> pending_w;  // (stage, mb) whose B ran, oldest first
  double held = 0;
};

}  // namespace

void zero_bubble_clock(Schedule& s, const std::vector<std::vector<int>>& chunks, const ChunkBudget& budget,
                       const std::string& kind) {
  const int stages = s.num_stages, m = s.microbatches, p = static_cast<int>(chunks.size());
  const std::vector<double>& adds = budget.adds;
  PT_CHECK(static_cast<int>(adds.size()) == stages && static_cast<int>(budget.limit.size()) == p, kind,
           ": a budget for ", adds.size(), " stages and ", budget.limit.size(), " workers");
  std::vector<ChunkWorker> workers(p);
  for (int w = 0; w < p; ++w) {
    ChunkWorker& v = workers[w];
    int n = static_cast<int>(chunks[w].size());
    v.stages = chunks[w];
    v.next_f.assign(n, 0), v.next_b.assign(n, 0), v.room_after.assign(n, 0);
    for (int c = n - 2; c >= 0; --c) v.room_after[c] = v.room_after[c + 1] + adds[v.stages[c + 1]];
  }
  // Finish slot of each F and B by (stage, mb): an action may use it from that slot on.
  std::vector<std::vector<int>> f_done(stages, std::vector<int>(m, kNotYet)), b_done = f_done;
  auto done_by = [](int at, int t) { return at != kNotYet && at <= t; };
  int remaining = 3 * stages * m;  // F, B and W of every stage and microbatch
  for (int t = 0; remaining > 0; ++t) {
    bool any = false;
    for (int w = 0; w < p; ++w) {
      ChunkWorker& v = workers[w];
      const int n = static_cast<int>(v.stages.size());
      // 1. A ready B: the earliest microbatch, the later chunk on a tie.
      int best = -1;
      for (int c = n - 1; c >= 0; --c) {
        int st = v.stages[c], k = v.next_b[c];
        if (k >= m || !done_by(f_done[st][k], t)) continue;
        if (st + 1 < stages && !done_by(b_done[st + 1][k], t)) continue;
        if (best < 0 || k < v.next_b[best]) best = c;
      }
      if (best >= 0) {
        int st = v.stages[best], k = v.next_b[best]++;
        s.add(w, ActionKind::kBackward, st, k);
        b_done[st][k] = t + 1;
        v.pending_w.emplace_back(st, k);
        --remaining, any = true;
        continue;
      }
      // 2. A ready F that leaves room for its microbatch in the later chunks, the later first.
      for (int c = n - 1; c >= 0 && best < 0; --c) {
        int st = v.stages[c], k = v.next_f[c];
        if (k >= m || (st > 0 && !done_by(f_done[st - 1][k], t))) continue;
        if (v.held + adds[st] + v.room_after[c] > budget.limit[w]) continue;
        s.add(w, ActionKind::kForward, st, k);
        f_done[st][k] = t + 1;
        ++v.next_f[c], v.held += adds[st];
        --remaining, any = true;
        best = c;
      }
      if (best >= 0) continue;
      // 3. The oldest W.
      if (!v.pending_w.empty()) {
        auto [st, k] = v.pending_w.front();
        v.pending_w.pop_front();
        s.add(w, ActionKind::kBackwardWeight, st, k);
        v.held -= adds[st];
        --remaining, any = true;
      }
    }
    // Nothing ran while work remains: every worker waits on another's slot still to come, or is
    // at its limit with no W left; the room kept for later chunks rules that out, but a silent
    // endless loop would be worse than saying so.
    if (!any) {
      bool waiting = false;  // some F or B is done in a later slot
      for (int st = 0; st < stages && !waiting; ++st)
        for (int k = 0; k < m && !waiting; ++k)
          waiting = (f_done[st][k] != kNotYet && f_done[st][k] > t) || (b_done[st][k] != kNotYet && b_done[st][k] > t);
      if (!waiting) throw InternalError(str(kind, ": no worker can run at slot ", t, " with ", remaining, " actions left"));
    }
  }
}

}  // namespace pt::schedule::detail
