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

// Start times of every action of a compute-only schedule on the unit clock, with free
// transfers. Actions that can never run keep kNever.
struct UnitReplay {
  std::vector<std::vector<double>> start;
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
    for (int w = 0; w < n; ++w) start[w].assign(s.actions[w].size(), kNever);
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
              clock[r] = ready + unit_cost(s, a);
              ++pc[r];
            }
            progress = true;
            continue;
          }
          if (ready == kNever) break;
          start[w][pc[w]] = ready;
          clock[w] = ready + unit_cost(s, a);
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

// A transfer on one worker's list: the time its data is ready on the unit clock and its place
// in the one global order of pairs.
struct Transfer {
  double time;
  long pair;
  Action action;
};
}  // namespace

Schedule insert_comm(Schedule s) {
  for (auto& list : s.actions)
    list.erase(std::remove_if(list.begin(), list.end(), [](const Action& a) { return is_p2p(a.kind); }), list.end());
  UnitReplay replay(s);
  // Each worker's transfers come in streams, one per stage it holds and kind (send or receive,
  // activation or gradient): a stream's microbatches run in order on the unit clock, so its
  // times rise, and merging a worker's few streams orders them as sorting its whole list did
  // (that sort was a third of this pass, the referee's replays build hundreds of schedules).
  struct Stream {
    int stage;
    ActionKind kind;
    std::vector<Transfer> items;
  };
  std::vector<std::vector<Stream>> streams(s.num_workers());
  long pair_id = 0;
  auto stream_of = [&](int w, int stage, ActionKind kind) -> std::vector<Transfer>& {
    for (Stream& st : streams[w])
      if (st.stage == stage && st.kind == kind) return st.items;
    streams[w].push_back({stage, kind, {}});
    // At most the microbatches of its stage on this worker (one in `replicas` of them).
    streams[w].back().items.reserve((s.total_microbatches() + s.replicas(stage) - 1) / s.replicas(stage));
    return streams[w].back().items;
  };
  auto add_pair = [&](ActionKind send, ActionKind recv, int from_stage, int to_stage, int u, int v, int mb,
                      double time) {
    if (u == v) return;  // same worker: the data is already there
    stream_of(u, from_stage, send).push_back({time, pair_id, {u, send, from_stage, mb, s.chunks > 1 ? s.chunk_of(from_stage) : 0, v}});
    stream_of(v, to_stage, recv).push_back({time, pair_id, {v, recv, to_stage, mb, s.chunks > 1 ? s.chunk_of(to_stage) : 0, u}});
    ++pair_id;
  };
  for (int mb = 0; mb < s.total_microbatches(); ++mb)
    for (int st = 0; st + 1 < s.num_stages; ++st) {
      int u = s.worker_of(st, mb), v = s.worker_of(st + 1, mb);
      add_pair(ActionKind::kSendActivation, ActionKind::kRecvActivation, st, st + 1, u, v, mb,
               replay.done(ActionKind::kForward, st, mb));
      add_pair(ActionKind::kSendGradient, ActionKind::kRecvGradient, st + 1, st, v, u, mb,
               replay.done(ActionKind::kBackward, st + 1, mb));
    }
  auto before = [](const Transfer& x, const Transfer& y) { return std::tie(x.time, x.pair) < std::tie(y.time, y.pair); };
  // A worker's own actions start in list order on the unit clock (each after the one before;
  // those that never run, kNever, are the tail), so the merge needs only the transfers in order.
  for (int w = 0; w < s.num_workers(); ++w) {
    size_t transfers = 0;
    for (Stream& st : streams[w]) {
      if (!std::is_sorted(st.items.begin(), st.items.end(), before))  // a schedule that reorders microbatches
        std::sort(st.items.begin(), st.items.end(), before);
      transfers += st.items.size();
    }
    std::vector<size_t> next(streams[w].size(), 0);
    // The stream whose next transfer comes first; -1 when all are merged.
    auto first = [&] {
      int best = -1;
      for (size_t k = 0; k < next.size(); ++k)
        if (next[k] < streams[w][k].items.size() &&
            (best < 0 || before(streams[w][k].items[next[k]], streams[w][best].items[next[best]])))
          best = static_cast<int>(k);
      return best;
    };
    const std::vector<Action>& own = s.actions[w];
    const std::vector<double>& start = replay.start[w];
    std::vector<Action> merged;
    merged.reserve(own.size() + transfers);
    size_t i = 0;
    for (int k = first(); i < own.size() || k >= 0;) {
      // Transfers first at equal times; unreplayable actions keep their order after everything.
      if (k >= 0 && (i == own.size() || streams[w][k].items[next[k]].time <= start[i])) {
        merged.push_back(streams[w][k].items[next[k]++].action);
        k = first();
      } else {
        merged.push_back(own[i++]);
      }
    }
    s.actions[w] = std::move(merged);
  }
  return s;
}

}  // namespace pt::schedule
