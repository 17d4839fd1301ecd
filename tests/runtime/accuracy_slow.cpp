// PipeDream on 4 stages reaches single-worker accuracy on Fashion-MNIST in 2 epochs (issue 31),
// with the CLI's defaults (batch 64, lr 0.02, momentum 0.9, constant rate), as the mean of 3
// seeds: weight prediction and the stale stages' warm-up on (their defaults). The paper's
// stashing alone lost 2.1 points here (docs/runtime.md). Label `slow`: three full trainings.
//
// The single worker's accuracy is the one this test measured beside the pipeline until issue 32
// (one worker trained on the core the pipeline left idle, seeds 1-3: 89.02, 88.61, 89.78%; those
// runs are deterministic). Training it again here doubled the suite's longest test (200 s of
// CPU of the suite's 5 minutes) to recompute three fixed numbers; bench/async_accuracy.sh trains
// both side by side, and a change to single-worker training is held by Trainer.* and the
// imported models' fidelity to eager PyTorch (tests/python).
#include <gtest/gtest.h>

#include <iostream>

#include "core/host_allocator.h"
#include "model/compute_threads.h"
#include "model/zoo.h"
#include "pipeline_test_util.h"

namespace pt::runtime {
namespace {

using namespace testing;

TrainOptions settings(uint64_t seed) {
  TrainOptions t;  // the CLI's defaults
  t.epochs = 2;
  t.seed = seed;
  t.quiet = true;
  return t;
}

// One worker's mean over seeds 1-3 (above), and how far below it the pipeline may end.
constexpr double kSingleWorkerMean = (0.8902 + 0.8861 + 0.8978) / 3;
constexpr double kTolerance = 0.005;

TEST(Accuracy, PipedreamOnFourStagesMatchesSingleWorker) {
  model::use_one_compute_thread();
  keep_freed_host_memory();  // as train does
  model::DataSplit data = model::load_fashion_mnist(model::kFashionMnistDir);
  double piped = 0;
  for (uint64_t seed : {1, 2, 3}) {
    // Per-layer costs as `pipetrain profile` measures them here (ms, forward + backward), so the
    // split is the one `train --stages 4` makes: conv1 | conv2 | fc1 | fc2 fc3.
    auto m = seeded_cnn(seed);
    profile::Profile prof = unit_profile(*m);
    const double costs[] = {10.4, 15.0, 1.4, 0.2, 0.03};
    for (int i = 0; i < m->num_layers(); ++i) prof.layers[i].forward_ms = prof.layers[i].backward_ms = costs[i] / 2;
    plan::Plan plan = plan::even_split(prof, 4);
    ASSERT_EQ(plan.num_stages(), 4);
    PipelineOptions o;
    o.schedule = "pipedream";
    o.train = settings(seed);
    PipelineResult four = train_pipeline([seed](const model::LayerSet& held = {}) { return seeded_cnn(seed, held); }, data, plan, o);
    std::cerr << "seed " << seed << ", 2 epochs: pipedream 4 stages " << 100 * four.train.test_accuracy << "%\n";
    piped += four.train.test_accuracy / 3;
  }
  std::cerr << "mean: pipedream " << 100 * piped << "%, single worker " << 100 * kSingleWorkerMean << "%\n";
  EXPECT_GE(piped, kSingleWorkerMean - kTolerance);
}

}  // namespace
}  // namespace pt::runtime
