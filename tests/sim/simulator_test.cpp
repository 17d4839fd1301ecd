// The simulator against analytic results: with uniform stages and free communication the
// bubble fractions are the papers' formulas, and DP time is compute + ring all-reduce.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "core/error.h"
#include "metrics/metrics.h"
#include "plan/realised_cost.h"
#include "plan/planner.h"
#include "schedule/generators.h"
#include "sim/simulator.h"
#include "sim/stage_costs.h"
#include "../schedule/test_plans.h"
#include "../schedule/uniform_profile.h"

namespace pt::sim {
namespace {

using schedule::make_schedule;
using schedule::ScheduleOptions;
using schedule::testing::plan_with_replicas;
using schedule::testing::straight_plan;
using schedule::testing::uniform_profile;

// A cluster whose links are so fast that transfers are free (activation bytes are 0 anyway).
plan::Cluster free_links(int workers) { return plan::Cluster::flat(workers, 1e9); }

metrics::Metrics run(const std::string& kind, const plan::Plan& plan, const profile::Profile& prof, ScheduleOptions o,
                     const plan::Cluster& c) {
  return metrics::compute_metrics(simulate(make_schedule(kind, plan, o), prof, c));
}

TEST(Simulator, GPipeAnd1F1BBubbleIsAnalytic) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      auto prof = uniform_profile(p, 1.0, 1.0);  // F = B per stage
      double expected = double(p - 1) / (m + p - 1);
      for (const char* kind : {"gpipe", "1f1b"}) {
        auto r = run(kind, straight_plan(p), prof, {m}, free_links(p));
        EXPECT_NEAR(r.bubble_fraction, expected, 1e-9) << kind << " p=" << p << " m=" << m;
        for (const auto& w : r.workers) EXPECT_NEAR(w.bubble_fraction, expected, 1e-9);
        // (m + p - 1) slots of F + B, each F + B = 2 ms / m.
        EXPECT_NEAR(r.ms_per_minibatch, (m + p - 1) * 2.0 / m, 1e-9);
      }
    }
}

// A profile that knows its layers' times at the microbatch's size: the simulator charges each
// microbatch its own time (a fixed cost a call makes 4 microbatches of 16 dearer than 64 at once).
TEST(Simulator, AMicrobatchTakesItsOwnSizesTime) {
  auto prof = uniform_profile(1, 2.0, 4.0);  // batch 64
  prof.layers[0].timings = {{16, 1.0, 2.0}, {64, 2.0, 4.0}};
  auto r = run("gpipe", straight_plan(1), prof, {4}, free_links(1));
  EXPECT_NEAR(r.ms_per_minibatch, 4 * (1.0 + 2.0), 1e-9);  // 4 microbatches of 16
  auto whole = run("gpipe", straight_plan(1), prof, {1}, free_links(1));
  EXPECT_NEAR(whole.ms_per_minibatch, 6.0, 1e-9);
  prof.layers[0].timings.clear();  // linear: the microbatches cost the minibatch
  EXPECT_NEAR(run("gpipe", straight_plan(1), prof, {4}, free_links(1)).ms_per_minibatch, 6.0, 1e-9);
}

TEST(Simulator, InterleavedBubbleShrinksByChunks) {
  for (int p = 1; p <= 8; ++p)
    for (int v = 1; v <= 4; ++v)
      for (int m = p; m <= 16; m += p) {  // Megatron's closed form: m a multiple of p
        auto prof = uniform_profile(p * v, 1.0, 1.0);
        auto r = run("interleaved", straight_plan(p * v), prof, {m, v}, free_links(p));
        EXPECT_NEAR(r.bubble_fraction, double(p - 1) / (v * m + p - 1), 1e-9) << "p=" << p << " v=" << v << " m=" << m;
      }
}

TEST(Simulator, ZeroBubbleH1IsAThirdOf1F1B) {
  // F = B = W: the profile's backward is 2 (split half/half), the forward 1.
  for (int p = 2; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      auto prof = uniform_profile(p, 1.0, 2.0);
      auto zb = run("zb-h1", straight_plan(p), prof, {m}, free_links(p));
      auto fb = run("1f1b", straight_plan(p), prof, {m}, free_links(p));
      // ZB-H1's bubble (p-1)(F+B-W) over 1F1B's (p-1)(F+B+W), per worker busy 3m slots; with
      // m < p the first microbatch's F and B chains cannot be hidden.
      if (m >= p) {
        EXPECT_NEAR(zb.bubble_fraction, double(p - 1) / (3 * m + p - 1), 1e-9) << "p=" << p << " m=" << m;
      }
      EXPECT_LT(zb.bubble_fraction, fb.bubble_fraction);
      EXPECT_NEAR(fb.bubble_fraction, double(3 * (p - 1)) / (3 * m + 3 * (p - 1)), 1e-9);
      if (m >= 4 * p) {
        EXPECT_NEAR(zb.bubble_fraction / fb.bubble_fraction, 1.0 / 3, 0.1);
      }
    }
}

