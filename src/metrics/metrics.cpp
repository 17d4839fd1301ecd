#include "metrics/metrics.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <iomanip>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/median.h"
#include "core/units.h"
#include "schedule/generators.h"
#include "schedule/stash_tracker.h"

namespace pt::metrics {

using schedule::ActionKind;
using schedule::TraceEvent;

namespace {
double overlap(const TraceEvent& e, double a, double b) {
  return std::max(0.0, std::min(e.end_ms, b) - std::max(e.start_ms, a));
}

// Memory of one worker: replays its events in time order through the StashTracker.
void memory_of(const schedule::Trace& t, const std::vector<TraceEvent>& events, WorkerMetrics& out) {
  std::set<int> split;  // stages whose stash is released by W
  for (const auto& e : events)
    if (e.action.kind == ActionKind::kBackwardWeight) split.insert(e.action.stage);
  std::vector<const TraceEvent*> order;
  for (const auto& e : events)
    if (is_compute(e.action.kind) || e.action.kind == ActionKind::kStep) order.push_back(&e);
  // Compute and Steps of one worker do not overlap: start order is execution order.
  std::stable_sort(order.begin(), order.end(), [](const TraceEvent* a, const TraceEvent* b) {
    return a->start_ms < b->start_ms;
  });
  schedule::StashTracker tracker;
  if (t.predicted_weights) {
    std::vector<schedule::Action> ran;
    for (const TraceEvent* e : order) ran.push_back(e->action);
    if (t.weight_delay > 0) tracker.share_predictions(t.microbatches);
    for (const auto& [key, steps] : schedule::steps_in_flight(ran))
      if (steps > 0) tracker.predicted(key.first, key.second, steps);
  }
  if (!t.predicted_weights || t.weight_delay == 0) tracker.keep_versions_before(t.weight_delay);
  std::set<int> stages;
  for (const TraceEvent* e : order) {
    tracker.on(e->action, split.count(e->action.stage) > 0, e->bytes);
    stages.insert(e->action.stage);
  }
  out.peak_stash = tracker.peak_stash();
  out.peak_activation_bytes = tracker.peak_bytes();
  out.weight_versions = tracker.max_weight_versions();
  for (int s : stages)
    if (s < static_cast<int>(t.stage_parameter_bytes.size()))
      out.weight_bytes += t.stage_parameter_bytes[s] * tracker.weight_versions(s);
  out.peak_memory_bytes = out.peak_activation_bytes + out.weight_bytes;
}

// The most minibatches between their first compute's start and their last compute's end at
// one time.
int most_in_flight(const std::vector<double>& begun, const std::vector<double>& done) {
  std::vector<std::pair<double, int>> edges;  // (time, +1 begins / -1 ends); ends first at a tie
  for (size_t i = 0; i < done.size(); ++i) edges.emplace_back(begun[i], 1), edges.emplace_back(done[i], -1);
  std::sort(edges.begin(), edges.end());
  int now = 0, most = 0;
  for (const auto& [t, d] : edges) most = std::max(most, now += d);
  return most;
}

// The fewest gaps c after which the gaps between finished[a..b] repeat, seen at least twice
// over; 0 where none does (the window is not yet periodic, or too short to show its period).
int gap_cycle(const std::vector<double>& finished, int a, int b) {
  auto gap = [&](int i) { return finished[i + 1] - finished[i]; };
  for (int c = 1; 2 * c <= b - a; ++c) {
    bool repeats = true;
    for (int i = a; i + c < b && repeats; ++i)
      repeats = std::abs(gap(i) - gap(i + c)) <= 1e-6 * std::max({1.0, gap(i), gap(i + c)});
    if (repeats) return c;
  }
  return 0;
}

// The first and last index of the longest run of `finished` (completion times, sorted) that no
// pause splits; the earliest of equal ones.
std::pair<int, int> longest_segment(const std::vector<double>& finished,
                                    const std::vector<std::pair<double, double>>& pauses) {
  std::pair<int, int> best{0, static_cast<int>(finished.size()) - 1};
  if (pauses.empty()) return best;
  int start = 0, longest = 0;
  auto pause = pauses.begin();
  for (int i = 0; i < static_cast<int>(finished.size()); ++i) {
    bool last = i + 1 == static_cast<int>(finished.size());
    while (pause != pauses.end() && pause->second <= finished[i]) ++pause;
    if (last || (pause != pauses.end() && pause->first < finished[i + 1])) {  // a pause before the next
      if (i - start + 1 > longest) longest = i - start + 1, best = {start, i};
      start = i + 1;
    }
  }
  return best;
}

}  // namespace

int64_t Metrics::peak_memory_bytes() const {
  int64_t m = 0;
  for (const auto& w : workers) m = std::max(m, w.peak_memory_bytes);
  return m;
}

Metrics compute_metrics(const schedule::Trace& t, Detail detail) {
  Metrics m;
  m.schedule = t.schedule;
  m.source = t.source;
  m.memory_known = !t.stage_parameter_bytes.empty();
  // Per minibatch id, in id order: begun, the start of its first compute; done, the end of its
  // last. Indexed by id (the planner computes these for hundreds of replays, where maps took a
  // tenth of its time); ids with no compute are left out.
  const int per = std::max(1, t.microbatches);
  int ids = 0;
  size_t computes = 0;
  for (const auto& list : t.workers)
    for (const auto& e : list)
      if (is_compute(e.action.kind)) ids = std::max(ids, e.action.microbatch / per + 1), ++computes;
  if (ids == 0) throw ConfigError(str("trace of '", t.schedule, "' has no compute events"));
  // A trace read from a file may skip ids (up to 10^9): then its own ids, in order, index them.
  std::vector<int> sparse;
  if (static_cast<size_t>(ids) > computes) {
    for (const auto& list : t.workers)
      for (const auto& e : list)
        if (is_compute(e.action.kind)) sparse.push_back(e.action.microbatch / per);
    std::sort(sparse.begin(), sparse.end());
    sparse.erase(std::unique(sparse.begin(), sparse.end()), sparse.end());
    ids = static_cast<int>(sparse.size());
  }
  auto index_of = [&](int id) {
    return sparse.empty() ? id : static_cast<int>(std::lower_bound(sparse.begin(), sparse.end(), id) - sparse.begin());
  };
  const double none = std::numeric_limits<double>::infinity();
  std::vector<double> done(ids, -none), begun(ids, none);
  for (const auto& list : t.workers)
    for (const auto& e : list)
      if (is_compute(e.action.kind)) {
        int id = index_of(e.action.microbatch / per);
        done[id] = std::max(done[id], e.end_ms);
        begun[id] = std::min(begun[id], e.start_ms);
      }
  size_t kept = 0;
  for (int id = 0; id < ids; ++id)
    if (begun[id] != none) done[kept] = done[id], begun[kept] = begun[id], ++kept;
  done.resize(kept), begun.resize(kept);
  m.minibatches = static_cast<int>(done.size());
  // Completions in time order: replicated stages finish minibatches out of order, and the gap
  // between two minibatch ids would count a replica's whole round as one minibatch's time.
  std::vector<double> finished = done;
  std::sort(finished.begin(), finished.end());
  // Replicated stages that take whole minibatches in turn (pipedream) make the steady state
  // periodic in the least common multiple of their replica counts (each replica all-reduces
  // once per round): a window of whole periods counts each part of a round once, where an edge
  // inside a round would count part of it. Replicas that split each minibatch's microbatches
  // (2bw, 1f1b, dp) all-reduce every minibatch: their round is one minibatch. Counting those as
  // rounds of r sent a joint search's short 2bw replays to the whole trace, warm-up and all
  // (ResNet-50 on 4x4: 334.6 ms per minibatch where the steady state is 317.7).
  // (stage, minibatch, worker) of every forward, sorted and unique: one array, as for the spans.
  std::vector<std::array<int, 3>> forwards;
  for (int w = 0; w < t.num_workers(); ++w)
    for (const auto& e : t.workers[w])
      if (e.action.kind == schedule::ActionKind::kForward)
        forwards.push_back({e.action.stage, e.action.microbatch / std::max(1, t.microbatches), w});
  std::sort(forwards.begin(), forwards.end());
  forwards.erase(std::unique(forwards.begin(), forwards.end()), forwards.end());
  int period = 1;
  for (size_t i = 0; i < forwards.size();) {  // one stage at a time
    std::set<int> workers;
    int sharing = 0;  // the most workers one minibatch's forwards ran on
    size_t j = i;
    for (; j < forwards.size() && forwards[j][0] == forwards[i][0];) {
      size_t k = j;
      for (; k < forwards.size() && forwards[k][0] == forwards[j][0] && forwards[k][1] == forwards[j][1]; ++k)
        workers.insert(forwards[k][2]);
      sharing = std::max(sharing, static_cast<int>(k - j));
      j = k;
    }
    period = std::lcm(period, (static_cast<int>(workers.size()) + sharing - 1) / sharing);
    i = j;
  }
  // An asynchronous pipeline's warm-up and drain each span as many minibatches as it holds in
  // flight at once (about one per worker, more where a plan raises a stage's in_flight: VGG-16
  // 15-1 with 5 per replica holds 75); completions inside them come a backward apart, not a
  // forward and a backward, so the window keeps clear of them. Without room for a whole period
  // between them it takes the whole trace, which can only overstate the time per minibatch,
  // never understate it.
  int k = m.minibatches, mb = std::max(1, t.microbatches);
  const bool flushes = schedule::schedule_flushes(t.schedule);
  // Such a pipeline also fills and drains at each pause (a measured run's evaluations and
  // checkpoints end segments): the window lies in its longest segment. Across them, pipedream on 4
  // stages, evaluating every 4 minibatches, read 13.6 ms per minibatch for a steady state where its
  // segments took 13.7 to 24.6 each, and train set that against its simulation's steady 8.1.
  auto [first, last] = flushes ? std::pair{0, k - 1} : longest_segment(finished, t.pauses);
  int span = last - first + 1;
  int edge = flushes ? k / 3 : std::max({span / 3, (t.num_workers() + mb - 1) / mb, most_in_flight(begun, done)});
  int a = first + edge, b = last - edge;
  // The steady state can repeat in more minibatches than the rounds above: PipeDream-2BW's
  // double buffering alternates two gaps (ResNet-50 8-8 on 4x4: 233.7 and 253.5 ms), so a
  // window of an odd count of them is off by half their difference over the count (6
  // minibatches: 233.7 where it runs at 243.6). Where the window's gaps repeat every c of them,
  // it is cut to whole repeats too.
  int cycle = b - a >= period ? gap_cycle(finished, a, b) : 0;
  if (cycle > 0) {
    int repeats = std::lcm(period, cycle);
    if (repeats <= b - a) period = repeats;  // else the rounds alone, as before
  }
  if (b - a >= period) b = a + (b - a) / period * period;
  else a = b;  // less than a period in the middle third: the whole trace, warm-up and all
  m.steady = b > a;
  m.window_start_ms = m.steady ? finished[a] : t.start_ms();
  m.window_end_ms = m.steady ? finished[b] : t.end_ms();
  for (const auto& [start, end] : t.pauses)
    m.paused_ms += std::max(0.0, std::min(end, m.window_end_ms) - std::max(start, m.window_start_ms));
  double window = m.window_end_ms - m.window_start_ms - m.paused_ms;  // training time
  m.ms_per_minibatch = window / (m.steady ? b - a : k);
  if (m.steady) {
    // Of any worker, its computes and steps over the whole trace. A run's (measured or emulated)
    // at each kind and stage's median time: its first actions and noisy spells run slow (a 2-stage
    // pipedream run's worker 1 averaged 19.0 ms of forward and backward a minibatch where their
    // medians made 13.6, and its steady window of 17.3 was called unsettled). A replay's as they
    // are: its times are its model's, computes sharing cores slower only while they share.
    const bool run = t.source != "simulated";
    double busiest = 0;
    for (const auto& list : t.workers) {
      std::map<std::pair<ActionKind, int>, std::vector<double>> times;  // by kind and stage
      for (const auto& e : list)
        if (is_compute(e.action.kind) || e.action.kind == ActionKind::kStep)
          times[{e.action.kind, e.action.stage}].push_back(e.end_ms - e.start_ms);
      double busy = 0;
      for (const auto& [kind, ms] : times)
        busy += run ? median(ms) * static_cast<double>(ms.size()) : std::accumulate(ms.begin(), ms.end(), 0.0);
      busiest = std::max(busiest, busy);
    }
    m.settled = m.ms_per_minibatch >= busiest / k * (1 - 1e-9);
    m.periodic = cycle > 0;
  }
  if (m.ms_per_minibatch > 0) m.samples_per_s = static_cast<double>(t.batch_size) / m.ms_per_minibatch * 1e3;
  std::map<std::pair<int, int>, int64_t> links;
  for (int w = 0; w < t.num_workers(); ++w) {
    WorkerMetrics wm;
    for (const auto& e : t.workers[w]) {
      if (is_compute(e.action.kind) || e.action.kind == ActionKind::kStep)
        wm.busy_ms += overlap(e, m.window_start_ms, m.window_end_ms);
      if (detail == Detail::kAll && is_send(e.action.kind)) links[{w, e.action.peer}] += e.bytes;
    }
    wm.bubble_fraction = window > 0 ? 1.0 - wm.busy_ms / window : 0;
    if (detail == Detail::kAll) memory_of(t, t.workers[w], wm);
    m.bubble_fraction += wm.bubble_fraction / t.num_workers();
    m.workers.push_back(wm);
  }
  if (detail == Detail::kTiming) return m;
  // All-reduce bytes: one per (stage, id) collective.
  std::set<std::pair<int, int>> seen;
  for (const auto& list : t.workers)
    for (const auto& e : list)
      if (e.action.kind == ActionKind::kAllReduce && seen.insert({e.action.stage, e.action.microbatch}).second)
        m.allreduce_bytes += e.bytes;
  for (const auto& [link, bytes] : links) m.links.push_back({link.first, link.second, bytes});
  return m;
}

json to_json(const Metrics& m) {
  // A trace without the stages' bytes (a measured one) gives no memory: null, as the text
  // leaves the columns out, not the bytes its events happen to carry.
  auto bytes = [&](int64_t b) { return m.memory_known ? json(b) : json(nullptr); };
  json workers = json::array();
  for (const auto& w : m.workers)
    workers.push_back({{"busy_ms", w.busy_ms},
                       {"bubble_fraction", w.bubble_fraction},
                       {"peak_stash", w.peak_stash},
                       {"peak_activation_bytes", bytes(w.peak_activation_bytes)},
                       {"weight_versions", w.weight_versions},
                       {"weight_bytes", bytes(w.weight_bytes)},
                       {"peak_stash_weights_bytes", bytes(w.peak_memory_bytes)}});
  json links = json::array();
  for (const auto& l : m.links) links.push_back({{"from", l.from}, {"to", l.to}, {"bytes", l.bytes}});
  return {{"format", format_tag("metrics", 1)},
          {"schedule", m.schedule},
          {"source", m.source},
          {"minibatches", m.minibatches},
          {"steady", m.steady},
          {"settled", m.settled},
          {"periodic", m.periodic},
          {"window_ms", {m.window_start_ms, m.window_end_ms}},
          {"paused_ms", m.paused_ms},
          {"ms_per_minibatch", m.ms_per_minibatch},
          {"samples_per_s", m.samples_per_s},
          {"bubble_fraction", m.bubble_fraction},
          // The trace's stashes and weight versions alone, not a worker's whole tensors (which
          // train measures, and simulate and compare model, as peak_memory_bytes). This field
          // held it under that name too, a quarter of the modelled peak (pipedream 3-1).
          {"peak_stash_weights_bytes", bytes(m.peak_memory_bytes())},
          {"memory_known", m.memory_known},
          {"allreduce_bytes", m.allreduce_bytes},
          {"workers", workers},
          {"links", links}};
}

std::string format_metrics(const Metrics& m) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(3);
  // A window that does not hold the busiest worker's share of the work is a run too short to
  // settle (a 4-step train read 11.6 ms a minibatch "steady state" where it ran at 14.3); a
  // replay's that does not yet repeat can still move (Metrics::periodic). A measured window's
  // gaps never repeat to the microsecond: settled, it is the run's steady state.
  const bool repeats = m.periodic || m.source != "simulated";
  os << "schedule " << m.schedule << " (" << m.source << ", " << m.minibatches << " minibatch"
     << (m.steady && m.settled && repeats ? "es, steady state"
         : m.steady && m.settled ? "es, middle window, not yet repeating: a longer replay may run at another pace"
         : m.steady              ? "es, middle window: too few to settle, the busiest worker's work takes longer"
         : m.minibatches > 1   ? "es, whole run: too few for a steady state"
                               : "")
     << ")\n";
  os << "time per minibatch  " << m.ms_per_minibatch << " ms";
  if (m.paused_ms > 0)
    os << " (" << std::setprecision(1) << m.paused_ms << std::setprecision(3)
       << " ms of evaluations and checkpoints in the window left out)";
  os << "\n";
  os << "throughput          " << std::setprecision(1) << m.samples_per_s << " samples/s\n";
  os << "bubble fraction     " << std::setprecision(3) << m.bubble_fraction << "\n";
  if (m.memory_known)
    os << "peak stash+weights  " << human_bytes(static_cast<double>(m.peak_memory_bytes())) << "\n";
  else
    os << "memory              not in the " << m.source << " trace: train prints each worker's measured tensors\n";
  // Totals over the trace, which may hold 1 minibatch or 300: the same link read 784.0 KiB in one
  // and 229.7 MiB in another beside per-minibatch times, with nothing to say which.
  auto bytes_over_trace = [&](int64_t bytes) {
    if (m.minibatches <= 1) return human_bytes(static_cast<double>(bytes)) + " (one minibatch)";
    return str(human_bytes(static_cast<double>(bytes)), " over ", m.minibatches, " minibatches, ",
               human_bytes(static_cast<double>(bytes) / m.minibatches), " a minibatch");
  };
  if (m.allreduce_bytes) os << "all-reduced         " << bytes_over_trace(m.allreduce_bytes) << "\n";
  os << "worker  bubble  stash  versions" << (m.memory_known ? "  activations  weights" : "") << "\n";
  for (size_t w = 0; w < m.workers.size(); ++w) {
    const auto& x = m.workers[w];
    os << std::setw(6) << w << "  " << std::setw(6) << x.bubble_fraction << "  " << std::setw(5) << x.peak_stash << "  "
       << std::setw(8) << x.weight_versions;
    if (m.memory_known)
      os << "  " << std::setw(11) << human_bytes(static_cast<double>(x.peak_activation_bytes)) << "  "
         << human_bytes(static_cast<double>(x.weight_bytes));
    os << "\n";
  }
  for (const auto& l : m.links)
    os << "link " << l.from << " -> " << l.to << "  " << bytes_over_trace(l.bytes) << "\n";
  return os.str();
}

}  // namespace pt::metrics
