// Metrics and pictures from a hand-written trace (as a runtime would record it): the library
// works on any Trace, not only the simulator's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "metrics/metrics.h"
#include "metrics/timeline.h"
#include "core/error.h"
#include "schedule/trace.h"

namespace pt::metrics {
namespace {

using schedule::parse_action;
using schedule::Trace;

// Two workers, 1F1B over 2 microbatches, F = 1 ms, B = 2 ms, 1 ms transfers:
//   w0: 0F0 0F1  .   .   .   .  0B0 ==  .  0B1 ==
//   w1:  .   .  1F0 1B0 == 1F1 1B1 ==  .   .   .    (each gradient takes 1 ms back to w0)
Trace two_stage_trace() {
  Trace t;
  t.source = "measured";
  t.schedule = "1f1b";
  t.num_stages = 2;
  t.microbatches = 2;
  t.batch_size = 32;
  t.stage_parameter_bytes = {1000, 3000};
  auto ev = [](int w, const char* a, double s, double e, int64_t bytes = 0) {
    return schedule::TraceEvent{parse_action(a, w), s, e, bytes};
  };
  t.workers = {
      {ev(0, "0F0", 0, 1, 100), ev(0, "0SA0>1", 1, 2, 50), ev(0, "0F1", 1, 2, 100), ev(0, "0SA1>1", 2, 3, 50),
       ev(0, "0RG0<1", 5, 6, 50), ev(0, "0B0", 6, 8), ev(0, "0RG1<1", 8, 9, 50), ev(0, "0B1", 9, 11), ev(0, "0ST0", 11, 11)},
      {ev(1, "1RA0<0", 1, 2, 50), ev(1, "1F0", 2, 3, 100), ev(1, "1B0", 3, 5), ev(1, "1SG0>0", 5, 6, 50),
       ev(1, "1RA1<0", 2, 3, 50), ev(1, "1F1", 5, 6, 100), ev(1, "1B1", 6, 8), ev(1, "1SG1>0", 8, 9, 50),
       ev(1, "1ST0", 8, 8)},
  };
  return t;
}

// One worker of one stage, its events to add: a minibatch is a forward and a backward.
Trace one_worker_trace(const char* schedule, const char* source) {
  Trace t;
  t.source = source;
  t.schedule = schedule;
  t.num_stages = 1;
  t.microbatches = 1;
  t.batch_size = 8;
  t.workers.resize(1);
  return t;
}

void add_minibatch(Trace& t, const std::string& id, double start, double forward_ms, double backward_ms) {
  t.workers[0].push_back({parse_action("0F" + id, 0), start, start + forward_ms, 0});
  t.workers[0].push_back({parse_action("0B" + id, 0), start + forward_ms, start + forward_ms + backward_ms, 0});
}

// A measured run of one worker whose minibatch i takes lengths[i] ms, half forward, half backward.
Trace measured_run(const std::vector<double>& lengths) {
  Trace t = one_worker_trace("1f1b", "measured");
  double at = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    add_minibatch(t, std::to_string(i), at, lengths[i] / 2, lengths[i] / 2);
    at += lengths[i];
  }
  return t;
}

// One worker finishing minibatches 1 ms and 3 ms apart by turns (PipeDream-2BW's double
// buffering alternates two gaps so): the steady state is 2 ms per minibatch, and a window of an
// odd count of gaps would say 1.8 or 2.2. The window is cut to whole repeats of the gaps.
TEST(Metrics, AlternatingGapsAreMeasuredOverWholeRepeats) {
  for (int k : {15, 16, 17, 18}) {
    Trace t = one_worker_trace("2bw", "simulated");
    double at = 0;
    for (int i = 0; i < k; ++i) {
      double len = i % 2 == 0 ? 1 : 3;
      add_minibatch(t, std::to_string(i), at, len / 2, len / 2);
      at += len;
    }
    Metrics m = compute_metrics(t);
    EXPECT_TRUE(m.steady) << k;
    EXPECT_DOUBLE_EQ(m.ms_per_minibatch, 2.0) << k << " minibatches";
  }
}

// A window is periodic where its gaps between completions repeat, and is then cut to whole
// repeats of any length (a pattern of 5 gaps: 3 ms a minibatch exactly, where 16 gaps of it say
// 3.06); where they do not repeat (a queue still filling: each gap longer than the last) the
// replay may still be in its warm-up, and settled_replay runs it longer.
TEST(Metrics, AWindowIsPeriodicWhereItsGapsRepeat) {
  Trace cycle = one_worker_trace("pipedream", "simulated");
  double at = 0;
  for (int i = 0; i < 51; ++i) {
    double len = 1 + i % 5;  // 1, 2, 3, 4, 5 ms by turns
    add_minibatch(cycle, std::to_string(i), at, len / 2, len / 2);
    at += len;
  }
  Metrics m = compute_metrics(cycle);
  EXPECT_TRUE(m.steady);
  EXPECT_TRUE(m.periodic);
  EXPECT_DOUBLE_EQ(m.ms_per_minibatch, 3.0);
  Trace filling = one_worker_trace("pipedream", "simulated");
  at = 0;
  for (int i = 0; i < 51; ++i) {
    double len = 1 + 0.01 * i;
    add_minibatch(filling, std::to_string(i), at, len / 2, len / 2);
    at += len;
  }
  m = compute_metrics(filling);
  EXPECT_TRUE(m.steady);
  EXPECT_TRUE(m.settled);  // as fast as the worker computes: the older test passes it
  EXPECT_FALSE(m.periodic);
  // A replay whose window does not yet repeat is not called a steady state (simulate at 20
  // minibatches printed "steady state" at 5.072 ms a minibatch, 5.643 over the default 48); a
  // measured run's window never repeats to the microsecond, and is read as its steady state.
  EXPECT_EQ(format_metrics(m).find("steady state"), std::string::npos) << format_metrics(m);
  EXPECT_NE(format_metrics(m).find("middle window, not yet repeating"), std::string::npos) << format_metrics(m);
  filling.source = "measured";
  EXPECT_NE(format_metrics(compute_metrics(filling)).find("steady state"), std::string::npos);
}

// A window faster than the busiest worker's typical work per minibatch is not called a steady
// state: a 6-step run whose fourth minibatch took 2 ms and the others 10 reads its middle window,
// a spell quicker than the worker's work.
TEST(Metrics, AWindowThatHasNotSettledIsNotCalledSteady) {
  Metrics m = compute_metrics(measured_run({10, 10, 10, 2, 10, 10}));
  ASSERT_TRUE(m.steady);
  EXPECT_DOUBLE_EQ(m.ms_per_minibatch, 2);
  EXPECT_FALSE(m.settled);
  EXPECT_EQ(format_metrics(m).find("steady state"), std::string::npos) << format_metrics(m);
  EXPECT_NE(format_metrics(m).find("middle window: too few to settle"), std::string::npos) << format_metrics(m);
}

// A measured run's slow start does not unsettle its steady window: the work it is held to is each
// action's median, not its mean (a 2-stage pipedream run's worker 1 averaged 19.0 ms of forward
// and backward a minibatch through its slow first actions, its medians 13.6, and its window of
// 17.3 was called unsettled). Here 3 of 12 minibatches take 10 ms, the rest 2: a mean of 4.
TEST(Metrics, ASlowStartDoesNotUnsettleTheSteadyWindow) {
  Metrics m = compute_metrics(measured_run({10, 10, 10, 2, 2, 2, 2, 2, 2, 2, 2, 2}));
  ASSERT_TRUE(m.steady);
  EXPECT_DOUBLE_EQ(m.ms_per_minibatch, 2);
  EXPECT_TRUE(m.settled);
  EXPECT_NE(format_metrics(m).find("steady state"), std::string::npos) << format_metrics(m);
}

// A measured run pauses between segments for the test-set evaluation and checkpoints
// (Trace::pauses): the steady state is training's. One worker at 3 ms a minibatch with a 600 ms
// evaluation after minibatch 29 of 60 read 34.6 ms a minibatch before the pause was left out.
TEST(Metrics, PausesBetweenSegmentsAreLeftOut) {
  Trace t = one_worker_trace("1f1b", "measured");
  double at = 0;
  for (int i = 0; i < 60; ++i) {
    if (i == 30) {
      t.pauses.push_back({at, at + 600});
      at += 600;
    }
    add_minibatch(t, std::to_string(i), at, 1, 2);
    at += 3;
  }
  Metrics m = compute_metrics(t);
  EXPECT_TRUE(m.steady);
  EXPECT_DOUBLE_EQ(m.paused_ms, 600);
  EXPECT_NEAR(m.ms_per_minibatch, 3.0, 1e-9);
  EXPECT_NEAR(m.bubble_fraction, 0, 1e-9);
  EXPECT_NE(format_metrics(m).find("600.0 ms of evaluations and checkpoints in the window left out"), std::string::npos);
  t.pauses.clear();
  EXPECT_NEAR(compute_metrics(t).ms_per_minibatch, 3.0 + 600.0 / 19, 1e-9);  // the window's 19 gaps
}

// An asynchronous pipeline fills and drains at each pause (pipedream evaluating every 4
// minibatches read 13.6 ms a minibatch across its segments where each took 13.7 to 24.6): its
// window lies in its longest segment, and a run whose segments are all too short has none.
TEST(Metrics, AnAsynchronousRunsWindowLiesBetweenItsPauses) {
  auto segmented = [](int every) {
    Trace t = one_worker_trace("pipedream", "measured");
    double at = 0;
    for (int i = 0; i < 60; ++i) {
      if (i > 0 && i % every == 0) {
        t.pauses.push_back({at, at + 600});
        at += 600;
      }
      double forward = i % every == 0 ? 11 : 1;  // each segment's first minibatch fills the pipeline
      add_minibatch(t, std::to_string(i), at, forward, 2);
      at += forward + 2;
    }
    return t;
  };
  Metrics m = compute_metrics(segmented(10));
  EXPECT_TRUE(m.steady);
  EXPECT_DOUBLE_EQ(m.paused_ms, 0);
  EXPECT_NEAR(m.ms_per_minibatch, 3.0, 1e-9);
  Metrics short_segments = compute_metrics(segmented(2));
  EXPECT_FALSE(short_segments.steady);
  EXPECT_NEAR(short_segments.ms_per_minibatch, (30 * 13 + 30 * 3) / 60.0, 1e-9);  // every fill counted
  Metrics flushing = compute_metrics([&] {  // a flushing schedule's pauses cost it no fill: left out
    Trace t = segmented(10);
    t.schedule = "1f1b";
    return t;
  }());
  EXPECT_DOUBLE_EQ(flushing.paused_ms, 600);  // the pause after minibatch 29, in the middle third
}

// The optimizer step is work, not a wait: a worker that computes 6 ms of 11 and steps for 2
// idles 3.
TEST(Metrics, AStepIsNotABubble) {
  Trace t = two_stage_trace();
  t.workers[1].back() = {parse_action("1ST0", 1), 8, 10, 0};
  Metrics m = compute_metrics(t);
  ASSERT_DOUBLE_EQ(m.ms_per_minibatch, 11);
  EXPECT_DOUBLE_EQ(m.workers[1].busy_ms, 8);
  EXPECT_DOUBLE_EQ(m.workers[1].bubble_fraction, 3 / 11.0);
}

// The bytes a link carried are the trace's, which may hold one minibatch or hundreds: the text
// says over how many, and a minibatch's share (the same link read 784.0 KiB and 229.7 MiB).
TEST(Metrics, LinkBytesSayOverHowManyMinibatches) {
  Trace t = two_stage_trace();
  EXPECT_NE(format_metrics(compute_metrics(t)).find("link 0 -> 1  100 B (one minibatch)"), std::string::npos)
      << format_metrics(compute_metrics(t));
  Trace twice = t;  // a second minibatch, 20 ms later
  for (size_t w = 0; w < 2; ++w)
    for (auto e : t.workers[w]) {
      e.action.microbatch += 2;
      e.start_ms += 20, e.end_ms += 20;
      twice.workers[w].push_back(e);
    }
  std::string text = format_metrics(compute_metrics(twice));
  EXPECT_NE(text.find("link 0 -> 1  200 B over 2 minibatches, 100 B a minibatch"), std::string::npos) << text;
}

TEST(Metrics, FromAMeasuredTrace) {
  Metrics m = compute_metrics(two_stage_trace());
  EXPECT_EQ(m.source, "measured");
  EXPECT_EQ(m.minibatches, 1);
  EXPECT_DOUBLE_EQ(m.ms_per_minibatch, 11);
  EXPECT_DOUBLE_EQ(m.samples_per_s, 32 / 11.0 * 1000);
  // Each worker computes 6 ms of the 11.
  EXPECT_DOUBLE_EQ(m.workers[0].bubble_fraction, 5 / 11.0);
  EXPECT_DOUBLE_EQ(m.workers[1].bubble_fraction, 5 / 11.0);
  EXPECT_EQ(m.workers[0].peak_stash, 2);
  EXPECT_EQ(m.workers[1].peak_stash, 1);
  EXPECT_EQ(m.workers[0].peak_activation_bytes, 200);
  EXPECT_EQ(m.workers[1].weight_bytes, 3000);
  EXPECT_EQ(m.workers[1].peak_memory_bytes, 3100);
  ASSERT_EQ(m.links.size(), 2u);
  EXPECT_EQ(m.links[0].from, 0);
  EXPECT_EQ(m.links[0].to, 1);
  EXPECT_EQ(m.links[0].bytes, 100);
  // Named for what it is: the trace's stashes and weights, not a worker's whole tensors, which
  // peak_memory_bytes names where a memory model gives them (simulate, compare).
  EXPECT_FALSE(to_json(m).contains("peak_memory_bytes"));
  EXPECT_FALSE(to_json(m)["workers"][1].contains("peak_memory_bytes"));
  EXPECT_EQ(to_json(m)["peak_stash_weights_bytes"], 3100);
  EXPECT_EQ(to_json(m)["workers"][1]["peak_stash_weights_bytes"], 3100);
  EXPECT_NE(format_metrics(m).find("worker  bubble  stash  versions  activations  weights"), std::string::npos);
  // The runtime's traces hold no parameter bytes, and each forward's output alone: their memory
  // columns read "weights 0 B" and a last stage's "activations 4 B" (its loss), as though measured.
  schedule::Trace runtime = two_stage_trace();
  runtime.stage_parameter_bytes.clear();
  std::string text = format_metrics(compute_metrics(runtime));
  EXPECT_NE(text.find("memory              not in the measured trace: train prints each worker's measured tensors"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("activations"), std::string::npos) << text;
  EXPECT_EQ(text.find("peak stash+weights"), std::string::npos) << text;
  json doc = to_json(compute_metrics(runtime));
  EXPECT_FALSE(doc["memory_known"].get<bool>());
  // --json said the same: null, not the loss's 4 bytes.
  EXPECT_TRUE(doc["peak_stash_weights_bytes"].is_null()) << doc.dump();
  EXPECT_TRUE(doc["workers"][1]["peak_activation_bytes"].is_null()) << doc.dump();
  EXPECT_TRUE(doc["workers"][1]["weight_bytes"].is_null()) << doc.dump();
}

// Events no run makes, read without a word and measured: a backward moved before its forward
// (29.6 ms a minibatch where the run took 19.6), a send to a worker the trace does not have.
TEST(Metrics, ATraceOfImpossibleEventsIsRefused) {
  auto read_error = [](const Trace& t) {
    try {
      schedule::trace_from_json(schedule::to_json(t), "t.json");
      return std::string("(none)");
    } catch (const FormatError& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(read_error(two_stage_trace()), "(none)");
  Trace early = two_stage_trace();
  early.workers[0][5].start_ms = -1, early.workers[0][5].end_ms = -0.5;  // 0B0, before 0F0's 0 to 1
  std::string e = read_error(early);
  EXPECT_NE(e.find("t.json: field 'workers[0][5].start_ms' is -1: '0B0' starts before its forward ends, at 1"),
            std::string::npos) << e;
  for (const char* send : {"0SA0>7", "0SA0>0"}) {
    Trace astray = two_stage_trace();
    astray.workers[0][1].action = parse_action(send, 0);
    e = read_error(astray);
    EXPECT_NE(e.find(std::string("is '") + send + "', whose peer"), std::string::npos) << e;
    EXPECT_NE(e.find("is not another of the trace's 2 workers"), std::string::npos) << e;
  }
}

// A trace with a stage's work, a microbatch or a backward taken out is no whole run's: `trace` measured
// it at the full run's throughput (worker 1 emptied: the same 417.7 samples/s).
TEST(Metrics, ATraceMissingAStagesWorkOrAMicrobatchIsRefused) {
  auto refusal = [](const Trace& t) {
    try {
      schedule::check_complete(t, "t.json");
      return std::string("(none)");
    } catch (const FormatError& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(refusal(two_stage_trace()), "(none)");
  Trace no_stage = two_stage_trace();
  no_stage.workers[1].clear();
  EXPECT_EQ(refusal(no_stage),
            "t.json: no forward of stage 1 for microbatch 0, which other stages ran: not a whole run's trace");
  // A row appended empty was counted a worker idle throughout (mean bubble 0.461 -> 0.641).
  Trace empty_row = two_stage_trace();
  empty_row.workers.emplace_back();
  EXPECT_EQ(refusal(empty_row), "t.json: worker 2 runs no compute: not a whole run's trace");
  Trace no_microbatch = two_stage_trace();
  for (auto& list : no_microbatch.workers)
    list.erase(std::remove_if(list.begin(), list.end(), [](const auto& e) { return e.action.microbatch == 1; }),
               list.end());
  EXPECT_EQ(refusal(no_microbatch),
            "t.json: minibatch 0 has no microbatch 1 of its 2 (field 'microbatches'): not a whole run's trace");
  // Its backwards taken out: `trace` printed a whole run's throughput and a bubble of 0.95.
  Trace no_backward = two_stage_trace();
  for (auto& list : no_backward.workers)
    list.erase(std::remove_if(list.begin(), list.end(),
                              [](const auto& e) {
                                return e.action.kind == schedule::ActionKind::kBackward && e.action.stage == 1 &&
                                       e.action.microbatch == 1;
                              }),
               list.end());
  EXPECT_EQ(refusal(no_backward),
            "t.json: no backward of stage 1 for microbatch 1, which its forward ran: not a whole run's trace");
  // A header of 1 microbatch on this run of 2 read each minibatch as two: twice its throughput.
  Trace halved = two_stage_trace();
  halved.microbatches = 1;
  EXPECT_EQ(refusal(halved),
            "t.json: worker 0 steps stage 0 1 times for the 2 minibatches its forwards make at 1 microbatches each "
            "(field 'microbatches'): not this run's header");
  // 2bw: minibatch 1's forwards before minibatch 0's step run a step behind; a header keeping no
  // older version understated its memory.
  Trace two_bw = two_stage_trace();
  two_bw.schedule = "2bw";
  two_bw.microbatches = 1;
  two_bw.workers[0].push_back({parse_action("0ST1", 0), 11, 11, 0});
  two_bw.workers[1].push_back({parse_action("1ST1", 1), 9, 9, 0});
  EXPECT_EQ(refusal(two_bw), "t.json: field 'weight_delay' is 0, but worker 0's forwards run ahead of its steps by 1 "
                             "minibatch: not this run's header");
  two_bw.weight_delay = 1;
  EXPECT_EQ(refusal(two_bw), "(none)");
  // A resumed run's trace numbers its minibatches from the checkpoint's step (here 100), its
  // steps from 0: it was refused as 101 minibatches ahead of its weights.
  Trace resumed = two_bw;
  for (auto& list : resumed.workers)
    for (auto& e : list) e.action.microbatch += 100;
  EXPECT_EQ(refusal(resumed), "(none)");
  // Parts merged from hosts whose clocks differ: worker 1's clock 5 ms behind puts its forward of
  // microbatch 0 before worker 0 finished the one it needs.
  Trace clocks = two_stage_trace();
  for (auto& e : clocks.workers[1]) e.start_ms -= 5, e.end_ms -= 5;
  EXPECT_EQ(refusal(clocks), "t.json: worker 1's '1F0' starts at -3 ms, before worker 0 finished stage 0's forward of "
                             "microbatch 0 at 1 ms, which it needs: its workers' parts are on different clocks, not one run");
  resumed.weight_delay = 0;
  EXPECT_EQ(refusal(resumed), "t.json: field 'weight_delay' is 0, but worker 0's forwards run ahead of its steps by 1 "
                              "minibatch: not this run's header");
}

// A trace read from a file may number its minibatches with gaps, up to 10^9: each id present
// counts once, in id order, and none sizes an array by its value.
TEST(Metrics, MinibatchIdsWithGapsCountEachOnce) {
  Trace t = one_worker_trace("pipedream", "measured");
  double at = 0;
  for (const char* id : {"0", "7", "999999999"}) {
    add_minibatch(t, id, at, 1, 2);
    at += 3;
  }
  Metrics m = compute_metrics(t);
  EXPECT_EQ(m.minibatches, 3);
  EXPECT_DOUBLE_EQ(m.ms_per_minibatch, 3);
}

TEST(Metrics, AsynchronousSteadyStateWindow) {
  // One worker, minibatch k done at 3k + 3: the window leaves out the ends.
  Trace t;
  t.schedule = "pipedream";
  t.batch_size = 10;
  t.workers.resize(1);
  for (int k = 0; k < 9; ++k) {
    t.workers[0].push_back({parse_action("0F" + std::to_string(k), 0), 3.0 * k, 3.0 * k + 1, 0});
    t.workers[0].push_back({parse_action("0B" + std::to_string(k), 0), 3.0 * k + 1, 3.0 * k + 3, 0});
    t.workers[0].push_back({parse_action("0ST" + std::to_string(k), 0), 3.0 * k + 3, 3.0 * k + 3, 0});
  }
  Metrics m = compute_metrics(t);
  EXPECT_EQ(m.minibatches, 9);
  EXPECT_DOUBLE_EQ(m.ms_per_minibatch, 3);
  EXPECT_DOUBLE_EQ(m.bubble_fraction, 0);
  EXPECT_EQ(m.workers[0].weight_versions, 1);
  EXPECT_TRUE(m.steady);
}

TEST(Metrics, AWindowNeverFallsInsideAWarmUpOrDrainOfManyInFlight) {
  // One worker keeps 8 of 12 minibatches in flight: eight forwards, then backward and forward
  // by turns, then eight backwards back to back. The middle third (completions 4..7) lies in
  // the drain, 2 ms apart, though each minibatch costs 3 ms of compute: the window must clear
  // the 8 in flight, and with no whole steady state left the time is the whole run's.
  Trace t;
  t.schedule = "pipedream";
  t.batch_size = 10;
  t.workers.resize(1);
  double now = 0;
  auto run = [&](const std::string& a, double ms) {
    t.workers[0].push_back({parse_action(a, 0), now, now + ms, 0});
    now += ms;
  };
  for (int k = 0; k < 8; ++k) run("0F" + std::to_string(k), 1);
  for (int k = 0; k < 4; ++k) run("0B" + std::to_string(k), 2), run("0F" + std::to_string(k + 8), 1);
  for (int k = 4; k < 12; ++k) run("0B" + std::to_string(k), 2);
  Metrics m = compute_metrics(t);
  EXPECT_FALSE(m.steady);
  EXPECT_DOUBLE_EQ(m.ms_per_minibatch, 3);  // 36 ms over 12: the one worker's compute per minibatch
  EXPECT_NE(format_metrics(m).find("whole run: too few for a steady state"), std::string::npos);
}

TEST(Timeline, AsciiGridOnTheTimeAxis) {
  EXPECT_EQ(time_grid(two_stage_trace()),
            "w0:   0F0 0F1   .   .   .   . 0B0 ===   . 0B1 ===\n"
            "w1:     .   . 1F0 1B0 === 1F1 1B1 ===   .   .   .\n"
            "(one column = 1 ms)\n");
}

TEST(Timeline, SvgHasRowsLegendAxisAndLabels) {
  std::string svg = timeline_svg(two_stage_trace(), "test <title>");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  for (const char* part : {"worker 0", "worker 1", "forward F", "backward B", "weight grad W", "time (ms)",
                           "test &lt;title&gt;", ">0B1 9.00-11.00 ms<", ">0ST0 11.00-11.00 ms<", "#4e79a7"})
    EXPECT_NE(svg.find(part), std::string::npos) << part;
  // The tooltips read the axis's clock, which starts at the first event (they read the trace's).
  Trace later = two_stage_trace();
  for (auto& worker : later.workers)
    for (auto& e : worker) e.start_ms += 4.5, e.end_ms += 4.5;
  EXPECT_NE(timeline_svg(later, "t").find(">0B1 9.00-11.00 ms<"), std::string::npos);
  EXPECT_EQ(svg.find("paused"), std::string::npos);
  // A control character or a byte of no UTF-8 sequence made an SVG no XML parser reads; a whole
  // sequence (é, 2 bytes; 😀, 4) is kept.
  std::string odd = timeline_svg(two_stage_trace(), "run \x01 \xff \xed\xa0\x80 \"q\" \xc3\xa9 \xf0\x9f\x98\x80");
  EXPECT_NE(odd.find("run ? ? ??? &quot;q&quot; \xc3\xa9 \xf0\x9f\x98\x80"), std::string::npos) << odd.substr(0, 400);
  // A measured run's pauses are drawn and named over every row (they were left blank: idle
  // workers to the eye); the optimizer steps' marks say when.
  later.pauses = {{5.0, 7.0}};
  std::string paused = timeline_svg(later, "t");
  EXPECT_NE(paused.find("paused: evaluation or checkpoint</text>"), std::string::npos);
  EXPECT_NE(paused.find("<title>paused 0.50-2.50 ms: no worker trained"), std::string::npos) << paused;
  // A pause after the last action (a run's final evaluation) is not drawn, nor named in the legend.
  later.pauses = {{20.0, 30.0}};
  EXPECT_EQ(timeline_svg(later, "t").find("paused"), std::string::npos);
}

TEST(Timeline, ChromeTraceHasOneEventPerTraceEvent) {
  json c = chrome_trace(two_stage_trace());
  int complete = 0;
  for (const auto& e : c["traceEvents"]) complete += e["ph"] == "X";
  EXPECT_EQ(complete, 18);
  EXPECT_EQ(c["traceEvents"][3]["name"], "0F0");
  EXPECT_EQ(c["traceEvents"][3]["dur"], 1000.0);
  // A measured run's pauses: one event each, on a track of their own.
  Trace paused = two_stage_trace();
  paused.pauses = {{12.0, 20.0}};
  json with_pauses = chrome_trace(paused);
  const json& last = with_pauses["traceEvents"].back();
  EXPECT_EQ(last["cat"], "pause");
  EXPECT_EQ(last["dur"], 8000.0);
  EXPECT_EQ(last["pid"], 2);
}

TEST(Trace, JsonRejectsUnknownSource) {
  json doc = schedule::to_json(two_stage_trace());
  EXPECT_EQ(schedule::trace_from_json(doc, "t").workers[1][0].action.peer, 0);
  doc["source"] = "guessed";
  EXPECT_THROW(schedule::trace_from_json(doc, "t"), FormatError);
  doc = schedule::to_json(two_stage_trace());
  doc["workers"][0][0]["action"] = "0Q0";
  EXPECT_THROW(schedule::trace_from_json(doc, "t"), FormatError);
}

// What reading `doc` as run.trace.json says: its FormatError, or "accepted".
std::string trace_error(const json& doc) {
  try {
    schedule::trace_from_json(doc, "run.trace.json");
  } catch (const FormatError& e) {
    return e.what();
  }
  return "accepted";
}

// Values no run records are refused by field: they printed negative bubbles and weights, or a
// stage count of 1000 for two stages' actions.
TEST(Trace, ImpossibleEventsAndCountsAreNamed) {
  json good = schedule::to_json(two_stage_trace());
  ASSERT_EQ(trace_error(good), "accepted");
  json doc = good;
  doc["workers"][0][0]["end_ms"] = 1e308;
  EXPECT_NE(trace_error(doc).find("workers[0][0].end_ms"), std::string::npos) << trace_error(doc);
  doc = good;
  doc["workers"][0][0]["action"] = "9F0";
  EXPECT_NE(trace_error(doc).find("names stage 9 of a trace of 2 stages"), std::string::npos) << trace_error(doc);
  doc = good;
  doc["stage_parameter_bytes"] = json::array({-1, 4});
  EXPECT_NE(trace_error(doc).find("stage_parameter_bytes[0]"), std::string::npos) << trace_error(doc);
  doc["stage_parameter_bytes"] = json::array({1, 2, 3});
  EXPECT_NE(trace_error(doc).find("one count per stage (2), got 3"), std::string::npos) << trace_error(doc);
  // Counts past an int are named, not narrowed (4294967298 microbatches read as 2).
  doc = good;
  doc["microbatches"] = 4294967298LL;
  EXPECT_NE(trace_error(doc).find("field 'microbatches' must be in 1..2147483647, got 4294967298"), std::string::npos)
      << trace_error(doc);
  doc = good;
  doc["stages"] = 4294967298LL;
  EXPECT_NE(trace_error(doc).find("field 'stages' must be in 1..2147483647"), std::string::npos) << trace_error(doc);
}

// A worker runs one compute at a time, each once, and a backward follows its forward: a trace
// that says otherwise counted a compute twice (a duplicated forward: 5 stashed where 1F1B keeps
// 4) and is refused by field.
TEST(Trace, ComputesTwiceOverlappingOrWithoutTheirForwardAreNamed) {
  json good = schedule::to_json(two_stage_trace());
  json doc = good;
  doc["workers"][0].push_back(doc["workers"][0][0]);
  EXPECT_EQ(trace_error(doc), "run.trace.json: field 'workers[0][9].action' repeats '0F0', given before on this worker");
  doc = good;
  doc["workers"][0][2]["start_ms"] = 0.5;  // 0F1 inside 0F0 (0 to 1)
  EXPECT_EQ(trace_error(doc), "run.trace.json: field 'workers[0][2].start_ms' is 0.5, inside '0F0' (0 to 1): a worker "
                              "runs one compute at a time");
  doc = good;
  doc["workers"][1][1]["action"] = "1F7";  // 1B0 then has no forward
  EXPECT_EQ(trace_error(doc), "run.trace.json: field 'workers[1][2].action' is '1B0', with no forward of stage 1 "
                              "microbatch 0 in the trace");
  // Transfers and all-reduces overlap computes, and touching computes do not overlap.
  doc = good;
  doc["workers"][0][1]["start_ms"] = 0.5;
  EXPECT_EQ(trace_error(doc), "accepted");
}

TEST(Trace, PausesRoundTripAndBadOnesAreNamed) {
  Trace t = two_stage_trace();
  t.pauses = {{11, 12}, {13, 20}};
  EXPECT_EQ(schedule::trace_from_json(schedule::to_json(t), "t").pauses, t.pauses);
  json doc = schedule::to_json(t);
  // A pause over a computation took it out of the run: 0.000 ms per minibatch, exit 0.
  doc["pauses"][0] = json::array({4, 5.5});
  EXPECT_NE(trace_error(doc).find("pauses[0]' [4, 5.5] covers worker 1's 1B0 at [3, 5]: a pause is a time no worker "
                                  "trains"),
            std::string::npos)
      << trace_error(doc);
  doc["pauses"][0] = json::array({11, 12});
  // Counts that are not the run's (issue 70, item 7).
  json bad = doc;
  bad["batch_size"] = 0;
  EXPECT_NE(trace_error(bad).find("batch_size' must be >= 1, got 0"), std::string::npos) << trace_error(bad);
  bad = doc;
  bad["stages"] = 1000000000;
  bad.erase("stage_parameter_bytes");
  EXPECT_NE(trace_error(bad).find("is 1000000000, more than its 2 workers hold"), std::string::npos) << trace_error(bad);
  bad = doc;
  for (auto& w : bad["workers"]) w = json::array();
  EXPECT_NE(trace_error(bad).find("holds no compute event"), std::string::npos) << trace_error(bad);
  bad = doc;  // every action of no length: 0.000 ms a minibatch and 0.0 samples/s, exit 0
  for (auto& w : bad["workers"])
    for (auto& e : w) e["end_ms"] = e["start_ms"];
  EXPECT_NE(trace_error(bad).find("holds no event that takes time"), std::string::npos) << trace_error(bad);
  doc["pauses"][1] = json::array({20, 9});
  EXPECT_NE(trace_error(doc).find("pauses[1][1]"), std::string::npos) << trace_error(doc);
  EXPECT_NE(trace_error(doc).find("before the pause's start 20"), std::string::npos) << trace_error(doc);
  doc["pauses"][1] = json::array({2, 5});
  EXPECT_NE(trace_error(doc).find("precedes the pause before"), std::string::npos) << trace_error(doc);
  doc["pauses"][1] = json::array({30});
  EXPECT_NE(trace_error(doc).find("must be [start_ms, end_ms]"), std::string::npos) << trace_error(doc);
  EXPECT_NE(trace_error(doc).find("run.trace.json"), std::string::npos) << trace_error(doc);
  // What no worker trained through: the workers' pauses in common.
  EXPECT_EQ(schedule::common_pauses({{0, 10}, {20, 30}}, {{2, 12}, {25, 40}}),
            (std::vector<std::pair<double, double>>{{2, 10}, {25, 30}}));
}

// --merge joins each worker's own events; a part that holds another worker's (a whole trace
// passed as worker 0's) was merged without them and removed, and a bad part removed the ones
// read before it. Now both are refused with every part left in place, as are parts of two runs.
TEST(Trace, MergeRefusesAPartWithAnotherWorkersEventsAndKeepsTheParts) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("pt_merge_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string path = (dir / "run.trace.json").string();
  Trace whole = two_stage_trace();
  auto part = [&](int r) { return path + ".worker" + std::to_string(r); };
  auto only = [&](int r) {
    Trace t = whole;
    for (size_t w = 0; w < t.workers.size(); ++w)
      if (static_cast<int>(w) != r) t.workers[w].clear();
    return t;
  };
  // The whole trace as worker 0's part.
  schedule::write_trace(whole, part(0));
  schedule::write_trace(only(1), part(1));
  try {
    schedule::merge_worker_traces(2, path);
    ADD_FAILURE() << "merged a part holding worker 1's events as worker 0's";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(part(0) + ": field 'workers[1]' holds 9 events"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(fs::exists(part(0)) && fs::exists(part(1)));
  EXPECT_FALSE(fs::exists(path));
  // A garbled last part leaves the first in place too.
  schedule::write_trace(only(0), part(0));
  { std::ofstream(part(1)) << "{\"source\": "; }
  EXPECT_THROW(schedule::merge_worker_traces(2, path), FormatError);
  EXPECT_TRUE(fs::exists(part(0)));
  // A part of another run (its schedule another) was merged, the parts removed, and the merged
  // trace then refused as on different clocks; and so is one whose clock differs.
  Trace other = only(1);
  other.schedule = "gpipe";
  schedule::write_trace(other, part(1));
  try {
    schedule::merge_worker_traces(2, path);
    ADD_FAILURE() << "merged parts of two runs";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(part(1) + ": field 'schedule' is gpipe but " + part(0) + "'s is " +
                                         whole.schedule + ": the parts are of different runs"),
              std::string::npos)
        << e.what();
  }
  Trace behind = only(1);
  for (auto& e : behind.workers[1]) e.start_ms -= 5, e.end_ms -= 5;
  schedule::write_trace(behind, part(1));
  EXPECT_THROW(schedule::merge_worker_traces(2, path), FormatError);
  EXPECT_TRUE(fs::exists(part(0)) && fs::exists(part(1)));
  EXPECT_FALSE(fs::exists(path));
  // Good parts merge into the whole trace, and are removed.
  schedule::write_trace(only(1), part(1));
  schedule::merge_worker_traces(2, path);
  Trace merged = schedule::read_trace(path);
  ASSERT_EQ(merged.workers.size(), 2u);
  for (int w = 0; w < 2; ++w) EXPECT_EQ(merged.workers[w].size(), whole.workers[w].size());
  EXPECT_FALSE(fs::exists(part(0)) || fs::exists(part(1)));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pt::metrics
