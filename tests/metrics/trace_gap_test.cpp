// Where a run and its simulation part (metrics/trace_gap.h): hand-written traces whose gap is
// known, action by action.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "metrics/trace_gap.h"
#include "schedule/trace.h"

namespace pt::metrics {
namespace {

using schedule::parse_action;
using schedule::Trace;

// One minibatch of one microbatch over 2 stages: w0's forward (1 ms), w1's forward and backward
// (f1, b1), w0's backward (2 ms), each stage's step (w0 0.5 ms, w1 0.25) at the end of its own.
Trace two_stages(const char* source, double f1, double b1) {
  Trace t;
  t.source = source;
  t.schedule = "1f1b";
  t.num_stages = 2;
  t.batch_size = 8;
  auto ev = [](int w, const char* a, double s, double e) { return schedule::TraceEvent{parse_action(a, w), s, e, 0}; };
  double back = 1 + f1 + b1;
  t.workers = {{ev(0, "0F0", 0, 1), ev(0, "0SA0>1", 1, 1), ev(0, "0RG0<1", back, back), ev(0, "0B0", back, back + 2),
                ev(0, "0ST0", back + 2, back + 2.5)},
               {ev(1, "1RA0<0", 1, 1), ev(1, "1F0", 1, 1 + f1), ev(1, "1B0", 1 + f1, back), ev(1, "1SG0>0", back, back),
                ev(1, "1ST0", back, back + 0.25)}};
  return t;
}

// One worker of one stage, minibatch i's forward forward_ms[i] and backward backward_ms, each
// minibatch `gap` ms after the last.
Trace one_worker(const char* source, const char* schedule, const std::vector<double>& forward_ms, double backward_ms,
                 double gap = 0) {
  Trace t;
  t.source = source;
  t.schedule = schedule;
  t.num_stages = 1;
  t.batch_size = 8;
  t.workers.resize(1);
  double at = 0;
  for (size_t i = 0; i < forward_ms.size(); ++i) {
    double f = forward_ms[i];
    t.workers[0].push_back({parse_action("0F" + std::to_string(i), 0), at, at + f, 0});
    t.workers[0].push_back({parse_action("0B" + std::to_string(i), 0), at + f, at + f + backward_ms, 0});
    at += f + backward_ms + gap;
  }
  return t;
}

// The run's second stage took 3 ms a backward where 2 were simulated: the minibatch is 1 ms
// longer, all of it in worker 1's computes, which set the pace; worker 0 waited 1 ms longer.
TEST(TraceGap, EachWorkersGapIsItsComputesAndStepsPlusTheRest) {
  TraceGap g = trace_gap(two_stages("measured", 1, 3), "run.json", two_stages("simulated", 1, 2), "sim.json");
  EXPECT_EQ(g.names[0], "measured");
  EXPECT_EQ(g.names[1], "simulated");
  EXPECT_DOUBLE_EQ(g.ms_per_minibatch[0], 7.5);
  EXPECT_DOUBLE_EQ(g.ms_per_minibatch[1], 6.5);
  ASSERT_EQ(g.workers.size(), 2u);
  EXPECT_EQ(g.pace_worker, 1);
  const WorkerGap& w1 = g.workers[1];
  ASSERT_EQ(w1.kinds.size(), 3u);  // F, B, ST: transfers are not computes
  EXPECT_EQ(w1.kinds[1], schedule::ActionKind::kBackward);
  EXPECT_DOUBLE_EQ(w1.times[1][0].mean_ms, 3);
  EXPECT_DOUBLE_EQ(w1.times[1][1].mean_ms, 2);
  EXPECT_DOUBLE_EQ(w1.times[1][0].count_per_minibatch, 1);
  EXPECT_DOUBLE_EQ(w1.compute_ms[0], 4.25);
  EXPECT_DOUBLE_EQ(w1.compute_ms[1], 3.25);
  EXPECT_DOUBLE_EQ(w1.outside_ms[0], w1.outside_ms[1]);
  for (const WorkerGap& w : g.workers)
    for (int i = 0; i < 2; ++i) EXPECT_DOUBLE_EQ(w.compute_ms[i] + w.outside_ms[i], g.ms_per_minibatch[i]);
  EXPECT_DOUBLE_EQ(g.workers[0].compute_ms[0], g.workers[0].compute_ms[1]);
  EXPECT_DOUBLE_EQ(g.workers[0].outside_ms[0] - g.workers[0].outside_ms[1], 1.0);
  std::string text = format_trace_gap(g);
  EXPECT_NE(text.find("worker 1 set the pace"), std::string::npos) << text;
  EXPECT_NE(text.find("of the +1.000 ms, +1.000 in its computes and steps (+30.8%), +0.000 outside them"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("3.000 / 2.000 (+50.0%)"), std::string::npos) << text;
  json doc = to_json(g);
  EXPECT_DOUBLE_EQ(doc["workers"][1]["actions"]["B"]["mean_ms"][0].get<double>(), 3.0);
  EXPECT_EQ(doc["pace_worker"].get<int>(), 1);
}

// Over many minibatches the figures are per minibatch of the steady window, warm-up left out.
// train's note where a run's throughput missed its simulation by over 10%: the steady states'
// split where they too are apart; where they are not, that the gap lies outside them (it blamed
// the layers' speed for a 20-step run whose steady state was within 2%).
TEST(TraceGap, TheMissNoteSaysWhetherTheSteadyStatesMissedToo) {
  std::string apart = prediction_miss_note(
      trace_gap(two_stages("measured", 1, 3), "run.json", two_stages("simulated", 1, 2), "sim.json"), 0.10);
  EXPECT_EQ(apart.rfind("off by more than 10%; in the steady state the run took 7.500 ms a minibatch, its simulation "
                        "6.500 (ratio 0.867): worker 1 set the pace", 0), 0u) << apart;
  EXPECT_NE(apart.find("its layers ran at another speed than the profile timed them"), std::string::npos) << apart;
  EXPECT_EQ(apart.find("besides"), std::string::npos) << apart;  // one minibatch: the whole run is its steady state
  // A run's start beside a steady state that missed too: said (a run at 22.2 ms a minibatch over its
  // length, 13.8 in its steady state, was told only of the steady state's gap).
  TraceGap slow_start = trace_gap(two_stages("measured", 1, 3), "run.json", two_stages("simulated", 1, 2), "sim.json");
  slow_start.first_whole_ms = 12;
  std::string start = prediction_miss_note(slow_start, 0.10);
  EXPECT_NE(start.find("; besides, over its whole length the run took 12.000 ms a minibatch, +4.500 outside its "
                       "steady state: its start"),
            std::string::npos)
      << start;
  std::string near = prediction_miss_note(
      trace_gap(two_stages("measured", 1, 2.2), "run.json", two_stages("simulated", 1, 2), "sim.json"), 0.10);
  EXPECT_EQ(near.rfind("off by more than 10% over the whole run, within it in the steady state, where the run took "
                       "6.700 ms a minibatch, its simulation 6.500 (ratio 0.970): the rest lies outside it", 0), 0u)
      << near;
  EXPECT_EQ(near.find("set the pace"), std::string::npos) << near;
  // A run with no steady state (its pauses left none) is no steady state to split: it was set
  // against the simulation's and blamed on the transport.
  TraceGap whole = trace_gap(two_stages("measured", 1, 3), "run.json", two_stages("simulated", 1, 2), "sim.json");
  whole.whole_trace[0] = true;
  std::string none = prediction_miss_note(whole, 0.10);
  EXPECT_EQ(none.rfind("off by more than 10% over the whole run; the run has no steady state to set against its "
                       "simulation's (7.500 ms a minibatch over the whole run, fills and drains included, 6.500 in the "
                       "simulation's steady state)", 0), 0u) << none;
  EXPECT_EQ(none.find("set the pace"), std::string::npos) << none;
}

// A run's middle window that had not settled (Metrics::settled) is no steady state: the run is
// measured whole against its simulation. train set a 2-stage pipedream run's unsettled window
// against its simulation's steady state as "in the steady state the run took 17.303 ms".
TEST(TraceGap, AnUnsettledWindowIsNoSteadyState) {
  // The fourth of 6 minibatches 2 ms in the run, the others 10: its middle window is that one.
  std::vector<double> run = {9, 9, 9, 1, 9, 9}, simulated(6, 9);
  TraceGap g =
      trace_gap(one_worker("measured", "1f1b", run, 1), "run.json", one_worker("simulated", "1f1b", simulated, 1), "sim.json");
  EXPECT_TRUE(g.whole_trace[0]);
  EXPECT_FALSE(g.whole_trace[1]);
  EXPECT_DOUBLE_EQ(g.ms_per_minibatch[0], 52.0 / 6);  // the whole run, not the window's 2 ms
  EXPECT_DOUBLE_EQ(g.workers[0].compute_ms[0], 52.0 / 6);
  std::string note = prediction_miss_note(g, 0.10);
  EXPECT_EQ(note.rfind("off by more than 10% over the whole run; the run has no steady state", 0), 0u) << note;
  EXPECT_EQ(note.find("in the steady state, where"), std::string::npos) << note;
}

// The note's advice fits the run (a helper's audit of predictions on real compute): a run faster
// over its length than in its steady state was told of fills and drains, which only slow one; a run
// on a cluster calibrated for its transport was told to give one; a calibrated core share, which
// moved the computes, went unsaid.
TEST(TraceGap, TheMissNoteAdvisesWhatTheRunDidNotHave) {
  TraceGap fast = trace_gap(two_stages("measured", 1, 2.2), "run.json", two_stages("simulated", 1, 2), "sim.json");
  fast.first_whole_ms = 6.0;  // faster than the steady state's 6.7
  std::string swing = prediction_miss_note(fast, 0.05);
  EXPECT_NE(swing.find("over its whole length it ran faster than in its steady state, so the rest is this machine's "
                       "speed"),
            std::string::npos)
      << swing;
  EXPECT_EQ(swing.find("fills and drains"), std::string::npos) << swing;
  // Computes faster than simulated, on a calibrated cluster that shares the cores.
  TraceGap quick = trace_gap(two_stages("measured", 1, 3), "run.json", two_stages("simulated", 1, 3), "sim.json");
  WorkerGap& pace = quick.workers[quick.pace_worker];
  pace.compute_ms[0] -= 1;
  quick.ms_per_minibatch[0] -= 1;
  MissContext context;
  context.calibrated = true;
  context.core_figures = "the cluster's core_rates run 2 computes at once at 0.667 of a core each";
  std::string computes = prediction_miss_note(quick, 0.10, context);
  EXPECT_NE(computes.find("and calibrate again: the cluster's core_rates run 2 computes at once at 0.667 of a core "
                          "each, figures that moved"),
            std::string::npos)
      << computes;
  EXPECT_EQ(prediction_miss_note(quick, 0.10).find("calibrate again"), std::string::npos);
  // A gap outside the computes on a calibrated cluster: calibrate again, not "give a --cluster".
  TraceGap waits = trace_gap(two_stages("measured", 1, 2), "run.json", two_stages("simulated", 1, 2), "sim.json");
  waits.workers[waits.pace_worker].outside_ms[0] += 3;
  waits.ms_per_minibatch[0] += 3;
  std::string outside = prediction_miss_note(waits, 0.10, context);
  EXPECT_NE(outside.find("though the cluster was calibrated for this transport: `pipetrain calibrate` again"),
            std::string::npos)
      << outside;
  EXPECT_EQ(outside.find("give train a --cluster"), std::string::npos) << outside;
  EXPECT_NE(prediction_miss_note(waits, 0.10).find("give train a --cluster"), std::string::npos);
}

TEST(TraceGap, ManyMinibatchesCountPerMinibatchOfTheWindow) {
  // A slow first minibatch (10x its forward), outside the window; 0.5 ms between minibatches: the host's.
  auto run = [](double forward_ms) {
    std::vector<double> forwards(12, forward_ms);
    forwards[0] *= 10;
    return one_worker("measured", "pipedream", forwards, 2, 0.5);
  };
  TraceGap g = trace_gap(run(1.5), "a.json", run(1), "b.json");
  EXPECT_EQ(g.names[0], "a.json");  // two of one kind are named by their files
  EXPECT_DOUBLE_EQ(g.ms_per_minibatch[0], 4.0);
  EXPECT_DOUBLE_EQ(g.ms_per_minibatch[1], 3.5);
  const WorkerGap& w = g.workers[0];
  EXPECT_NEAR(w.times[0][0].count_per_minibatch, 1, 1e-9);
  EXPECT_NEAR(w.times[0][0].mean_ms, 1.5, 1e-9);
  EXPECT_NEAR(w.times[0][0].per_minibatch_ms, 1.5, 1e-9);
  EXPECT_NEAR(w.outside_ms[0], 0.5, 1e-9);
  EXPECT_NEAR(w.outside_ms[1], 0.5, 1e-9);
}

// Actions that cross the window's edges count by their share inside it, so that the count times
// one action's mean is the minibatch's time: counted whole where begun inside, worker 0's
// forwards (1.25 ms up to 1.4, the window cutting the first and last) read 1.35 ms x 1 beside
// 1.3 ms a minibatch (pipedream on 2 stages: 1.08 x 5.117 beside 5.134).
TEST(TraceGap, TheCountTimesOneActionIsTheMinibatchsTime) {
  Trace t;
  t.source = "measured";
  t.schedule = "pipedream";
  t.num_stages = 2;
  t.batch_size = 8;
  t.workers.resize(2);
  for (int k = 0; k < 12; ++k) {
    double at = 4.5 * k;
    std::string i = std::to_string(k);
    t.workers[0].push_back({parse_action("0F" + i, 0), at, at + 1 + 0.05 * k, 0});
    t.workers[0].push_back({parse_action("0B" + i, 0), at + 1.5, at + 4, 0});
    t.workers[1].push_back({parse_action("1F" + i, 1), at + 3.5, at + 5.2, 0});  // each minibatch's last
  }
  TraceGap g = trace_gap(t, "a.json", t, "b.json");
  EXPECT_DOUBLE_EQ(g.ms_per_minibatch[0], 4.5);
  for (const WorkerGap& w : g.workers)
    for (const auto& pair : w.times)
      for (const ActionTimes& a : pair) EXPECT_NEAR(a.count_per_minibatch * a.mean_ms, a.per_minibatch_ms, 1e-9);
  EXPECT_NEAR(g.workers[0].times[0][0].per_minibatch_ms, 1.3, 1e-9);
}

// An action is "alone" where no other worker computed during it and "beside" where another
// computed throughout: worker 0's backward takes 1 ms on the minibatches where worker 1's
// backward runs elsewhere and 1.5 ms on those where it runs over it.
TEST(TraceGap, ActionsAloneAndBesideAnotherWorkersComputeAreTimedApart) {
  Trace t;
  t.source = "measured";
  t.schedule = "pipedream";
  t.num_stages = 2;
  t.batch_size = 8;
  t.workers.resize(2);
  auto add = [&](int w, const std::string& a, double s, double e) {
    t.workers[w].push_back({parse_action(std::to_string(w) + a, w), s, e, 0});
  };
  for (int i = 0; i < 16; ++i) {
    double at = 5.0 * i;
    bool odd = i % 2 == 1;
    add(0, "F" + std::to_string(i), at, at + 1);
    add(1, "F" + std::to_string(i), at + 1, at + 1.5);
    add(0, "B" + std::to_string(i), at + 2, at + (odd ? 3.5 : 3));
    add(1, "B" + std::to_string(i), at + (odd ? 1.8 : 3.2), at + (odd ? 4 : 4.5));
  }
  TraceGap g = trace_gap(t, "run.json", t, "run.json");
  const WorkerGap& w0 = g.workers[0];
  ASSERT_EQ(w0.kinds.size(), 2u);
  const CoRun& f = w0.co_run[0];
  const CoRun& b = w0.co_run[1];
  EXPECT_GE(f.alone, 4);  // worker 1 never computes during a forward of worker 0 (the window: 4 minibatches)
  EXPECT_EQ(f.beside, 0);
  EXPECT_DOUBLE_EQ(f.alone_ms, 1);
  EXPECT_EQ(b.alone, 2);
  EXPECT_EQ(b.beside, 2);
  EXPECT_DOUBLE_EQ(b.alone_ms, 1);
  EXPECT_DOUBLE_EQ(b.beside_ms, 1.5);
  std::string text = format_trace_gap(g);
  EXPECT_NE(text.find("worker 0 B: 1.000 ms alone ("), std::string::npos) << text;
  EXPECT_NE(text.find("1.500 beside ("), std::string::npos) << text;
  EXPECT_NE(text.find("+50.0%"), std::string::npos) << text;
  EXPECT_EQ(text.find("worker 0 F: "), std::string::npos) << "a kind never beside another is not listed\n" << text;
  json doc = to_json(g);
  EXPECT_DOUBLE_EQ(doc["workers"][0]["actions"]["B"]["beside_another"]["median_ms"].get<double>(), 1.5);
}

// Traces of two runs are refused, naming both files and the field that differs.
TEST(TraceGap, TracesOfDifferentRunsAreRefusedByFileAndField) {
  Trace a = two_stages("measured", 1, 2), b = two_stages("simulated", 1, 2);
  b.microbatches = 4;
  try {
    trace_gap(a, "run.json", b, "sim.json");
    FAIL() << "accepted traces of 1 and 4 microbatches";
  } catch (const ConfigError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("sim.json: field 'microbatches' is 4 where run.json's is 1"), std::string::npos) << what;
  }
  b = two_stages("simulated", 1, 2);
  b.schedule = "gpipe";
  EXPECT_THROW(trace_gap(a, "run.json", b, "sim.json"), ConfigError);
  b = two_stages("simulated", 1, 2);
  b.batch_size = 16;
  EXPECT_THROW(trace_gap(a, "run.json", b, "sim.json"), ConfigError);
}

}  // namespace
}  // namespace pt::metrics
