// Layers that share a parameter (profile.h, Tie): the profile file carries them, and every
// plan the planner makes keeps each tie group inside one stage (state_space.h).
#include <gtest/gtest.h>

#include "core/error.h"
#include "plan/planner.h"
#include "plan/state_space.h"
#include "profile/profile.h"

namespace pt::plan {
namespace {

profile::Profile chain(int layers) {
  profile::Profile p;
  p.model = "tied-lm";
  p.batch_size = 8;
  for (int l = 0; l < layers; ++l) {
    profile::Layer x;
    x.name = "l" + std::to_string(l);
    x.forward_ms = 1;
    x.backward_ms = 2;
    x.activation_bytes = 1000;
    x.parameter_bytes = 4000;
    if (l > 0) x.inputs = {l - 1};
    p.layers.push_back(x);
  }
  return p;
}

int stage_of(const Plan& plan, int layer) {
  for (int st = 0; st < plan.num_stages(); ++st)
    for (int l : plan.stages[st].layers)
      if (l == layer) return st;
  return -1;
}

TEST(Ties, RoundTripThroughTheProfileFile) {
  auto p = chain(6);
  p.ties = {{{0, 5}, 4000}, {{2, 3}, 100}};
  auto back = profile::profile_from_json(profile::to_json(p), "p.json");
  ASSERT_EQ(back.ties.size(), 2u);
  EXPECT_EQ(back.ties[0].layers, (std::vector<int>{0, 5}));
  EXPECT_EQ(back.ties[0].bytes, 4000);
  EXPECT_EQ(back.ties[1].layers, (std::vector<int>{2, 3}));
  // Without ties, no field (older readers and files stay as they were).
  EXPECT_FALSE(profile::to_json(chain(3)).contains("ties"));
}

// A tied tensor is one parameter, one gradient and one momentum in the runtime: a stage holding
// two of its layers counts it once (it counted a GPT's tied embedding twice, in memory and in
// the all-reduce); a stage holding one of them holds it whole.
TEST(Ties, ATiedTensorCountsOnceInWhatAStageHolds) {
  auto p = chain(6);
  p.ties = {{{0, 5}, 4000}};
  std::vector<int> all{0, 1, 2, 3, 4, 5};
  EXPECT_EQ(profile::parameter_bytes(p, all), 5 * 4000);
  EXPECT_EQ(profile::tied_duplicate_bytes(p, all), 4000);
  EXPECT_EQ(profile::parameter_bytes(p, {4, 5}), 2 * 4000);
  EXPECT_EQ(p.total_parameter_bytes(), 5 * 4000);
  // Its gradient is final at the backward of its first holder: in the last bucket, once.
  auto one = profile::gradient_buckets(p, all, 0);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].bytes, 5 * 4000);
  auto small = profile::gradient_buckets(p, all, 4000);
  int64_t total = 0;
  for (const auto& b : small) total += b.bytes;
  EXPECT_EQ(total, 5 * 4000);
  EXPECT_EQ(small.size(), 5u);  // layer 5 adds nothing: its tensor is layer 0's
  // The planner's states hold a tie whole, and count it once.
  StateSpace space = build_state_space(p, 2500, 1000000);
  EXPECT_EQ(space.parameter_bytes[space.last()], 5 * 4000.0);
}

