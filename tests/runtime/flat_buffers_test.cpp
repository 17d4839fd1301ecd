// Flat parameter and gradient buffers (model/flat_parameters.h), the SGD step on them and the
// gradient buckets that all-reduce during the backward (runtime/gradient_buckets.h).
#include <gtest/gtest.h>

#include <cmath>

#include "model/memory_meter.h"
#include "pipeline_test_util.h"
#include "runtime/gradient_buckets.h"
#include "model/optimizer.h"

namespace pt::runtime {
namespace {

using namespace testing;

torch::Tensor batch_loss(model::LayeredModel& m, uint64_t seed) {
  torch::manual_seed(seed);
  auto x = torch::randn({8, 1, 28, 28});
  auto y = torch::randint(0, 10, {8});
  return m.loss(m.forward(x), y);
}

TEST(FlatParameters, ParametersAndGradientsAreViewsThatSurviveBackward) {
  auto m = seeded_cnn(7);
  auto before = m->parameters();
  std::vector<torch::Tensor> values;
  for (auto& p : before) values.push_back(p.detach().clone());
  model::FlatParameters flat(m->parameters());
  ASSERT_EQ(flat.weights().size(), 1u);  // one dtype: one buffer
  auto params = m->parameters();
  int64_t total = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::equal(params[i].detach(), values[i])) << "parameter " << i << " kept its value";
    EXPECT_EQ(params[i].data_ptr<float>(), flat.weights()[0].data_ptr<float>() + total);
    EXPECT_EQ(params[i].grad().data_ptr<float>(), flat.grads()[0].data_ptr<float>() + total);
    total += params[i].numel();
  }
  EXPECT_EQ(flat.weights()[0].numel(), total);
  for (uint64_t seed : {1, 2}) batch_loss(*m, seed).backward();  // accumulates twice
  float* grads = flat.grads()[0].data_ptr<float>();
  for (auto& p : params) {
    EXPECT_EQ(p.grad().data_ptr<float>(), grads) << "autograd replaced a gradient view";
    grads += p.numel();
  }
  EXPECT_GT(flat.grads()[0].abs().sum().item<double>(), 0);
}

TEST(FlatParameters, TiedWeightsShareOneSlot) {
  auto a = torch::randn({3, 4}).requires_grad_(true);
  auto b = torch::randn({4}).requires_grad_(true);
  model::FlatParameters flat({a, b, a});
  EXPECT_EQ(flat.slots().size(), 2u);
  EXPECT_EQ(flat.weights()[0].numel(), 16);
}

TEST(FlatParameters, StashedVersionIsOneCopyAndSwappingBackRestores) {
  auto m = seeded_cnn(7);
  model::FlatParameters flat(m->parameters());
  auto stash = flat.copy_weights();
  ASSERT_EQ(stash.size(), 1u);
  EXPECT_NE(stash[0].data_ptr(), flat.weights()[0].data_ptr());
  auto newest = flat.weights()[0].clone();
  flat.weights()[0].add_(1.0);
  auto saved = m->parameters()[0].detach().flatten();  // a view, as autograd saves a Linear's weight.t()
  flat.swap_weights(stash);
  EXPECT_TRUE(torch::equal(flat.weights()[0], newest));  // the stashed version, in place
  EXPECT_TRUE(torch::equal(saved, m->parameters()[0].detach().flatten()));  // seen through every view
  EXPECT_TRUE(torch::equal(saved, newest.narrow(0, 0, saved.numel())));
  EXPECT_TRUE(torch::equal(stash[0], newest + 1.0));
  flat.swap_weights(stash);
  EXPECT_TRUE(torch::equal(flat.weights()[0], newest + 1.0));
  EXPECT_TRUE(torch::equal(stash[0], newest));
  auto again = flat.copy_weights(stash);  // a released stash is reused, not reallocated
  EXPECT_EQ(again[0].data_ptr(), stash[0].data_ptr());
  EXPECT_TRUE(torch::equal(again[0], flat.weights()[0]));
}

