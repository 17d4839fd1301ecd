// The profiler's bytes are exact: hand-computed values for mnist-cnn at batch 64.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "model/emulated_layer.h"
#include "model/zoo.h"
#include "core/error.h"
#include "profile/profile_fits_model.h"
#include "profile/profiler.h"

namespace pt::profile {
namespace {

TEST(Profiler, MnistCnnExactBytes) {
  torch::manual_seed(0);
  auto m = model::build_mnist_cnn({});
  Profile p = measure_profile(*m, torch::randn({64, 1, 28, 28}), {1, 3});
  ASSERT_EQ(p.num_layers(), 5);
  EXPECT_EQ(p.model, "mnist-cnn");
  EXPECT_EQ(p.batch_size, 64);
  struct Expect {
    const char* name;
    int64_t activation, parameters;
  };
  const Expect expect[] = {
      {"conv1", 64 * 16 * 14 * 14 * 4, (16 * 1 * 5 * 5 + 16) * 4},     // 802816, 1664
      {"conv2", 64 * 32 * 7 * 7 * 4, (32 * 16 * 5 * 5 + 32) * 4},      // 401408, 51328
      {"fc1", 64 * 200 * 4, (1568 * 200 + 200) * 4},                   // 51200, 1255200
      {"fc2", 64 * 200 * 4, (200 * 200 + 200) * 4},                    // 51200, 160800
      {"fc3", 64 * 10 * 4, (200 * 10 + 10) * 4},                       // 2560, 8040
  };
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(p.layers[i].name, expect[i].name);
    EXPECT_EQ(p.layers[i].activation_bytes, expect[i].activation);
    EXPECT_EQ(p.layers[i].parameter_bytes, expect[i].parameters);
    EXPECT_GT(p.layers[i].forward_ms, 0);
    EXPECT_GT(p.layers[i].backward_ms, 0);
    EXPECT_EQ(p.layers[i].inputs, i ? std::vector<int>{i - 1} : std::vector<int>{});
  }
  // The runtime's own work per minibatch (SGD step and a stash copy) is measured where there
  // are weights, and on copies: the model's weights are untouched.
  for (int i = 0; i < 5; ++i) EXPECT_GT(p.layers[i].optimizer_ms, 0) << p.layers[i].name;
  EXPECT_GT(p.layers[2].optimizer_ms, p.layers[0].optimizer_ms) << "fc1 holds 750x conv1's weights";
  torch::manual_seed(0);
  auto fresh = model::build_mnist_cnn({});
  auto a = m->parameters(), b = fresh->parameters();
  for (size_t k = 0; k < a.size(); ++k) EXPECT_TRUE(torch::equal(a[k].detach(), b[k].detach())) << "parameter " << k;
  // What it measured reads back through the validating reader.
  EXPECT_EQ(to_json(profile_from_json(to_json(p), "x")), to_json(p));
}

// Timed in sequence, the step is the runtime's: one step over a flat buffer of every weight after
// the batch's backward, shared by the layers in proportion to the weights each holds; and it is
// undone: the model's weights are as they were.
TEST(Profiler, InSequenceTheStepIsOneFlatStepSharedByTheWeights) {
  torch::manual_seed(0);
  auto m = model::build_mnist_cnn({});
  ProfilerOptions in_sequence{1, 3};
  in_sequence.sequence_share = 0.25;
  Profile p = measure_profile(*m, torch::randn({32, 1, 28, 28}), in_sequence, torch::randint(0, 10, {32}));
  ASSERT_EQ(p.timed, "in sequence");
  double per_byte = p.layers[0].optimizer_ms / static_cast<double>(p.layers[0].parameter_bytes);
  EXPECT_GT(per_byte, 0);
  for (const auto& l : p.layers)
    EXPECT_NEAR(l.optimizer_ms / static_cast<double>(l.parameter_bytes), per_byte, 1e-9 * per_byte) << l.name;
  // Its stash copy is timed apart (a flushing schedule makes none), shared alike, and is a part.
  double copy_per_byte = p.layers[0].stash_copy_ms / static_cast<double>(p.layers[0].parameter_bytes);
  EXPECT_GT(copy_per_byte, 0);
  EXPECT_LT(copy_per_byte, per_byte);
  for (const auto& l : p.layers)
    EXPECT_NEAR(l.stash_copy_ms / static_cast<double>(l.parameter_bytes), copy_per_byte, 1e-9 * copy_per_byte) << l.name;
  torch::manual_seed(0);
  auto fresh = model::build_mnist_cnn({});
  auto a = m->parameters(), b = fresh->parameters();
  for (size_t k = 0; k < a.size(); ++k) EXPECT_TRUE(torch::equal(a[k].detach(), b[k].detach())) << "parameter " << k;
}

// A weight two layers share, the layers built apart (a model file read a layer at a time): the
// step is timed over it once and charged to its first layer. Its copies were tensors of their
// own, stepped and charged twice (a llama's embedding and head, 0.12 ms each: the model's steps
// 64% over its weights').
TEST(Profiler, ATiedWeightIsSteppedOnceAndChargedToItsFirstLayer) {
  model::LayeredModel m("tied", model::Task::kClassification, {8}, false, model::LayerSet::none());
  for (const char* name : {"a", "b"}) m.add(name, [] { return torch::nn::Sequential(torch::nn::Linear(8, 8)); });
  model::TieGroup tie;
  tie.members = {{0, 0}, {1, 0}};  // each layer's weight, its first parameter
  tie.bytes = 8 * 8 * 4;
  m.set_tie_groups({tie});
  ProfilerOptions in_sequence{1, 3};
  in_sequence.sequence_share = 0.25;
  Profile p = measure_profile(m, torch::randn({16, 8}), in_sequence, torch::randint(0, 8, {16}));
  ASSERT_EQ(p.timed, "in sequence");
  ASSERT_GT(p.layers[0].optimizer_ms, 0);
  // Layer b steps its bias alone: 8 floats against a's 72.
  EXPECT_NEAR(p.layers[1].optimizer_ms / p.layers[0].optimizer_ms, 8.0 / 72, 1e-9);
  EXPECT_NEAR(p.layers[1].stash_copy_ms / p.layers[0].stash_copy_ms, 8.0 / 72, 1e-9);
}

// A profile is held against the model it is given for, layer by layer, by the bytes each holds:
// one of another size is refused by file, layer, field and both figures.
TEST(Profiler, AProfileOfAnotherModelIsRefusedByLayer) {
  torch::manual_seed(0);
  auto m = model::build_mnist_cnn({});
  Profile p = measure_profile(*m, torch::randn({16, 1, 28, 28}), {1, 1});
  EXPECT_NO_THROW(check_profile_fits_model(p, "p.json", *m));
  Profile wider = p;
  wider.layers[2].parameter_bytes += 4;
  try {
    check_profile_fits_model(wider, "p.json", *m);
    ADD_FAILURE() << "a profile of other bytes was taken";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "p.json: layer 2 ('fc1') field 'parameter_bytes' is 1255204 (1.2 MiB), but the model built, mnist-cnn, "
              "holds 1255200 (1.2 MiB) there: the profile is of another model or size (`pipetrain profile` with this "
              "run's model flags measures it)");
  }
  Profile shorter = p;
  shorter.layers.pop_back();
  EXPECT_THROW(check_profile_fits_model(shorter, "p.json", *m), ConfigError);
}

