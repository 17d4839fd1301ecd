// A layer's projections share its node in the pipetrain search's space (state_space.h,
// projections_of): fewer states, and no state whose cut carries more bytes than one it replaces.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "core/error.h"
#include "plan/cluster.h"
#include "plan/planner.h"
#include "plan/state_space.h"
#include "profile/pipedream_graph.h"
#include "profile/profile.h"
#include "pt_paths.h"

namespace pt::plan {
namespace {

profile::Layer layer(const std::string& name, double ms, int64_t bytes, std::vector<int> inputs) {
  profile::Layer x;
  x.name = name;
  x.forward_ms = ms / 3;
  x.backward_ms = 2 * ms / 3;
  x.activation_bytes = bytes;
  x.parameter_bytes = ms > 0 ? 1000 : 0;
  x.inputs = std::move(inputs);
  return x;
}

// in -> lstm -> (out, state); out -> a; state -> b; a, b -> join. As GNMT's LSTMs: a tuple
// of 100 bytes, read through two free __getitem__s of 60 and 30.
profile::Profile lstm_graph() {
  profile::Profile p;
  p.model = "tuple";
  p.batch_size = 4;
  p.layers = {layer("Input0", 0, 0, {}),      layer("lstm", 3, 100, {0}), layer("__getitem__(0)", 0, 60, {1}),
              layer("__getitem__(1)", 0, 30, {1}), layer("a", 2, 50, {2}),   layer("b", 2, 50, {3}),
              layer("join", 1, 10, {4, 5})};
  return p;
}

// The layers the search plans (inputs and detached sinks are outside it), as build_state_space.
std::vector<char> all_planned(const profile::Profile& p) {
  std::vector<char> planned = outside_search(p);
  for (char& c : planned) c = !c;
  return planned;
}

TEST(Projections, TupleGetitemsAreTheirProducers) {
  auto p = lstm_graph();
  auto proj = projections_of(p, all_planned(p));
  EXPECT_EQ(proj[1], (std::vector<int>{2, 3}));
  for (int l : {0, 2, 3, 4, 5, 6}) EXPECT_TRUE(proj[l].empty()) << "layer " << l;
}

TEST(Projections, OnlyFreeSingleInputReadersNoLargerThanTheProducer) {
  {  // the readers' outputs hold more than the producer's: cutting before them carries less
    auto p = lstm_graph();
    p.layers[3].activation_bytes = 50;
    EXPECT_TRUE(projections_of(p, all_planned(p))[1].empty());
  }
  {  // a reader that computes
    auto p = lstm_graph();
    p.layers[3].forward_ms = 0.1;
    EXPECT_TRUE(projections_of(p, all_planned(p))[1].empty());
  }
  {  // a reader that holds parameters
    auto p = lstm_graph();
    p.layers[2].parameter_bytes = 8;
    EXPECT_TRUE(projections_of(p, all_planned(p))[1].empty());
  }
  {  // a free reader of two layers (an Add) is not a projection of either
    auto p = lstm_graph();
    p.layers[3].inputs = {1, 0};
    EXPECT_TRUE(projections_of(p, all_planned(p))[1].empty());
  }
  {  // another reader besides the projections
    auto p = lstm_graph();
    p.layers[5].inputs = {3, 1};
    EXPECT_TRUE(projections_of(p, all_planned(p))[1].empty());
  }
}

// Each state of the space without merging, with the projections of its members added, is a state
// of the merged space with the same sums, and its cut carries no more bytes.
void expect_merged_space_dominates(const profile::Profile& p) {
  StateSpace plain = build_state_space(p, 2500, 1000000, false);
  StateSpace merged = build_state_space(p, 2500, 1000000, true);
  ASSERT_TRUE(plain.note.empty() && merged.note.empty()) << "coarsened: the check needs every state";
  EXPECT_LT(merged.num_states(), plain.num_states());
  auto proj = projections_of(p, all_planned(p));
  // A state by the layers it holds.
  auto layers_of = [](const StateSpace& s, int k) {
    std::vector<int> out;
    for (size_t v = 0; v < s.node_layers.size(); ++v)
      if (s.members[k].has(static_cast<int>(v))) out.insert(out.end(), s.node_layers[v].begin(), s.node_layers[v].end());
    std::sort(out.begin(), out.end());
    return out;
  };
  std::map<std::vector<int>, int> merged_state;
  for (int k = 0; k < merged.num_states(); ++k) merged_state[layers_of(merged, k)] = k;
  for (int k = 0; k < plain.num_states(); ++k) {
    std::vector<int> layers = layers_of(plain, k);
    for (size_t i = 0; i < layers.size(); ++i)
      for (int r : proj[layers[i]]) layers.push_back(r);
    std::sort(layers.begin(), layers.end());
    layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
    auto it = merged_state.find(layers);
    ASSERT_NE(it, merged_state.end()) << "state " << k << " has no merged counterpart";
    int m = it->second;
    EXPECT_NEAR(merged.compute_ms[m], plain.compute_ms[k], 1e-9);
    EXPECT_EQ(merged.parameter_bytes[m], plain.parameter_bytes[k]);
    EXPECT_LE(merged.frontier_bytes[m], plain.frontier_bytes[k]) << "state " << k;
  }
}

TEST(Projections, MergedSpaceLosesNoCutOnATupleGraph) { expect_merged_space_dominates(lstm_graph()); }

// --straight on more workers than the merged nodes says why there are fewer than layers.
TEST(Projections, StraightSaysWhyItHasFewerStagesThanLayers) {
  PlanOptions o;
  o.straight = true;
  try {
    make_plan(lstm_graph(), cluster_from_shorthand("5", "10"), o);
    ADD_FAILURE() << "5 one-worker stages of 4 nodes";
  } catch (const ConfigError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("has only 4 layers to split (its 6 layers to plan in 4 groups"), std::string::npos) << what;
  }
}

TEST(Projections, MergedSpaceLosesNoCutOnGnmt) {
  std::string path = std::string(PT_SHARED_DIR) + "/data/pipedream-profiles/gnmt.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared profiles at " << path;
  profile::Profile gnmt = profile::read_any_profile(path);
  expect_merged_space_dominates(gnmt);
  // The 28 layers of its 48 that cost nothing multiplied its states: 562 without merging.
  EXPECT_EQ(build_state_space(gnmt, 2500, 1000000, false).num_states(), 562);
  EXPECT_EQ(build_state_space(gnmt, 2500, 1000000, true).num_states(), 57);
}

}  // namespace
}  // namespace pt::plan
