// LayeredModel::tie_groups: parameters that several layers hold, found by memory.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/layered_model.h"

namespace pt::model {
namespace {

torch::nn::Sequential holding(std::vector<torch::Tensor> params) {
  auto m = std::make_shared<torch::nn::Module>();
  torch::nn::Sequential seq;
  struct Holder : torch::nn::Module {
    torch::Tensor forward(torch::Tensor x) { return x; }
  };
  auto h = std::make_shared<Holder>();
  for (size_t i = 0; i < params.size(); ++i) h->register_parameter("p" + std::to_string(i), params[i]);
  seq->push_back(h);
  return seq;
}

TEST(TieGroups, FoundByIdentityAcrossLayers) {
  torch::Tensor emb = torch::randn({10, 4}), other = torch::randn({4}), inner = torch::randn({3});
  LayeredModel m("tied", Task::kClassification, {4}, false);
  m.add("embed", holding({emb}));
  m.add("block", holding({other, inner, inner}));  // used twice inside one layer: not a tie
  m.add("head", holding({torch::randn({2}), emb}));
  auto groups = m.tie_groups();
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].layers(), (std::vector<int>{0, 2}));
  EXPECT_EQ(groups[0].members[1].param, 1);
  EXPECT_EQ(groups[0].bytes, 10 * 4 * 4);
}

TEST(TieGroups, NoneInAnUntiedModel) {
  LayeredModel m("plain", Task::kClassification, {4}, false);
  m.add("a", holding({torch::randn({4})}));
  m.add("b", holding({torch::randn({4})}));
  EXPECT_TRUE(m.tie_groups().empty());
}

TEST(TieGroups, APartialOverlapIsRefused) {
  torch::Tensor w = torch::randn({8});
  LayeredModel m("views", Task::kClassification, {4}, false);
  m.add("a", holding({w}));
  m.add("b", holding({w.narrow(0, 2, 4)}));
  try {
    m.tie_groups();
    FAIL() << "accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("overlaps parameter 0 of layer 0 ('a')"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pt::model
