#include "referee/referee.h"

#include <chrono>
#include <iostream>

#include <algorithm>
#include <numeric>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <functional>
#include <set>
#include <thread>
#include <sstream>

#include "core/error.h"
#include "core/parallel.h"
#include "core/units.h"
#include "plan/physical_limit.h"
#include "plan/plan_table.h"
#include "plan/planner.h"
#include "schedule/memory.h"
#include "schedule/validate.h"
#include "referee/replay_ahead.h"
#include "referee/replay_floor.h"
#include "sim/simulator.h"

namespace pt::referee {
namespace {

constexpr int kMostLengthened = 64;  // periodic_first
// The referee's local search: rounds, and neighbours replayed per round (the exact model's best).
constexpr int kRefineRounds = 6;
constexpr int kNeighboursReplayed = 8;
// How far a candidate may simulate over the search's estimate before `plan --top` says where the
// simulated time went (the estimate only proposes candidates; the simulation ranks them).
constexpr double kBeyondEstimate = 0.05;
std::string fixed(double v, int digits = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// What limits a plan's slowest stage, in words: the term of its time_ms that sets it
// (pipetrain_cost.cpp). GNMT-16 --straight on 8 said "stage 4: compute 41.26 ms" of a stage at
// 58.16, set by its round trip over the minibatches it keeps in flight.
std::string limit_of(const plan::PlanEstimate& e, const plan::Cluster& cluster) {
  const plan::StageEstimate& s = e.stages[e.bottleneck];
  double busy = std::max(s.compute_ms, s.link_ms) + s.allreduce_ms;
  std::string what;
  if (s.in_flight_ms > busy * (1 + 1e-9) && s.in_flight_ms >= s.time_ms * (1 - 1e-9)) {
    what = str("the round trip from its forward to its backward over the minibatches it keeps in flight, ",
               fixed(s.in_flight_ms), " ms a minibatch");
  } else if (s.round_ms > 0 && busy < s.time_ms * (1 - 1e-9)) {
    what = str("its replicas' round ", fixed(s.round_ms), " ms (all-reduce and the previous stage's spacing), ",
               fixed(s.time_ms), " ms a minibatch");
  } else {
    if (s.link_ms > s.compute_ms)
      what = str("link of worker ", s.busiest_worker, " at level ", cluster.levels[s.busiest_level].name, " ",
                 fixed(s.link_ms), " ms");
    else
      what = str("compute ", fixed(s.compute_ms), " ms");
    if (s.allreduce_ms > 0) what += str(" + all-reduce ", fixed(s.allreduce_ms), " ms");
  }
  return str("stage ", e.bottleneck, ": ", what);
}

// Where a candidate simulates well over the search's estimate, the closed form's bottleneck does
// not say why it lost (VGG-16 15-1 @conv5_3 on 4x4: "compute 22.50 ms" for a plan simulated at
// 28.9): say how much of the steady state that stage's workers sat idle in the simulation.
std::string beyond_estimate(const Candidate& c) {
  double over = c.simulated.ms_per_minibatch / c.estimate.pipeline_ms_per_minibatch - 1;
  if (!(over > kBeyondEstimate)) return "";
  int b = c.estimate.bottleneck;
  double idle = 0;
  int n = 0;
  for (int w : c.plan.stages[b].workers)
    if (w >= 0 && w < static_cast<int>(c.simulated.workers.size())) idle += c.simulated.workers[w].bubble_fraction, ++n;
  if (n == 0) return "";
  return str("; simulated ", fixed(100 * over, 1), "% over the search's estimate: stage ", b, "'s workers idle ",
             fixed(100 * idle / n, 0), "% of the steady state, waiting for data or an all-reduce");
}

// A plan as the runtime would run it: every field of its file but the estimates, which differ
// between the search's closed form and the exact model for the same plan (VGG-16 15-1 @conv5_3
// on 4x4 was replayed, and listed by --top, twice). Built field by field: written as the plan's
// JSON, it took a tenth of GNMT's planning.
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

// What tells apart candidates of one shape and split in `--top`: "ds" a deferred step, "f"
// the minibatches each stage keeps in flight where the plan sets them, "p" replicas placed
// other than stage by stage in worker order ("-": none of these).
std::string variant(const plan::Plan& p) {
  std::string out;
  if (p.deferred_step) out += "ds";
  std::string flight;
  bool any = false, in_order = true;
  int next = 0;
  for (const auto& st : p.stages) {
    flight += str(flight.empty() ? "" : "/", st.in_flight > 0 ? std::to_string(st.in_flight) : std::string("*"));
    any = any || st.in_flight > 0;
    for (int w : st.workers) in_order = in_order && w == next++;
  }
  if (any) out += str(out.empty() ? "" : " ", "f", flight);
  if (!in_order) out += str(out.empty() ? "" : " ", "p");
  return out.empty() ? "-" : out;
}

// Each worker's memory under `kind` by the memory model (schedule/memory.h): what train checks
// and prints, compare ranks by and the joint search caps, so `plan` shows the same figure.
std::vector<schedule::WorkerMemory> modelled_memory(const plan::Plan& p, const profile::Profile& profile,
                                                    const std::string& kind) {
  auto over = [&](int minibatches) {
    schedule::ScheduleOptions o;
    o.minibatches = minibatches;
    return schedule::make_unvalidated_schedule(kind, p, o);
  };
  return schedule::memory_per_worker(over(0), over, profile);
}

}  // namespace

double simulate_plan(const plan::Plan& plan, const profile::Profile& profile, const plan::Cluster& cluster,
                     const plan::PlanOptions& options, const std::string& kind) {
  if (replay_period(plan) == 0 && !steady_state_in_closed_form(plan, kind)) return 0;
  try {
    if (steady_state_in_closed_form(plan, kind)) return plan::evaluate_plan(plan, profile, cluster, options).pipeline_ms_per_minibatch;
    schedule::Schedule first = schedule::make_unvalidated_schedule(kind, plan, {});
    return settled_replay(
               [&](int minibatches) {
                 auto replay = [&](const schedule::Schedule& s) {
                   return metrics::compute_metrics(sim::simulate(s, profile, cluster, timing_only(options.bucket_bytes)),
                                                   metrics::Detail::kTiming);
                 };
                 if (minibatches == 0) return replay(first);
                 schedule::ScheduleOptions o;
                 o.minibatches = minibatches;
                 return replay(schedule::make_unvalidated_schedule(kind, plan, o));
               },
               true, nullptr, 0, replay_floor_ms(plan, profile, cluster, kind, options.bucket_bytes, &first))
        .ms_per_minibatch;
  } catch (const ConfigError&) {
    return 0;
  }
}

double simulate_data_parallel(const profile::Profile& profile, const plan::Cluster& cluster,
                              const plan::PlanOptions& options, const std::string& kind) {
  plan::Plan dp = plan::data_parallel_plan(profile.num_layers(), cluster.workers());
  try {
    if (!plan::evaluate_plan(dp, profile, cluster, options).fits_memory) return 0;
  } catch (const ConfigError&) {
    return 0;
  }
  return simulate_plan(dp, profile, cluster, options, kind);
}

BucketChoice choose_bucket(const plan::Plan& plan, const profile::Profile& profile, const plan::Cluster& cluster,
                           const plan::PlanOptions& options, const std::string& kind, double own_ms,
                           double limit_ms) {
  if (own_ms > 0 && own_ms <= limit_ms * (1 + 1e-9)) {
    BucketChoice at{static_cast<double>(options.bucket_bytes) / (1 << 20), own_ms, {}, true, {}};
    at.tried.push_back({at.bucket_mb, own_ms});
    return at;
  }
  schedule::Schedule s = schedule::make_unvalidated_schedule(kind, plan, {});
  std::vector<double> sizes{static_cast<double>(options.bucket_bytes) / (1 << 20)};
  for (double mb : kBucketChoicesMb)
    if (std::abs(mb - sizes.front()) > 1e-9) sizes.push_back(mb);
  std::vector<double> ms(sizes.size(), own_ms), floor(sizes.size(), 0);
  auto bytes_of = [&](size_t i) { return static_cast<int64_t>(sizes[i] * (1 << 20)); };
  // A size whose floor is above the options' bucket's time cannot win: not simulated (ResNet-101
  // 12-4 on 4x4 at 100/10: 0 and 100 MiB, floors 29.6 ms per minibatch against 28.3).
  std::vector<size_t> simulated;
  for (size_t i = own_ms > 0 ? 1 : 0; i < sizes.size(); ++i) {
    if (!steady_state_in_closed_form(plan, kind)) floor[i] = replay_floor_ms(plan, profile, cluster, kind, bytes_of(i), &s);
    if (own_ms > 0 && floor[i] > own_ms * (1 + 1e-9)) ms[i] = -1;
    else simulated.push_back(i);
  }
  auto simulate_size = [&](size_t i) {
    auto bytes = bytes_of(i);
    if (steady_state_in_closed_form(plan, kind)) {
      plan::PlanOptions o = options;
      o.bucket_bytes = bytes;
      ms[i] = plan::evaluate_plan(plan, profile, cluster, o).pipeline_ms_per_minibatch;
      return;
    }
    auto replay = [&](const schedule::Schedule& replayed) {
      return metrics::compute_metrics(sim::simulate(replayed, profile, cluster, timing_only(bytes)),
                                      metrics::Detail::kTiming);
    };
    ms[i] = settled_replay(
                [&](int minibatches) {
                  if (minibatches == 0) return replay(s);
                  schedule::ScheduleOptions o;
                  o.minibatches = minibatches;
                  return replay(schedule::make_unvalidated_schedule(kind, plan, o));
                },
                true, nullptr, 0, floor[i])
                .ms_per_minibatch;
  };
  side_by_side(simulated.size(), [&](size_t k) { simulate_size(simulated[k]); });
  BucketChoice choice;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (ms[i] < 0) {
      choice.ruled_out.push_back({sizes[i], floor[i]});
      continue;
    }
    choice.tried.push_back({sizes[i], ms[i]});
    if (i == 0 || ms[i] < choice.ms_per_minibatch * (1 - 1e-9)) choice.bucket_mb = sizes[i], choice.ms_per_minibatch = ms[i];
  }
  return choice;
}

bool ranks_before(const Candidate& a, const Candidate& b) {
  double ta = a.simulated.ms_per_minibatch, tb = b.simulated.ms_per_minibatch;
  if (std::abs(ta - tb) > 1e-9 * std::max(ta, tb)) return ta < tb;
  if (a.plan.workers != b.plan.workers) return a.plan.workers < b.plan.workers;
  return !a.plan.deferred_step && b.plan.deferred_step;
}

namespace {

// Where the local search goes next among plans as fast: the one on more workers, whose
// neighbours include plans that give some up (the choice itself prefers fewer, ranks_before).
// From the leaner plan the climbs ended lower: VGG-16 --straight on 8 workers at 10 Gbit/s
// reached 5-1 at 124.4 ms per minibatch, not 7-1 at 88.9.
bool climbs_before(const Candidate& a, const Candidate& b) {
  double ta = a.simulated.ms_per_minibatch, tb = b.simulated.ms_per_minibatch;
  if (std::abs(ta - tb) > 1e-9 * std::max(ta, tb)) return ta < tb;
  if (a.plan.workers != b.plan.workers) return a.plan.workers > b.plan.workers;
  return !a.plan.deferred_step && b.plan.deferred_step;
}

// Index of a plan's candidate once replayed; kNotReplayed when seen before, unschedulable or
// past the time limit; kOverLimit when its floor (replay_floor.h) rules it out.
constexpr int kNotReplayed = -1;
constexpr int kOverLimit = -2;

// One choose(): the candidates replayed in turn, each plan's figures worked out ahead
// (replay_ahead.h), then the local search.
class Referee {
 public:
  Referee(const profile::Profile& profile, const plan::Cluster& cluster, const plan::PlanOptions& options,
          const std::string& kind, bool own_buckets)
      : context_{profile, cluster, options, kind, memo_}, started_(std::chrono::steady_clock::now()),
        own_buckets_(own_buckets) {
    r_.schedule = kind;
  }