// The fused step on the flat buffers gives torch::optim::SGD's weights bit for bit (momentum,
// weight decay, several steps), the first step included (its momentum starts at zero here).
TEST(Sgd, FlatStepIsTorchSgdExactly) {
  auto ours = seeded_cnn(9), theirs = seeded_cnn(9);
  model::FlatParameters flat(ours->parameters());
  model::OptimizerOptions o{0.05, 0.9, 1e-3};
  model::Optimizer sgd(flat, o);
  torch::optim::SGD reference(theirs->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
  for (uint64_t step = 0; step < 3; ++step) {
    batch_loss(*ours, step).backward();
    sgd.step(1.0, step);
    reference.zero_grad();
    batch_loss(*theirs, step).backward();
    reference.step();
  }
  auto a = ours->parameters(), b = theirs->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].detach(), b[i].detach())) << "parameter " << i;
  EXPECT_EQ(flat.grads()[0].abs().sum().item<double>(), 0) << "the step zeroes the gradients";
}

// Adam and AdamW on the flat buffers give LibTorch's own per-parameter optimizers' weights (the
// decay L2 in one, decoupled in the other), the moments' bias corrections over several steps.
TEST(Sgd, FlatAdamIsTorchAdamExactly) {
  for (const std::string kind : {"adam", "adamw"}) {
    SCOPED_TRACE(kind);
    auto ours = seeded_cnn(9), theirs = seeded_cnn(9);
    model::FlatParameters flat(ours->parameters());
    model::OptimizerOptions o{0.01, 0.9, 0.1};
    o.kind = kind;
    o.beta1 = 0.8;
    o.beta2 = 0.95;
    o.eps = 1e-6;
    model::Optimizer adam(flat, o);
    std::unique_ptr<torch::optim::Optimizer> reference;
    if (kind == "adam")
      reference = std::make_unique<torch::optim::Adam>(
          theirs->parameters(), torch::optim::AdamOptions(0.01).betas({0.8, 0.95}).eps(1e-6).weight_decay(0.1));
    else
      reference = std::make_unique<torch::optim::AdamW>(
          theirs->parameters(), torch::optim::AdamWOptions(0.01).betas({0.8, 0.95}).eps(1e-6).weight_decay(0.1));
    for (uint64_t step = 0; step < 4; ++step) {
      batch_loss(*ours, step).backward();
      adam.step(1.0, step);
      reference->zero_grad();
      batch_loss(*theirs, step).backward();
      reference->step();
    }
    EXPECT_EQ(adam.steps_taken(), 4);
    auto a = ours->parameters(), b = theirs->parameters();
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i)
      worst = std::max(worst, (a[i].detach() - b[i].detach()).abs().max().item<double>());
    EXPECT_LE(worst, 1e-7);
    EXPECT_GT((a[0].detach() - seeded_cnn(9)->parameters()[0].detach()).abs().max().item<double>(), 1e-3);
  }
}

// A parameter no backward reached is skipped, as torch.optim skips a .grad of None: here the
// middle of three, which the loss reads only at steps 1 and 2. zero_grad "none" steps it at those
// two alone; "zeros" from its first gradient on (a zero one at step 3). LibTorch's AdamW with
// decay is stepped the same way, its .grad set to none (or zeros) by hand.
TEST(Sgd, AParameterNoBackwardReachedIsSkipped) {
  auto loss_at = [](const std::vector<torch::Tensor>& p, int step) {
    torch::Tensor h = p[0] * 2;
    if (step == 1 || step == 2) h = h * p[1];
    return (h * p[2]).pow(2).sum();
  };
  for (const std::string mode : {"none", "zeros"}) {
    SCOPED_TRACE(mode);
    torch::manual_seed(4);
    std::vector<torch::Tensor> ours, theirs;
    for (int i = 0; i < 3; ++i) {
      ours.push_back(torch::randn({5}).requires_grad_());
      theirs.push_back(ours.back().detach().clone().requires_grad_());
    }
    model::FlatParameters flat(ours);
    model::OptimizerOptions o{0.01, 0.9, 0.1};
    o.kind = "adamw";
    o.zero_grad = mode;
    model::Optimizer adam(flat, o);
    torch::optim::AdamW reference(theirs, torch::optim::AdamWOptions(0.01).weight_decay(0.1));
    for (int step = 0; step < 4; ++step) {
      loss_at(ours, step).backward();
      adam.step(1.0, step);
      for (auto& p : theirs) p.mutable_grad() = mode == "none" || !p.grad().defined() ? torch::Tensor() : p.grad().zero_();
      loss_at(theirs, step).backward();
      reference.step();
    }
    EXPECT_EQ(adam.steps_taken(1), mode == "none" ? 2 : 3);
    EXPECT_EQ(adam.steps_taken(0), 4);
    for (int i = 0; i < 3; ++i) EXPECT_LE((ours[i] - theirs[i]).abs().max().item<double>(), 1e-7) << "parameter " << i;
  }
}

