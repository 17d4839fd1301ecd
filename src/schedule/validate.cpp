#include "schedule/validate.h"

#include <algorithm>
#include <tuple>

#include "schedule/stash_tracker.h"

namespace pt::schedule {

namespace {

// A table over (kind, stage, microbatch) of a schedule's compute and point-to-point actions, whose
// microbatches check_placement has bounded: flat, as the planner validates hundreds of schedules.
template <typename T>
class ActionTable {
 public:
  ActionTable(const Schedule& s, T empty)
      : stages_(s.num_stages), microbatches_(s.total_microbatches()),
        cells_(static_cast<size_t>(kNumActionKinds) * stages_ * microbatches_, empty) {}
  T& operator()(ActionKind k, int stage, int mb) {
    return cells_[(static_cast<size_t>(k) * stages_ + stage) * microbatches_ + mb];
  }

 private:
  int stages_, microbatches_;
  std::vector<T> cells_;
};

[[noreturn]] void fail(const Schedule& s, const std::vector<std::pair<int, int>>& at, const std::string& why) {
  std::string where;
  if (!at.empty()) {
    const Action& a = s.actions[at[0].first][at[0].second];
    where = str("worker ", at[0].first, ", step ", at[0].second, ", action ", to_string(a), ": ");
  }
  throw InvalidSchedule(str(s.kind, " schedule is invalid: ", where, why, "\n", format_grid(s, at)));
}

bool holds(const Schedule& s, int worker, int stage) {
  const auto& ws = s.stage_workers[stage];
  return std::find(ws.begin(), ws.end(), worker) != ws.end();
}

// Check 1: placement and peers.
void check_placement(const Schedule& s) {
  PT_CHECK(static_cast<int>(s.stage_workers.size()) == s.num_stages && static_cast<int>(s.split_backward.size()) == s.num_stages,
           "schedule fields sized for ", s.num_stages, " stages");
  for (int w = 0; w < s.num_workers(); ++w)
    for (int i = 0; i < static_cast<int>(s.actions[w].size()); ++i) {
      const Action& a = s.actions[w][i];
      std::vector<std::pair<int, int>> at = {{w, i}};
      if (a.worker != w) fail(s, at, str("is in worker ", w, "'s list but names worker ", a.worker));
      if (a.stage < 0 || a.stage >= s.num_stages) fail(s, at, str("stage out of range 0..", s.num_stages - 1));
      if (!holds(s, w, a.stage)) fail(s, at, str("worker ", w, " does not hold stage ", a.stage));
      if (a.microbatch < 0) fail(s, at, "negative microbatch");
      if (is_compute(a.kind) || is_p2p(a.kind)) {
        if (a.microbatch >= s.total_microbatches())
          fail(s, at, str("microbatch out of range 0..", s.total_microbatches() - 1));
        if (s.worker_of(a.stage, a.microbatch) != w)
          fail(s, at, str("microbatch ", a.microbatch, " of stage ", a.stage, " belongs to worker ",
                          s.worker_of(a.stage, a.microbatch)));
      }
      if (a.kind == ActionKind::kBackwardWeight && !s.split_backward[a.stage])
        fail(s, at, str("W on stage ", a.stage, " whose backward is not split"));
      int next = a.kind == ActionKind::kSendActivation || a.kind == ActionKind::kRecvGradient ? a.stage + 1
                 : is_p2p(a.kind)                                                               ? a.stage - 1
                                                                                                : -2;
      if (next == -2) continue;
      if (next < 0 || next >= s.num_stages) fail(s, at, str("there is no stage ", next, " to talk to"));
      if (a.peer != s.worker_of(next, a.microbatch))
        fail(s, at, str("peer should be worker ", s.worker_of(next, a.microbatch), " (stage ", next, ")"));
    }
}

// Check 2: every microbatch forwarded, backwarded (and W'd where split) exactly once per stage.
void check_coverage(const Schedule& s) {
  ActionTable<std::pair<int, int>> seen(s, {-1, -1});  // where each ran
  for (int w = 0; w < s.num_workers(); ++w)
    for (int i = 0; i < static_cast<int>(s.actions[w].size()); ++i) {
      const Action& a = s.actions[w][i];
      if (!is_compute(a.kind)) continue;
      auto& at = seen(a.kind, a.stage, a.microbatch);
      if (at.first >= 0) fail(s, {{w, i}, at}, "runs twice");
      at = {w, i};
    }
  for (int st = 0; st < s.num_stages; ++st)
    for (int k = 0; k < s.total_microbatches(); ++k)
      for (ActionKind kind : {ActionKind::kForward, ActionKind::kBackward, ActionKind::kBackwardWeight}) {
        if (kind == ActionKind::kBackwardWeight && !s.split_backward[st]) continue;
        if (seen(kind, st, k).first < 0)
          fail(s, {}, str("stage ", st, " never runs ", kind_name(kind), " of microbatch ", k, " (expected ",
                          st, kind_code(kind), k, " on worker ", s.worker_of(st, k), ")"));
      }
}

// Check 3: data dependencies within each worker's order.
void check_order(const Schedule& s) {
  ActionTable<int> done(s, -1);  // the worker that has run it
  for (int w = 0; w < s.num_workers(); ++w) {
    for (int i = 0; i < static_cast<int>(s.actions[w].size()); ++i) {
      const Action& a = s.actions[w][i];
      auto need = [&](ActionKind k, int stage, const char* why) {
        if (done(k, stage, a.microbatch) != w)
          fail(s, {{w, i}}, str("runs before ", stage, kind_code(k), a.microbatch, " (", why, ")"));
      };
      // The input of stage s comes by RA, or from F(s-1) when the same worker runs stage s-1.
      auto input = [&](ActionKind local, ActionKind recv, int from, const char* why) {
        if (s.worker_of(from, a.microbatch) == w) need(local, from, why);
        else need(recv, a.stage, why);
      };
      switch (a.kind) {
        case ActionKind::kForward:
          if (a.stage > 0) input(ActionKind::kForward, ActionKind::kRecvActivation, a.stage - 1, "its input");
          break;
        case ActionKind::kBackward:
          need(ActionKind::kForward, a.stage, "forward before backward");
          if (a.stage + 1 < s.num_stages)
            input(ActionKind::kBackward, ActionKind::kRecvGradient, a.stage + 1, "its output gradient");
          break;
        case ActionKind::kBackwardWeight: need(ActionKind::kBackward, a.stage, "W after B"); break;
        case ActionKind::kSendActivation: need(ActionKind::kForward, a.stage, "the activation it sends"); break;
        case ActionKind::kSendGradient: need(ActionKind::kBackward, a.stage, "the gradient it sends"); break;
        default: break;
      }
      if (is_compute(a.kind) || is_p2p(a.kind)) done(a.kind, a.stage, a.microbatch) = w;
    }
  }
}

// The (kind, stage, mb, from, to) a send or receive moves, the same for both ends.
std::tuple<bool, int, int, int, int> transfer_of(const Action& a) {
  bool act = a.kind == ActionKind::kSendActivation || a.kind == ActionKind::kRecvActivation;
  // Identify by the producing stage.
  int producer = a.kind == ActionKind::kSendActivation || a.kind == ActionKind::kSendGradient ? a.stage
                 : act                                                                     ? a.stage - 1
                                                                                           : a.stage + 1;
  int from = is_send(a.kind) ? a.worker : a.peer, to = is_send(a.kind) ? a.peer : a.worker;
  return {act, producer, a.microbatch, from, to};
}

// Check 4: sends and receives pair up one to one. A transfer is (direction, producing stage,
// microbatch): check_placement has tied its two workers to them.
void check_matching(const Schedule& s) {
  ActionTable<std::pair<int, int>> sent(s, {-1, -1}), received(s, {-1, -1});  // where, by transfer
  auto cell = [&](const Action& a) -> std::pair<int, int>& {
    auto [act, producer, mb, from, to] = transfer_of(a);
    auto& table = is_send(a.kind) ? sent : received;
    return table(act ? ActionKind::kSendActivation : ActionKind::kSendGradient, producer, mb);
  };
  for (int w = 0; w < s.num_workers(); ++w)
    for (int i = 0; i < static_cast<int>(s.actions[w].size()); ++i) {
      const Action& a = s.actions[w][i];
      if (!is_p2p(a.kind)) continue;
      auto& at = cell(a);
      if (at.first >= 0) fail(s, {at, {w, i}}, is_send(a.kind) ? "is sent twice" : "is received twice");
      at = {w, i};
    }
  for (int w = 0; w < s.num_workers(); ++w)
    for (int i = 0; i < static_cast<int>(s.actions[w].size()); ++i) {
      const Action& a = s.actions[w][i];
      if (!is_p2p(a.kind)) continue;
      auto [act, producer, mb, from, to] = transfer_of(a);
      auto& other = (is_send(a.kind) ? received : sent)(act ? ActionKind::kSendActivation : ActionKind::kSendGradient,
                                                         producer, mb);
      if (other.first < 0) fail(s, {{w, i}}, is_send(a.kind) ? "no worker receives it" : "no worker sends it");
    }
}

// Check 5: replay with rendezvous sends and collective all-reduces.
int check_deadlock(const Schedule& s) {
  int n = s.num_workers();
  std::vector<size_t> pc(n, 0);
  auto at = [&](int w) -> const Action* { return pc[w] < s.actions[w].size() ? &s.actions[w][pc[w]] : nullptr; };
  int rounds = 0;
  for (bool progress = true; progress; ++rounds) {
    progress = false;
    for (int w = 0; w < n; ++w) {
      const Action* a = at(w);
      if (!a) continue;
      if (is_p2p(a->kind)) {
        const Action* b = at(a->peer);
        if (b && is_p2p(b->kind) && is_send(b->kind) != is_send(a->kind) && b->peer == w &&
            transfer_of(*a) == transfer_of(*b)) {
          ++pc[w];
          ++pc[a->peer];
          progress = true;
        }
      } else if (a->kind == ActionKind::kAllReduce) {
        bool all = true;
        for (int r : s.stage_workers[a->stage]) {
          const Action* b = at(r);
          all = all && b && b->kind == ActionKind::kAllReduce && b->stage == a->stage && b->microbatch == a->microbatch;
        }
        if (all) {
          for (int r : s.stage_workers[a->stage]) ++pc[r];
          progress = true;
        }
      } else {
        ++pc[w];  // local: its inputs are there (check 3 and the matched receives guarantee it)
        progress = true;
      }
    }
  }
  std::vector<std::pair<int, int>> stuck;
  std::string what;
  for (int w = 0; w < n; ++w)
    if (const Action* a = at(w)) {
      stuck.push_back({w, static_cast<int>(pc[w])});
      what += str("\n  worker ", w, " waits at step ", pc[w], " on ", to_string(*a));
    }
  if (!stuck.empty()) fail(s, stuck, str("deadlock with blocking sends and receives:", what));
  return rounds;
}
// Check 7 (synchronous schedules): each worker steps each of its stages once per minibatch,
// after that minibatch's backwards on it (and its all-reduce where replicated) and before its
// next forward there. A schedule file without a step, with two, or with one before its
// backwards trained and exited 0: a stage that never learns, or learns twice.
void check_steps(const Schedule& s) {
  if (!s.flush) return;  // the asynchronous generators step per round (pipedream.cpp)
  for (int w = 0; w < s.num_workers(); ++w)
    for (int st = 0; st < s.num_stages; ++st) {
      if (!holds(s, w, st)) continue;
      for (int k = 0; k < s.minibatches; ++k) {
        int step = -1, reduced = -1, last_backward = -1, first_forward_after = -1;
        for (int i = 0; i < static_cast<int>(s.actions[w].size()); ++i) {
          const Action& a = s.actions[w][i];
          if (a.stage != st) continue;
          bool mine = a.microbatch / s.microbatches == k;
          if (a.kind == ActionKind::kStep && a.microbatch == k) {
            if (step >= 0) fail(s, {{w, i}, {w, step}}, str("stage ", st, " steps twice for minibatch ", k));
            step = i;
          } else if (a.kind == ActionKind::kAllReduce && a.microbatch == k) {
            reduced = i;
          } else if (mine && (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardWeight)) {
            last_backward = i;
          } else if (mine && a.kind == ActionKind::kForward && step >= 0 && first_forward_after < 0) {
            first_forward_after = i;
          }
        }
        if (step < 0)
          fail(s, {}, str("worker ", w, " never steps stage ", st, " for minibatch ", k, " (expected ", st, "ST", k,
                          " after its backwards): a synchronous schedule steps each stage once per minibatch"));
        if (last_backward > step)
          fail(s, {{w, step}, {w, last_backward}}, str("stage ", st, " steps before its backward of minibatch ", k,
                                                       " ends: that gradient would be left out"));
        if (first_forward_after >= 0)
          fail(s, {{w, first_forward_after}, {w, step}},
               str("a forward of minibatch ", k, " runs after its step: on other weights than the rest"));
        if (s.replicas(st) > 1 && !(reduced >= 0 && reduced < step))
          fail(s, {{w, step}}, str("stage ", st, " has ", s.replicas(st), " replicas but steps without all-reducing "
                                   "minibatch ", k, "'s gradients first"));
      }
    }
}

// Check 6: weight versions alive on each replica within the stage's declared budget.
void check_stash_budget(const Schedule& s) {
  PT_CHECK(static_cast<int>(s.weight_versions.size()) == s.num_stages, "weight_versions sized ",
           s.weight_versions.size(), " for ", s.num_stages, " stages");
  for (int w = 0; w < s.num_workers(); ++w) {
    StashTracker tracker;
    tracker.delay_weights(s.weight_delay, s.microbatches);
    for (int i = 0; i < static_cast<int>(s.actions[w].size()); ++i) {
      const Action& a = s.actions[w][i];
      tracker.on(a, s.split_backward[a.stage]);
      if (tracker.ran_ahead())
        fail(s, {{w, i}}, str("runs on the weights after ", a.microbatch / s.microbatches - s.weight_delay,
                              " steps of stage ", a.stage, " (weight delay ", s.weight_delay,
                              "), which its worker has not taken yet"));
      if (tracker.weight_versions(a.stage) > s.weight_versions[a.stage])
        fail(s, {{w, i}}, str(tracker.weight_versions(a.stage), " weight versions of stage ", a.stage,
                              " alive at once, more than the ", s.weight_versions[a.stage], " the schedule keeps"));
    }
  }
}

}  // namespace

std::vector<WorkerCounts> stash_counts(const Schedule& s) {
  std::vector<WorkerCounts> out(s.num_workers());
  for (int w = 0; w < s.num_workers(); ++w) {
    StashTracker tracker;
    tracker.delay_weights(s.weight_delay, s.microbatches);
    for (const Action& a : s.actions[w]) tracker.on(a, s.split_backward[a.stage]);
    out[w] = {tracker.peak_stash(), tracker.max_weight_versions()};
  }
  return out;
}

ValidationReport validate(const Schedule& s) {
  check_placement(s);
  check_coverage(s);
  check_order(s);
  check_matching(s);
  ValidationReport r;
  r.steps = check_deadlock(s);
  check_steps(s);
  check_stash_budget(s);
  r.workers = stash_counts(s);
  return r;
}

}  // namespace pt::schedule
