// PipeDream on 4 stages reaches single-worker accuracy on Fashion-MNIST in 2 epochs (issue 5):
// both runs use the same settings (batch 32, lr 0.02, momentum 0.9, cosine decay after 200 warm-up
// minibatches). Label `slow`: two full trainings, a few minutes on 2 cores.
#include <gtest/gtest.h>

#include <iostream>

#include "model/compute_threads.h"
#include "model/zoo.h"
#include "pipeline_test_util.h"

namespace pt::runtime {
namespace {

using namespace testing;

TrainOptions settings() {
  TrainOptions t;
  t.epochs = 2;
  t.batch_size = 32;
  t.sgd.lr = 0.02;
  t.sgd.momentum = 0.9;
  t.sgd.lr_schedule = "cosine";
  t.sgd.warmup_steps = 200;
  t.seed = 1;
  t.quiet = true;
  return t;
}

TEST(Accuracy, PipedreamOnFourStagesMatchesSingleWorker) {
  model::use_one_compute_thread();
  model::DataSplit data = model::load_fashion_mnist(model::kFashionMnistDir);
  auto single_model = seeded_cnn(1);
  TrainResult single = train_single_worker(*single_model, data, settings());

  // Per-layer costs as `pipetrain profile` measures them here (ms, forward + backward), so the
  // split is the one the CLI makes: conv1 | conv2 | fc1 | fc2 fc3.
  auto m = seeded_cnn(1);
  profile::Profile prof = unit_profile(*m);
  const double costs[] = {10.4, 15.0, 1.4, 0.2, 0.03};
  for (int i = 0; i < m->num_layers(); ++i) prof.layers[i].forward_ms = prof.layers[i].backward_ms = costs[i] / 2;
  plan::Plan plan = plan::even_split(prof, 4);
  ASSERT_EQ(plan.num_stages(), 4);
  PipelineOptions o;
  o.schedule = "pipedream";
  o.train = settings();
  PipelineResult piped = train_pipeline([] { return seeded_cnn(1); }, data, plan, o);

  std::cerr << "2 epochs: single worker " << 100 * single.test_accuracy << "% (" << single.samples_per_s
            << " samples/s), pipedream 4 stages " << 100 * piped.train.test_accuracy << "% ("
            << piped.train.samples_per_s << " samples/s)\n";
  EXPECT_GE(single.test_accuracy, 0.88);
  EXPECT_GE(piped.train.test_accuracy, 0.88);
}

}  // namespace
}  // namespace pt::runtime
