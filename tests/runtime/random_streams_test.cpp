// Dropout's masks come from a stream per layer (LayeredModel::set_random_stream): the same masks
// whichever stage holds a layer and however the threads run, other masks on another replica.
// From the process's one generator, the workers of a threads run drew in the order their
// threads reached it (weights 13-35% apart from run to run), and gloo processes drew the same
// masks on every stage and every replica.
#include <gtest/gtest.h>

#include "model/random_draws.h"
#include "pipeline_test_util.h"

namespace pt::runtime {
namespace {

using namespace testing;

std::shared_ptr<model::LayeredModel> dropout_mlp(const model::LayerSet& held = {}) {
  auto m = std::make_shared<model::LayeredModel>("dropout-mlp", model::Task::kClassification, std::vector<int64_t>{8},
                                                 false, held, 5);
  m->add("fc1", [] { return torch::nn::Sequential(torch::nn::Linear(8, 32), torch::nn::ReLU()); });
  m->add("drop1", [] { return torch::nn::Sequential(torch::nn::Dropout(0.5), torch::nn::Linear(32, 32)); });
  m->add("fc2", [] { return torch::nn::Sequential(torch::nn::Tanh(), torch::nn::Linear(32, 32)); });
  m->add("drop2", [] { return torch::nn::Sequential(torch::nn::Dropout(0.3), torch::nn::Linear(32, 4)); });
  return m;
}

TEST(RandomStreams, ALayerDrawsItsOwnStreamWhereverItIsHeld) {
  auto whole = dropout_mlp(), part = dropout_mlp(model::LayerSet({1}));
  EXPECT_TRUE(model::draws_random(*whole->layer(1).module));
  EXPECT_FALSE(model::draws_random(*whole->layer(0).module));
  torch::Tensor x = torch::randn({16, 32});
  // Layer 1 alone, and after the whole model drew for layers 0..3 once: its own stream only.
  whole->forward(torch::randn({16, 8}));
  torch::manual_seed(99);  // the process's generator plays no part
  torch::Tensor a = whole->forward(x, 1, 2), b = part->forward(x, 1, 2);
  EXPECT_FALSE(torch::equal(a, b)) << "layer 1 of the whole model drew once already: its second mask is another";
  EXPECT_TRUE(torch::equal(part->forward(x, 1, 2), a)) << "the part's second draw is the whole model's second";
  // Another stream (a replica's), other masks; the same stream again, the same.
  auto other = dropout_mlp(model::LayerSet({1}));
  other->set_random_stream(1);
  EXPECT_FALSE(torch::equal(other->forward(x, 1, 2), dropout_mlp(model::LayerSet({1}))->forward(x, 1, 2)));
  other->set_random_stream(0);
  EXPECT_TRUE(torch::equal(other->forward(x, 1, 2), dropout_mlp(model::LayerSet({1}))->forward(x, 1, 2)));
  // In evaluation, no draws.
  whole->train(false);
  EXPECT_TRUE(torch::equal(whole->forward(x, 1, 2), whole->forward(x, 1, 2)));
}

TEST(RandomStreams, APipelineWithDropoutTrainsTheSameWeightsOnAnySplitAndEveryRun) {
  auto data = model::synthetic_data(*dropout_mlp(), 256, 16, 4, 1);
  PipelineOptions o;
  o.schedule = "1f1b";
  o.microbatches = 4;
  o.train.steps = 6;
  o.train.batch_size = 32;
  o.train.sgd = {0.05, 0.9, 0};
  o.train.quiet = true;
  o.train.evaluate = false;
  o.timeout_s = 20;
  auto trained = [&](int stages) {
    std::vector<std::unique_ptr<Worker>> workers;
    plan::Plan plan = plan::even_split(unit_profile(*dropout_mlp()), stages);
    train_pipeline(dropout_mlp, data, plan, o, &workers);
    return pipeline_weights(generate_schedule(plan, o, 1), workers);
  };
  std::vector<torch::Tensor> two = trained(2);
  EXPECT_TRUE(bitwise_equal(trained(2), two)) << "two runs of one pipeline on threads";
  EXPECT_TRUE(bitwise_equal(trained(4), two)) << "4 stages against 2";
  EXPECT_TRUE(bitwise_equal(trained(1), two)) << "1 stage against 2";
}

}  // namespace
}  // namespace pt::runtime