// A profile that measured its layers' input gradients (Layer::input_gradient_ms) charges a split
// B that share of the backward and W the rest; the first stage's B the whole backward (its
// input, the data, needs no gradient) and its W nothing.
TEST(Simulator, ASplitBackwardTakesTheMeasuredInputGradientShare) {
  auto prof = uniform_profile(2, 1.0, 2.0);
  prof.layers[1].input_gradient_ms = 1.5;
  auto trace = simulate(make_schedule("zb-h1", straight_plan(2), {1}), prof, free_links(2));
  std::map<std::string, double> took;
  for (const auto& events : trace.workers)
    for (const auto& e : events) took[schedule::to_string(e.action)] = e.end_ms - e.start_ms;
  EXPECT_NEAR(took.at("1B0"), 1.5, 1e-9);
  EXPECT_NEAR(took.at("1W0"), 0.5, 1e-9);
  EXPECT_NEAR(took.at("0B0"), 2.0, 1e-9);
  EXPECT_NEAR(took.at("0W0"), 0.0, 1e-9);
  prof.layers[1].input_gradient_ms = 0;  // not measured: half and half
  trace = simulate(make_schedule("zb-h1", straight_plan(2), {1}), prof, free_links(2));
  for (const auto& events : trace.workers)
    for (const auto& e : events) took[schedule::to_string(e.action)] = e.end_ms - e.start_ms;
  EXPECT_NEAR(took.at("1B0"), 1.0, 1e-9);
}

TEST(Simulator, PipeDreamSteadyStateHasNoBubble) {
  for (int p = 1; p <= 8; ++p) {
    auto prof = uniform_profile(p, 1.0, 2.0);
    auto r = run("pipedream", straight_plan(p), prof, {1, 1, 6 * p}, free_links(p));
    EXPECT_NEAR(r.bubble_fraction, 0, 1e-9) << "p=" << p;
    EXPECT_NEAR(r.ms_per_minibatch, 3.0, 1e-9);  // one stage's F + B
    // Stage i keeps p - i minibatches in flight, each on weights predicted for it (the runtime's
    // default) besides the newest; the last stage's apply before any later step: the newest.
    for (int i = 0; i < p; ++i) EXPECT_EQ(r.workers[i].weight_versions, i == p - 1 ? 1 : p - i + 1) << "p=" << p;
  }
}

TEST(Simulator, TwoBWSteadyStateHasNoBubble) {
  for (int p = 1; p <= 6; ++p) {
    auto r = run("2bw", straight_plan(p), uniform_profile(p, 1.0, 2.0), {p, 1, 12}, free_links(p));
    EXPECT_NEAR(r.bubble_fraction, 0, 1e-9) << "p=" << p;
    // Predicted (the runtime's default): the newest and two minibatches' copies at most, the
    // last stage's the newest alone (the memory model's count, MemoryModel.WeightVersionsFollowTheSchedule).
    for (const auto& w : r.workers) EXPECT_LE(w.weight_versions, 3);
    EXPECT_EQ(r.workers.back().weight_versions, 1) << "p=" << p;
  }
}

TEST(Simulator, OneFOneBPeakStashFromTrace) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      auto r = run("1f1b", straight_plan(p), uniform_profile(p, 1.0, 2.0, 1000), {m}, free_links(p));
      auto g = run("gpipe", straight_plan(p), uniform_profile(p, 1.0, 2.0, 1000), {m}, free_links(p));
      for (int i = 0; i < p; ++i) {
        EXPECT_EQ(r.workers[i].peak_stash, std::min(p - i, m));
        EXPECT_EQ(g.workers[i].peak_stash, m);
        EXPECT_EQ(g.workers[i].peak_activation_bytes, m * (1000 / m));
      }
    }
}

TEST(Simulator, DataParallelIsComputePlusRingAllReduce) {
  // 4 workers as 2 servers x 2 (10 Gbit/s inside, 1 Gbit/s between); 8 layers of 1 + 2 ms,
  // 1 MB of parameters each; m = 8 microbatches, 2 per worker.
  plan::Cluster c;
  c.levels = {{"server", 2, 10}, {"network", 2, 1}};
  auto prof = uniform_profile(8, 1.0, 2.0, 0, 1000000);
  plan::Plan plan = plan::even_split(prof, 1);
  plan.stages[0].replicas = 4;
  plan::assign_workers(plan);
  auto r = run("dp", plan, prof, {8}, c);
  double compute = 2 * (8 * 3.0) / 8;                                   // 2 microbatches of (F+B)/8
  double allreduce = 2.0 * 3 / 4 * 8e6 / (1 * 1.25e8) * 1e3;            // ring over the 1 Gbit/s level
  EXPECT_NEAR(r.ms_per_minibatch, compute + allreduce, 1e-9);
  EXPECT_EQ(r.allreduce_bytes, 8000000);
  EXPECT_NEAR(c.allreduce_ms({0, 1}, 8000000), 2.0 / 2 * 8e6 / 1.25e9 * 1e3, 1e-12);

  // Buckets (the runtime's gradient_buckets.h). The default holds all 8 MB in one: the ring
  // starts after the backward, as above. With 1 MB each layer's gradients are reduced once the
  // last backward has produced them, layers from the last: the first starts 1/8 into the 2 ms
  // backward and the ring, busy from then on, ends 1.75 ms sooner.
  auto s = make_schedule("dp", plan, {8});
  EXPECT_NEAR(metrics::compute_metrics(simulate(s, prof, c, {0})).ms_per_minibatch, compute + allreduce, 1e-9);
  auto buckets = metrics::compute_metrics(simulate(s, prof, c, {1000000}));
  EXPECT_NEAR(buckets.ms_per_minibatch, compute + allreduce - 1.75, 1e-9);
  EXPECT_EQ(buckets.allreduce_bytes, 8000000);
  auto costs = stage_costs(s, prof, 1000000);
  ASSERT_EQ(costs[0].buckets.size(), 8u);
  EXPECT_NEAR(costs[0].buckets.front().ready_share, 1.0 / 8, 1e-12);
  EXPECT_NEAR(costs[0].buckets.back().ready_share, 1.0, 1e-12);
}

