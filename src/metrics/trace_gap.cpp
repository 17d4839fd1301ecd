#include "metrics/trace_gap.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/median.h"
#include "core/units.h"
#include "metrics/metrics.h"

namespace pt::metrics {

using schedule::ActionKind;

namespace {

bool timed(ActionKind k) { return schedule::is_compute(k) || k == ActionKind::kStep; }

void check_same_run(const schedule::Trace& a, const std::string& an, const schedule::Trace& b, const std::string& bn) {
  auto differ = [&](const std::string& field, const std::string& x, const std::string& y) {
    throw ConfigError(str(bn, ": field '", field, "' is ", y, " where ", an, "'s is ", x,
                          ": the two traces are not of one run (compare a run's --trace with its --prediction-trace)"));
  };
  if (a.schedule != b.schedule) differ("schedule", "'" + a.schedule + "'", "'" + b.schedule + "'");
  if (a.num_stages != b.num_stages) differ("stages", str(a.num_stages), str(b.num_stages));
  if (a.microbatches != b.microbatches) differ("microbatches", str(a.microbatches), str(b.microbatches));
  if (a.num_workers() != b.num_workers())
    differ("workers", str(a.num_workers(), " workers"), str(b.num_workers(), " workers"));
  if (a.batch_size > 0 && b.batch_size > 0 && a.batch_size != b.batch_size)
    differ("batch_size", str(a.batch_size), str(b.batch_size));
}

// Each worker's F, B, W and ST in the window of `t`, per minibatch.
std::vector<std::map<ActionKind, ActionTimes>> times_in_window(const schedule::Trace& t, const Metrics& m) {
  std::vector<std::map<ActionKind, ActionTimes>> out(t.workers.size());
  double window = m.window_end_ms - m.window_start_ms - m.paused_ms;
  double minibatches = m.ms_per_minibatch > 0 ? window / m.ms_per_minibatch : 0;
  if (minibatches <= 0) return out;
  for (size_t w = 0; w < t.workers.size(); ++w) {
    for (const auto& e : t.workers[w]) {
      if (!timed(e.action.kind)) continue;
      ActionTimes& a = out[w][e.action.kind];
      // Clipped at the window's edges, as the bubble fraction counts them, and counted by the
      // share of each inside it: count x mean is the time per minibatch. Counted whole where
      // begun inside, the edges put pipedream's backwards at 1.1 a minibatch on 2 stages (one
      // ran), and 1.08 x 5.117 ms printed beside 5.134.
      double clipped = std::max(0.0, std::min(e.end_ms, m.window_end_ms) - std::max(e.start_ms, m.window_start_ms));
      a.per_minibatch_ms += clipped;
      double length = e.end_ms - e.start_ms;
      if (length > 0) {
        a.count_per_minibatch += clipped / length;
      } else {  // a step of no time: in the window where it happened there (a whole trace's last, at its end)
        bool in = e.start_ms >= m.window_start_ms &&
                  (e.start_ms < m.window_end_ms || (!m.steady && e.start_ms <= m.window_end_ms));
        a.count_per_minibatch += in ? 1 : 0;
      }
    }
    for (auto& [kind, a] : out[w]) {
      a.mean_ms = a.count_per_minibatch > 0 ? a.per_minibatch_ms / a.count_per_minibatch : 0;
      a.per_minibatch_ms /= minibatches;
      a.count_per_minibatch /= minibatches;
    }
  }
  return out;
}

// Worker w's actions of each kind begun in the window, split by how much of each the other
// workers' computes covered.
std::map<ActionKind, CoRun> co_run_in_window(const schedule::Trace& t, const Metrics& m, size_t w) {
  std::vector<std::pair<double, double>> others;  // their computes, merged into disjoint spans
  for (size_t o = 0; o < t.workers.size(); ++o)
    for (const auto& e : t.workers[o])
      if (o != w && schedule::is_compute(e.action.kind)) others.emplace_back(e.start_ms, e.end_ms);
  std::sort(others.begin(), others.end());
  std::vector<std::pair<double, double>> spans;
  for (const auto& [s, e] : others)
    if (!spans.empty() && s <= spans.back().second)
      spans.back().second = std::max(spans.back().second, e);
    else
      spans.emplace_back(s, e);
  std::map<ActionKind, std::array<std::vector<double>, 2>> split;  // [alone, beside]
  for (const auto& e : t.workers[w]) {
    double ms = e.end_ms - e.start_ms;
    if (!timed(e.action.kind) || ms <= 0 || e.start_ms < m.window_start_ms || e.start_ms >= m.window_end_ms) continue;
    double covered = 0;
    auto it = std::lower_bound(spans.begin(), spans.end(), std::make_pair(e.start_ms, e.start_ms));
    if (it != spans.begin()) --it;
    for (; it != spans.end() && it->first < e.end_ms; ++it)
      covered += std::max(0.0, std::min(e.end_ms, it->second) - std::max(e.start_ms, it->first));
    if (covered < 0.05 * ms) split[e.action.kind][0].push_back(ms);
    if (covered > 0.95 * ms) split[e.action.kind][1].push_back(ms);
  }
  std::map<ActionKind, CoRun> out;
  for (const auto& [kind, groups] : split)
    out[kind] = {median(groups[0]), median(groups[1]), static_cast<int>(groups[0].size()),
                 static_cast<int>(groups[1].size())};
  return out;
}

// Its pauses within [from, to].
double paused_between(const schedule::Trace& t, double from, double to) {
  double paused = 0;
  for (const auto& [start, end] : t.pauses) paused += std::max(0.0, std::min(end, to) - std::max(start, from));
  return paused;
}

// `m` over the whole trace: where its middle window is short of the busiest worker's typical work
// per minibatch (Metrics::settled), it is no steady state, and the trace is compared whole, as
// one too short for a window (train set a 2-stage pipedream run's unsettled window, 17.3 ms a
// minibatch, against its simulation's steady state as the run's).
Metrics over_whole_trace(const schedule::Trace& t, Metrics m) {
  m.steady = false;
  m.window_start_ms = t.start_ms();
  m.window_end_ms = t.end_ms();
  m.paused_ms = paused_between(t, m.window_start_ms, m.window_end_ms);
  m.ms_per_minibatch = (m.window_end_ms - m.window_start_ms - m.paused_ms) / std::max(1, m.minibatches);
  return m;
}

std::string signed_fixed(double v, int digits) { return (v >= 0 ? "+" : "") + fixed(v, digits); }

std::string percent_of(double v, double base) {  // not of a microsecond or less: noise
  return base >= 1e-3 ? signed_fixed(100 * (v - base) / base, 1) + "%" : std::string("-");
}

}  // namespace

TraceGap trace_gap(const schedule::Trace& first, const std::string& first_file, const schedule::Trace& second,
                   const std::string& second_file) {
  check_same_run(first, first_file, second, second_file);
  TraceGap g;
  g.names = first.source != second.source ? std::array<std::string, 2>{first.source, second.source}
                                          : std::array<std::string, 2>{first_file, second_file};
  std::array<std::vector<std::map<ActionKind, ActionTimes>>, 2> times;
  const std::array<const schedule::Trace*, 2> traces{&first, &second};
  Metrics first_metrics;
  for (int i = 0; i < 2; ++i) {
    Metrics m = compute_metrics(*traces[i], Detail::kTiming);
    if (m.steady && !m.settled) m = over_whole_trace(*traces[i], m);
    g.ms_per_minibatch[i] = m.ms_per_minibatch;
    g.whole_trace[i] = !m.steady && m.minibatches > 1;
    times[i] = times_in_window(*traces[i], m);
    if (i == 0) first_metrics = m;
  }
  g.first_whole_ms = over_whole_trace(first, first_metrics).ms_per_minibatch;
  double least_outside = 0;
  for (int w = 0; w < first.num_workers(); ++w) {
    WorkerGap wg;
    std::map<ActionKind, CoRun> co_run = co_run_in_window(first, first_metrics, static_cast<size_t>(w));
    for (int k = 0; k < schedule::kNumActionKinds; ++k) {
      auto kind = static_cast<ActionKind>(k);
      if (!times[0][w].count(kind) && !times[1][w].count(kind)) continue;
      wg.kinds.push_back(kind);
      std::array<ActionTimes, 2> pair;
      for (int i = 0; i < 2; ++i) {
        auto it = times[i][w].find(kind);
        if (it != times[i][w].end()) pair[i] = it->second;
        wg.compute_ms[i] += pair[i].per_minibatch_ms;
      }
      wg.times.push_back(pair);
      wg.co_run.push_back(co_run[kind]);
    }
    for (int i = 0; i < 2; ++i) wg.outside_ms[i] = std::max(0.0, g.ms_per_minibatch[i] - wg.compute_ms[i]);
    if (w == 0 || wg.outside_ms[0] < least_outside) least_outside = wg.outside_ms[0], g.pace_worker = w;
    g.workers.push_back(std::move(wg));
  }
  return g;
}

std::string format_trace_gap(const TraceGap& g) {
  std::ostringstream os;
  const auto& [a, b] = g.names;
  double gap = g.ms_per_minibatch[0] - g.ms_per_minibatch[1];
  os << "time per minibatch: " << a << " " << fixed(g.ms_per_minibatch[0], 3) << " ms, " << b << " "
     << fixed(g.ms_per_minibatch[1], 3) << " ms (" << signed_fixed(gap, 3) << " ms, "
     << percent_of(g.ms_per_minibatch[0], g.ms_per_minibatch[1]) << ")\n";
  for (int i = 0; i < 2; ++i)
    if (g.whole_trace[i])
      os << "  (" << g.names[i]
         << ": no steady state in the trace, its whole length counted, fill and drain included)\n";
  auto line = [&](const std::string& w, const std::string& what, const std::string& count, const std::string& each,
                  const std::string& minibatch) {
    os << std::setw(6) << w << "  " << std::left << std::setw(9) << what << std::setw(10) << count << std::setw(32)
       << each << minibatch << std::right << "\n";
  };
  os << "each pair: " << a << " / " << b << "; 'a mb': actions per minibatch; 'other': the rest of the minibatch\n";
  line("worker", "action", "a mb", "one action, ms", "a minibatch's, ms");
  auto row = [&](int w, const std::string& what, const std::string& count, const std::string& each, double x,
                 double y) {
    line(str(w), what, count, each, fixed(x, 3) + " / " + fixed(y, 3) + "  (" + signed_fixed(x - y, 3) + ")");
  };
  for (size_t w = 0; w < g.workers.size(); ++w) {
    const WorkerGap& wg = g.workers[w];
    for (size_t k = 0; k < wg.kinds.size(); ++k) {
      const auto& [x, y] = wg.times[k];
      std::string count = std::fabs(x.count_per_minibatch - y.count_per_minibatch) < 0.05
                              ? fixed(x.count_per_minibatch, 1)
                              : fixed(x.count_per_minibatch, 1) + " / " + fixed(y.count_per_minibatch, 1);
      std::string each =
          fixed(x.mean_ms, 3) + " / " + fixed(y.mean_ms, 3) + " (" + percent_of(x.mean_ms, y.mean_ms) + ")";
      row(static_cast<int>(w), schedule::kind_code(wg.kinds[k]), count, each, x.per_minibatch_ms, y.per_minibatch_ms);
    }
    row(static_cast<int>(w), "other", "", "waits, transfers, the host", wg.outside_ms[0], wg.outside_ms[1]);
  }
  std::ostringstream beside;
  for (size_t w = 0; w < g.workers.size(); ++w)
    for (size_t k = 0; k < g.workers[w].kinds.size(); ++k)
      if (const CoRun& c = g.workers[w].co_run[k]; c.alone > 0 && c.beside > 0)
        beside << "  worker " << w << " " << schedule::kind_code(g.workers[w].kinds[k]) << ": " << fixed(c.alone_ms, 3)
               << " ms alone (" << c.alone << "), " << fixed(c.beside_ms, 3) << " beside (" << c.beside << "), "
               << percent_of(c.beside_ms, c.alone_ms) << "\n";
  if (!beside.str().empty())
    os << "in the " << a << " trace, one action's median time alone (no other worker computing) and beside "
       << "another worker's compute throughout:\n"
       << beside.str();
  os << pace_summary(g) << "\n";
  return os.str();
}

std::string pace_summary(const TraceGap& g) {
  const WorkerGap& p = g.workers.empty() ? WorkerGap{} : g.workers[g.pace_worker];
  return str("worker ", g.pace_worker, " set the pace (the least time outside its computes and steps in the ",
             g.names[0], " trace): of the ", signed_fixed(g.ms_per_minibatch[0] - g.ms_per_minibatch[1], 3),
             " ms, ", signed_fixed(p.compute_ms[0] - p.compute_ms[1], 3), " in its computes and steps (",
             percent_of(p.compute_ms[0], p.compute_ms[1]), "), ", signed_fixed(p.outside_ms[0] - p.outside_ms[1], 3),
             " outside them");
}

std::string prediction_miss_note(const TraceGap& g, double threshold, const MissContext& run) {
  const double steady = g.ms_per_minibatch[1] / g.ms_per_minibatch[0];
  std::string times = str("the run took ", fixed(g.ms_per_minibatch[0], 3), " ms a minibatch, its simulation ",
                          fixed(g.ms_per_minibatch[1], 3), " (ratio ", fixed(steady, 3), ")");
  std::string side_by_side = " (`pipetrain trace RUN --against SIM` of --trace RUN and --prediction-trace SIM sets "
                             "them side by side, action by action)";
  std::string over = str("off by more than ", fixed(100 * threshold, 0), "%");
  // A run too short for a steady state, or whose pauses leave no stretch long enough for one, is
  // measured whole, fills and drains included, which its simulation's steady state leaves out.
  if (g.whole_trace[0] && !g.whole_trace[1])
    return str(over, " over the whole run; the run has no steady state to set against its simulation's (",
               fixed(g.ms_per_minibatch[0], 3), " ms a minibatch over the whole run, fills and drains included, ",
               fixed(g.ms_per_minibatch[1], 3), " in the simulation's steady state): too few minibatches between "
               "its start, its pauses (evaluations and checkpoints, at each of which an asynchronous pipeline "
               "drains and fills again) and its end. The whole-run figures above are the comparison; a longer run, "
               "or a larger --eval-every or --checkpoint-every, leaves a steady state to measure", side_by_side);
  // A start, fills and drains only slow a run down: a run faster over its length than its steady
  // state (1.105 against 1.093, a helper's audit) sped up in some stretches.
  if (std::abs(steady - 1) <= threshold)
    return str(over, " over the whole run, within it in the steady state, where ", times,
               g.first_whole_ms > 0 && g.first_whole_ms < g.ms_per_minibatch[0]
                   ? ": over its whole length it ran faster than in its steady state, so the rest is this machine's "
                     "speed, which swings from one stretch of a run to the next"
                   : ": the rest lies outside it, in the run's start (the allocator's first blocks, each layer's first "
                     "runs) or its pipeline's fills and drains, which a longer run spreads thinner",
               side_by_side);
  const WorkerGap& p = g.workers[g.pace_worker];
  const double computes = p.compute_ms[0] - p.compute_ms[1], outside = p.outside_ms[0] - p.outside_ms[1];
  // The whole run's figure holds its start too, which the steady states leave out: a run at 22.2 ms
  // a minibatch whose steady state took 13.8 was told only of the 2.2 ms in its steady state.
  const double start = g.first_whole_ms - g.ms_per_minibatch[0];
  std::string besides =
      start > threshold * g.ms_per_minibatch[0]
          ? str("; besides, over its whole length the run took ", fixed(g.first_whole_ms, 3), " ms a minibatch, ",
                signed_fixed(start, 3), " outside its steady state: its start (the allocator's first blocks, each "
                "layer's first runs) or its pipeline's fills and drains, which a longer run spreads thinner")
          : std::string();
  // What to measure again, and what else it may be (a helper's audit of predictions on real compute:
  // the advice named a --cluster that was given, and a profile that timed again the same).
  std::string in_computes =
      "its layers ran at another speed than the profile timed them (timed in a busier or a quieter spell of this "
      "machine than the run's?): profile again on a quiet machine";
  if (!run.core_figures.empty())
    in_computes += str(", and calibrate again: ", run.core_figures, ", figures that moved by 0.1-0.2 between calibrations");
  std::string outside_computes =
      run.calibrated ? "its waits, transfers and the host's own work took another time than simulated, though the "
                       "cluster was calibrated for this transport: `pipetrain calibrate` again (its figures move "
                       "between runs on a busy machine) and compare them"
                     : "its waits, transfers and the host's own work took another time than simulated: give train a "
                       "--cluster that `pipetrain calibrate` measured for this run's workers and transport";
  return str(over, "; in the steady state ", times, ": ", pace_summary(g), ": ",
             std::abs(computes) >= std::abs(outside) ? in_computes : outside_computes, besides, side_by_side);
}

json to_json(const TraceGap& g) {
  auto pair = [](double x, double y) { return json::array({x, y}); };
  json workers = json::array();
  for (const auto& wg : g.workers) {
    json kinds = json::object();
    for (size_t k = 0; k < wg.kinds.size(); ++k) {
      const auto& [x, y] = wg.times[k];
      kinds[schedule::kind_code(wg.kinds[k])] = {
          {"per_minibatch_ms", pair(x.per_minibatch_ms, y.per_minibatch_ms)},
          {"count_per_minibatch", pair(x.count_per_minibatch, y.count_per_minibatch)},
          {"mean_ms", pair(x.mean_ms, y.mean_ms)},
          {"alone", {{"median_ms", wg.co_run[k].alone_ms}, {"count", wg.co_run[k].alone}}},
          {"beside_another", {{"median_ms", wg.co_run[k].beside_ms}, {"count", wg.co_run[k].beside}}}};
    }
    workers.push_back({{"actions", kinds},
                       {"compute_ms", pair(wg.compute_ms[0], wg.compute_ms[1])},
                       {"outside_ms", pair(wg.outside_ms[0], wg.outside_ms[1])}});
  }
  return {{"traces", json::array({g.names[0], g.names[1]})},
          {"ms_per_minibatch", pair(g.ms_per_minibatch[0], g.ms_per_minibatch[1])},
          {"whole_trace", json::array({g.whole_trace[0], g.whole_trace[1]})},
          {"pace_worker", g.pace_worker},
          {"workers", workers}};
}

}  // namespace pt::metrics
