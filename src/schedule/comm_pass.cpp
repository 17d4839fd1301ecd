#include "schedule/comm_pass.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include "core/error.h"

namespace pt::schedule {

namespace {
constexpr double kNever = std::numeric_limits<double>::infinity();

double unit_cost(const Schedule& s, const Action& a) {
  switch (a.kind) {
    case ActionKind::kForward: return 1;
    case ActionKind::kBackward: return s.split_backward[a.stage] ? 1 : 2;
    case ActionKind::kBackwardWeight: return 1;
    case ActionKind::kAllReduce: return 1;
    default: return 0;
  }
}

// Start and finish times of every action of a compute-only schedule on the unit clock, with free
// transfers. Actions that can never run keep kNever.
struct UnitReplay {
  std::vector<std::vector<double>> start, finish;
  // Finish time of F (even index) and B (odd) by stage and microbatch; kNever for none. A
  // microbatch outside the schedule's range (the validator names it later) is never done.
  std::vector<double> done_;
  int stages_, microbatches_;
  double done(ActionKind k, int stage, int mb) const {
    if (mb < 0 || mb >= microbatches_ || stage < 0 || stage >= stages_) return kNever;
    return done_[(static_cast<size_t>(stage) * microbatches_ + mb) * 2 + (k == ActionKind::kBackward)];
  }

  explicit UnitReplay(const Schedule& s)
      : done_(static_cast<size_t>(s.num_stages) * s.total_microbatches() * 2, kNever), stages_(s.num_stages),
        microbatches_(s.total_microbatches()) {
    int n = s.num_workers();
    start.resize(n);
    finish.resize(n);
    for (int w = 0; w < n; ++w) {
      start[w].assign(s.actions[w].size(), kNever);
      finish[w].assign(s.actions[w].size(), kNever);
    }
    std::vector<size_t> pc(n, 0);
    std::vector<double> clock(n, 0);
    for (bool progress = true; progress;) {
      progress = false;
      for (int w = 0; w < n; ++w) {
        while (pc[w] < s.actions[w].size()) {
          const Action& a = s.actions[w][pc[w]];
          double ready = clock[w];
          if (a.kind == ActionKind::kForward && a.stage > 0)
            ready = std::max(ready, done(ActionKind::kForward, a.stage - 1, a.microbatch));
          if (a.kind == ActionKind::kBackward && a.stage + 1 < s.num_stages)
            ready = std::max(ready, done(ActionKind::kBackward, a.stage + 1, a.microbatch));
          if (a.kind == ActionKind::kAllReduce) {
            // A collective starts when every replica has reached it.
            for (int r : s.stage_workers[a.stage]) {
              bool there = pc[r] < s.actions[r].size() && s.actions[r][pc[r]].kind == ActionKind::kAllReduce &&
                           s.actions[r][pc[r]].stage == a.stage && s.actions[r][pc[r]].microbatch == a.microbatch;
              ready = there ? std::max(ready, clock[r]) : kNever;
              if (!there) break;
            }
            if (ready == kNever) break;
            for (int r : s.stage_workers[a.stage]) {
              start[r][pc[r]] = ready;
              finish[r][pc[r]] = clock[r] = ready + unit_cost(s, a);
              ++pc[r];
            }
            progress = true;
            continue;
          }
          if (ready == kNever) break;
          start[w][pc[w]] = ready;
          finish[w][pc[w]] = clock[w] = ready + unit_cost(s, a);
          if ((a.kind == ActionKind::kForward || a.kind == ActionKind::kBackward) && a.microbatch >= 0 &&
              a.microbatch < microbatches_ && a.stage >= 0 && a.stage < stages_)
            done_[(static_cast<size_t>(a.stage) * microbatches_ + a.microbatch) * 2 +
                  (a.kind == ActionKind::kBackward)] = clock[w];
          ++pc[w];
          progress = true;
        }
      }
    }
  }
};

struct Entry {
  double time;
  int cls;   // 0: transfer, 1: the worker's own action (transfers first at equal times)
  long order;  // transfers: global pair id; own actions: position in the list
  Action action;
};
}  // namespace

Schedule insert_comm(const Schedule& compute_only) {
  Schedule s = compute_only;
  for (auto& list : s.actions)
    list.erase(std::remove_if(list.begin(), list.end(), [](const Action& a) { return is_p2p(a.kind); }), list.end());
  UnitReplay replay(s);
  std::vector<std::vector<Entry>> merged(s.num_workers());
  for (int w = 0; w < s.num_workers(); ++w) {
    merged[w].reserve(3 * s.actions[w].size());  // about a send or a receive per compute, and room
    for (size_t i = 0; i < s.actions[w].size(); ++i)
      merged[w].push_back({replay.start[w][i], 1, static_cast<long>(i), s.actions[w][i]});
  }
  long pair_id = 0;
  auto add_pair = [&](ActionKind send, ActionKind recv, int from_stage, int to_stage, int mb, double time) {
    int u = s.worker_of(from_stage, mb), v = s.worker_of(to_stage, mb);
    if (u == v) return;  // same worker: the data is already there
    Action a{u, send, from_stage, mb, s.chunks > 1 ? s.chunk_of(from_stage) : 0, v};
    Action b{v, recv, to_stage, mb, s.chunks > 1 ? s.chunk_of(to_stage) : 0, u};
    merged[u].push_back({time, 0, pair_id, a});
    merged[v].push_back({time, 0, pair_id, b});
    ++pair_id;
  };
  for (int mb = 0; mb < s.total_microbatches(); ++mb)
    for (int st = 0; st + 1 < s.num_stages; ++st) {
      add_pair(ActionKind::kSendActivation, ActionKind::kRecvActivation, st, st + 1, mb,
               replay.done(ActionKind::kForward, st, mb));
      add_pair(ActionKind::kSendGradient, ActionKind::kRecvGradient, st + 1, st, mb,
               replay.done(ActionKind::kBackward, st + 1, mb));
    }
  for (int w = 0; w < s.num_workers(); ++w) {
    auto& list = merged[w];
    // Unreplayable actions (time kNever) keep their relative order after everything else.
    std::stable_sort(list.begin(), list.end(), [](const Entry& x, const Entry& y) {
      return std::tie(x.time, x.cls, x.order) < std::tie(y.time, y.cls, y.order);
    });
    s.actions[w].clear();
    s.actions[w].reserve(list.size());
    for (const auto& e : list) s.actions[w].push_back(e.action);
  }
  return s;
}

}  // namespace pt::schedule