TEST(Simulator, HierarchicalAllReduceTakesItsThreePhases) {
  // The cluster above with a hierarchical all-reduce: 2(1/2) x 8 MB inside a server at 10
  // Gbit/s, a shard of 4 MB across at 1, then the gather (1/2 x 8 MB) inside.
  plan::Cluster c;
  c.levels = {{"server", 2, 10}, {"network", 2, 1}};
  c.allreduce = plan::Cluster::Allreduce::kHierarchical;
  auto prof = uniform_profile(8, 1.0, 2.0, 0, 1000000);
  plan::Plan plan = plan::even_split(prof, 1);
  plan.stages[0].replicas = 4;
  plan::assign_workers(plan);
  auto r = run("dp", plan, prof, {8}, c);
  double inside = (1.0 + 0.5) * 8e6 / 1.25e9 * 1e3, across = 1.0 * 4e6 / 1.25e8 * 1e3;
  EXPECT_NEAR(r.ms_per_minibatch, 2 * (8 * 3.0) / 8 + inside + across, 1e-9);
  EXPECT_NEAR(inside + across, c.allreduce_ms({0, 1, 2, 3}, 8e6), 1e-9);
  EXPECT_LT(inside + across, 2.0 * 3 / 4 * 8e6 / (1 * 1.25e8) * 1e3 * 0.6);  // the ring's 48 ms
}

// The runtime's own work (Layer::optimizer_ms) is charged at each Step: a 2-stage 1F1B pipeline
// with 4 microbatches steps once per minibatch after its last backward; stage 0's is the last
// backward of all, so the minibatch takes its step longer (stage 1's fits in stage 0's backward).
TEST(Simulator, StepChargesTheOptimizer) {
  auto prof = uniform_profile(2, 1.0, 2.0);
  auto plan = straight_plan(2);
  auto base = run("1f1b", plan, prof, {4}, free_links(2)).ms_per_minibatch;
  prof.layers[0].optimizer_ms = 0.5;
  prof.layers[1].optimizer_ms = 0.75;
  auto charged = run("1f1b", plan, prof, {4}, free_links(2)).ms_per_minibatch;
  EXPECT_NEAR(charged - base, 0.5, 1e-9);
}

// A flushing schedule stashes no weights, so its steps make no copy (Layer::stash_copy_ms): 1F1B's
// minibatch is stage 0's copy shorter (its step is the last action of all). Pipedream's stage 0,
// two minibatches in flight, stashes and keeps the whole optimizer_ms; its last stage, whose
// forward and backward follow each other, makes no copy (as runtime::StageReplica::step): the
// stages take 1 + 2 + 0.5 and 1 + 2 + 0.75 - 0.3 ms, and the first sets the pace.
TEST(Simulator, AFlushingStepMakesNoStashCopy) {
  auto prof = uniform_profile(2, 1.0, 2.0);
  auto plan = straight_plan(2);
  prof.layers[0].optimizer_ms = 0.5;
  prof.layers[1].optimizer_ms = 0.75;
  auto flush = run("1f1b", plan, prof, {4}, free_links(2)).ms_per_minibatch;
  auto stashing = run("pipedream", plan, prof, {4}, free_links(2)).ms_per_minibatch;
  prof.layers[0].stash_copy_ms = 0.2;
  prof.layers[1].stash_copy_ms = 0.3;
  EXPECT_NEAR(flush - run("1f1b", plan, prof, {4}, free_links(2)).ms_per_minibatch, 0.2, 1e-9);
  EXPECT_NEAR(stashing, 3.75, 1e-9);
  EXPECT_NEAR(run("pipedream", plan, prof, {4}, free_links(2)).ms_per_minibatch, 3.5, 1e-9);
  prof.layers[1].stash_copy_ms = 0;  // the last stage's copy, charged: the pace again
  EXPECT_NEAR(run("pipedream", plan, prof, {4}, free_links(2)).ms_per_minibatch, stashing, 1e-9);
}

// The host's time per action (Cluster::action_us, measured by `calibrate`): every forward,
// backward and step of a worker's list pays it once. 1F1B over p = 2 stages of m = 4
// microbatches takes (m + p - 1) forwards and as many backwards one after another, and a step,
// per minibatch; the pipedream schedule's steady state a forward, a backward and a step. The
// planner charges the same (plan::host_ms_per_minibatch), so its estimate moves by as much.
TEST(Simulator, EveryActionPaysTheHostsTime) {
  auto prof = uniform_profile(2, 1.0, 2.0);
  auto plan = straight_plan(2);
  for (const auto& [kind, actions] : std::vector<std::pair<std::string, int>>{{"1f1b", 2 * (4 + 2 - 1) + 1}, {"pipedream", 3}}) {
    plan::Cluster c = free_links(2);
    double base = run(kind, plan, prof, {4}, c).ms_per_minibatch;
    double estimate = plan::evaluate_plan(plan, prof, c, {}).pipeline_ms_per_minibatch;
    c.action_us = 250;
    EXPECT_NEAR(run(kind, plan, prof, {4}, c).ms_per_minibatch - base, actions * 0.25, 1e-9) << kind;
    if (kind == "pipedream") {
      EXPECT_NEAR(plan::evaluate_plan(plan, prof, c, {}).pipeline_ms_per_minibatch - estimate, 0.75, 1e-9);
    }
  }
}