// Each layer is timed at the batch's halves down to a sixteenth too, on the first samples of the
// batch: a microbatch of 16 in a profile of 64 is read, not scaled.
TEST(Profiler, TimesEachLayerAtTheMicrobatchSizes) {
  torch::manual_seed(0);
  auto m = model::build_mnist_cnn({});
  Profile p = measure_profile(*m, torch::randn({64, 1, 28, 28}), {0, 1});
  for (const auto& l : p.layers) {
    ASSERT_EQ(l.timings.size(), 5u) << l.name;
    std::vector<int64_t> batches;
    for (const auto& t : l.timings) {
      batches.push_back(t.batch);
      EXPECT_GT(t.forward_ms, 0) << l.name << " at " << t.batch;
    }
    EXPECT_EQ(batches, (std::vector<int64_t>{4, 8, 16, 32, 64})) << l.name;
    EXPECT_EQ(l.timings.back().forward_ms, l.forward_ms);
  }
  EXPECT_TRUE(knows_batch_sizes(p));
  EXPECT_EQ(timed_batch_sizes(64, {0, 1, "sgd", {64}}), std::vector<int64_t>{64});  // the batch alone
  EXPECT_EQ(timed_batch_sizes(12, {}), (std::vector<int64_t>{1, 3, 6, 12}));
  Profile one = measure_profile(*m, torch::randn({8, 1, 28, 28}), {0, 1, "sgd", {8}});
  for (const auto& l : one.layers) EXPECT_TRUE(l.timings.empty()) << l.name;
}

