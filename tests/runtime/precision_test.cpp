// --precision bf16 (model/precision.h): autocast's compute, fp32 master weights, and the bytes
// crossing each stage boundary halved, in the trace and in the profile.
#include <gtest/gtest.h>

#include "pipeline_test_util.h"
#include "profile/profiler.h"

namespace pt::runtime {
namespace {

using namespace testing;

std::shared_ptr<model::LayeredModel> cnn(model::Precision p, const model::LayerSet& held = {}) {
  auto m = seeded_cnn(5, held);
  m->set_precision(p);
  return m;
}

TEST(Precision, AScopeIsAutocastAndLeavesAsItFound) {
  torch::nn::Linear linear(8, 4);
  torch::Tensor x = torch::randn({2, 8});
  EXPECT_EQ(linear->forward(x).scalar_type(), torch::kFloat32);
  {
    model::ComputeScope outer(model::Precision::kBFloat16);
    EXPECT_EQ(linear->forward(x).scalar_type(), torch::kBFloat16);
    {
      model::ComputeScope inner(model::Precision::kBFloat16);
      EXPECT_EQ(linear->forward(x).scalar_type(), torch::kBFloat16);
    }
    EXPECT_EQ(linear->forward(x).scalar_type(), torch::kBFloat16);  // the inner scope left the outer's on
    model::ComputeScope off(model::Precision::kFloat32);               // fp32 changes nothing
    EXPECT_EQ(linear->forward(x).scalar_type(), torch::kBFloat16);
  }
  EXPECT_EQ(linear->forward(x).scalar_type(), torch::kFloat32);
  // A weight changed in place between scopes is cast afresh (the cache went with the scope).
  torch::Tensor before;
  {
    model::ComputeScope s(model::Precision::kBFloat16);
    before = linear->forward(x);
  }
  {
    torch::NoGradGuard no_grad;
    linear->weight.mul_(2);
    linear->bias.mul_(2);
  }
  model::ComputeScope s(model::Precision::kBFloat16);
  EXPECT_TRUE(torch::allclose(linear->forward(x).to(torch::kFloat32), 2 * before.to(torch::kFloat32), 1e-2, 1e-2));
}

TEST(Precision, TheWireIsBf16AndArrivesAsFp32) {
  torch::Tensor a = torch::randn({3, 5});
  torch::Tensor ids = torch::arange(4);
  EXPECT_EQ(model::to_wire(a, model::Precision::kBFloat16).scalar_type(), torch::kBFloat16);
  EXPECT_EQ(model::from_wire(a.to(torch::kBFloat16), model::Precision::kBFloat16).scalar_type(), torch::kFloat32);
  EXPECT_EQ(model::wire_bytes(a, model::Precision::kBFloat16), 30);
  EXPECT_EQ(model::wire_bytes(a, model::Precision::kFloat32), 60);
  EXPECT_EQ(model::to_wire(ids, model::Precision::kBFloat16).scalar_type(), torch::kInt64);  // ids stay ids
  EXPECT_TRUE(model::to_wire(a, model::Precision::kFloat32).is_same(a));
  EXPECT_THROW(model::parse_precision("fp16", "--precision"), UsageError);
}

// Training options of the runs below: 6 steps of 32, AdamW.
TrainOptions options() {
  TrainOptions t;
  t.steps = 6;
  t.batch_size = 32;
  t.sgd.kind = "adamw";
  t.sgd.lr = 1e-3;
  t.sgd.weight_decay = 0.01;
  t.seed = 5;
  t.quiet = true;
  t.evaluate = false;
  return t;
}

struct PrecisionRun {
  PipelineResult result;
  std::vector<torch::Tensor> weights;
  int64_t sent_bytes = 0;  // every send of the trace
};

PrecisionRun pipeline(model::Precision p, const model::DataSplit& data) {
  PipelineOptions o;
  o.schedule = "1f1b";
  o.microbatches = 2;
  o.train = options();
  o.timeout_s = 30;
  auto plan = plan::even_split(unit_profile(*cnn(p)), 2);
  std::vector<std::unique_ptr<Worker>> workers;
  PrecisionRun r;
  r.result = train_pipeline([p](const model::LayerSet& held) { return cnn(p, held); }, data, plan, o, &workers);
  r.weights = pipeline_weights(generate_schedule(plan, o, 1), workers);
  for (const auto& events : r.result.trace.workers)
    for (const auto& e : events)
      if (schedule::is_send(e.action.kind)) r.sent_bytes += e.bytes;
  return r;
}

TEST(Precision, Bf16StagesSendHalfTheBytesKeepFp32WeightsAndTrainAsOneWorker) {
  auto data = model::synthetic_data(*cnn(model::Precision::kFloat32), 192, 32, 10, 7);
  PrecisionRun fp32 = pipeline(model::Precision::kFloat32, data);
  PrecisionRun bf16 = pipeline(model::Precision::kBFloat16, data);
  ASSERT_GT(fp32.sent_bytes, 0);
  EXPECT_EQ(2 * bf16.sent_bytes, fp32.sent_bytes);
  for (const auto& w : bf16.weights) EXPECT_EQ(w.scalar_type(), torch::kFloat32);  // the master copy
  // bf16 computed: the weights end away from fp32's, which pipelines match to 1e-5.
  EXPECT_GT(max_relative_error(bf16.weights, fp32.weights), 1e-4);
  // One worker in bf16 (no boundary) trains to the same loss.
  auto one = cnn(model::Precision::kBFloat16);
  double alone = train_single_worker(*one, data, options()).final_loss;
  EXPECT_NEAR(bf16.result.train.final_loss, alone, 0.02 * alone);
}

TEST(Precision, ABf16ProfileCountsBf16BytesBetweenLayers) {
  auto data = model::synthetic_data(*cnn(model::Precision::kFloat32), 64, 16, 10, 7);
  auto measure = [&](model::Precision p) {
    auto m = cnn(p);
    return profile::measure_profile(*m, data.train.first_inputs(16), {0, 1}, data.train.first_targets(16));
  };
  profile::Profile fp32 = measure(model::Precision::kFloat32), bf16 = measure(model::Precision::kBFloat16);
  EXPECT_EQ(fp32.precision, "fp32");
  EXPECT_EQ(bf16.precision, "bf16");
  ASSERT_EQ(fp32.num_layers(), bf16.num_layers());
  for (int l = 0; l < fp32.num_layers(); ++l) {
    EXPECT_EQ(2 * bf16.layers[l].activation_bytes, fp32.layers[l].activation_bytes) << "layer " << l;
    EXPECT_EQ(bf16.layers[l].parameter_bytes, fp32.layers[l].parameter_bytes) << "layer " << l;  // fp32 weights
  }
}

}  // namespace
}  // namespace pt::runtime
