// The simulator's links: transfers booked on both ends' ports, all-reduces ring by ring and
// bucket by bucket, a split tie's exchange, and the old bookings forgotten (replay.h).
#include "sim/replay.h"

#include <algorithm>
#include <array>
#include <limits>

namespace pt::sim::detail {

void Replay::send(int w, const Action& a, double posted) {
  if (cores_ > 0) {  // on one host's shared cores: the message's time is their work, the pair's in turn
    auto [channel, idle] = channels_.try_emplace({w, a.peer});
    if (!idle) return channel->second.push_back(&a);
    posted = std::max(posted, now_);
    advance(posted);
    return start_message(w, a, posted);
  }
  int64_t bytes = message_bytes(a);
  int level = level_between(w, a.peer);
  double ms = cluster_.message_ms(level, static_cast<double>(bytes));
  std::array<Port*, 2> ports = {egress(w, level), ingress(a.peer, level)};
  double start = earliest_free(ports, posted, ms), end = start + ms;
  reserve(ports, start, end);
  booked_ += static_cast<int64_t>(ports.size());
  arrive(w, a, start, end, bytes);
}

int64_t Replay::message_bytes(const Action& a) const {
  bool act = a.kind == ActionKind::kSendActivation;
  return static_cast<int64_t>(costs_[act ? a.stage : a.stage - 1].boundary_bytes * scale_);
}

void Replay::start_message(int w, const Action& a, double at) {
  int64_t bytes = message_bytes(a);
  double ms = cluster_.message_ms(level_between(w, a.peer), static_cast<double>(bytes));
  running_.push_back({w, ms, at, 0, ms, bytes, &a});
}

void Replay::arrive(int w, const Action& a, double begin, double end, int64_t bytes) {
  bool act = a.kind == ActionKind::kSendActivation;
  int to_stage = act ? a.stage + 1 : a.stage - 1;
  ready(act ? kActivationIn : kGradientIn, to_stage, a.microbatch) = {a.peer, end};
  record(w, a, begin, end, bytes);
  ActionKind recv = act ? ActionKind::kRecvActivation : ActionKind::kRecvGradient;
  Action r{a.peer, recv, to_stage, a.microbatch, s_.chunks > 1 ? s_.chunk_of(to_stage) : 0, w};
  record(a.peer, r, begin, end, bytes);
}

const Replay::RingPlan& Replay::ring_plan(int stage) {
  RingPlan& rp = ring_plans_[stage];
  if (!rp.phases.empty()) return rp;
  rp.phases = cluster_.allreduce_phases(s_.stage_workers[stage], 1.0);
  rp.ports.resize(rp.phases.size());
  for (size_t p = 0; p < rp.phases.size(); ++p)
    for (const auto& ring : rp.phases[p].rings) {
      rp.ports[p].emplace_back();
      for (int r : ring) rp.ports[p].back().insert(rp.ports[p].back().end(), {egress(r, rp.phases[p].level), ingress(r, rp.phases[p].level)});
    }
  return rp;
}

void Replay::allreduce(const Action& a, double start) {
  const auto& group = s_.stage_workers[a.stage];
  // Each phase keeps its rings' links of its level busy both ways (one ring over the group, or
  // a hierarchical all-reduce's rings inside the units, then across them): a ring's step waits
  // for transfers already on its links; rings of a phase run side by side; a phase starts when
  // the one before has ended everywhere (each ring's members take part in every ring of the next).
  const RingPlan& rp = ring_plan(a.stage);
  const auto& phases = rp.phases;
  const auto& ports = rp.ports;
  const auto& buckets = costs_[a.stage].buckets;
  double end = 0;  // the previous bucket's end
  for (size_t k = 0; k < buckets.size(); ++k) {
    double from = end;  // in order: after the previous bucket
    bool early = true;  // every replica's completing backward made this bucket ready
    for (int r : group) {
      if (const std::vector<double>* ready = pending(a.stage, r)) from = std::max(from, (*ready)[k]);
      else early = false;
    }
    if (!early) from = std::max(from, start);
    // A ring's phase is `steps` equal steps on its links, each one message and its share of
    // the summing (which holds the ring's links: the next step waits for it); each step takes
    // the next gap that fits it, so the ring interleaves with the activations sharing those links.
    for (size_t p = 0; p < phases.size(); ++p) {
      double ms = cluster_.ring_step_ms(phases[p], static_cast<double>(buckets[k].bytes));
      double phase_end = from;
      for (const auto& ring_ports : ports[p]) {
        double t = book_steps(ring_ports, from, ms, phases[p].steps);
        booked_ += static_cast<int64_t>(ring_ports.size()) * phases[p].steps;
        phase_end = std::max(phase_end, t);
      }
      from = phase_end;
    }
    end = from;
  }
  end = std::max(end, start);
  for (int r : group) {
    auto& list = pending_buckets_[r];
    list.erase(std::remove_if(list.begin(), list.end(), [&](const auto& e) { return e.first == a.stage; }), list.end());
    record(r, s_.actions[r][pc_[r]], start, end, costs_[a.stage].parameter_bytes);
    clock_[r] = end;
    ++pc_[r];
  }
}

// A split tie's all-reduce, as a stage's in one bucket: its workers' links busy for its ring
// steps, and every worker's clock at its end. No event is recorded: the trace's kinds are the
// schedule's actions (the wait shows before the step).
void Replay::exchange(int e, double start) {
  const TieExchange& x = ties_[e];
  double from = start;
  for (const plan::AllreducePhase& phase : cluster_.allreduce_phases(x.workers, 1.0)) {
    double ms = cluster_.ring_step_ms(phase, static_cast<double>(x.bytes));
    double phase_end = from;
    for (const auto& ring : phase.rings) {
      Ports ports;
      for (int r : ring) ports.insert(ports.end(), {egress(r, phase.level), ingress(r, phase.level)});
      phase_end = std::max(phase_end, book_steps(ports, from, ms, phase.steps));
      booked_ += static_cast<int64_t>(ports.size()) * phase.steps;
    }
    from = phase_end;
  }
  for (int r : x.workers) {
    clock_[r] = from;
    ++next_tie_[r];
  }
}

// Bookings before every worker's clock and every pending bucket's ready time (replay.h, forget_past).
void Replay::forget_past() {
  booked_ = 0;
  double floor = std::numeric_limits<double>::infinity();
  for (int w = 0; w < s_.num_workers(); ++w) {
    if (pc_[w] < s_.actions[w].size()) floor = std::min(floor, clock_[w]);
    for (const auto& [stage, times] : pending_buckets_[w])
      for (double t : times) floor = std::min(floor, t);
  }
  for (auto* ports : {&egress_, &ingress_})
    for (Port& p : *ports) {
      auto keep = std::lower_bound(p.begin(), p.end(), floor,
                                   [](const std::pair<double, double>& iv, double v) { return iv.second <= v; });
      p.erase(p.begin(), keep);
    }
}

}  // namespace pt::sim::detail
