// Every zoo model: forward/backward shapes, layer structure, and exact sizes.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/zoo.h"

namespace pt::model {
namespace {

int64_t count_parameters(const LayeredModel& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

struct Case {
  std::string name;
  ModelOptions options;
  std::vector<int64_t> output;  // for a batch of 2
  int layers;
};

// Small enough to build in milliseconds.
ModelOptions small_image(uint64_t seed = 0) {
  ModelOptions o;
  o.width = 0.125;
  o.image_size = 32;
  o.classes = 10;
  o.seed = seed;
  return o;
}

ModelOptions small_text(uint64_t seed = 0) {
  ModelOptions o;
  o.width = 0.25;
  o.vocab = 50;
  o.seq_len = 12;
  o.depth = 2;
  o.seed = seed;
  return o;
}

TEST(Zoo, ForwardBackwardShapes) {
  ModelOptions small_mlp;
  small_mlp.width = 1.0 / 64;
  small_mlp.depth = 2;
  std::vector<Case> cases = {
      {"mnist-cnn", {}, {2, 10}, 5},
      {"vgg16", small_image(), {2, 10}, 16},
      {"resnet18", small_image(), {2, 10}, 10},
      {"resnet50", small_image(), {2, 10}, 18},
      {"lstm-lm", small_text(), {2, 12, 50}, 4},
      {"gpt", small_text(), {2, 12, 50}, 4},
      {"mlp", small_mlp, {2, 10}, 3},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    torch::manual_seed(0);
    auto m = build_model(c.name, c.options);
    ASSERT_EQ(m->num_layers(), c.layers);
    for (int i = 0; i < m->num_layers(); ++i)
      EXPECT_EQ(m->layer(i).inputs, i == 0 ? std::vector<int>{} : std::vector<int>{i - 1});
    std::vector<int64_t> shape{2};
    for (auto d : m->sample_shape()) shape.push_back(d);
    torch::Tensor x = m->integer_input() ? torch::randint(50, shape, torch::kInt64) : torch::randn(shape);
    auto out = m->forward(x);
    EXPECT_EQ(out.sizes().vec(), c.output);
    torch::Tensor target = m->task() == Task::kLanguageModel ? torch::randint(50, {2, shape[1]}, torch::kInt64)
                                                            : torch::randint(10, {2}, torch::kInt64);
    auto loss = m->loss(out, target);
    loss.backward();
    for (const auto& p : m->parameters()) {
      ASSERT_TRUE(p.grad().defined());
      EXPECT_EQ(p.grad().sizes(), p.sizes());
    }
    // Running the layers in two pieces is the same function as running them all.
    m->train(false);
    int cut = m->num_layers() / 2;
    EXPECT_TRUE(torch::allclose(m->forward(m->forward(x, 0, cut), cut, -1), m->forward(x), 1e-5, 1e-6));
  }
}

// The full-size networks build with their published parameter counts.
TEST(Zoo, FullSizeParameterCounts) {
  EXPECT_EQ(count_parameters(*build_model("vgg16", {})), 138357544);
  EXPECT_EQ(count_parameters(*build_model("resnet18", {})), 11689512);
  EXPECT_EQ(count_parameters(*build_model("resnet50", {})), 25557032);
}

TEST(Zoo, UnknownModelNamesTheFlag) {
  try {
    build_model("alexnet", {});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--model: unknown model 'alexnet' (known: mnist-cnn, vgg16, resnet18, resnet50, lstm-lm, gpt, mlp)");
  }
}

// A worker builds only its stages' layers (docs/runtime.md): each layer's initial weights are the
// same whichever others a process builds, a model built for none runs the same function layer
// by layer, and its description (names, graph) is the whole model's.
TEST(Zoo, ALayersWeightsDoNotDependOnWhichLayersAreBuilt) {
  std::vector<std::pair<std::string, ModelOptions>> cases = {
      {"mnist-cnn", small_image(7)}, {"vgg16", small_image(7)}, {"resnet18", small_image(7)},
      {"lstm-lm", small_text(7)},    {"gpt", small_text(7)},     {"mlp", ModelOptions{1.0 / 64, 0, 0, 0, 0, 0, 2, 7}}};
  for (const auto& [name, options] : cases) {
    SCOPED_TRACE(name);
    auto whole = build_model(name, options);
    auto none = build_model(name, options, LayerSet::none());
    ASSERT_EQ(none->num_layers(), whole->num_layers());
    for (int i = 0; i < whole->num_layers(); ++i) {
      EXPECT_EQ(none->layer(i).name, whole->layer(i).name);
      EXPECT_FALSE(none->holds(i));
      auto alone = build_model(name, options, LayerSet({i}));
      for (int j = 0; j < alone->num_layers(); ++j) EXPECT_EQ(alone->holds(j), j == i);
      auto mine = alone->layer_parameters(i), theirs = whole->layer_parameters(i);
      ASSERT_EQ(mine.size(), theirs.size());
      for (size_t k = 0; k < mine.size(); ++k) EXPECT_TRUE(torch::equal(mine[k], theirs[k])) << "layer " << i;
    }
    // Another seed, other weights.
    ModelOptions other = options;
    other.seed = 8;
    EXPECT_FALSE(torch::equal(build_model(name, other)->parameters()[0], whole->parameters()[0]));
    std::vector<int64_t> shape{2};
    for (auto d : whole->sample_shape()) shape.push_back(d);
    torch::Tensor x = whole->integer_input() ? torch::randint(50, shape, torch::kInt64) : torch::randn(shape);
    whole->train(false);
    none->train(false);
    EXPECT_TRUE(torch::allclose(none->forward(x), whole->forward(x), 1e-5, 1e-6));
  }
  // A layer it does not hold is named when asked for.
  auto none = build_model("mnist-cnn", {}, LayerSet({0, 1}));
  try {
    none->layer_parameters(3);
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("layer 3 ('fc2') is not held by this process (it holds layers 0-1)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pt::model