// Threads on one machine (SimOptions::cores): the workers' computes share its cores. With as
// many cores as workers nothing changes; with one, every compute runs one after another, so
// a minibatch takes all of its compute; with 2 for 4 steady pipedream stages, half of it.
TEST(Simulator, WorkersShareTheCoresTheyAreGiven) {
  auto prof = uniform_profile(4, 1.0, 2.0);
  prof.layers[0].optimizer_ms = 0.5;
  auto plan = straight_plan(4);
  for (const char* kind : {"1f1b", "pipedream"}) {
    schedule::Schedule s = make_schedule(kind, plan, {4});
    auto on = [&](int cores) {
      SimOptions o;
      o.cores = cores;
      return metrics::compute_metrics(simulate(s, prof, free_links(4), o)).ms_per_minibatch;
    };
    EXPECT_NEAR(on(4), on(0), 1e-9) << kind;
    EXPECT_NEAR(on(1), prof.total_compute_ms() + prof.total_step_ms(), 1e-9) << kind;
    // (The steady state's window of whole periods reads pipedream's core-bound completions
    // within 0.3% of their rate.)
    EXPECT_GE(on(2), (prof.total_compute_ms() + prof.total_step_ms()) / 2 * 0.99) << kind;
    EXPECT_GT(on(2), on(4)) << kind;
  }
}

// Shared cores are time-sliced, as the kernel shares them among threads: two replicas' forwards
// ready together on one core both run at half speed and end together, at twice their time.
TEST(Simulator, ComputesRunningTogetherShareACore) {
  auto prof = uniform_profile(1, 1.0, 2.0);  // forward 1 ms a minibatch
  // Data parallelism over r replicas, a microbatch each: r forwards of 1 / r ms, ready at 0.
  auto first_forwards = [&](int replicas, int cores, std::vector<double> rates = {}) {
    SimOptions o;
    o.cores = cores;
    plan::Cluster c = free_links(replicas);
    c.core_rates = rates;
    auto t = simulate(make_schedule("dp", plan_with_replicas({replicas}), {replicas}), prof, c, o);
    std::vector<double> ends;
    for (const auto& list : t.workers) {
      EXPECT_EQ(list.front().action.kind, schedule::ActionKind::kForward);
      EXPECT_NEAR(list.front().start_ms, 0, 1e-12);
      ends.push_back(list.front().end_ms);
    }
    return ends;
  };
  // Two on one core: both at half speed, both ending at 1 ms (not one at 0.5 and one at 1).
  for (double end : first_forwards(2, 1)) EXPECT_NEAR(end, 1.0, 1e-9);
  // Three on two cores: each at two thirds, ending at 1/3 x 3/2 = 0.5 ms.
  for (double end : first_forwards(3, 2)) EXPECT_NEAR(end, 0.5, 1e-9);
  // As many cores as computes: each at full speed.
  for (double end : first_forwards(3, 3)) EXPECT_NEAR(end, 1.0 / 3, 1e-9);
  // At the rates calibrate measured (the cluster's core_rates): 2 at once at 0.8 each, 3 at 0.5;
  // 4, past what was measured, at the last rate shared out further (0.5 x 3 / 4).
  for (double end : first_forwards(2, 2, {1, 0.8, 0.5})) EXPECT_NEAR(end, 0.5 / 0.8, 1e-9);
  for (double end : first_forwards(3, 2, {1, 0.8, 0.5})) EXPECT_NEAR(end, (1.0 / 3) / 0.5, 1e-9);
  for (double end : first_forwards(4, 2, {1, 0.8, 0.5})) EXPECT_NEAR(end, 0.25 / 0.375, 1e-9);
  // A cluster whose workers share a host's cores says so itself (host_cores, as calibrate writes
  // it on one machine), without SimOptions::cores: three on two cores again.
  plan::Cluster host = free_links(3);
  host.host_cores = 2;
  for (const auto& list : simulate(make_schedule("dp", plan_with_replicas({3}), {3}), prof, host).workers)
    EXPECT_NEAR(list.front().end_ms, 0.5, 1e-9);
}

// On one host's shared cores a message is the host's work (copies, the kernel's socket), time-
// sliced with the computes: two stages on one core, 2 microbatches of 0.5 ms forwards, each
// activation 0.5 ms at 10 Gbit/s. Microbatch 0's activation leaves at 0.5, beside microbatch 1's
// forward: both at half speed, both end at 1.5, where stage 1's forward can start. On a device
// each, it arrives at 1.0.
TEST(Simulator, TransfersShareTheCoresWithTheComputes) {
  auto prof = uniform_profile(2, 1.0, 1.0, 1250000);
  auto stage_one_starts = [&](int cores) {
    SimOptions o;
    o.cores = cores;
    auto t = simulate(make_schedule("gpipe", straight_plan(2), {2}), prof, plan::Cluster::flat(2, 10), o);
    for (const auto& e : t.workers[1])
      if (e.action.kind == schedule::ActionKind::kForward) return e.start_ms;
    return -1.0;
  };
  EXPECT_NEAR(stage_one_starts(0), 1.0, 1e-9);
  EXPECT_NEAR(stage_one_starts(1), 1.5, 1e-9);
}

