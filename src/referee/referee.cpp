// The referee's choice (referee.h): the candidates replayed in turn, each in its variants, then
// the local search (climbs) from the fastest few; the ranking is finished in referee_finish.cpp.
#include "referee/referee.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <set>

#include "core/error.h"
#include "plan/planner.h"
#include "referee/referee_internal.h"
#include "referee/replay_ahead.h"
#include "schedule/generators.h"
#include "schedule/validate.h"

namespace pt::referee {
namespace detail {
namespace {

// The referee's local search: rounds, and neighbours replayed per round (the exact model's best).
constexpr int kRefineRounds = 6;
constexpr int kNeighboursReplayed = 8;

}  // namespace

std::string identity(const plan::Plan& p) {
  std::string key;
  auto add = [&key](int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  auto add_list = [&](const std::vector<int>& v) {
    add(static_cast<int64_t>(v.size()));
    for (int x : v) add(x);
  };
  add(p.workers), add(p.batch_size), add(p.microbatches), add(p.chunks), add(p.deferred_step);
  key.append(reinterpret_cast<const char*>(&p.bucket_mb), sizeof p.bucket_mb);
  add(static_cast<int64_t>(p.stages.size()));
  for (const auto& st : p.stages) {
    add_list(st.layers), add_list(st.workers);
    add(st.replicas), add(st.recompute), add(st.in_flight);
  }
  add(static_cast<int64_t>(p.ties.size()));
  for (const auto& t : p.ties) add_list(t);
  for (const std::string* text : {&p.model, &p.cost_model, &p.schedule}) {
    add(static_cast<int64_t>(text->size()));
    key += *text;
  }
  return key;
}

bool climbs_before(const Candidate& a, const Candidate& b) {
  double ta = a.simulated.ms_per_minibatch, tb = b.simulated.ms_per_minibatch;
  if (std::abs(ta - tb) > 1e-9 * std::max(ta, tb)) return ta < tb;
  if (a.plan.workers != b.plan.workers) return a.plan.workers > b.plan.workers;
  return !a.plan.deferred_step && b.plan.deferred_step;
}

namespace {

// Each plan is replayed in its variants, the fastest standing for it: with fewer minibatches in
// flight than PipeDream's rule (plan.h, in_flight) and with the rule (the estimate that lowered
// them ignores queueing); where a pipeline's first stage is replicated, with its step deferred
// too (plan.h, deferred_step), unless options forbid.
std::vector<plan::Plan> variants_of(plan::Plan p, const plan::PlanOptions& options) {
  p.deferred_step = false;  // a neighbour inherits it; here it is a variant of its own
  std::vector<plan::Plan> variants{p};
  plan::Plan paper = p;
  for (auto& st : paper.stages) st.in_flight = 0;
  variants.push_back(paper);
  if (options.deferred_step && p.stages[0].replicas > 1 && p.num_stages() > 1)
    for (size_t i = 0, n = variants.size(); i < n; ++i) {
      plan::Plan d = variants[i];
      d.deferred_step = true;
      variants.push_back(d);
    }
  return variants;
}

}  // namespace

// A large cluster's replays take long: nothing more after the time limit (the search's best is
// always replayed).
bool Referee::past_limit() const {
  return options().time_limit_s > 0 && elapsed() > options().time_limit_s && !r_.ranked.empty();
}

bool Referee::out_of_time() {
  r_.timed_out = r_.timed_out || past_limit();
  return r_.timed_out;
}

// A progress line every few seconds.
void Referee::progress() {
  double t = elapsed();
  if (t <= next_progress_ || !options().progress) return;
  options().progress(str(r_.ranked.empty() ? std::string("replaying candidates in the simulator")
                                           : str(r_.ranked.size(), " plans replayed in the simulator"),
                         " (", static_cast<int>(t), " s of planning; --time-limit ", options().time_limit_s, ")"));
  next_progress_ = t + 3;
}

void Referee::work_ahead(const plan::Plan& p) {
  if (past_limit()) return;
  for (auto& v : variants_of(p, options())) {
    std::string key = identity(v);
    if (!seen_.count(key) && (replay_period(v) > 0 || steady_state_in_closed_form(v, context_.kind, context_.cluster)))
      ahead_.queue(key, v);
  }
}

int Referee::replay(const plan::Plan& p, bool weighed) {
  std::string key = identity(p);
  if (!seen_.insert(key).second) return kNotReplayed;
  if (out_of_time()) {
    ++r_.unreplayed;
    return kNotReplayed;
  }
  progress();
  if (replay_period(p) == 0 && !steady_state_in_closed_form(p, context_.kind, context_.cluster)) {
    skipped_ += str("\n  ", p.shape(), ": its replica counts repeat only every ", kMaxReplayPeriod,
                    "+ minibatches (their lcm), too long to replay");
    r_.unschedulable.push_back(p);
    return kNotReplayed;
  }
  std::optional<Replay> ahead = ahead_.take(key);
  Replay w = ahead ? std::move(*ahead) : Replay(p);
  estimate(w, context_);
  if (w.estimate && w.limit_ms <= best_ms_) bound(w, context_);
  if (w.estimate && w.limit_ms > best_ms_ && !weighed) {
    ruled_out_.push_back({p, floor_in_turn(w, best_ms_)});
    ++r_.over_limit;
    return kOverLimit;
  }
  simulate(w, context_);
  if (!w.simulated) {
    skipped_ += str("\n  ", p.shape(), ": ", w.error);
    return kNotReplayed;
  }
  Candidate c{p, std::move(*w.estimate), std::move(*w.simulated), "", {}};
  // The plan's time is its steady state; its stages' figures are the cost engine's.
  c.plan.pipeline_ms_per_minibatch = c.simulated.ms_per_minibatch;
  c.plan.simulated_ms_per_minibatch = c.simulated.ms_per_minibatch;
  c.plan.simulated_schedule = context_.kind;
  for (int st = 0; st < c.plan.num_stages(); ++st)
    c.plan.stages[st].compute_ms = c.estimate.stages[st].compute_ms,
    c.plan.stages[st].comm_ms = c.estimate.stages[st].comm_ms,
    c.plan.stages[st].time_ms = c.estimate.stages[st].time_ms;
  // Only a window that repeats is known to be run at: a settled one can sit in a transient below
  // its steady state (GNMT-Large's 16-stage 79.9 ms per minibatch, which runs at 80.8), and plans
  // ruled out against it were faster than that (the 9-stage 80.4, its floor exactly).
  if (c.simulated.periodic && c.simulated.ms_per_minibatch < best_ms_) {
    ahead_.set_best(best_ms_ = c.simulated.ms_per_minibatch);
  }
  r_.ranked.push_back(std::move(c));
  return static_cast<int>(r_.ranked.size()) - 1;
}

// The index of the fastest variant replayed; kOverLimit where the limit ruled out all it weighed.
int Referee::replay_variants(const plan::Plan& p, bool weighed) {
  int best = kNotReplayed;
  for (const auto& v : variants_of(p, options())) {
    int c = replay(v, weighed);
    if (c == kOverLimit && best == kNotReplayed) best = kOverLimit;
    if (c >= 0 && (best < 0 || climbs_before(r_.ranked[c], r_.ranked[best]))) best = c;
  }
  return best;
}

// Local search under the simulator: the search's closed form and the exact model each rank some
// plans wrongly, so a plan's neighbours (plan::neighbour_plans) that the exact model ranks best
// are replayed too, and a faster one starts the next round.
void Referee::climb(int from) {
  // Past the time limit nothing more is replayed: no neighbours are made to be counted out.
  for (int round = 0; round < kRefineRounds && from >= 0 && !out_of_time(); ++round) {
    plan::Plan at = r_.ranked[from].plan;
    std::vector<plan::Plan> neighbours = plan::neighbour_plans(at, context_.profile, context_.cluster, options());
    int improved = -1, replayed = 0;
    // Ahead of their turn: as many neighbours as the round replays, and one more for each that
    // does not count (one already replayed): a neighbour queued past the round's need is work
    // thrown away (queuing one more per neighbour taken cost GNMT and GNMT-Large 5% more CPU).
    size_t queued = 0;
    auto queue_next = [&] {
      if (queued < neighbours.size()) work_ahead(neighbours[queued++]);
    };
    for (int i = 0; i < kNeighboursReplayed; ++i) queue_next();
    for (size_t i = 0; i < neighbours.size(); ++i) {
      if (replayed == kNeighboursReplayed || out_of_time()) break;
      int c = replay_variants(neighbours[i]);
      if (c == kOverLimit) ++replayed;  // weighed, and cannot win
      if (c < 0 && c != kOverLimit) queue_next();
      if (c < 0) continue;
      ++replayed;
      double t = r_.ranked[c].simulated.ms_per_minibatch;
      if (t < r_.ranked[from].simulated.ms_per_minibatch && (improved < 0 || climbs_before(r_.ranked[c], r_.ranked[improved])))
        improved = c;
    }
    ahead_.drop_queued();  // the neighbours left are not replayed
    from = improved;
  }
}

// The replayed index of the fastest eligible plan replayed, or where none is, of the one of
// lowest floor among those it ruled out, replayed now: a climb from a slower plan can end on a
// faster hill than the others' (GNMT-Large on 16 workers: from a 9-stage plan at 85.5 ms per
// minibatch, on 9 workers, to 80.4, where the climbs from the 16-stage 79.9 ended at 80.8 after
// replaying it longer), and the floors that spare most replays rule such starts out. -1: none.
int Referee::climb_start(const std::function<bool(const plan::Plan&)>& eligible) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(r_.ranked.size()); ++i)
    if (eligible(r_.ranked[i].plan) && (best < 0 || climbs_before(r_.ranked[i], r_.ranked[best]))) best = i;
  const std::pair<plan::Plan, double>* floor = nullptr;
  for (const auto& out : ruled_out_)
    if (eligible(out.first) && (!floor || out.second < floor->second)) floor = &out;
  if (best >= 0 || !floor) return best;
  plan::Plan p = floor->first;
  seen_.erase(identity(p));
  int c = replay(p, true);
  return c >= 0 ? c : best;
}

Refereed Referee::run(const std::vector<plan::Plan>& candidates) {
  int searchs_best = kNotReplayed;  // the replayed index of the search's first candidate
  for (const auto& p : candidates) work_ahead(p);  // all of them are replayed in turn
  for (size_t i = 0; i < candidates.size(); ++i) {
    int c = replay_variants(candidates[i], i == 0);
    if (i == 0) searchs_best = c;
  }
  const plan::Cluster& cluster = context_.cluster;
  for (const auto& c : r_.ranked)
    if (c.plan.num_stages() == 1 && c.plan.workers == cluster.workers()) r_.data_parallel_ms = c.simulated.ms_per_minibatch;
  if (r_.data_parallel_ms == 0) r_.data_parallel_ms = simulate_data_parallel(context_.profile, cluster, options(), context_.kind);
  // Plans too long to replay are the caller's to rank by prediction (plan.cpp); only when none
  // was even that is there nothing to plan.
  if (r_.ranked.empty() && r_.unschedulable.empty())
    throw ConfigError(str("no candidate plan can run the ", context_.kind, " schedule:", skipped_));
  if (r_.ranked.empty()) return r_;
  // The climbs start from the fastest simulated plan, from the search's own best, and from the
  // fastest on another number of workers: from one start alone, more candidates could end on a
  // lower hill (GNMT on 4x4 at 96/10: 12.8 ms per minibatch on 16 workers with 12 candidates,
  // 12.6 on 12 with 1). GNMT-16 on flat 8 at 1 Gbit/s: 1-6-1, two moves from the search's
  // 1-5-1-1, runs 11% faster.
  if (options().cost_model == plan::CostModel::kRealised) {
    int fastest = static_cast<int>(std::min_element(r_.ranked.begin(), r_.ranked.end(), climbs_before) - r_.ranked.begin());
    const int fastest_workers = r_.ranked[fastest].plan.workers;
    // The fastest on another number of workers.
    int other = climb_start([&](const plan::Plan& p) { return p.workers != fastest_workers; });
    climb(fastest);
    if (searchs_best >= 0 && searchs_best != fastest) climb(searchs_best);
    if (other >= 0 && other != searchs_best) climb(other);
    // And from the fastest plan of a shape (its replica counts) none of those starts had, where
    // the climbs from them all ended near one hill: a climb only adds replays, so the choice is
    // never slower (but where --time-limit then leaves no time for the bucket choice). Over 32
    // GNMT and GNMT-Large cases it found faster plans for 4 (GNMT on 2x8 at 96/25 12%, on 16 at
    // 25 Gbit/s 6%, GNMT-Large on 12 4%, on 4x4 at 96/1 3%) for 8% more time, 4% more over the
    // 52 default cases; a second such start found 3 more (GNMT-Large on 4x4 at 100/10 7%) for
    // 22% more.
    std::set<std::string> climbed;
    for (int start : {fastest, searchs_best, other})
      if (start >= 0) climbed.insert(r_.ranked[start].plan.shape());
    int another = climb_start([&](const plan::Plan& p) { return !climbed.count(p.shape()); });
    if (another >= 0) climb(another);
  }
  std::stable_sort(r_.ranked.begin(), r_.ranked.end(), ranks_before);
  periodic_first();
  if (own_buckets_ && !out_of_time()) own_buckets();
  // The replays skip validation (make_unvalidated_schedule); the choice's schedule is checked.
  schedule::validate(schedule::make_unvalidated_schedule(context_.kind, r_.ranked.front().plan, {}));
  explain_losers();
  return r_;
}

}  // namespace detail

bool ranks_before(const Candidate& a, const Candidate& b) {
  double ta = a.simulated.ms_per_minibatch, tb = b.simulated.ms_per_minibatch;
  if (std::abs(ta - tb) > 1e-9 * std::max(ta, tb)) return ta < tb;
  if (a.plan.workers != b.plan.workers) return a.plan.workers < b.plan.workers;
  return !a.plan.deferred_step && b.plan.deferred_step;
}

Refereed choose(const std::vector<plan::Plan>& candidates, const profile::Profile& profile,
                const plan::Cluster& cluster, const plan::PlanOptions& options, const std::string& kind,
                bool own_buckets) {
  // What the referee minimises: the simulated time, nothing added (docs/design.md).
  return detail::Referee(profile, cluster, options, kind, own_buckets).run(candidates);
}

}  // namespace pt::referee