// The layers are timed one after another, as a stage runs them, and each time lands on its own
// layer and size: emulated layers wait known times (per sample), the first's forward long and
// backward short, the second's the other way round. A process that holds no layer has them built
// for the pass and still holds none after; by default (a worker's own profile), each alone.
TEST(Profiler, TimesTheLayersInSequenceEachInItsPlace) {
  std::vector<model::EmulatedCost> costs(2);
  costs[0].name = "long-forward", costs[0].forward_ms_per_sample = 0.05, costs[0].backward_ms_per_sample = 0.01;
  costs[1].name = "long-backward", costs[1].forward_ms_per_sample = 0.01, costs[1].backward_ms_per_sample = 0.08;
  auto m = model::build_emulated_model("waits", costs, model::LayerSet::none());
  torch::Tensor x = torch::zeros({64, 4});
  ProfilerOptions in_sequence{1, 3};
  in_sequence.sequence_share = 0.25;
  // Each round is told with what it took: both layers' waits at batches 4-64, 0.15 ms x 124 samples.
  std::vector<std::tuple<std::string, int, int, double>> told;
  in_sequence.on_progress = [&](const std::string& what, int done, int of, double ms) { told.emplace_back(what, done, of, ms); };
  Profile p = measure_profile(*m, x, in_sequence);
  EXPECT_EQ(p.timed, "in sequence");
  ASSERT_EQ(told.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(std::get<0>(told[r]), "round");
    EXPECT_EQ(std::get<1>(told[r]), r + 1);
    EXPECT_EQ(std::get<2>(told[r]), 4);
    EXPECT_GT(std::get<3>(told[r]), 0.9 * 0.15 * 124);
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_FALSE(m->holds(i)) << "built for the pass, then dropped";
    ASSERT_EQ(p.layers[i].timings.size(), 5u);
    for (const Timing& t : p.layers[i].timings) {
      double f = costs[i].forward_ms_per_sample * t.batch, b = costs[i].backward_ms_per_sample * t.batch;
      EXPECT_NEAR(t.forward_ms, f, 0.2 * f + 0.3) << costs[i].name << " at " << t.batch;
      EXPECT_NEAR(t.backward_ms, b, 0.2 * b + 0.3) << costs[i].name << " at " << t.batch;
    }
  }
  EXPECT_EQ(to_json(profile_from_json(to_json(p), "x")), to_json(p));
  ProfilerOptions alone_options{1, 3};  // by default: a worker holds its stage alone
  told.clear();
  alone_options.on_progress = in_sequence.on_progress;
  Profile alone = measure_profile(*m, x, alone_options);
  EXPECT_EQ(alone.timed, "alone");
  ASSERT_EQ(told.size(), 2u);  // each layer, when timed at every size
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(std::get<0>(told[i]), "layer");
    EXPECT_EQ(std::get<1>(told[i]), i + 1);
    EXPECT_EQ(std::get<2>(told[i]), 2);
    double waits = 4 * 124 * (costs[i].forward_ms_per_sample + costs[i].backward_ms_per_sample);  // 4 rounds
    EXPECT_GT(std::get<3>(told[i]), 0.9 * waits) << costs[i].name;
  }
  EXPECT_NEAR(alone.layers[1].backward_ms, 0.08 * 64, 0.2 * 0.08 * 64 + 0.3);
}

