#include "referee/replay_ahead.h"

#include <algorithm>
#include <limits>
#include <system_error>
#include <numeric>
#include <thread>

#include "core/error.h"
#include "core/fingerprint.h"
#include "core/units.h"
#include "referee/replay_floor.h"
#include "schedule/generators.h"
#include "sim/cycle_time.h"
#include "sim/simulator.h"
#include "sim/stage_costs.h"

namespace pt::referee {

namespace {

// What the schedule of `p` under `kind` is made of: what its generator reads of the plan
// (generators.h: the stages' workers, replicas, recomputation and minibatches in flight, and the
// deferred step; the layers it only copies).
Fingerprint structure_of(const std::string& kind, const plan::Plan& p) {
  Fingerprint f;
  for (char ch : kind) f.add(ch);
  for (int v : {p.workers, p.num_stages(), static_cast<int>(p.deferred_step)}) f.add(v);
  for (int st = 0; st < p.num_stages(); ++st) {
    const plan::Stage& stage = p.stages[st];
    f.add(stage.workers.size());
    for (int w : stage.workers) f.add(w);
    for (int v : {stage.replicas, static_cast<int>(stage.recompute), plan::in_flight(p, st)}) f.add(v);
  }
  return f;
}

// Everything sim::simulate and the metrics of its timing read: the schedule (by `structure`)
// and its stages' costs, which stand for the layers. The profile (but its batch size), the
// cluster and the bucket are the same for one referee.
SimulationMemo::Key fingerprint(Fingerprint structure, const std::vector<sim::StageCost>& costs) {
  Fingerprint& f = structure;
  for (const auto& c : costs) {
    for (double v : {c.forward_ms, c.backward_ms, c.step_ms}) f.add(v);
    for (int64_t v : {c.stash_bytes, c.fixed_stash_bytes, c.boundary_bytes, c.input_bytes, c.parameter_bytes}) f.add(v);
    f.add(c.buckets.size());
    for (const auto& b : c.buckets) f.add(b.ready_share), f.add(b.bytes);
  }
  return f.key();
}

}  // namespace

int64_t replay_period(const plan::Plan& p) {
  int64_t lcm = 1;
  for (const auto& st : p.stages) {
    lcm = std::lcm(lcm, static_cast<int64_t>(st.replicas));
    if (lcm > kMaxReplayPeriod) return 0;
  }
  return lcm;
}

bool steady_state_in_closed_form(const plan::Plan& p, const std::string& kind, const plan::Cluster& cluster) {
  return p.num_stages() == 1 && kind == "pipedream" && cluster.host_cores == 0;
}

metrics::Metrics closed_form_metrics(const plan::PlanEstimate& e, const plan::Plan& p, const profile::Profile& profile,
                                     const std::string& kind) {
  metrics::Metrics m;
  m.schedule = kind;
  m.source = str("closed form (data parallelism on ", counted(p.workers, "worker"), ")");
  m.steady = true;
  m.minibatches = 0;
  m.ms_per_minibatch = e.pipeline_ms_per_minibatch;
  if (m.ms_per_minibatch > 0) m.samples_per_s = static_cast<double>(profile.batch_size) / m.ms_per_minibatch * 1e3;
  return m;
}

bool SimulationMemo::find(const Key& k, metrics::Metrics& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = done_.find(k);
  if (it == done_.end()) return false;
  out = it->second;
  return true;
}

void SimulationMemo::add(const Key& k, const metrics::Metrics& m) {
  std::lock_guard<std::mutex> lock(mutex_);
  done_.emplace(k, m);
}

std::shared_ptr<const schedule::Schedule> SimulationMemo::schedule(const Key& key,
                                                                   const std::function<schedule::Schedule()>& build) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = schedules_.find(key);
    if (it != schedules_.end()) return it->second;
  }
  auto built = std::make_shared<const schedule::Schedule>(build());
  size_t actions = 0;
  for (const auto& list : built->actions) actions += list.size();
  std::lock_guard<std::mutex> lock(mutex_);
  if (schedule_actions_ + actions <= kMaxHeldActions && schedules_.emplace(key, built).second)
    schedule_actions_ += actions;
  return built;
}