// One host's workers hand a pair's messages over one after another (gloo's ring each way per
// pair): 4 activations of 2.5 ms each at 10 Gbit/s, posted 0.25 ms apart, leave in turn, with
// as many cores as workers too (side by side, each took the whole rate: 40 Gbit/s from one link).
TEST(Simulator, APairsMessagesOnSharedCoresGoInTurn) {
  auto prof = uniform_profile(2, 1.0, 1.0, 12500000);
  for (int cores : {1, 2, 4}) {
    SimOptions o;
    o.cores = cores;
    auto t = simulate(make_schedule("gpipe", straight_plan(2), {4}), prof, plan::Cluster::flat(2, 10), o);
    std::vector<std::pair<double, double>> sends;
    for (const auto& e : t.workers[0])
      if (e.action.kind == schedule::ActionKind::kSendActivation) sends.push_back({e.start_ms, e.end_ms});
    ASSERT_EQ(sends.size(), 4u);
    std::sort(sends.begin(), sends.end());
    for (size_t k = 0; k < sends.size(); ++k) {
      EXPECT_GE(sends[k].second - sends[k].first, 2.5 - 1e-9) << cores << " cores, send " << k;
      if (k > 0) EXPECT_GE(sends[k].first, sends[k - 1].second - 1e-9) << cores << " cores, send " << k;
    }
    EXPECT_GE(sends.back().second, 0.25 + 4 * 2.5 - 1e-9) << cores << " cores";
  }
}

TEST(Simulator, TransfersUseInnermostLevelAndOverlapCompute) {
  // 2 stages on 2 servers joined at 1 Gbit/s: a 1.25 MB activation takes 10 ms at m = 1.
  plan::Cluster c;
  c.levels = {{"server", 1, 100}, {"network", 2, 1}};
  auto prof = uniform_profile(2, 1.0, 1.0, 1250000);
  auto t = simulate(make_schedule("gpipe", straight_plan(2), {1}), prof, c);
  auto m = metrics::compute_metrics(t);
  // F0 1 ms, send 10 ms, F1 1 ms, B1 1 ms, gradient 10 ms, B0 1 ms.
  EXPECT_NEAR(m.ms_per_minibatch, 24.0, 1e-9);
  ASSERT_EQ(m.links.size(), 2u);
  EXPECT_EQ(m.links[0].bytes, 1250000);
}

// Each worker's link carries one transfer at a time each way (a NIC), also when several
// replicas send to one worker at once, and an all-reduce waits for its links.
TEST(Simulator, AWorkerReceivesOneTransferAtATime) {
  // pipedream 3-1 on one 1 Gbit/s level: the three stage-0 replicas finish their forwards
  // together and all send 1.25 MB (10 ms each) to worker 3.
  auto c = plan::Cluster::flat(4, 1);
  auto prof = uniform_profile(2, 1.0, 1.0, 1250000);
  ScheduleOptions o;
  o.minibatches = 6;
  auto t = simulate(make_schedule("pipedream", plan_with_replicas({3, 1}), o), prof, c);
  std::vector<std::pair<double, double>> in;
  for (const auto& e : t.workers[3])
    if (e.action.kind == schedule::ActionKind::kRecvActivation) in.push_back({e.start_ms, e.end_ms});
  ASSERT_EQ(in.size(), 6u);
  std::sort(in.begin(), in.end());
  EXPECT_NEAR(in[0].first, 1.0, 1e-9);  // the first starts after F0 (1 ms)
  for (size_t i = 1; i < in.size(); ++i) EXPECT_GE(in[i].first, in[i - 1].second - 1e-9) << i;
  EXPECT_NEAR(in[2].second, 31.0, 1e-9);  // the first three arrive one after another
  // Every link, both ways: no two transfers overlap on one worker's side.
  for (int w = 0; w < 4; ++w)
    for (auto kinds : {std::vector<schedule::ActionKind>{schedule::ActionKind::kSendActivation, schedule::ActionKind::kSendGradient},
                       std::vector<schedule::ActionKind>{schedule::ActionKind::kRecvActivation, schedule::ActionKind::kRecvGradient}}) {
      std::vector<std::pair<double, double>> busy;
      for (const auto& e : t.workers[w])
        if (std::find(kinds.begin(), kinds.end(), e.action.kind) != kinds.end() && e.end_ms > e.start_ms)
          busy.push_back({e.start_ms, e.end_ms});
      std::sort(busy.begin(), busy.end());
      for (size_t i = 1; i < busy.size(); ++i) EXPECT_GE(busy[i].first, busy[i - 1].second - 1e-9) << "worker " << w;
    }
}

TEST(StageCosts, DagBoundaryCarriesSkipTensors) {
  auto prof = uniform_profile(4, 1.0, 1.0, 100);
  prof.layers[3].inputs = {2, 0};  // a skip from layer 0 to layer 3
  auto s = make_schedule("1f1b", straight_plan(4), {1});
  auto costs = stage_costs(s, prof);
  EXPECT_EQ(costs[0].boundary_bytes, 100);        // layer 0's output (read by 1 and 3)
  EXPECT_EQ(costs[1].boundary_bytes, 200);        // layer 1's and the skip of layer 0
  EXPECT_EQ(costs[2].boundary_bytes, 200);        // layer 2's and the skip
  EXPECT_EQ(costs[3].boundary_bytes, 0);
}