// With the batch's targets the last layer is measured as the last stage runs it, the loss after
// it: a language model's cross-entropy holds the gradients of its logits in the backward. The
// other layers' figures are the same either way.
TEST(Profiler, TheLastLayerHoldsTheLossWithTargets) {
  model::ModelOptions o;
  o.width = 0.25, o.vocab = 64, o.seq_len = 32, o.depth = 2;
  torch::manual_seed(3);
  auto m = model::build_gpt(o);
  torch::Tensor tokens = torch::randint(0, 64, {8, 32}, torch::kLong);
  Profile plain = measure_profile(*m, tokens, {0, 1});
  Profile with_loss = measure_profile(*m, tokens, {0, 1}, torch::randint(0, 64, {8, 32}, torch::kLong));
  int last = m->num_layers() - 1;
  for (int i = 0; i < last; ++i) {
    EXPECT_EQ(with_loss.layers[i].stash_bytes, plain.layers[i].stash_bytes) << i;
    EXPECT_EQ(with_loss.layers[i].workspace_bytes, plain.layers[i].workspace_bytes) << i;
  }
  int64_t logits = 8 * 32 * 64 * 4;
  EXPECT_EQ(with_loss.layers[last].activation_bytes, logits);
  // The log-probabilities stand in for the logits, which nothing keeps once the loss is taken.
  EXPECT_NEAR(with_loss.layers[last].stash_bytes, plain.layers[last].stash_bytes, 64);
  // The backward starts at the loss and makes the logits' gradient on the way (a gradient
  // handed in, as without targets, was not the layer's to hold).
  EXPECT_GE(with_loss.layers[last].workspace_bytes, plain.layers[last].workspace_bytes + logits);
}

// Layers of the same code, shapes and memory take their group's medians (time_alike): gpt's
// blocks are one group; a layer of other code but the same shapes and bytes (Tanh for ReLU),
// and the first layer (its input takes no gradient), stay as measured.
TEST(Profiler, LayersThatComputeAlikeAreTimedAlike) {
  model::ModelOptions o;
  o.width = 0.25, o.vocab = 64, o.seq_len = 32, o.depth = 3;
  torch::manual_seed(3);
  auto gpt = model::build_gpt(o);
  Profile g = measure_profile(*gpt, torch::randint(0, 64, {8, 32}, torch::kLong), {0, 1});
  ASSERT_EQ(g.num_layers(), 5);
  EXPECT_EQ(g.alike, (std::vector<std::vector<int>>{{1, 2, 3}}));
  for (int l : {2, 3}) {
    EXPECT_EQ(g.layers[l].forward_ms, g.layers[1].forward_ms);
    EXPECT_EQ(g.layers[l].backward_ms, g.layers[1].backward_ms);
    EXPECT_EQ(g.layers[l].input_gradient_ms, g.layers[1].input_gradient_ms);
  }

  auto m = std::make_shared<model::LayeredModel>("mixed", model::Task::kClassification, std::vector<int64_t>{32}, false);
  namespace nn = torch::nn;
  for (bool tanh : {false, false, false, true, false})
    m->add(tanh ? "tanh" : "relu", tanh ? nn::Sequential(nn::Linear(32, 32), nn::Tanh())
                                        : nn::Sequential(nn::Linear(32, 32), nn::ReLU()));
  Profile p = measure_profile(*m, torch::randn({16, 32}), {0, 1});
  EXPECT_EQ(p.layers[3].stash_bytes, p.layers[2].stash_bytes);  // alike in bytes, not in code
  EXPECT_EQ(p.alike, (std::vector<std::vector<int>>{{1, 2, 4}}));

  // Emulated layers of equal shapes are alike when their waits are.
  std::vector<model::EmulatedCost> costs(4);
  for (auto& c : costs) c.name = "wait", c.forward_ms_per_sample = 0.001, c.backward_ms_per_sample = 0.002;
  costs[3].backward_ms_per_sample = 0.003;
  auto waits = model::build_emulated_model("waits", costs);
  EXPECT_EQ(measure_profile(*waits, torch::zeros({8, 1}), {0, 1}).alike, (std::vector<std::vector<int>>{{1, 2}}));
}

}  // namespace
}  // namespace pt::profile
