// The simulator's action loop: which worker's action runs next and when, compute on a device
// per worker or on shared cores (replay.h; the link bookings are replay_links.cpp's).
#include "sim/replay.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace pt::sim::detail {

Replay::Replay(const schedule::Schedule& s, const std::vector<StageCost>& costs, const plan::Cluster& c,
               int64_t bucket_bytes, int cores, bool computes_only, std::vector<TieExchange> ties,
               std::vector<int> placement)
    : s_(s), cluster_(c), costs_(costs), computes_only_(computes_only), scale_(1.0 / s.microbatches),
      cores_(std::max(cores, 0)), placement_(std::move(placement)), busy_(s.num_workers(), 0),
      pc_(s.num_workers(), 0), clock_(s.num_workers(), 0), events_(s.num_workers()),
      queue_(s.num_workers()), pending_buckets_(s.num_workers()), ring_plans_(s.num_stages) {
  // Only a replicated stage's backwards release buckets (finish_compute): a worker holding
  // none needs no table (most of a straight pipeline's).
  if (cores_ == 0) placement_.clear();
  PT_CHECK(placement_.empty() || static_cast<int>(placement_.size()) == s.num_workers(), "a placement of ",
           placement_.size(), " workers for a schedule of ", s.num_workers());
  for (int core : placement_) PT_CHECK(core >= 0 && core < cores_, "core ", core, " of ", cores_);
  std::vector<char> replicated(s.num_workers(), 0);
  for (int st = 0; st < s.num_stages; ++st)
    if (s.replicas(st) > 1)
      for (int w : s.stage_workers[st]) replicated[w] = 1;
  for (int w = 0; w < s.num_workers(); ++w) {
    completes_.push_back(bucket_bytes > 0 && replicated[w] ? s.completes_gradients(w)
                                                           : std::vector<bool>(s.actions[w].size()));
    events_[w].reserve(s.actions[w].size() + (computes_only ? 0 : s.actions[w].size() / 2));
  }
  // A validated schedule's computes and transfers take microbatches below this (validate.cpp).
  microbatches_ = s.total_microbatches();
  ready_.assign(static_cast<size_t>(kSlots) * s.num_stages * microbatches_, {-1, 0.0});
  int L = static_cast<int>(c.levels.size());
  for (int k = 0; k < L; ++k) unit_.push_back(c.workers_per_unit_below(k + 1));
  egress_.resize(static_cast<size_t>(s.num_workers()) * L);
  ingress_.resize(egress_.size());
  for (auto* ports : {&egress_, &ingress_})  // room for a few rounds' bookings before any growth
    for (Port& p : *ports) p.reserve(64);
  // Each worker's tie exchanges, in group order (the runtime's), before its first step.
  ties_ = std::move(ties);
  mine_.resize(s.num_workers());
  next_tie_.assign(s.num_workers(), 0);
  first_step_.assign(s.num_workers(), 0);
  for (int w = 0; w < s.num_workers(); ++w) {
    const auto& list = s.actions[w];
    while (first_step_[w] < list.size() && list[first_step_[w]].kind != ActionKind::kStep) ++first_step_[w];
  }
  for (size_t e = 0; e < ties_.size(); ++e)
    for (int w : ties_[e].workers) mine_[w].push_back(static_cast<int>(e));
}

std::vector<std::vector<TraceEvent>> Replay::run() {
  // In time order: each round runs the action that can start earliest (ties: the lowest
  // worker), so transfers claim their links in the order they are posted, as on a real link,
  // whatever the workers' numbering (replaying worker after worker made two mirror-image
  // placements of one plan simulate 14% apart).
  //
  // The startable actions wait in queue_ by (start, worker): it gives what a scan of every
  // worker would pick, in O(log W) rather than O(W) per action. An all-reduce waits as one
  // entry under its group's lowest worker, which a scan would pick.
  for (int w = 0; w < s_.num_workers(); ++w) consider(w);
  for (int64_t pops = 0; !queue_.empty() || !running_.empty(); ++pops) {
    // On shared cores, a running compute that ends before the next action starts comes first.
    if (!running_.empty()) {
      double end = first_end();
      if (queue_.empty() || end <= queue_.start(queue_.top())) {
        finish_running(end);
        continue;
      }
    }
    int w = queue_.top();  // its entry stays until consider(w) below replaces it
    double start = queue_.start(w);
    if (pops % kForgetEvery == 0 || booked_ > kForgetBooked) forget_past();
    const Action& a = s_.actions[w][pc_[w]];
    bool send = a.kind == ActionKind::kSendActivation || a.kind == ActionKind::kSendGradient;
    int peer = a.peer;
    if (a.kind == ActionKind::kAllReduce) {
      const auto& group = s_.stage_workers[a.stage];
      execute(w, start);
      for (int r : group) consider(r);
      continue;
    }
    if (int e = tie_due(w); e >= 0) {
      exchange(e, start);
      for (int r : ties_[e].workers) consider(r);
      continue;
    }
    execute(w, start);
    consider(w);
    if (send) consider(peer);  // its data has arrived
  }
  for (int w = 0; w < s_.num_workers(); ++w)
    PT_CHECK(pc_[w] == s_.actions[w].size(), "simulator stuck: worker ", w, " at step ", pc_[w], " (",
             to_string(s_.actions[w][pc_[w]]), "); validate the schedule first");
  // A worker's computes and steps are recorded as they run, in order; the transfers it
  // receives when they are booked.
  auto by_start = [](const TraceEvent& a, const TraceEvent& b) { return a.start_ms < b.start_ms; };
  for (auto& list : events_)
    if (!std::is_sorted(list.begin(), list.end(), by_start)) std::stable_sort(list.begin(), list.end(), by_start);
  return std::move(events_);
}