TEST(Simulator, TraceRoundTripsThroughJson) {
  auto prof = uniform_profile(4, 1.0, 2.0, 1000, 10);
  auto t = simulate(make_schedule("interleaved", straight_plan(4), {4, 2}), prof, free_links(2));
  auto u = schedule::trace_from_json(schedule::to_json(t), "test");
  ASSERT_EQ(u.num_workers(), t.num_workers());
  for (int w = 0; w < t.num_workers(); ++w) {
    ASSERT_EQ(u.workers[w].size(), t.workers[w].size());
    for (size_t i = 0; i < t.workers[w].size(); ++i) {
      EXPECT_EQ(u.workers[w][i].action, t.workers[w][i].action);
      EXPECT_DOUBLE_EQ(u.workers[w][i].end_ms, t.workers[w][i].end_ms);
    }
  }
  EXPECT_EQ(u.source, "simulated");
  EXPECT_EQ(metrics::compute_metrics(u).ms_per_minibatch, metrics::compute_metrics(t).ms_per_minibatch);
}

// A figure that cannot be true is a bug: no schedule finishes minibatches faster than every
// worker computing all the time (total compute / workers), whatever the replication, the
// cluster and the minibatch count (replicated stages finish minibatches in bursts, which once
// let a window edge fall inside a burst and report a time below this limit).
// A stage keeping 2 minibatches in flight over a slow link finishes them 20 and 40 ms apart by
// turns (a 60 ms round trip: 4 + 20 + 4 + 6 + 20 + 6): it runs at 30 ms per minibatch, and a
// window of a few gaps misread it (26.7 ms at the old default of 12 minibatches).
TEST(Simulator, BurstyCompletionsReadAtTheirMeanRate) {
  auto prof = uniform_profile(2, 4.0, 6.0, 25000000);  // 25 MB = 20 ms at 10 Gbit/s
  auto m = run("pipedream", straight_plan(2), prof, {}, plan::Cluster::flat(2, 10));
  EXPECT_NEAR(m.ms_per_minibatch, 30.0, 30.0 * 0.03);
}

TEST(Simulator, NoTimeBelowThePhysicalLimit) {
  std::vector<std::vector<int>> shapes = {{15, 1}, {13, 2, 1}, {5, 10, 1}, {3, 1},  {1, 3},
                                          {2, 2, 2, 2}, {7, 1}, {6}, {4, 4, 4, 4}, {8, 8}};
  for (const auto& shape : shapes)
    for (const char* gbps : {"100,10", "100,1"}) {
      plan::Plan plan = plan_with_replicas(shape);
      int workers = plan.workers;
      for (bool first_heavy : {false, true}) {
      auto prof = uniform_profile(static_cast<int>(shape.size()), 30.0, 60.0, 4000000, 2000000);
      // Uneven stages, so that replicated stages are not all alike; or, as VGG-16's convolutions,
      // one first stage far heavier than the rest (its warm-up completions come a backward apart).
      for (size_t l = 0; l < prof.layers.size(); ++l) prof.layers[l].forward_ms += 10.0 * static_cast<double>(l);
      if (first_heavy) prof.layers[0].forward_ms *= 10, prof.layers[0].backward_ms *= 10;
      plan::Cluster c = workers % 2 == 0 ? plan::cluster_from_shorthand(str(workers / 2, ",2"), gbps)
                                         : plan::cluster_from_shorthand(std::to_string(workers), "10");
      // No stage runs faster than its replicas can compute: each does 1/r of the minibatches.
      double busiest = 0;
      for (size_t s = 0; s < shape.size(); ++s)
        busiest = std::max(busiest, (prof.layers[s].forward_ms + prof.layers[s].backward_ms) / shape[s]);
      // A plan may keep more minibatches in flight than the paper's rule (VGG-16 15-1 with 5 per
      // first-stage replica drains 75 back to back: a window inside that drain once read
      // 18.4 ms per minibatch where the first stage alone needs 22.5), and defer its step.
      for (int extra : {0, 3})
      for (bool deferred : {false, true}) {
      plan::Plan p = plan;
      p.stages[0].in_flight = extra > 0 ? plan::in_flight(plan, 0) + extra : 0;
      for (int rounds : {0, 1, 2, 3, 7}) {  // 0: the default count
        int lcm = 1;
        for (int r : shape) lcm = std::lcm(lcm, r);
        ScheduleOptions o;
        o.minibatches = lcm * rounds;
        o.deferred_step = deferred;
        if (o.minibatches > schedule::kMaxMinibatches) continue;
        auto m = run("pipedream", p, prof, o, c);
        SCOPED_TRACE(p.shape() + " on " + c.describe() + ", " + std::to_string(o.minibatches) + " minibatches, " +
                     std::to_string(plan::in_flight(p, 0)) + " in flight" + (deferred ? ", deferred step" : ""));
        EXPECT_GE(m.ms_per_minibatch, prof.total_compute_ms() / workers * (1 - 1e-9));
        EXPECT_GE(m.ms_per_minibatch, busiest * (1 - 1e-9));
      }
      }
      }
    }
}

}  // namespace
}  // namespace pt::sim

