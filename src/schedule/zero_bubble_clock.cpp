#include "schedule/zero_bubble_clock.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <limits>
#include <queue>
#include <tuple>

#include "core/error.h"

namespace pt::schedule::detail {

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

struct Step {
  ActionKind kind;
  int stage, microbatch;
};
using Order = std::vector<std::vector<Step>>;  // [worker] its computes in order

// The computes of a schedule on a clock: each takes its stage's time (`times`, or one slot), and
// what it hands to another worker arrives after its message, each worker's port sending and
// receiving one at a time (free where there are no times or no cluster). Every worker free at
// `now` chooses in worker order (what one ends is not there for the others until it ends); then
// the clock moves to the next end or arrival.
class Clock {
 public:
  Clock(const Schedule& s, const ActionTimes& times)
      : s_(s), t_(times), out_(s.num_workers(), 0), in_(s.num_workers(), 0), free_at_(s.num_workers(), 0),
        f_done_(s.num_stages, std::vector<double>(s.microbatches, kNever)), f_there_(f_done_), b_there_(f_done_) {
    PT_CHECK(t_.empty() || (static_cast<int>(t_.forward_ms.size()) == s.num_stages &&
                            static_cast<int>(t_.send_bytes.size()) == s.num_stages),
             s.kind, ": action times for ", t_.forward_ms.size(), " stages, the schedule has ", s.num_stages);
  }
  // Whether stage st's F (B) of microbatch k has its inputs at `now`.
  bool f_ready(int st, int k, double now) const { return st == 0 || f_there_[st - 1][k] <= now; }
  bool b_ready(int st, int k, double now) const {
    return f_done_[st][k] <= now && (st + 1 == s_.num_stages || b_there_[st + 1][k] <= now);
  }
  double duration(const Step& a) const {
    if (t_.empty()) return 1;
    return a.kind == ActionKind::kForward ? t_.forward_ms[a.stage]
           : a.kind == ActionKind::kBackward ? t_.input_grad_ms[a.stage] : t_.weight_grad_ms[a.stage];
  }
  // Worker w runs `a` from `now`.
  void run(int w, const Step& a, double now) {
    double end = free_at_[w] = now + duration(a);
    if (a.kind == ActionKind::kForward) {
      f_done_[a.stage][a.microbatch] = end;
      f_there_[a.stage][a.microbatch] = a.stage + 1 < s_.num_stages ? hand_over(end, a.stage, a.stage + 1) : end;
      arrivals_.push(f_there_[a.stage][a.microbatch]);
    } else if (a.kind == ActionKind::kBackward) {
      b_there_[a.stage][a.microbatch] = a.stage > 0 ? hand_over(end, a.stage, a.stage - 1) : end;
      arrivals_.push(b_there_[a.stage][a.microbatch]);
    }
  }
  // Runs until `left` computes have run; `choose(w, now)` starts one on free worker w (via run)
  // or returns false. Returns the makespan, or kNever where no worker can ever run again.
  double go(int left, const std::function<bool(int, double)>& choose) {
    const int p = s_.num_workers();
    for (double now = 0; left > 0;) {
      for (int w = 0; w < p && left > 0; ++w)
        if (free_at_[w] <= now && choose(w, now)) --left;
      double next = kNever;
      for (double f : free_at_)
        if (f > now) next = std::min(next, f);
      while (!arrivals_.empty() && arrivals_.top() <= now) arrivals_.pop();
      if (!arrivals_.empty()) next = std::min(next, arrivals_.top());
      if (left > 0 && next == kNever) return kNever;
      now = next;
    }
    return *std::max_element(free_at_.begin(), free_at_.end());
  }

 private:
  // When what stage `from` finished at `ready` is at stage `to`'s worker.
  double hand_over(double ready, int from, int to) {
    int a = s_.stage_workers[from][0], b = s_.stage_workers[to][0];
    const plan::Cluster& c = t_.cluster;
    if (a == b || t_.empty() || c.levels.empty() || std::max(a, b) >= c.workers()) return ready;
    double start = std::max({ready, out_[a], in_[b]});
    out_[a] = in_[b] = start + c.message_ms(c.level_between(a, b), t_.send_bytes[std::min(from, to)]);
    return out_[a];
  }

