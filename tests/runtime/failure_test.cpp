// A failing worker brings the whole job down quickly, naming the worker, the action and the
// cause; no other worker is left waiting.
#include <gtest/gtest.h>

#include <chrono>

#include "core/error.h"
#include "pipeline_test_util.h"

namespace pt::runtime {
namespace {

using namespace testing;

TEST(PipelineFailure, BadShapeOnOneWorkerStopsTheJob) {
  auto m = seeded_cnn(1);
  // 20x20 images pass the convolutions but not fc1, which expects 32x7x7 inputs.
  model::DataSplit data;
  data.name = "bad";
  data.train = {torch::randn({64, 1, 20, 20}), torch::randint(10, {64}, torch::kInt64)};
  data.test = data.train;
  data.classes = 10;
  for (const std::string kind : {"1f1b", "pipedream"}) {
    PipelineOptions o;
    o.schedule = kind;
    o.train.steps = 4;
    o.train.batch_size = 16;
    o.train.quiet = true;
    o.timeout_s = 60;  // the abort, not the deadline, must end the wait
    auto plan = plan::even_split(unit_profile(*m), 4);
    auto t0 = std::chrono::steady_clock::now();
    try {
      train_pipeline([](const model::LayerSet& held = {}) { return seeded_cnn(1, held); }, data, plan, o);
      ADD_FAILURE() << kind << ": no error";
    } catch (const RuntimeFailure& e) {
      std::string msg = e.what();
      // fc1 is layer 2; with 4 stages over 5 layers it is on a middle stage.
      int stage = 0;
      for (int s = 0; s < plan.num_stages(); ++s)
        for (int l : plan.stages[s].layers)
          if (l == 2) stage = s;
      EXPECT_NE(msg.find("worker " + std::to_string(stage) + " at " + std::to_string(stage) + "F0"), std::string::npos) << msg;
      EXPECT_NE(msg.find("mat1 and mat2 shapes cannot be multiplied"), std::string::npos) << msg;
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(secs, 10) << kind;
  }
}

// A worker whose forward never returns (a model's loop on a bad sample) cannot be stopped in
// its thread: the job hung after its peer's timeout, saying nothing. The process now says why a
// timeout later and exits 1.
std::shared_ptr<model::LayeredModel> spinning_model(const model::LayerSet& held) {
  auto m = std::make_shared<model::LayeredModel>("spin", model::Task::kClassification, std::vector<int64_t>{4}, false,
                                                 held, 1);
  m->add("fc0", [] { return torch::nn::Sequential(torch::nn::Linear(4, 4)); });
  m->add("spin_fc1", [] {
    return torch::nn::Sequential(torch::nn::Functional([](torch::Tensor x) {
                                   while (!(x.abs() < 1e30).all().item<bool>()) {  // inf or NaN
                                   }
                                   return x;
                                 }),
                                 torch::nn::Linear(4, 2));
  });
  return m;
}

TEST(PipelineFailureDeathTest, AWorkerThatNeverReturnsEndsTheProcessWithAMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  model::DataSplit data;
  data.name = "spin";
  data.train = {torch::ones({32, 4}), torch::zeros({32}, torch::kInt64)};
  data.train.inputs[20].fill_(3e38);  // fc0's output of it overflows: the second minibatch spins
  data.test = data.train;
  data.classes = 2;
  PipelineOptions o;
  o.schedule = "1f1b";
  o.train.steps = 4;
  o.train.batch_size = 16;
  o.train.shuffle = false;
  o.train.quiet = true;
  o.timeout_s = 1;
  auto plan = plan::even_split(unit_profile(*spinning_model({})), 2);
  EXPECT_EXIT(train_pipeline(spinning_model, data, plan, o), ::testing::ExitedWithCode(1),
              "pipeline failed: worker 0 at .*; worker 1 did not stop within 1 s \\(--timeout\\) of it, in a "
              "compute that does not return: exiting");
}

TEST(PipelineFailure, MicrobatchesMustDivideTheBatch) {
  auto m = seeded_cnn(1);
  auto data = model::synthetic_data(*m, 64, 8, 10, 1);
  PipelineOptions o;
  o.schedule = "gpipe";
  o.microbatches = 3;
  o.train.batch_size = 16;
  try {
    train_pipeline([](const model::LayerSet& held = {}) { return seeded_cnn(1, held); }, data, plan::even_split(unit_profile(*m), 2), o);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "--microbatches: 3 does not divide --batch-size 16");
  }
}

}  // namespace
}  // namespace pt::runtime
