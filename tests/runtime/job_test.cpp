// The Job is made once (job/job.h): each schedule is generated and validated once per segment
// length, in make_job, and the runners run what it holds.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "job/core_pinning.h"
#include "job/prediction.h"
#include "pipeline_test_util.h"

namespace pt::runtime {
namespace {

// Distinct segment lengths, and the typical schedule's.
size_t schedules_needed(const Job& job) {
  std::set<int> lengths{job.typical->minibatches};
  for (const auto& seg : job.segments) lengths.insert(seg.minibatches);
  // A synchronous schedule runs one minibatch per segment: one schedule serves all.
  return job.typical->flush ? 1 : lengths.size();
}

void expect_each_schedule_made_once(const std::string& kind, int replicas, int64_t epochs, int64_t eval_every) {
  SCOPED_TRACE(str(kind, ", ", replicas, " replicas of the first stage, ", epochs, " epochs"));
  auto m = testing::seeded_cnn(3);
  auto data = model::synthetic_data(*m, 80, 16, 10, 5);  // 10 minibatches of 8 per epoch
  plan::Plan plan = plan::data_parallel_plan(m->num_layers(), 1);
  plan.stages = {{{0, 1}, replicas, {}}, {{2, 3, 4}, 1, {}}};
  for (int w = 0; w <= replicas; ++w) (w < replicas ? plan.stages[0] : plan.stages[1]).workers.push_back(w);
  plan.workers = replicas + 1;
  PipelineOptions o;
  o.schedule = kind;
  o.microbatches = 2;
  o.train.batch_size = 8;
  o.train.epochs = epochs;
  o.train.eval_every = eval_every;
  o.train.quiet = true;
  int64_t before = schedule::schedules_made();
  Job job = make_job(plan, o, *testing::seeded_cnn(3, model::LayerSet::none()), data);
  int64_t made = schedule::schedules_made() - before;
  EXPECT_EQ(made, static_cast<int64_t>(schedules_needed(job)));
  std::set<int> lengths;
  for (const auto& seg : job.segments) lengths.insert(seg.minibatches);
  if (!job.typical->flush) {
    EXPECT_GT(lengths.size(), 1u);  // the case is one the count can fail
  }
  auto result = run_on_threads(job, [](const model::LayerSet& held) { return testing::seeded_cnn(3, held); }, data);
  EXPECT_EQ(schedule::schedules_made() - before, made) << "the runners generated schedules of their own";
  EXPECT_EQ(result.train.steps, job.steps);
}

TEST(Job, EachScheduleIsMadeOncePerSegmentLengthAndTheRunnersRunThem) {
  // Asynchronous, with evaluations that cut epochs into segments of several lengths.
  expect_each_schedule_made_once("pipedream", 1, 2, 4);
  expect_each_schedule_made_once("pipedream", 2, 1, 6);
  // Synchronous: a minibatch per segment.
  expect_each_schedule_made_once("1f1b", 1, 1, 3);
}

// Every check runs in make_job, before any worker starts: a bad option is refused there.
TEST(Job, MakeJobRefusesBadOptionsBeforeAnyWorkerStarts) {
  auto m = testing::seeded_cnn(3);
  auto data = model::synthetic_data(*m, 32, 8, 10, 5);
  PipelineOptions o;
  o.schedule = "1f1b";
  o.microbatches = 3;  // does not divide the batch
  o.train.batch_size = 8;
  EXPECT_THROW(make_job(plan::data_parallel_plan(m->num_layers(), 1), o, *m, data), UsageError);
}

// Without --profile, train pins a plan's workers by the plan's own stage times, as `plan`
// replayed them (sim::SimOptions::pin_as_train): the cores the profile they were planned from
// gives, others where the times make another stage the busiest, none where the plan has no times.
TEST(Job, APlansWorkersArePinnedByItsTimesWithoutAProfile) {
  auto m = testing::seeded_cnn(3);
  auto data = model::synthetic_data(*m, 64, 16, 10, 5);
  profile::Profile prof = testing::unit_profile(*m);
  for (int l = 0; l < prof.num_layers(); ++l) {
    prof.layers[l].forward_ms = l < 2 ? 4 : 0.5;
    prof.layers[l].backward_ms = l < 2 ? 8 : 1;
  }
  plan::Plan plan = plan::data_parallel_plan(m->num_layers(), 1);
  plan.stages = {{{0, 1}, 2, {0, 1}}, {{2, 3, 4}, 1, {2}}};
  plan.workers = 3;
  plan.stages[0].compute_ms = 2 * (4 + 8) / 2.0;  // a replica's share of the stage's forward and backward
  plan.stages[1].compute_ms = 3 * (0.5 + 1);
  PipelineOptions o;
  o.schedule = "pipedream";
  o.train.batch_size = 8;
  o.train.quiet = true;
  Job job = make_job(plan, o, *testing::seeded_cnn(3, model::LayerSet::none()), data);
  job::place_workers(job, &prof, 2);
  std::vector<int> by_profile = job.cores_of_workers;
  EXPECT_EQ(by_profile, (std::vector<int>{0, 1, 0}));
  job::place_workers(job, nullptr, 2);
  EXPECT_EQ(job.cores_of_workers, by_profile);
  job.plan.stages[1].compute_ms = 100;  // the plan says the last stage is the busiest
  job::place_workers(job, nullptr, 2);
  EXPECT_EQ(job.cores_of_workers, (std::vector<int>{1, 1, 0}));
  job.plan.stages[1].compute_ms = 0;  // no times: the kernel places them
  job::place_workers(job, nullptr, 2);
  EXPECT_TRUE(job.cores_of_workers.empty());
  job::place_workers(job, nullptr, 3);  // a core each: nothing to pin
  EXPECT_TRUE(job.cores_of_workers.empty());
}

// The run's prediction weighs computes sharing the cores as plan and simulate do: where the
// calibrated cluster measured how computes at once slow each other (core_rates), also with a
// core per worker (it replayed a core each there, 21% faster than the plan it ran).
TEST(Job, ThePredictionSlowsComputesAtOnceAsCalibrateMeasuredThem) {
  auto m = testing::seeded_cnn(3);
  auto data = model::synthetic_data(*m, 64, 16, 10, 5);
  profile::Profile prof = testing::unit_profile(*m);
  plan::Plan plan = plan::data_parallel_plan(m->num_layers(), 1);
  plan.stages = {{{0, 1}, 1, {0}}, {{2, 3, 4}, 1, {1}}};
  plan.workers = 2;
  PipelineOptions o;
  o.schedule = "1f1b";
  o.microbatches = 4;
  o.train.batch_size = 8;
  o.train.quiet = true;
  o.cluster = plan::Cluster::flat(2, 1000);
  o.cluster.calibration = json{{"transport", "threads"}};
  Job job = make_job(plan, o, *testing::seeded_cnn(3, model::LayerSet::none()), data);
  job::RunPrediction alone = job::predict_host_run(job, prof, 2, "threads");
  EXPECT_EQ(alone.core_each_ms, 0);  // no rates measured: two computes on two cores run as one each
  job.options.cluster.core_rates = {1.0, 0.5};
  job::RunPrediction shared = job::predict_host_run(job, prof, 2, "threads");
  EXPECT_EQ(shared.cores, 2);
  EXPECT_DOUBLE_EQ(shared.core_each_ms, alone.simulated_ms);
  EXPECT_GT(shared.simulated_ms, 1.2 * alone.simulated_ms);  // the two stages compute at once at half rate
  // What a miss's note tells to calibrate again: the figure taken (it cited core_share, which only
  // workers pinned two to a core take).
  EXPECT_EQ(shared.core_figures, "the cluster's core_rates run 2 computes at once at 0.500 of a core each");
  // Rates measured on another count of cores say nothing of this one's, as simulate takes them:
  // a file calibrated on 1 core predicted 2 workers on 2 at its rate, 29% under simulate's figure.
  job.options.cluster.host_cores = 1;
  job::RunPrediction elsewhere = job::predict_host_run(job, prof, 2, "threads");
  EXPECT_EQ(elsewhere.rates_measured_on, 1);
  EXPECT_EQ(elsewhere.core_each_ms, 0);
  EXPECT_DOUBLE_EQ(elsewhere.simulated_ms, alone.simulated_ms);
  EXPECT_NE(elsewhere.describe(job).find("core_rates, measured on its host_cores 1, left out on this machine's 2"),
            std::string::npos)
      << elsewhere.describe(job);
  job.options.cluster.host_cores = 2;  // measured here: taken
  EXPECT_DOUBLE_EQ(job::predict_host_run(job, prof, 2, "threads").simulated_ms, shared.simulated_ms);
  // On another transport than calibrated, the links go and the cores' rates (measured on threads
  // whatever the transport) stay: a gloo run replayed a core each, 35% over simulate's figure.
  job::RunPrediction gloo = job::predict_host_run(job, prof, 2, "gloo");
  EXPECT_FALSE(gloo.calibrated_host);
  EXPECT_GT(gloo.simulated_ms, 1.2 * alone.simulated_ms);
  EXPECT_EQ(gloo.core_figures, shared.core_figures);
}

// An asynchronous run fills and drains its pipeline in each segment, which its measured rate
// counts: a short run is predicted over its own minibatches, not at the steady state (pipedream,
// 6 steps: 4203 samples/s predicted, 3707 for a replay of the 6).
TEST(Job, AnAsynchronousRunIsPredictedOverItsOwnSegments) {
  auto m = testing::seeded_cnn(3);
  auto data = model::synthetic_data(*m, 2400, 16, 10, 5);  // 600 minibatches of 4 an epoch
  profile::Profile prof = testing::unit_profile(*m);
  PipelineOptions o;
  o.schedule = "pipedream";
  o.train.batch_size = 4;
  o.train.quiet = true;
  auto predicted_ms = [&](int64_t steps) {
    o.train.steps = steps;
    Job job = make_job(plan::even_split(prof, 3), o, *testing::seeded_cnn(3, model::LayerSet::none()), data);
    return job::predict_emulated_run(job, prof, {}, "threads").simulated_ms;
  };
  double short_run = predicted_ms(6), long_run = predicted_ms(600);
  EXPECT_GT(short_run, 1.1 * long_run);  // 6 minibatches through 3 stages: 1.16x here
  EXPECT_LT(long_run, 1.02 * predicted_ms(300));  // long runs: the steady state
}

// The seeded CNN's 1f1b job on 2 stages, 4 microbatches of 8, on `cluster`, predicted as emulated
// compute at `emulation`'s scales over `transport`.
double predicted_emulated_ms(const plan::Cluster& cluster, const profile::EmulationOptions& emulation,
                             const std::string& transport) {
  auto m = testing::seeded_cnn(3);
  auto data = model::synthetic_data(*m, 256, 16, 10, 5);
  profile::Profile prof = testing::unit_profile(*m);
  PipelineOptions o;
  o.schedule = "1f1b", o.microbatches = 4, o.train.batch_size = 32, o.train.steps = 8, o.train.quiet = true;
  o.cluster = cluster;
  Job job = make_job(plan::even_split(prof, 2), o, *testing::seeded_cnn(3, model::LayerSet::none()), data);
  return job::predict_emulated_run(job, prof, emulation, transport).simulated_ms;
}

// Emulated compute on threads hands its tensors over in memory whatever links the --cluster
// gives (gloo processes cross them, shaped on the testbed): at 0.1 Gbit/s the prediction was 632
// samples/s for a threads run that went at 1,772.
TEST(Job, EmulatedThreadsCrossNoClusterLinks) {
  double memory_ms = predicted_emulated_ms({}, {}, "threads");
  plan::Cluster slow = plan::Cluster::flat(2, 0.001);  // 1 Mbit/s
  EXPECT_DOUBLE_EQ(predicted_emulated_ms(slow, {}, "threads"), memory_ms);
  EXPECT_GT(predicted_emulated_ms(slow, {}, "gloo"), 1.5 * memory_ms);
}

// Emulated compute waits the profile's times x S, but the host's time per action (a calibrated
// --cluster's action_us) is real time: scaled with the compute, awd-lm at S = 1e-3 was predicted
// at 1,162,201 samples/s, its host's 0.109 ms a minibatch charged as 0.000109.
TEST(Job, AnEmulatedRunsHostTimePerActionIsNotScaled) {
  const profile::EmulationOptions tiny{1e-3, 1e-3};
  plan::Cluster host;
  host.action_us = 100;
  double compute_ms = predicted_emulated_ms({}, tiny, "threads");
  // Each worker runs 4 forwards, 4 backwards and a step a minibatch: at least 0.9 ms of its own.
  EXPECT_GT(predicted_emulated_ms(host, tiny, "threads") - compute_ms, 0.85) << compute_ms << " ms without it";
  // And the compute is the profile's x S.
  EXPECT_NEAR(compute_ms, 1e-3 * predicted_emulated_ms({}, {}, "threads"), 1e-9);
}

// Workers spread over hosts are not placed on this host's cores: the environment says how many
// of the job's workers this host runs (torchrun's LOCAL_WORLD_SIZE, mpirun's local size).
TEST(Job, WorkersOfSeveralHostsAreNotPinnedToThisHostsCores) {
  EXPECT_TRUE(job::workers_share_this_host());  // no launcher's variables: threads, or our launcher
  setenv("RANK", "0", 1), setenv("WORLD_SIZE", "4", 1);
  EXPECT_TRUE(job::workers_share_this_host());  // hosts unknown (the testbed's namespaces)
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  EXPECT_FALSE(job::workers_share_this_host());
  setenv("LOCAL_WORLD_SIZE", "4", 1);
  EXPECT_TRUE(job::workers_share_this_host());
  unsetenv("RANK"), unsetenv("WORLD_SIZE"), unsetenv("LOCAL_WORLD_SIZE");
  setenv("OMPI_COMM_WORLD_RANK", "1", 1), setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  EXPECT_FALSE(job::workers_share_this_host());
  unsetenv("OMPI_COMM_WORLD_RANK"), unsetenv("OMPI_COMM_WORLD_SIZE"), unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  EXPECT_TRUE(job::workers_share_this_host());
}

}  // namespace
}  // namespace pt::runtime
