// PipeDream on 4 stages reaches single-worker accuracy on Fashion-MNIST in 2 epochs (issue 31),
// with the CLI's defaults (batch 64, lr 0.02, momentum 0.9, constant rate), as the mean of 3
// seeds: weight prediction and the stale stages' warm-up on (their defaults). The paper's
// stashing alone lost 2.1 points here (docs/runtime.md). Label `slow`: six full trainings.
//
// Both sides are trained here, as `pipetrain train` trains them: the pipeline on the split
// `train --stages 4` makes from the profile it measures (a hand-set split held the test where
// the command's own ended 0.9 points under, issue 70), one worker from the same weights. One
// worker's accuracy was a constant measured once; the per-layer seeding of the weights (issue
// 66) moved it from 89.14% to 88.68% and the constant went stale unnoticed.
#include <gtest/gtest.h>

#include <iostream>

#include "core/host_allocator.h"
#include "model/compute_threads.h"
#include "model/zoo.h"
#include "pipeline_test_util.h"
#include "profile/profiler.h"
#include "runtime/trainer.h"

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

constexpr double kTolerance = 0.005;  // how far below one worker's mean the pipeline's may end

TEST(Accuracy, PipedreamOnTheCommandsFourStagesMatchesSingleWorker) {
  model::use_one_compute_thread();
  keep_freed_host_memory();  // as train does
  model::DataSplit data = model::load_fashion_mnist(model::kFashionMnistDir);
  double piped = 0, single = 0;
  for (uint64_t seed : {1, 2, 3}) {
    auto m = seeded_cnn(seed);
    // The split `train --stages 4` makes (job/request.cpp): an even split of the
    // profile measured here at the training's batch.
    TrainOptions t = settings(seed);
    profile::Profile prof = profile::measure_profile(*m, data.train.first_inputs(t.batch_size), {1, 3},
                                                     data.train.first_targets(t.batch_size));
    plan::Plan plan = plan::even_split(prof, 4);
    ASSERT_EQ(plan.num_stages(), 4);
    PipelineOptions o;
    o.schedule = "pipedream";
    o.train = t;
    PipelineResult four = train_pipeline([seed](const model::LayerSet& held = {}) { return seeded_cnn(seed, held); },
                                         data, plan, o);
    auto one_model = seeded_cnn(seed);
    TrainResult one = train_single_worker(*one_model, data, t);
    std::cerr << "seed " << seed << ", 2 epochs: pipedream on " << plan.shape() << " (layers";
    for (const auto& st : plan.stages) std::cerr << " " << st.layers.front() << "-" << st.layers.back();
    std::cerr << ") " << 100 * four.train.test_accuracy << "%, one worker " << 100 * one.test_accuracy << "%\n";
    piped += four.train.test_accuracy / 3;
    single += one.test_accuracy / 3;
  }
  std::cerr << "mean: pipedream " << 100 * piped << "%, one worker " << 100 * single << "%\n";
  EXPECT_GE(piped, single - kTolerance);
}

}  // namespace
}  // namespace pt::runtime