// The one-pass step (model/fused_step.h) is LibTorch's optimizers bit for bit in every variant a
// run can ask for: float and double weights, sgd with and without momentum, adam and adamw, decay
// on the matrices only (torch's two parameter groups), gradients scaled before the step (here by
// 0.3, which rounds), over several steps.
TEST(Sgd, OnePassStepIsTorchOptimBitForBitInEveryVariant) {
  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    for (const std::string kind : {"sgd", "sgd-no-momentum", "adam", "adamw"}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " " + kind);
      torch::manual_seed(3);
      std::vector<torch::Tensor> ours, theirs;
      for (auto shape : std::vector<std::vector<int64_t>>{{8, 5}, {8}, {3, 8}, {3}}) {
        ours.push_back(torch::randn(shape, dtype).requires_grad_(true));
        theirs.push_back(ours.back().detach().clone().requires_grad_(true));
      }
      model::OptimizerOptions o;
      o.lr = 0.05;
      o.weight_decay = 0.1;
      o.weight_decay_on = "matrices";
      o.kind = kind == "sgd-no-momentum" ? "sgd" : kind;
      o.momentum = kind == "sgd-no-momentum" ? 0 : 0.9;
      o.beta1 = 0.8;
      o.beta2 = 0.95;
      o.eps = 1e-6;
      model::FlatParameters flat(ours, [&](const torch::Tensor& p) { return o.decays(p); });
      model::Optimizer step(flat, o);
      std::vector<torch::optim::OptimizerParamGroup> groups;
      using namespace torch::optim;
      auto group_options = [&](double wd) -> std::unique_ptr<OptimizerOptions> {
        if (o.kind == "sgd")
          return std::make_unique<SGDOptions>(SGDOptions(o.lr).momentum(o.momentum).weight_decay(wd));
        if (o.kind == "adam")
          return std::make_unique<AdamOptions>(AdamOptions(o.lr).betas({0.8, 0.95}).eps(1e-6).weight_decay(wd));
        return std::make_unique<AdamWOptions>(AdamWOptions(o.lr).betas({0.8, 0.95}).eps(1e-6).weight_decay(wd));
      };
      groups.emplace_back(std::vector<torch::Tensor>{theirs[0], theirs[2]}, group_options(o.weight_decay));
      groups.emplace_back(std::vector<torch::Tensor>{theirs[1], theirs[3]}, group_options(0));
      std::unique_ptr<torch::optim::Optimizer> reference;
      if (o.kind == "sgd") reference = std::make_unique<torch::optim::SGD>(groups, torch::optim::SGDOptions(o.lr));
      if (o.kind == "adam") reference = std::make_unique<torch::optim::Adam>(groups);
      if (o.kind == "adamw") reference = std::make_unique<torch::optim::AdamW>(groups);
      for (int64_t minibatch = 0; minibatch < 4; ++minibatch) {
        for (size_t i = 0; i < ours.size(); ++i) {
          torch::Tensor g = torch::randn(ours[i].sizes(), dtype);
          ours[i].mutable_grad().copy_(g);  // a view into the flat gradient buffer
          theirs[i].mutable_grad() = g.mul(0.3);
        }
        step.step(0.3, minibatch);
        reference->step();
      }
      for (size_t i = 0; i < ours.size(); ++i) {
        EXPECT_TRUE(torch::equal(ours[i].detach(), theirs[i].detach()))
            << "parameter " << i << ": off by " << (ours[i] - theirs[i]).abs().max().item<double>();
        EXPECT_EQ(ours[i].grad().abs().sum().item<double>(), 0) << "the step zeroes the gradients";
      }
    }
  }
}

// A rate of 0.5 over 150 steps, the first 100 a warm-up, then `schedule`.
model::OptimizerOptions warmed_up_then(const std::string& schedule) {
  model::OptimizerOptions o;
  o.lr = 0.5;
  o.lr_schedule = schedule;
  o.total_steps = 150;
  o.warmup_steps = 100;
  return o;
}

