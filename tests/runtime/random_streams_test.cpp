// Dropout's masks are drawn per layer and microbatch (LayeredModel::set_draw_key): the same masks
// whichever stage, replica or worker runs a microbatch, however the threads run, and again in a
// recomputed forward.
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

TEST(RandomStreams, AMicrobatchsMasksAreTheSameWhereverItsLayerIsHeld) {
  auto whole = dropout_mlp(), part = dropout_mlp(model::LayerSet({1}));
  EXPECT_TRUE(model::draws_random(*whole->layer(1).module));
  EXPECT_FALSE(model::draws_random(*whole->layer(0).module));
  torch::Tensor x = torch::randn({16, 32});
  whole->set_draw_key(5);
  part->set_draw_key(5);
  whole->forward(torch::randn({16, 8}));  // draws for layers 0..3: no stream runs on
  torch::manual_seed(99);                  // and the process's generator plays no part
  torch::Tensor a = whole->forward(x, 1, 2);
  EXPECT_TRUE(torch::equal(part->forward(x, 1, 2), a)) << "microbatch 5's masks, on a worker holding layer 1 alone";
  EXPECT_TRUE(torch::equal(part->forward(x, 1, 2), a)) << "again (a recomputed forward)";
  part->set_draw_key(6);
  EXPECT_FALSE(torch::equal(part->forward(x, 1, 2), a)) << "microbatch 6 draws other masks";
  // In evaluation, no draws.
  whole->train(false);
  EXPECT_TRUE(torch::allclose(whole->forward(x, 1, 2), x.matmul(whole->layer(1).module->parameters()[0].t()) +
                                                            whole->layer(1).module->parameters()[1]));
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
  // A recomputed forward draws its microbatch's masks again: the plain backward's weights.
  {
    std::vector<std::unique_ptr<Worker>> workers;
    plan::Plan plan = plan::even_split(unit_profile(*dropout_mlp()), 2);
    for (auto& st : plan.stages) st.recompute = true;
    train_pipeline(dropout_mlp, data, plan, o, &workers);
    EXPECT_TRUE(bitwise_equal(pipeline_weights(generate_schedule(plan, o, 1), workers), two)) << "recomputed";
  }
  // Data parallelism's replicas draw each microbatch's masks as a pipeline does (the all-reduce
  // sums in another order).
  {
    std::vector<std::unique_ptr<Worker>> workers;
    PipelineOptions dp = o;
    dp.schedule = "dp";
    plan::Plan plan = replicated_plan(*dropout_mlp(), 2);
    train_pipeline(dropout_mlp, data, plan, dp, &workers);
    EXPECT_LT(max_relative_error(pipeline_weights(generate_schedule(plan, dp, 1), workers), two), 1e-5) << "dp over 2";
  }
}

}  // namespace
}  // namespace pt::runtime