namespace pt::sim {
namespace {

// A latency per message (issue 33; Level::latency_us, measured by `calibrate`): a transfer pays
// it once, a ring all-reduce once per step, and each bucket is a ring of its own, so smaller
// buckets pay it more often. The cost engine charges the same (Cluster::allreduce_ms).
// The profile's layers as one stage on 4 replicas, under the dp schedule (8 microbatches).
schedule::Schedule data_parallel_on_four(const profile::Profile& prof) {
  plan::Plan dp = plan::even_split(prof, 1);
  dp.stages[0].replicas = 4;
  plan::assign_workers(dp);
  return make_schedule("dp", dp, {8});
}

TEST(Simulator, EveryMessagePaysItsLevelsLatency) {
  // The 2-stage transfer above with 2 ms per message: each way 2 + 10 ms.
  plan::Cluster c;
  c.levels = {{"server", 1, 100}, {"network", 2, 1, 2000}};
  auto prof = uniform_profile(2, 1.0, 1.0, 1250000);
  auto m = metrics::compute_metrics(simulate(make_schedule("gpipe", straight_plan(2), {1}), prof, c));
  EXPECT_NEAR(m.ms_per_minibatch, 28.0, 1e-9);
  EXPECT_NEAR(c.message_ms(1, 1250000), 12.0, 1e-12);
  EXPECT_NEAR(c.transfer_ms(1, 1250000), 10.0, 1e-12);

  // Data parallelism on 4 workers of one 1 Gbit/s level at 0.5 ms per message: the ring's
  // 2 (n - 1) = 6 steps per bucket. One bucket of 8 MB: 6 x 0.5 ms more than without latency;
  // eight of 1 MB: 48 steps, 24 ms of latency, which the backward no longer hides.
  auto flat = plan::Cluster::flat(4, 1);
  auto slow = flat;
  slow.levels[0].latency_us = 500;
  auto dp_prof = uniform_profile(8, 1.0, 2.0, 0, 1000000);
  auto s = data_parallel_on_four(dp_prof);
  double one = metrics::compute_metrics(simulate(s, dp_prof, flat, {0})).ms_per_minibatch;
  double one_slow = metrics::compute_metrics(simulate(s, dp_prof, slow, {0})).ms_per_minibatch;
  EXPECT_NEAR(one_slow - one, 6 * 0.5, 1e-9);
  EXPECT_NEAR(slow.allreduce_ms({0, 1, 2, 3}, 8e6) - flat.allreduce_ms({0, 1, 2, 3}, 8e6), 3.0, 1e-12);
  EXPECT_NEAR(slow.allreduce_ms({0, 1, 2, 3}, 0), 3.0, 1e-12);
  EXPECT_NEAR(slow.allreduce_ms_per_byte({0, 1, 2, 3}), flat.allreduce_ms_per_byte({0, 1, 2, 3}), 1e-18);
  double eight = metrics::compute_metrics(simulate(s, dp_prof, flat, {1000000})).ms_per_minibatch;
  double eight_slow = metrics::compute_metrics(simulate(s, dp_prof, slow, {1000000})).ms_per_minibatch;
  EXPECT_LT(eight, one);          // without latency, buckets overlap the ring with the backward
  EXPECT_GT(eight_slow, one_slow);  // at 0.5 ms a message, 48 steps cost more than that gains
  EXPECT_NEAR(eight_slow - eight, 48 * 0.5, 1e-9);
}

TEST(Simulator, EveryMemberPaysTheSummingOfWhatItReduces) {
  // Data parallelism on 4 workers with 8 MB of parameters in one bucket: a ring's reduce-scatter
  // sums 3/4 of them on every member, 6,000,000 bytes; at 1,000 us per MiB that is 5.722 ms more
  // per minibatch, in the simulator and in the cost engine's all-reduce alike.
  auto flat = plan::Cluster::flat(4, 1);
  auto summing = flat;
  summing.reduce_us_per_mib = 1000;
  auto prof = uniform_profile(8, 1.0, 2.0, 0, 1000000);
  auto s = data_parallel_on_four(prof);
  double bare = metrics::compute_metrics(simulate(s, prof, flat, {0})).ms_per_minibatch;
  double summed = metrics::compute_metrics(simulate(s, prof, summing, {0})).ms_per_minibatch;
  double expected = 6e6 / (1 << 20) * 1.0;
  EXPECT_NEAR(summed - bare, expected, 1e-9);
  EXPECT_NEAR(summing.allreduce_ms({0, 1, 2, 3}, 8e6) - flat.allreduce_ms({0, 1, 2, 3}, 8e6), expected, 1e-12);
  EXPECT_NEAR(summing.range_allreduce_ms(0, 3, 8e6), summing.allreduce_ms({0, 1, 2, 3}, 8e6), 1e-12);
  // The host's time per ring step counts where it outlasts the step's message: each of the 6
  // steps sends 2 MB, 16 ms at 1 Gbit/s, so 250 us a step costs nothing and 20 ms a step 4 ms
  // more each, 24 in all; with nothing to send each step takes the host's 20 ms.
  summing.allreduce_step_us = 250;
  double hidden = metrics::compute_metrics(simulate(s, prof, summing, {0})).ms_per_minibatch;
  EXPECT_NEAR(hidden, summed, 1e-9);
  summing.allreduce_step_us = 20000;
  double stepped = metrics::compute_metrics(simulate(s, prof, summing, {0})).ms_per_minibatch;
  EXPECT_NEAR(stepped - summed, 6 * 4.0, 1e-9);
  EXPECT_NEAR(summing.allreduce_ms({0, 1, 2, 3}, 8e6) - flat.allreduce_ms({0, 1, 2, 3}, 8e6), expected + 24.0, 1e-9);
  EXPECT_NEAR(summing.allreduce_ms({0, 1, 2, 3}, 0), 6 * 20.0, 1e-12);
}

TEST(Simulator, ComputesAloneGiveTheSameTiming) {
  // SimOptions::computes_only records the computes and steps alone (the referee's replays):
  // every timing figure equals the full trace's, on transfers that queue, all-reduces in
  // buckets and split backwards, and the trace holds nothing else.
  auto c = plan::Cluster::flat(8, 10);
  c.levels[0].latency_us = 20;
  const std::pair<const char*, std::vector<int>> cases[] = {
      {"pipedream", {3, 2, 1}}, {"1f1b", {2, 1, 1}}, {"gpipe", {1, 1, 1}}, {"2bw", {2, 2}}, {"zb-h1", {1, 1, 1}}};
  for (const auto& [kind, replicas] : cases) {
    auto prof = uniform_profile(static_cast<int>(replicas.size()), 1.0, 2.0, 4000000, 3000000);
    auto s = make_schedule(kind, plan_with_replicas(replicas), {4, 1, 24});
    SimOptions only;
    only.bucket_bytes = 1 << 20;
    only.computes_only = true;
    auto full = metrics::compute_metrics(simulate(s, prof, c, {1 << 20}), metrics::Detail::kTiming);
    auto trace = simulate(s, prof, c, only);
    auto part = metrics::compute_metrics(trace, metrics::Detail::kTiming);
    EXPECT_GT(full.ms_per_minibatch, 0) << kind;
    EXPECT_EQ(part.ms_per_minibatch, full.ms_per_minibatch) << kind;
    EXPECT_EQ(part.window_start_ms, full.window_start_ms) << kind;
    EXPECT_EQ(part.bubble_fraction, full.bubble_fraction) << kind;
    ASSERT_EQ(part.workers.size(), full.workers.size()) << kind;
    for (size_t w = 0; w < full.workers.size(); ++w) EXPECT_EQ(part.workers[w].busy_ms, full.workers[w].busy_ms) << kind;
    for (const auto& list : trace.workers)
      for (const auto& e : list) EXPECT_TRUE(schedule::is_compute(e.action.kind) || e.action.kind == schedule::ActionKind::kStep);
  }
}

// A tie split over stages (plan/split_ties.h): the workers holding its copies sum its gradient
// before their step, an all-reduce the runtime runs and the simulator prices, exactly the ring's
// time on a straight pipeline, where each stage's step ends the minibatch. An asynchronous
// schedule cannot keep the copies one parameter: refused, as the runtime refuses it.
TEST(Simulator, ASplitTiesExchangeIsPriced) {
  const int64_t tie_bytes = 1 << 20;
  auto prof = schedule::testing::uniform_profile(4, 1.0, 2.0, 0, tie_bytes);
  plan::Cluster c = plan::Cluster::flat(4, 1);  // 1 Gbit/s: 1 MiB takes 8.4 ms one way
  auto untied = run("1f1b", straight_plan(4), prof, {4}, c);
  prof.ties = {{{0, 3}, tie_bytes}};
  auto tied = run("1f1b", straight_plan(4), prof, {4}, c);
  double ring = c.allreduce_ms(std::vector<int>{0, 3}, static_cast<double>(tie_bytes));
  EXPECT_GT(ring, 8.0);
  EXPECT_NEAR(tied.ms_per_minibatch, untied.ms_per_minibatch + ring, 1e-6);
  // A tie inside one stage exchanges nothing.
  plan::Plan plan2 = plan::even_split(prof, 2);  // layers 0-1 | 2-3
  prof.ties = {{{0, 1}, tie_bytes}};
  EXPECT_NEAR(run("1f1b", plan2, prof, {4}, c).ms_per_minibatch,
              run("1f1b", plan2, schedule::testing::uniform_profile(4, 1.0, 2.0, 0, tie_bytes), {4}, c).ms_per_minibatch,
              1e-9);
  // The cost engine adds the same exchange to both holding stages.
  prof.ties = {{{0, 3}, tie_bytes}};
  plan::PlanEstimate e = plan::evaluate_plan(straight_plan(4), prof, c, plan::PlanOptions{});
  EXPECT_NEAR(e.stages[0].tie_ms, ring, 1e-9);
  EXPECT_NEAR(e.stages[3].tie_ms, ring, 1e-9);
  EXPECT_EQ(e.stages[1].tie_ms, 0);
  for (const char* kind : {"pipedream", "2bw"}) {
    try {
      simulate(make_schedule(kind, straight_plan(4), {kind == std::string("2bw") ? 4 : 1}), prof, c);
      ADD_FAILURE() << kind << " simulated a split tie";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("layers 0 and 3 on stages 0 and 3, and the " + std::string(kind)),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace pt::sim