// A warm-up, then the cosine over the steps after it (nanoGPT's and transformers' schedule): the
// two were multiplied from step 0, so a warm-up of 100 in 150 steps never passed 0.4 of the rate.
TEST(Sgd, CosineDecaysFromTheRateAfterTheWarmUp) {
  model::OptimizerOptions o = warmed_up_then("cosine");
  EXPECT_DOUBLE_EQ(model::learning_rate(o, 0), 0.5 / 100);
  EXPECT_DOUBLE_EQ(model::learning_rate(o, 49), 0.5 * 50 / 100);
  EXPECT_DOUBLE_EQ(model::learning_rate(o, 100), 0.5);  // the rate itself, once warmed up
  EXPECT_NEAR(model::learning_rate(o, 125), 0.5 * 0.5 * (1 + std::cos(M_PI * 25 / 50)), 1e-15);
  EXPECT_NEAR(model::learning_rate(o, 150), 0, 1e-15);
  o.warmup_steps = 0;  // no warm-up: the cosine over every step
  EXPECT_DOUBLE_EQ(model::learning_rate(o, 0), 0.5);
  EXPECT_NEAR(model::learning_rate(o, 75), 0.25, 1e-15);
  // A stale stage ramps up longer (pipedream), its cosine starting where every stage's does.
  o.warmup_steps = 100;
  o.stale_warmup_steps = 120;
  EXPECT_DOUBLE_EQ(model::learning_rate(o, 99), 0.5 * 100 / 120);
  EXPECT_NEAR(model::learning_rate(o, 110), 0.5 * 111 / 120 * 0.5 * (1 + std::cos(M_PI * 10 / 50)), 1e-15);
  EXPECT_NEAR(model::learning_rate(o, 130), 0.5 * 0.5 * (1 + std::cos(M_PI * 30 / 50)), 1e-15);
  o.stale_warmup_steps = 0;
  o.lr_schedule = "constant";
  o.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(model::learning_rate(o, 1), 0.25);
  EXPECT_DOUBLE_EQ(model::learning_rate(o, 10), 0.5);
}

// transformers' linear schedule after the warm-up, and either decay ending at --min-lr (nanoGPT's
// min_lr) rather than 0; a stale stage's ramp is never raised to it.
TEST(Sgd, LinearAndCosineDecayToTheFloor) {
  model::OptimizerOptions o = warmed_up_then("linear");
  EXPECT_DOUBLE_EQ(model::learning_rate(o, 49), 0.5 * 50 / 100);
  EXPECT_DOUBLE_EQ(model::learning_rate(o, 100), 0.5);
  EXPECT_DOUBLE_EQ(model::learning_rate(o, 120), 0.5 * (150 - 120) / 50.0);
  EXPECT_DOUBLE_EQ(model::learning_rate(o, 150), 0);
  o.min_lr = 0.05;
  EXPECT_DOUBLE_EQ(model::learning_rate(o, 49), 0.5 * 50 / 100);  // the warm-up starts from 0 still
  EXPECT_DOUBLE_EQ(model::learning_rate(o, 120), 0.05 + 0.45 * (150 - 120) / 50.0);
  EXPECT_DOUBLE_EQ(model::learning_rate(o, 150), 0.05);
  EXPECT_DOUBLE_EQ(model::learning_rate(o, 400), 0.05);
  o.lr_schedule = "cosine";
  EXPECT_NEAR(model::learning_rate(o, 125), 0.05 + 0.45 * 0.5 * (1 + std::cos(M_PI * 25 / 50)), 1e-15);
  EXPECT_NEAR(model::learning_rate(o, 150), 0.05, 1e-15);
  o.warmup_steps = 10;
  o.stale_warmup_steps = 1000;  // a ramp under the floor stays the ramp
  EXPECT_DOUBLE_EQ(model::learning_rate(o, 20), 0.5 * 21 / 1000);
}