namespace {

// `plan`'s schedule over n minibatches (0: the default), kept by its structure and length: the
// plans the referee lengthens (periodic_first) are mostly one shape split at other layers.
// Unvalidated, as every replay: the referee validates the schedule of the plan it chooses.
std::shared_ptr<const schedule::Schedule> schedule_of(const plan::Plan& plan, const ReplayContext& c,
                                                      Fingerprint structure, int minibatches) {
  structure.add(minibatches);
  return c.memo.schedule(structure.key(), [&] {
    schedule::ScheduleOptions schedule_options;
    schedule_options.minibatches = minibatches;
    return schedule::make_unvalidated_schedule(c.kind, plan, schedule_options);
  });
}

}  // namespace

void estimate(Replay& r, const ReplayContext& c) {
  if (r.estimate || !r.error.empty()) return;
  try {
    plan::PlanEstimate e = plan::evaluate_plan(r.plan, c.profile, c.cluster, c.options);
    if (!steady_state_in_closed_form(r.plan, c.kind, c.cluster)) r.costs = stage_costs_of(r.plan, c.profile, c.options.bucket_bytes, c.kind);
    r.limit_ms = r.estimate_floor_ms = replay_floor_ms(r.plan, e, r.costs, c.profile, c.cluster, c.kind);
    r.estimate = std::move(e);
  } catch (const ConfigError& e) {
    r.error = e.what();
  }
}

void bound(Replay& r, const ReplayContext& c) {
  estimate(r, c);
  if (r.bound || !r.estimate || c.kind != "pipedream" || steady_state_in_closed_form(r.plan, c.kind, c.cluster)) return;
  r.bound = true;
  try {
    auto s = schedule_of(r.plan, c, structure_of(c.kind, r.plan), 0);
    r.limit_ms = std::max(r.limit_ms, sim::cycle_time_ms(*s, r.costs, c.cluster, c.options.bucket_bytes));
  } catch (const ConfigError& e) {
    r.error = e.what();
  }
}

namespace {

// `plan`'s replay over n minibatches (0: the default).
metrics::Metrics replay_over(const plan::Plan& plan, const ReplayContext& c, const std::vector<sim::StageCost>& costs,
                             const Fingerprint& structure, int minibatches) {
  auto s = schedule_of(plan, c, structure, minibatches);
  return metrics::compute_metrics(sim::simulate(*s, c.profile, c.cluster, timing_only(c.options.bucket_bytes), costs),
                                  metrics::Detail::kTiming);
}

}  // namespace

void simulate(Replay& r, const ReplayContext& c) {
  bound(r, c);
  if (!r.estimate || r.simulated || !r.error.empty()) return;
  if (steady_state_in_closed_form(r.plan, c.kind, c.cluster)) {
    r.simulated = closed_form_metrics(*r.estimate, r.plan, c.profile, c.kind);
    return;
  }
  try {
    const std::vector<sim::StageCost>& costs = r.costs;
    Fingerprint structure = structure_of(c.kind, r.plan);
    SimulationMemo::Key key = fingerprint(structure, costs);
    metrics::Metrics m;
    if (!c.memo.find(key, m)) {
      m = settled_replay([&](int n) { return replay_over(r.plan, c, costs, structure, n); }, false, nullptr, 0,
                         r.limit_ms);
      c.memo.add(key, m);
    }
    r.simulated = std::move(m);
  } catch (const ConfigError& e) {
    r.error = e.what();
  }
}

double floor_in_turn(const Replay& r, double best_ms) {
  return r.estimate_floor_ms > best_ms ? r.estimate_floor_ms : r.limit_ms;
}