  // Each candidate, then the local search from the best few; the result ranked.
  Refereed run(const std::vector<plan::Plan>& candidates);

 private:
  const plan::PlanOptions& options() const { return context_.options; }
  double elapsed() const { return options().seconds_planning(started_); }

  bool past_limit() const;
  bool out_of_time();  // past_limit, noted in the result
  void progress();
  // Queues the plans a plan is replayed as (variants_of) with no turn yet, to be worked out ahead.
  void work_ahead(const plan::Plan& p);
  // `weighed`: replayed whatever its floor (the search's own best, which a climb starts from).
  int replay(const plan::Plan& p, bool weighed = false);
  int replay_variants(const plan::Plan& p, bool weighed = false);
  void climb(int from);
  int climb_start(const std::function<bool(const plan::Plan&)>& eligible);
  void periodic_first();
  void own_buckets();
  void explain_losers();

  SimulationMemo memo_;  // before context_, which refers to it
  ReplayContext context_;
  std::chrono::steady_clock::time_point started_;
  bool own_buckets_;
  Refereed r_;
  std::string skipped_;
  std::set<std::string> seen_;
  // Plans not replayed, their floor above the best time then, with that floor: a climb may start
  // from one still (climb_start).
  std::vector<std::pair<plan::Plan, double>> ruled_out_;
  ReplayAhead ahead_{context_, options().planning_deadline(started_)};  // by identity: queued or worked out, not yet taken in turn
  // The best time replayed so far: a plan whose floor (replay_floor.h, never above its steady
  // state) is above it cannot win and is not replayed.
  double best_ms_ = std::numeric_limits<double>::infinity();