// Queues worker w's next action if it can start (an all-reduce under its group's lowest
// worker), and takes w's own entry out where it cannot: w has moved on, or is a peer whose
// action waits still. A receive is passed over at once: it waits for nothing and holds
// nothing (send() books the transfer and records it on both sides), so it would only pop at
// its worker's clock and move on: a third of a pipeline's actions.
void Replay::consider(int w) {
  if (busy_[w]) return queue_.clear(w);  // its compute runs on a shared core still
  const auto& list = s_.actions[w];
  while (pc_[w] < list.size() && is_recv(list[pc_[w]].kind)) ++pc_[w];
  double start = 0;
  if (pc_[w] >= list.size() || !startable(w, start)) return queue_.clear(w);
  const Action& a = s_.actions[w][pc_[w]];
  int tie = tie_due(w);
  if (a.kind == ActionKind::kAllReduce || tie >= 0) {
    const auto& group = tie >= 0 ? ties_[tie].workers : s_.stage_workers[a.stage];
    int lead = *std::min_element(group.begin(), group.end());
    if (lead != w) queue_.clear(w);
    queue_.set(lead, start);
  } else {
    queue_.set(w, start);
  }
}

// Whether worker w's next action can run now that what it waits for is known, and when.
bool Replay::startable(int w, double& start) const {
  const Action& a = s_.actions[w][pc_[w]];
  start = clock_[w];
  if (int e = tie_due(w); e >= 0) {
    // Every worker of the exchange has reached it.
    for (int r : ties_[e].workers) {
      if (busy_[r] || tie_due(r) != e) return false;
      start = std::max(start, clock_[r]);
    }
    return true;
  }
  switch (a.kind) {
    case ActionKind::kForward:
      // Input: F(stage-1) on this worker, or the activation arriving from another.
      return a.stage == 0 || known(w, kActivationIn, a.stage, a.microbatch, start) ||
             known(w, kForwardDone, a.stage - 1, a.microbatch, start);
    case ActionKind::kBackward:
      return a.stage + 1 == s_.num_stages || known(w, kGradientIn, a.stage, a.microbatch, start) ||
             known(w, kBackwardDone, a.stage + 1, a.microbatch, start);
    case ActionKind::kAllReduce:
      // Every replica has reached this all-reduce.
      for (int r : s_.stage_workers[a.stage]) {
        if (pc_[r] >= s_.actions[r].size()) return false;
        const Action& b = s_.actions[r][pc_[r]];
        if (b.kind != ActionKind::kAllReduce || b.stage != a.stage || b.microbatch != a.microbatch) return false;
        start = std::max(start, clock_[r]);
      }
      return true;
    default:
      return true;
  }
}

// Runs worker w's next action from `start` (startable said it can).
void Replay::execute(int w, double start) {
  const Action& a = s_.actions[w][pc_[w]];
  const StageCost& c = costs_[a.stage];
  switch (a.kind) {
    case ActionKind::kForward:
      compute(w, a, start, compute_ms(s_, a, c),
              s_.recomputes(a.stage) ? static_cast<int64_t>(c.input_bytes * scale_)
                                     : c.fixed_stash_bytes + static_cast<int64_t>((c.stash_bytes - c.fixed_stash_bytes) * scale_));
      break;
    case ActionKind::kBackward:
    case ActionKind::kBackwardWeight: compute(w, a, start, compute_ms(s_, a, c), 0); break;
    case ActionKind::kSendActivation:
    case ActionKind::kSendGradient: send(w, a, start); break;
    case ActionKind::kRecvActivation:
    case ActionKind::kRecvGradient: break;  // passed over by consider(); send() records the transfer
    case ActionKind::kAllReduce: allreduce(a, start); return;  // advances every replica
    case ActionKind::kStep:
      if (cores_ > 0) return share_core(w, start, cluster_.action_ms() + c.step_ms, 0, 0);
      clock_[w] = start + cluster_.action_ms() + c.step_ms;
      record(w, a, start, clock_[w], 0);
      break;
  }
  if (!busy_[w]) ++pc_[w];
}