metrics::Metrics periodic_replay(const plan::Plan& plan, const metrics::Metrics& settled, const ReplayContext& c) {
  if (settled.periodic) return settled;
  std::vector<sim::StageCost> costs = stage_costs_of(plan, c.profile, c.options.bucket_bytes, c.kind);
  Fingerprint structure = structure_of(c.kind, plan);
  SimulationMemo::Key key = fingerprint(structure, costs);
  key.first = ~key.first;  // the periodic replay's, beside the settled one's
  metrics::Metrics m;
  if (c.memo.find(key, m)) return m;
  auto first = schedule_of(plan, c, structure, 0);
  m = settled_replay([&](int n) { return replay_over(plan, c, costs, structure, n); }, true, &settled,
                     first->minibatches,
                     replay_floor_ms(plan, c.profile, c.cluster, c.kind, c.options.bucket_bytes, first.get()));
  c.memo.add(key, m);
  return m;
}

ReplayAhead::ReplayAhead(const ReplayContext& c, std::chrono::steady_clock::time_point deadline)
    : context_(c), deadline_(deadline), best_ms_(std::numeric_limits<double>::infinity()) {
  try {
    for (unsigned t = 1; t < std::thread::hardware_concurrency(); ++t) threads_.emplace_back([this] { run(); });
  } catch (const std::system_error&) {
    // No more threads to be had: the referee replays the rest in turn, the same work.
  }
}

ReplayAhead::~ReplayAhead() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReplayAhead::queue(const std::string& key, const plan::Plan& plan) {
  if (threads_.empty()) return;  // one core: the referee replays in turn, the same work
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto [it, fresh] = slots_.emplace(key, nullptr);
    if (!fresh) return;
    it->second = std::make_shared<Slot>(key, plan);
    queue_.push_back(it->second);
  }
  changed_.notify_one();
}

std::optional<Replay> ReplayAhead::take(const std::string& key) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = slots_.find(key);
  if (it == slots_.end()) return std::nullopt;
  Held slot = it->second;
  slots_.erase(it);
  if (slot->state == Slot::kQueued) {
    slot->state = Slot::kDone;  // the referee works it out in turn; no thread begins it now
    return std::move(slot->replay);
  }
  while (slot->state != Slot::kDone) {
    Held other = std::chrono::steady_clock::now() > deadline_ ? nullptr : next_queued();
    if (other) {  // rather than wait idle
      lock.unlock();
      work(*other);
      lock.lock();
      finish(*other);
    } else {
      changed_.wait(lock);
    }
  }
  return std::move(slot->replay);
}

void ReplayAhead::drop_queued() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Held& slot : queue_)
    if (slot->state == Slot::kQueued) slot->state = Slot::kDone, slots_.erase(slot->key);
  queue_.clear();
}

void ReplayAhead::set_best(double ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  best_ms_ = ms;
}

ReplayAhead::Held ReplayAhead::next_queued() {
  while (!queue_.empty()) {
    Held slot = std::move(queue_.front());
    queue_.pop_front();
    if (slot->state == Slot::kQueued) {
      slot->state = Slot::kBegun;
      return slot;
    }
  }
  return nullptr;
}

void ReplayAhead::work(Slot& slot) {
  double best;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    best = best_ms_;
  }
  // A failure other than a refusal is left for the referee's own turn, which meets it again.
  try {
    estimate(slot.replay, context_);
    if (slot.replay.estimate && slot.replay.limit_ms <= best) bound(slot.replay, context_);
    if (slot.replay.estimate && slot.replay.limit_ms <= best) simulate(slot.replay, context_);
  } catch (...) {
    slot.replay = Replay(slot.replay.plan);
  }
}

void ReplayAhead::finish(Slot& slot) {
  slot.state = Slot::kDone;
  changed_.notify_all();
}

void ReplayAhead::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (stopping_ || std::chrono::steady_clock::now() > deadline_) return;  // the rest in turn, if at all
    Held slot = next_queued();
    if (!slot) {
      changed_.wait(lock);
      continue;
    }
    lock.unlock();
    work(*slot);
    lock.lock();
    finish(*slot);
  }
}

}  // namespace pt::referee
