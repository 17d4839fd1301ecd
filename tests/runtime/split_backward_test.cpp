// Zero-bubble's B and W on one stage (runtime/split_backward.h): together they give the input
// and weight gradients of a whole backward, and W runs no node of the input-gradient chain
// again; a weight used twice in the stage falls back to a backward to the weights; a node some of
// whose outputs get no gradient (GroupNorm's mean and rstd) runs at W from those that do.
#include <gtest/gtest.h>

#include "model/layered_model.h"
#include "runtime/stage_replica.h"

namespace pt::runtime {
namespace {

// An elementwise op of the chain that counts its backward calls.
struct Counted : torch::autograd::Function<Counted> {
  static inline int calls = 0;
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x) {
    ctx->save_for_backward({x});
    return x * x;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    ++calls;
    return {2 * ctx->get_saved_variables()[0] * g[0]};
  }
};

// A parameter scaling a slice in place (h[:, :3] *= scale): autograd's CopySlices.
struct SliceScaleImpl : torch::nn::Module {
  SliceScaleImpl() : scale(register_parameter("scale", torch::full({3}, 1.5))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = x * 1.0;
    h.narrow(1, 0, 3).mul_(scale);
    return h;
  }
  torch::Tensor scale;
};
TORCH_MODULE(SliceScale);

enum class Stage { kPlain, kTied, kGroupNorm, kSliceScale, kTiedSliceScale };

// Layers: Linear, then the stage under test: Linear, Counted, Linear (kTied: the last Linear is
// the first one of the stage again; kGroupNorm: a GroupNorm before it; kSliceScale: a SliceScale
// before it).
std::shared_ptr<model::LayeredModel> model_of(Stage stage) {
  bool tied = stage == Stage::kTied || stage == Stage::kTiedSliceScale;
  bool slice = stage == Stage::kSliceScale || stage == Stage::kTiedSliceScale;
  torch::manual_seed(7);
  auto m = std::make_shared<model::LayeredModel>("split", model::Task::kClassification, std::vector<int64_t>{6}, false);
  torch::nn::Linear first(6, 6), shared(6, 6);
  m->add("l0", torch::nn::Sequential(torch::nn::Linear(6, 6)));
  m->add("l1", torch::nn::Sequential(shared));
  m->add("counted", torch::nn::Sequential(torch::nn::Functional([](torch::Tensor x) { return Counted::apply(x); })));
  torch::nn::Sequential last = tied ? torch::nn::Sequential(shared) : torch::nn::Sequential(first);
  if (stage == Stage::kGroupNorm) last = torch::nn::Sequential(torch::nn::GroupNorm(2, 6), first);
  if (slice) last = torch::nn::Sequential(SliceScale(), tied ? shared : first);
  m->add("l3", last);
  return m;
}

struct Backward {
  torch::Tensor input_grad;
  std::vector<torch::Tensor> grads;
  int b_calls = 0, w_calls = 0;  // Counted's backwards at B and at W
};

Backward run(Stage stage, bool split) {
  StageReplica r(model_of(stage), 1, 4, false, model::OptimizerOptions{}, false, 1);
  torch::manual_seed(8);
  torch::Tensor x = torch::randn({5, 6}), g = torch::randn({5, 6});
  r.forward(0, x, {}, 1);
  Backward out;
  Counted::calls = 0;
  out.input_grad = r.backward(0, g, split);
  out.b_calls = Counted::calls;
  if (split) r.backward_weight(0);
  out.w_calls = Counted::calls - out.b_calls;
  for (const auto& b : r.flat().grads()) out.grads.push_back(b.clone());
  return out;
}

void expect_same(const Backward& a, const Backward& b) {
  EXPECT_TRUE(torch::allclose(a.input_grad, b.input_grad, 1e-6, 1e-7));
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    EXPECT_GT(a.grads[i].abs().sum().item<double>(), 0);
    EXPECT_TRUE(torch::allclose(a.grads[i], b.grads[i], 1e-6, 1e-7)) << i;
  }
}

TEST(SplitBackward, GivesTheWholeBackwardsGradientsAndRunsTheChainOnce) {
  Backward whole = run(Stage::kPlain, false), split = run(Stage::kPlain, true);
  expect_same(split, whole);
  EXPECT_EQ(whole.b_calls, 1);
  EXPECT_EQ(split.b_calls, 1);
  EXPECT_EQ(split.w_calls, 0);  // two backward calls ran it again at W
}

TEST(SplitBackward, AWeightUsedTwiceInTheStageFallsBackToABackwardToTheWeights) {
  Backward whole = run(Stage::kTied, false), split = run(Stage::kTied, true);
  expect_same(split, whole);
  EXPECT_EQ(split.w_calls, 1);
}

// Its W aborted the process from inside LibTorch: a gradient it did not get was handed to the
// engine as an undefined tensor (profile, --stages and zero-bubble schedules of such models).
TEST(SplitBackward, ANodeWhoseOtherOutputsGetNoGradientRunsAtW) {
  Backward whole = run(Stage::kGroupNorm, false), split = run(Stage::kGroupNorm, true);
  expect_same(split, whole);
  EXPECT_EQ(split.w_calls, 0);
}

// B accumulated `scale`'s gradient (CopySlices marks the node it wraps as needed, with its weight
// edges) and W again: doubled, exit 0, on every zero-bubble schedule; also where the split falls
// back to two backward calls (a weight used twice).
TEST(SplitBackward, AParameterScalingASliceInPlaceGetsItsGradientOnce) {
  for (Stage stage : {Stage::kSliceScale, Stage::kTiedSliceScale}) {
    SCOPED_TRACE(stage == Stage::kSliceScale ? "split" : "fallback");
    Backward whole = run(stage, false), split = run(stage, true);
    expect_same(split, whole);
  }
}

}  // namespace
}  // namespace pt::runtime