  double next_progress_ = 1;  // the first line after a second, then every 3
};

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
    if (!seen_.count(key) && (replay_period(v) > 0 || steady_state_in_closed_form(v, context_.kind)))
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
  if (replay_period(p) == 0 && !steady_state_in_closed_form(p, context_.kind)) {
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

// The ranking's replays are settled; the choice's is periodic too (metrics::Metrics::periodic),
// the figure `simulate` prints for it: the plans ranked ahead of the first whose figure is final
// (periodic, or replayed as long as settled_replay goes) are replayed longer, side by side, and
// ranked again, until the first is final (at most kMostLengthened plans). On the 52
// default-model cases, 44 choices repeat at once; GNMT-Large on 16 workers lengthens 14 plans,
// GNMT on 4x4 14, five others 1 or 2.
void Referee::periodic_first() {
  std::set<std::string> lengthened;
  const size_t at_once = std::max(1u, std::thread::hardware_concurrency());
  while (static_cast<int>(lengthened.size()) < kMostLengthened) {
    if (out_of_time()) {
      const Candidate& first = r_.ranked.front();
      r_.choice_unrepeated = !first.simulated.periodic && !lengthened.count(identity(first.plan));
      return;
    }
    std::vector<Candidate*> ahead;
    for (Candidate& c : r_.ranked) {
      if (c.simulated.periodic || lengthened.count(identity(c.plan)) || ahead.size() == at_once) break;
      ahead.push_back(&c);
    }
    if (ahead.empty()) return;
    side_by_side(ahead.size(), [&](size_t i) { ahead[i]->simulated = periodic_replay(ahead[i]->plan, ahead[i]->simulated, context_); });
    for (Candidate* c : ahead) {
      lengthened.insert(identity(c->plan));
      c->plan.pipeline_ms_per_minibatch = c->plan.simulated_ms_per_minibatch = c->simulated.ms_per_minibatch;
    }
    std::stable_sort(r_.ranked.begin(), r_.ranked.end(), ranks_before);
  }
}

// The ranking's replays all used the options' bucket, and another bucket can reverse it
// (ResNet-18 on 4x4 at 100/10: 15-1 was chosen at 17.28 ms per minibatch, which no bucket
// changes, where data parallelism runs at 18.61 with 25 MiB buckets and 16.28 with 1 MiB, and
// `plan` printed the plan as 1.08x faster than it). The first gets its own bucket
// (choose_bucket), and so does data parallelism, the baseline the plan is weighed against (under
// the pipedream schedule its closed form: no replay); then they are ranked again. Giving every
// plan whose physical limit (the same at every bucket) is under the best its own bucket too
// cost 2.6x the planning time over the 52 default cases (GNMT-Large on 16 workers: 1 s) for one
// plan more 0.3% faster (AlexNet on 4x4), and the next two of them 9% for none.
void Referee::own_buckets() {
  const plan::Cluster& cluster = context_.cluster;
  for (size_t i = 0; i < r_.ranked.size(); ++i) {
    Candidate& c = r_.ranked[i];
    bool dp = c.plan.num_stages() == 1 && c.plan.workers == cluster.workers();
    if (i > 0 && !dp) continue;
    bool replicated = false;
    for (const auto& st : c.plan.stages) replicated = replicated || st.replicas > 1;
    if (replicated) {
      // The ranking's replay is the options' bucket's figure where it repeats (periodic_first).
      c.bucket = choose_bucket(c.plan, context_.profile, cluster, options(), context_.kind,
                               c.simulated.periodic ? c.simulated.ms_per_minibatch : 0,
                               plan::physical_limit(c.plan, c.estimate, context_.profile, cluster).ms());
      c.simulated.ms_per_minibatch = c.bucket.ms_per_minibatch;
      if (c.simulated.ms_per_minibatch > 0)
        c.simulated.samples_per_s = static_cast<double>(context_.profile.batch_size) / c.simulated.ms_per_minibatch * 1e3;
      c.plan.bucket_mb = c.bucket.bucket_mb;
      c.plan.pipeline_ms_per_minibatch = c.plan.simulated_ms_per_minibatch = c.simulated.ms_per_minibatch;
    }
    if (dp) r_.data_parallel_ms = c.simulated.ms_per_minibatch;
  }
  r_.buckets_chosen = true;
  std::stable_sort(r_.ranked.begin(), r_.ranked.end(), ranks_before);
}

// Why each plan but the first lost.
void Referee::explain_losers() {
  double best = r_.ranked.front().simulated.ms_per_minibatch;
  for (size_t i = 1; i < r_.ranked.size(); ++i) {
    Candidate& c = r_.ranked[i];
    double slower = c.simulated.ms_per_minibatch / best - 1;
    if (slower * 1e9 >= 1) {
      c.why_not = str(fixed(100 * slower, 1), "% slower in simulation; ", limit_of(c.estimate, context_.cluster)) +
                  beyond_estimate(c);
    } else {
      const plan::Plan& first = r_.ranked.front().plan;
      c.why_not = c.plan.workers > first.workers ? "as fast, on more workers"
                  : c.plan.deferred_step && !first.deferred_step ? "as fast, with a deferred step"
                                                                  : "as fast; an equal plan was found first";
    }
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
  if (options().cost_model == plan::CostModel::kPipetrain) {
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

}  // namespace

Refereed choose(const std::vector<plan::Plan>& candidates, const profile::Profile& profile,
                const plan::Cluster& cluster, const plan::PlanOptions& options, const std::string& kind,
                bool own_buckets) {
  // What the referee minimises: the simulated time, nothing added (docs/design.md).
  return Referee(profile, cluster, options, kind, own_buckets).run(candidates);
}

std::string format_top(const Refereed& r, const profile::Profile& profile, int k) {
  std::ostringstream os;
  os << "the search's best " << r.ranked.size() << " candidates, replayed under the " << r.schedule
     << " schedule (fastest simulated first; at equal time, more workers and no deferred step first; simulated "
        "with the options' all-reduce bucket, the first and data parallelism with their own (variant bN: N MiB); "
        "peak memory per worker by the memory model, as train checks it):\n";
  char line[512];
  std::snprintf(line, sizeof line, "%4s  %-30s  %-14s  %12s  %12s  %11s  %s\n", "rank", "shape @ first layers", "variant",
                "estimate_ms", "simulated_ms", "peak_memory", "why not chosen");
  os << line;
  for (int i = 0; i < std::min<int>(k, static_cast<int>(r.ranked.size())); ++i) {
    const Candidate& c = r.ranked[i];
    // The shape and where each later stage starts: shapes alone repeat.
    std::string shape = c.plan.shape();
    for (int s = 1; s < c.plan.num_stages(); ++s)
      shape += (s == 1 ? " @" : ",") + profile.layers[c.plan.stages[s].layers.front()].name;
    if (shape.size() > 30) shape = shape.substr(0, 27) + "...";
    std::snprintf(line, sizeof line, "%4d  %-30s  %-14s  %12s  %12s  %11s  %s\n", i + 1, shape.c_str(),
                  (variant(c.plan) + (c.bucket.tried.empty() ? "" : str(" b", c.bucket.bucket_mb))).c_str(),
                  fixed(c.estimate.pipeline_ms_per_minibatch, 3).c_str(),
                  fixed(c.simulated.ms_per_minibatch, 3).c_str(),
                  human_bytes(static_cast<double>(schedule::peak_memory(modelled_memory(c.plan, profile, r.schedule))))
                      .c_str(),
                  i == 0 ? "chosen" : c.why_not.c_str());
    os << line;
  }
  return os.str();
}

std::string format_explain(const Candidate& c, const profile::Profile& profile, const plan::Cluster& cluster) {
  std::ostringstream os;
  const plan::PlanEstimate& e = c.estimate;
  os << "per stage, per minibatch of " << profile.batch_size << " (exact cost model; replicas take minibatches "
     << "round-robin; memory: its busiest worker's, by the memory model, as train checks it):\n";
  auto memory = modelled_memory(c.plan, profile, c.simulated.schedule);
  char line[512];
  std::snprintf(line, sizeof line, "%5s  %8s  %-12s  %10s  %10s  %12s  %10s  %12s\n", "stage", "replicas", "workers",
                "compute_ms", "link_ms", "allreduce_ms", "time_ms", "memory");
  os << line;
  for (int s = 0; s < c.plan.num_stages(); ++s) {
    const auto& st = e.stages[s];
    int64_t worker_memory = 0;
    for (int w : c.plan.stages[s].workers)
      if (w >= 0 && w < static_cast<int>(memory.size())) worker_memory = std::max(worker_memory, memory[w].total());
    std::string ids = plan::format_id_ranges(c.plan.stages[s].workers);
    if (ids.size() > 12) ids = ids.substr(0, 9) + "...";
    std::snprintf(line, sizeof line, "%5d  %8d  %-12s  %10s  %10s  %12s  %10s  %12s\n", s,
                  c.plan.stages[s].replicas, ids.c_str(), fixed(st.compute_ms, 3).c_str(), fixed(st.link_ms, 3).c_str(),
                  fixed(st.allreduce_ms, 3).c_str(), fixed(st.time_ms, 3).c_str(),
                  human_bytes(static_cast<double>(worker_memory)).c_str());
    os << line;
  }
  os << "bottleneck: " << limit_of(e, cluster) << "\n";
  if (!e.links.empty()) {
    os << "links (each worker has a full-duplex link per level), per minibatch:\n";
    std::snprintf(line, sizeof line, "%6s  %-10s  %12s  %12s  %9s\n", "worker", "level", "out", "in", "busy_ms");
    os << line;
    for (const auto& l : e.links) {
      std::snprintf(line, sizeof line, "%6d  %-10s  %12s  %12s  %9s\n", l.worker, cluster.levels[l.level].name.c_str(),
                    human_bytes(l.egress_bytes).c_str(), human_bytes(l.ingress_bytes).c_str(),
                    fixed(l.busy_ms, 3).c_str());
      os << line;
    }
  }
  if (c.simulated.minibatches == 0)  // steady_state_in_closed_form: data parallelism, not replayed
    os << "steady state (" << c.simulated.schedule << ", data parallelism's closed form, the simulator's figure exactly): ";
  else
    os << "simulated (" << c.simulated.schedule << ", " << c.simulated.minibatches << " minibatches, steady state): ";
  os << fixed(c.simulated.ms_per_minibatch, 3) << " ms per minibatch, predicted " << fixed(e.pipeline_ms_per_minibatch, 3)
     << " ms (" << fixed(100 * (c.simulated.ms_per_minibatch / e.pipeline_ms_per_minibatch - 1), 1) << "%)\n";
  return os.str();
}

}  // namespace pt::referee