TEST(Ties, BadTiesNameTheFieldAndValue) {
  auto doc = profile::to_json(chain(4));
  auto fails = [&](json ties) {
    doc["ties"] = ties;
    try {
      profile::profile_from_json(doc, "p.json");
    } catch (const FormatError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(fails(json::array({{{"layers", {0, 9}}, {"bytes", 4}}})).find("0..3, got 9"), std::string::npos);
  EXPECT_NE(fails(json::array({{{"layers", {2, 1}}, {"bytes", 4}}})).find("ascending"), std::string::npos);
  EXPECT_NE(fails(json::array({{{"layers", {2}}, {"bytes", 4}}})).find("two or more layers"), std::string::npos);
  EXPECT_NE(fails(json::array({{{"layers", {0, 1}}}})).find("bytes"), std::string::npos);
}

TEST(Ties, EveryPlanKeepsATieGroupInOneStage) {
  for (int layers : {4, 8, 12})
    for (auto tie : std::vector<std::vector<int>>{{0, layers - 1}, {1, 2}, {1, layers / 2}, {0, 2, layers - 2}})
      for (int workers : {2, 4, 8}) {
        for (CostModel cm : {CostModel::kRealised, CostModel::kPipedream}) {
          auto p = chain(layers);
          p.ties = {{tie, 4000}};
          PlanOptions o;
          o.cost_model = cm;
          o.candidates = 4;
          SCOPED_TRACE(testing::Message() << layers << " layers, tie " << tie.front() << ".." << tie.back() << ", "
                                          << workers << " workers, model " << static_cast<int>(cm));
          for (const Plan& plan : plan_candidates(p, Cluster::flat(workers, 1), o)) {
            int st = stage_of(plan, tie.front());
            for (int l : tie) EXPECT_EQ(stage_of(plan, l), st) << plan.shape();
          }
          // Without the tie the same search splits the chain (so the check above can fail).
          p.ties.clear();
          if (tie == std::vector<int>{0, layers - 1} && workers == 2 && cm == CostModel::kPipedream) {
            EXPECT_GT(make_plan(p, Cluster::flat(workers, 1000), o).num_stages(), 1);
          }
        }
      }
}

TEST(Ties, PlansCarryThemAndAreHeldToTheModels) {
  auto p = chain(6);
  p.ties = {{{0, 5}, 4000}};
  Plan planned = make_plan(p, Cluster::flat(2, 10), PlanOptions{});
  EXPECT_EQ(planned.ties, (std::vector<std::vector<int>>{{0, 5}}));
  EXPECT_EQ(even_split(p, 3).ties, planned.ties);
  Plan back = plan_from_json(to_json(planned), "plan.json");
  EXPECT_EQ(back.ties, planned.ties);
  check_plan_fits(back, p, "plan.json");  // the same model: fine
  auto other = chain(6);
  other.ties = {{{0, 4}, 4000}};
  try {
    check_plan_fits(back, other, "plan.json");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("made for layers sharing parameters 0=5 but in 'tied-lm' the layers "
                                         "sharing parameters are 0=4"),
              std::string::npos)
        << e.what();
  }
  auto doc = to_json(planned);
  doc["ties"] = json::array({json::array({3, 1})});
  try {
    plan_from_json(doc, "plan.json");
    FAIL() << "accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("ascending"), std::string::npos) << e.what();
  }
}

TEST(Ties, StateSpaceSaysWhyItHoldsLayersTogether) {
  auto p = chain(5);
  p.ties = {{{0, 4}, 4000}};
  StateSpace s = build_state_space(p, 1000);
  EXPECT_EQ(s.num_states(), 2);  // ∅ and every layer
  EXPECT_NE(s.note.find("share a parameter"), std::string::npos) << s.note;
}

// Where the tie leaves pipedream's planner no plan, the error names its layers and the
// schedules that may split it (it said only "the planner found no plan for 'llama.pt' on 4").
TEST(Ties, NoPlanForATieNamesItAndTheSchedulesThatSplitIt) {
  auto p = chain(6);
  p.ties = {{{0, 5}, 4000}};
  PlanOptions o;
  o.straight = true;
  try {
    make_plan(p, Cluster::flat(4, 10), o);
    FAIL() << "planned";
  } catch (const ConfigError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("layers that share a parameter stay in one stage under pipedream"), std::string::npos) << what;
    EXPECT_NE(what.find("(layers 0 ('l0') and 5 ('l5'))"), std::string::npos) << what;
    EXPECT_NE(what.find("plan --schedule 1f1b, or auto"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace pt::plan
