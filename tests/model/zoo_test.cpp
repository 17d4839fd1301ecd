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

TEST(Zoo, ForwardBackwardShapes) {
  ModelOptions small_image;
  small_image.width = 0.125;
  small_image.image_size = 32;
  small_image.classes = 10;
  ModelOptions small_text;
  small_text.width = 0.25;
  small_text.vocab = 50;
  small_text.seq_len = 12;
  small_text.depth = 2;
  std::vector<Case> cases = {
      {"mnist-cnn", {}, {2, 10}, 5},
      {"vgg16", small_image, {2, 10}, 16},
      {"resnet18", small_image, {2, 10}, 10},
      {"resnet50", small_image, {2, 10}, 18},
      {"lstm-lm", small_text, {2, 12, 50}, 4},
      {"gpt", small_text, {2, 12, 50}, 4},
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
              "--model: unknown model 'alexnet' (known: mnist-cnn, vgg16, resnet18, resnet50, lstm-lm, gpt)");
  }
}

}  // namespace
}  // namespace pt::model
