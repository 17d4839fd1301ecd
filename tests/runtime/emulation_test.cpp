// Emulated compute: the costs follow the profile (cut bytes of a DAG, input layers, scales), an
// emulated pipeline takes the time the simulator predicts for every schedule while the CPU stays
// idle, and the tensors it moves have the profiled sizes.
#include <gtest/gtest.h>

#include <ctime>

#include "plan/planner.h"
#include "runtime/emulation.h"
#include "runtime/pipeline_job.h"
#include "sim/simulator.h"

namespace pt::runtime {
namespace {

// A chain of 4 layers at batch 8: each 8 ms forward, 16 ms backward per minibatch; activations
// of 8 x 1000 floats, parameters of 40 KB.
profile::Profile chain_profile() {
  profile::Profile p;
  p.model = "emulated-chain";
  p.batch_size = 8;
  for (int i = 0; i < 4; ++i)
    p.layers.push_back({"layer" + std::to_string(i), 8, 16, 8 * 1000 * 4, 40000 * (i + 1),
                        i == 0 ? std::vector<int>{} : std::vector<int>{i - 1}});
  return p;
}

TEST(Emulation, CostsArePerSampleAndScaled) {
  auto costs = emulated_costs(chain_profile(), {2.0, 0.5});
  ASSERT_EQ(costs.size(), 4u);
  EXPECT_DOUBLE_EQ(costs[0].forward_ms_per_sample, 8 * 2.0 / 8);
  EXPECT_DOUBLE_EQ(costs[0].backward_ms_per_sample, 16 * 2.0 / 8);
  EXPECT_EQ(costs[1].output_floats_per_sample, 500);  // 1000 floats x byte scale 0.5
  EXPECT_EQ(costs[2].parameter_floats, 40000 * 3 / 4 / 2);
  EXPECT_THROW(emulated_costs(chain_profile(), {0, 1}), ConfigError);
  EXPECT_THROW(emulated_costs(chain_profile(), {1, -1}), ConfigError);
}

TEST(Emulation, DagCutsCarryEveryLiveOutputAndInputsCostNothing) {
  // Input -> a -> b -> c, with a skip a -> c: the cut after b carries a's and b's outputs.
  profile::Profile p;
  p.model = "dag";
  p.batch_size = 2;
  p.layers = {{"Input0", 50, 0, 8, 0, {}},
              {"a", 2, 2, 80, 0, {0}},
              {"b", 2, 2, 800, 0, {1}},
              {"c", 2, 2, 16, 0, {1, 2}}};
  auto c = emulated_costs(p, {});
  EXPECT_EQ(c[0].forward_ms_per_sample, 0);  // data loading, left out as the planner does
  EXPECT_EQ(c[0].output_floats_per_sample, 1);
  EXPECT_EQ(c[1].output_floats_per_sample, 10);         // a: 80 B / 2 samples / 4 B
  EXPECT_EQ(c[2].output_floats_per_sample, 100 + 10);   // b and the skip from a
  EXPECT_EQ(c[3].output_floats_per_sample, 2);          // the last layer's own output
}

struct EmulatedRun {
  PipelineResult result;
  double cpu_s = 0;
  double predicted_ms = 0;  // the simulator's time for the same segments
};

EmulatedRun run_emulated(const std::string& kind, const plan::Plan& plan, int microbatches, int chunks = 1) {
  EmulationOptions e{2.0, 1.0};  // every wait doubled: the scale must be applied
  profile::Profile prof = chain_profile();
  prof.batch_size = 8;
  auto model = build_emulated_model(prof, e);
  model::DataSplit data = emulated_data(*model, 64, 1);
  PipelineOptions o;
  o.schedule = kind;
  o.microbatches = microbatches;
  o.chunks = chunks;
  o.train.batch_size = 8;
  o.train.steps = 3;
  o.train.quiet = true;
  o.train.evaluate = false;
  o.timeout_s = 30;
  // The simulator on the same segments, with the scaled profile and free links (threads).
  profile::Profile scaled = prof;
  for (auto& l : scaled.layers) {
    l.forward_ms *= e.time_scale;
    l.backward_ms *= e.time_scale;
  }
  EmulatedRun r;
  JobLayout job = layout_job(plan, o, data);
  for (const auto& seg : job.segments) {
    auto trace = sim::simulate(schedule_for(plan, o, seg.minibatches), scaled,
                               plan::Cluster::flat(job.probe.num_workers(), 1e9));
    r.predicted_ms += trace.end_ms() - trace.start_ms();
  }
  std::clock_t c0 = std::clock();
  r.result = train_pipeline([&] { return build_emulated_model(prof, e); }, data, plan, o);
  r.cpu_s = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  return r;
}

TEST(Emulation, EveryScheduleTakesThePredictedTimeWithAnIdleCpu) {
  profile::Profile prof = chain_profile();
  struct Case {
    std::string kind;
    plan::Plan plan;
    int microbatches, chunks;
  };
  std::vector<Case> cases = {{"gpipe", plan::even_split(prof, 2), 4, 1},
                             {"1f1b", plan::even_split(prof, 3), 4, 1},
                             {"pipedream", plan::even_split(prof, 2), 1, 1},
                             {"2bw", plan::even_split(prof, 2), 4, 1},
                             {"interleaved", plan::even_split(prof, 4), 4, 2},
                             {"zb-h1", plan::even_split(prof, 2), 4, 1},
                             {"dp", plan::data_parallel_plan(4, 2), 2, 1},
                             {"mp", plan::even_split(prof, 2), 1, 1}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.kind);
    EmulatedRun r = run_emulated(c.kind, c.plan, c.microbatches, c.chunks);
    double measured_ms = r.result.train.seconds * 1000;
    std::cout << "[ emulated ] " << c.kind << ": measured " << measured_ms << " ms, simulated " << r.predicted_ms
              << " ms, cpu " << r.cpu_s * 1000 << " ms\n";
    ASSERT_GT(r.predicted_ms, 100);
    // Loose bounds: this machine's 2 cores are shared, so wake-ups can come late; a missing
    // scale (x0.5), an uncharged backward or a busy wait (CPU time ~ wall time x workers) fails.
    EXPECT_GT(measured_ms, 0.9 * r.predicted_ms);
    EXPECT_LT(measured_ms, 1.6 * r.predicted_ms + 30);
    EXPECT_LT(r.cpu_s * 1000, 0.5 * measured_ms);
  }
}

TEST(Emulation, MovesTheProfiledBytes) {
  // 2 stages, 4 microbatches of 2 samples: stage 0 sends 2 x 1000 floats per microbatch.
  profile::Profile prof = chain_profile();
  EmulatedRun r = run_emulated("1f1b", plan::even_split(prof, 2), 4);
  int forwards = 0;
  for (const auto& e : r.result.trace.workers[0])
    if (e.action.kind == schedule::ActionKind::kForward) {
      EXPECT_EQ(e.bytes, 2 * 1000 * 4);
      ++forwards;
    }
  EXPECT_EQ(forwards, 3 * 4);
  // The replicas hold the profiled parameter bytes.
  auto model = build_emulated_model(prof, {});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(model->parameter_bytes(i), prof.layers[i].parameter_bytes);
}

}  // namespace
}  // namespace pt::runtime