// Weight prediction (SpecTrain): a copy of the weights moved `steps` updates along momentum's
// velocity, w - steps * lr * buf, at the learning rate of the given step; the weights stay.
TEST(Sgd, PredictionFollowsTheVelocity) {
  auto m = seeded_cnn(9);
  model::FlatParameters flat(m->parameters());
  model::OptimizerOptions o{0.05, 0.9, 0};
  o.warmup_steps = 10;  // the rate of step 4 is 0.05 * 5 / 10
  model::Optimizer sgd(flat, o);
  auto before = flat.copy_weights();
  auto unmoved = flat.copy_weights();
  sgd.predict(unmoved, 3, 4);  // no velocity before the first step
  EXPECT_TRUE(torch::equal(unmoved[0], before[0]));
  batch_loss(*m, 0).backward();
  sgd.step(1.0, 0);
  // After one step buf = g and w = w0 - lr0 * g: the velocity is (w0 - w) / lr0.
  torch::Tensor velocity = (before[0] - flat.weights()[0]) / model::learning_rate(o, 0);
  auto now = flat.copy_weights();
  auto predicted = flat.copy_weights();
  sgd.predict(predicted, 3, 4);
  EXPECT_TRUE(torch::allclose(predicted[0], now[0] - 3 * 0.025 * velocity, 1e-5, 1e-7));
  EXPECT_TRUE(torch::equal(flat.weights()[0], now[0])) << "prediction moves the copy only";
}

// A transport that records each all-reduce when it starts: the tensor then, and how many
// were started. It sums nothing (one worker).
struct RecordingTransport : Transport {
  std::vector<torch::Tensor> started;  // copies at the moment each started
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  std::shared_ptr<PendingTransfer> isend(const torch::Tensor&, int, int64_t) override { return nullptr; }
  std::shared_ptr<PendingTransfer> irecv(int, int64_t) override { return nullptr; }
  void allreduce_sum(std::vector<torch::Tensor>&, const std::vector<int>&) override {}
  std::shared_ptr<PendingTransfer> allreduce_start(torch::Tensor t, const std::vector<int>&) override {
    started.push_back(t.clone());
    struct Done : PendingTransfer {
      torch::Tensor wait() override { return {}; }
    };
    return std::make_shared<Done>();
  }
  void abort(const std::string&) override {}
};

// Armed for the last of two accumulating backwards, every bucket starts inside that backward,
// in order, and only once its gradients are final; an unarmed backward starts none.
TEST(GradientBuckets, StartDuringTheBackwardOnceTheirGradientsAreFinal) {
  auto m = seeded_cnn(11);
  model::FlatParameters flat(m->parameters());
  RecordingTransport t;
  GradientBuckets buckets(flat, 16 << 10, t, {0, 1});
  ASSERT_GE(buckets.buckets(), 3) << "mnist-cnn in 16 KiB buckets";
  batch_loss(*m, 1).backward();
  EXPECT_TRUE(t.started.empty()) << "not armed: the first microbatch's backward reduces nothing";
  buckets.arm();
  batch_loss(*m, 2).backward();
  ASSERT_EQ(static_cast<int64_t>(t.started.size()), buckets.buckets()) << "all started before the backward returned";
  // Bucket k covers the parameters from the end: its started copy is the final gradient there.
  int64_t end = flat.grads()[0].numel();
  for (const auto& s : t.started) {
    int64_t n = s.numel();
    EXPECT_TRUE(torch::equal(s, flat.grads()[0].narrow(0, end - n, n))) << "a bucket started before its gradients were final";
    end -= n;
  }
  EXPECT_EQ(end, 0);
  buckets.finish();
  EXPECT_EQ(static_cast<int64_t>(t.started.size()), buckets.buckets()) << "finish starts nothing twice";
  buckets.finish();  // an all-reduce without an armed backward starts every bucket
  EXPECT_EQ(static_cast<int64_t>(t.started.size()), 2 * buckets.buckets());
}

// --clip-grad-norm's sum of squares: double precision, and no copy of the gradient. The double
// copy and its square it used to make were 4x a stage's gradient bytes: mnist-cnn's second stage
// under 1f1b held 10.0 MiB against the memory model's 6.4.
TEST(FlatParameters, SumOfSquaresIsExactAndCopiesNothing) {
  model::install_memory_meter();
  torch::manual_seed(5);
  for (int64_t n : {int64_t{1}, int64_t{4095}, int64_t{4096}, int64_t{1} << 20, (int64_t{1} << 20) + 17}) {
    auto account = std::make_shared<model::MemoryAccount>();
    model::ChargeTo charge(account);
    torch::Tensor g = torch::randn({n}) * 1e-3;
    double exact = g.to(torch::kDouble).pow(2).sum().item<double>();
    account->reset_peak();
    double sum = model::sum_of_squares(g);
    EXPECT_NEAR(sum, exact, 1e-6 * exact) << n << " elements";
    EXPECT_LT(account->peak() - account->live(), int64_t{64} << 10) << n << " elements: its working memory";
  }
}

}  // namespace
}  // namespace pt::runtime