// Shared cores: a compute joins the ones running at `start`.
void Replay::share_core(int w, double start, double host_ms, double ms, int64_t bytes) {
  start = std::max(start, now_);
  advance(start);
  running_.push_back({w, host_ms + ms, start, host_ms, ms, bytes});
  busy_[w] = 1;
}

const std::vector<double>& Replay::rates() const {
  rates_.assign(running_.size(), 0);
  if (placement_.empty()) {
    std::fill(rates_.begin(), rates_.end(), cluster_.core_rate(static_cast<int>(running_.size()), cores_));
    return rates_;
  }
  on_core_.assign(static_cast<size_t>(cores_), 0);
  int busy = 0;
  for (const Running& r : running_) busy += on_core_[placement_[r.worker]]++ == 0;
  const double core = cluster_.core_rate(busy, cores_);
  for (size_t i = 0; i < running_.size(); ++i) {
    const int on = on_core_[placement_[running_[i].worker]];
    rates_[i] = core * (on > 1 ? cluster_.core_share : 1.0) / on;  // switching between them costs the core
  }
  return rates_;
}

void Replay::advance(double to) {
  if (!running_.empty()) {
    const std::vector<double>& rate = rates();
    for (size_t i = 0; i < running_.size(); ++i) running_[i].left_ms -= (to - now_) * rate[i];
  }
  now_ = std::max(now_, to);
}

void Replay::finish_running(double end) {
  double left = std::numeric_limits<double>::infinity();
  for (const Running& r : running_) left = std::min(left, r.left_ms);
  advance(end);
  // The first to end ends now, whatever the rounding left of it: late in a long replay, `end`
  // less `now_` loses the last bits of a short compute's time, and a remainder of 1e-11 ms kept
  // it running at the same `end` forever (VGG-16 on 4 threads of 2 cores, plan's referee).
  double least = std::numeric_limits<double>::infinity();
  for (const Running& r : running_) least = std::min(least, r.left_ms);
  const double ended = std::max(left * 1e-9 + 1e-12, least + 1e-12);
  std::vector<Running> done;
  for (size_t i = 0; i < running_.size();) {
    if (running_[i].left_ms <= ended) {
      done.push_back(running_[i]);
      running_[i] = running_.back();
      running_.pop_back();
    } else {
      ++i;
    }
  }
  std::sort(done.begin(), done.end(), [](const Running& a, const Running& b) { return a.worker < b.worker; });
  for (const Running& r : done) {
    int w = r.worker;
    if (r.send) {  // a transfer: its data is at the peer, whose next action may now start
      arrive(w, *r.send, r.begin, end, r.bytes);
      auto channel = channels_.find({w, r.send->peer});
      if (channel->second.empty()) {
        channels_.erase(channel);
      } else {  // the pair's next message follows it
        start_message(w, *channel->second.front(), end);
        channel->second.pop_front();
      }
      consider(r.send->peer);
      continue;
    }
    const Action& a = s_.actions[w][pc_[w]];
    busy_[w] = 0;
    if (a.kind == ActionKind::kStep) {
      clock_[w] = end;
      record(w, a, r.begin, end, 0);
    } else {
      // Its host time and compute took the span in proportion to their work.
      double span = end - r.begin, work = r.host_ms + r.ms;
      double host = work > 0 ? span * r.host_ms / work : 0;
      finish_compute(w, a, r.begin, r.begin + host, (span - host), r.bytes);
    }
    ++pc_[w];
    consider(w);
  }
}

// The host's time per action (Cluster::action_us) comes first, then the layers' compute.
void Replay::compute(int w, const Action& a, double start, double ms, int64_t bytes) {
  if (cores_ > 0) return share_core(w, start, cluster_.action_ms(), ms, bytes);
  finish_compute(w, a, start, start + cluster_.action_ms(), ms, bytes);
}

// A compute that ran from `begin`, its layers from `start` for `ms`.
void Replay::finish_compute(int w, const Action& a, double begin, double start, double ms, int64_t bytes) {
  if (completes_[w][pc_[w]] && s_.replicas(a.stage) > 1) {
    // The backward completing the gradients: when each bucket's are final on this replica.
    std::vector<double>* ready = pending(a.stage, w);
    if (!ready) ready = &pending_buckets_[w].emplace_back(a.stage, std::vector<double>()).second;
    ready->clear();
    for (const auto& b : costs_[a.stage].buckets) ready->push_back(start + ms * b.ready_share);
  }
  clock_[w] = start + ms;
  if (a.kind == ActionKind::kForward) ready(kForwardDone, a.stage, a.microbatch) = {w, clock_[w]};
  if (a.kind == ActionKind::kBackward) ready(kBackwardDone, a.stage, a.microbatch) = {w, clock_[w]};
  record(w, a, begin, clock_[w], bytes);
}

}  // namespace pt::sim::detail