  const Schedule& s_;
  const ActionTimes& t_;
  std::vector<double> out_, in_, free_at_;  // [worker] when its ports, and it, are next free
  // By (stage, mb): when its F is done, when its activation is at stage + 1's worker, when its
  // B's gradient is at stage - 1's worker.
  std::vector<std::vector<double>> f_done_, f_there_, b_there_;
  std::priority_queue<double, std::vector<double>, std::greater<>> arrivals_;  // hand-overs in flight
};

struct ChunkWorker {
  std::vector<int> stages;      // [chunk] in pipeline order
  std::vector<int> next_f, next_b;  // [chunk] -> its next forward's (backward's) microbatch
  std::vector<double> room_after;   // [chunk] -> what one microbatch holds in the chunks after it
  std::deque<std::pair<int, int>> pending_w;  // (stage, mb) whose B ran, oldest first
  double held = 0;
};

// The rules' order on `times`' clock, and its makespan there (kNever where every worker comes
// to wait on another).
std::pair<Order, double> greedy(const Schedule& s, const std::vector<std::vector<int>>& chunks,
                                const ChunkBudget& budget, const ActionTimes& times) {
  const int stages = s.num_stages, m = s.microbatches, p = static_cast<int>(chunks.size());
  const std::vector<double>& adds = budget.adds;
  std::vector<ChunkWorker> workers(p);
  for (int w = 0; w < p; ++w) {
    ChunkWorker& v = workers[w];
    int n = static_cast<int>(chunks[w].size());
    v.stages = chunks[w];
    v.next_f.assign(n, 0), v.next_b.assign(n, 0), v.room_after.assign(n, 0);
    for (int c = n - 2; c >= 0; --c) v.room_after[c] = v.room_after[c + 1] + adds[v.stages[c + 1]];
  }
  Clock clock(s, times);
  Order order(p);
  auto start = [&](int w, Step a, double now) {
    clock.run(w, a, now);
    order[w].push_back(a);
    return true;
  };
  auto choose = [&](int w, double now) {
    ChunkWorker& v = workers[w];
    const int n = static_cast<int>(v.stages.size());
    // 1. A ready B: the earliest microbatch, the later chunk on a tie.
    int best = -1;
    for (int c = n - 1; c >= 0; --c) {
      int st = v.stages[c], k = v.next_b[c];
      if (k < m && clock.b_ready(st, k, now) && (best < 0 || k < v.next_b[best])) best = c;
    }
    if (best >= 0) {
      int st = v.stages[best], k = v.next_b[best]++;
      v.pending_w.emplace_back(st, k);
      return start(w, {ActionKind::kBackward, st, k}, now);
    }
    // 2. A ready F that leaves room for its microbatch in the later chunks, the later first.
    for (int c = n - 1; c >= 0; --c) {
      int st = v.stages[c], k = v.next_f[c];
      if (k >= m || !clock.f_ready(st, k, now) || v.held + adds[st] + v.room_after[c] > budget.limit[w]) continue;
      ++v.next_f[c], v.held += adds[st];
      return start(w, {ActionKind::kForward, st, k}, now);
    }
    // 3. The oldest W.
    if (v.pending_w.empty()) return false;
    auto [st, k] = v.pending_w.front();
    v.pending_w.pop_front();
    v.held -= adds[st];
    return start(w, {ActionKind::kBackwardWeight, st, k}, now);
  };
  double makespan = clock.go(3 * stages * m, choose);
  return {std::move(order), makespan};
}

}  // namespace

void zero_bubble_clock(Schedule& s, const std::vector<std::vector<int>>& chunks, const ChunkBudget& budget,
                       const ActionTimes& times, const std::string& kind) {
  PT_CHECK(static_cast<int>(budget.adds.size()) == s.num_stages && static_cast<int>(budget.limit.size()) ==
           static_cast<int>(chunks.size()), kind, ": a budget for ", budget.adds.size(), " stages and ",
           budget.limit.size(), " workers");
  auto [order, makespan] = greedy(s, chunks, budget, times);
  if (makespan == kNever && !times.empty()) {
    // On the unit clock the room each F keeps for its microbatch's later chunks lets a W free it
    // in time; on true times it can run out (alexnet's chunks on 4 workers at 1 Gbps: a worker
    // admits first chunks' F's while its later chunk's inputs are on their way, and all wait).
    // Then the unit clock's order.
    std::tie(order, makespan) = greedy(s, chunks, budget, ActionTimes{});
  }
  // A silent endless loop would be worse than saying so.
  if (makespan == kNever) throw InternalError(str(kind, ": no worker can run again"));
  for (int w = 0; w < static_cast<int>(order.size()); ++w)
    for (const Step& a : order[w]) s.add(w, a.kind, a.stage, a.microbatch);
}

}  // namespace pt::schedule::detail
