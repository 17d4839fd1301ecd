// PipeDream's graph.txt and JSON figures become pipetrain profiles: topological order, inputs
// from edges, list activations summed, and clear errors on bad lines and cycles.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "profile/pipedream_graph.h"
#include "pt_paths.h"

namespace pt::profile {
namespace {

std::string node(const std::string& id, const std::string& name, const std::string& act = "100.0") {
  return id + " -- " + name + " -- forward_compute_time=1.500, backward_compute_time=2.000, activation_size=" + act +
         ", parameter_size=40.000\n";
}

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(PipedreamGraph, ParsesNodesEdgesAndSumsListActivations) {
  // Listed out of order on purpose: node3 reads node1 and node2, node2 reads node1.
  std::string text = node("node3", "Add", "[10.0; 20.5]") + node("node1", "Input") +
                     node("node2", "Conv2d(3, 8, kernel_size=(3, 3))") + "\tnode1 -- node3\n\tnode2 -- node3\n\tnode1 -- node2\n";
  Profile p = profile_from_pipedream_graph(text, "g.txt");
  ASSERT_EQ(p.num_layers(), 3);
  EXPECT_EQ(p.layers[0].name, "Input");
  EXPECT_EQ(p.layers[1].name, "Conv2d(3, 8, kernel_size=(3, 3))");
  EXPECT_EQ(p.layers[2].name, "Add");
  EXPECT_EQ(p.layers[2].activation_bytes, 31);  // 10 + 20.5, rounded
  EXPECT_EQ(p.layers[2].inputs, (std::vector<int>{0, 1}));
  EXPECT_EQ(p.layers[1].inputs, (std::vector<int>{0}));
  EXPECT_DOUBLE_EQ(p.layers[1].forward_ms, 1.5);
  EXPECT_DOUBLE_EQ(p.layers[1].backward_ms, 2.0);
  EXPECT_EQ(p.layers[1].parameter_bytes, 40);
}

TEST(PipedreamGraph, KeepsStageIdSuffixAndDescriptionsWithSeparators) {
  std::string text = "node1 -- Input -- forward_compute_time=0.000, backward_compute_time=0.000, activation_size=4.0, "
                     "parameter_size=0.000 -- stage_id=0\n" +
                     node("node2", "Linear(in_features=4, out_features=2, bias=True)") + "\tnode1 -- node2\n";
  Profile p = profile_from_pipedream_graph(text, "g.txt");
  ASSERT_EQ(p.num_layers(), 2);
  EXPECT_EQ(p.layers[1].name, "Linear(in_features=4, out_features=2, bias=True)");
}

TEST(PipedreamGraph, RejectsCyclesBadLinesNegativeTimesAndUnknownNodes) {
  std::string cyc = node("a", "A") + node("b", "B") + "\ta -- b\n\tb -- a\n";
  EXPECT_NE(error_of([&] { profile_from_pipedream_graph(cyc, "c.txt"); }).find("cyclic graph"), std::string::npos);
  std::string bad = node("a", "A") + "b -- B -- forward_compute_time=x, backward_compute_time=1, activation_size=1, parameter_size=1\n";
  std::string e = error_of([&] { profile_from_pipedream_graph(bad, "b.txt"); });
  EXPECT_NE(e.find("b.txt line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("'x' is not a number"), std::string::npos) << e;
  std::string neg = "a -- A -- forward_compute_time=-1.0, backward_compute_time=1, activation_size=1, parameter_size=1\n";
  EXPECT_NE(error_of([&] { profile_from_pipedream_graph(neg, "n.txt"); }).find("negative time"), std::string::npos);
  std::string unknown = node("a", "A") + "\ta -- zz\n";
  EXPECT_NE(error_of([&] { profile_from_pipedream_graph(unknown, "u.txt"); }).find("unknown node 'zz'"),
            std::string::npos);
  std::string missing = "a -- A -- forward_compute_time=1, backward_compute_time=1, activation_size=1\n";
  EXPECT_NE(error_of([&] { profile_from_pipedream_graph(missing, "m.txt"); }).find("parameter_size"), std::string::npos);
  // Read as a graph.txt, an empty file "has no layers".
  EXPECT_NE(error_of([&] { parse_any_profile(" \n", "e.json"); }).find("e.json: is empty (a profile is"), std::string::npos);
}

TEST(PipedreamGraph, ReadAnyProfileDetectsTheThreeFormats) {
  // Per process (ctest runs each test as its own process, several at once); removed below.
  auto root = std::filesystem::temp_directory_path() / ("pt_graph_test_" + std::to_string(::getpid()));
  auto dir = root / "tiny";
  std::filesystem::create_directories(dir);
  std::string text = node("node1", "Input") + node("node2", "Linear") + "\tnode1 -- node2\n";
  std::ofstream(dir / "graph.txt") << text;
  Profile g = read_any_profile((dir / "graph.txt").string());
  EXPECT_EQ(g.model, "tiny");
  EXPECT_EQ(g.num_layers(), 2);
  // The Input node's batch is the input the first stage holds per microbatch in flight, which
  // the memory model charges there (it was 0: AlexNet's first stage 147 MiB short a microbatch).
  EXPECT_EQ(g.input_bytes, 100);

  json figures = {{"model", "tiny"}, {"profiled_batch_size", 32},
                  {"layers", {{{"id", "n1"}, {"name", "Input"}, {"forward_ms", 1}, {"backward_ms", 0},
                               {"activation_bytes", 8}, {"parameter_bytes", 0}},
                              {{"id", "n2"}, {"name", "Split"}, {"forward_ms", 1}, {"backward_ms", 1},
                               {"activation_bytes", 12}, {"activation_bytes_list", {4, 8}}, {"parameter_bytes", 4}}}},
                  {"edges", json::array({json::array({"n1", "n2"})})}};
  std::ofstream(dir / "figures.json") << figures.dump();
  Profile f = read_any_profile((dir / "figures.json").string());
  EXPECT_EQ(f.batch_size, 32);
  EXPECT_EQ(f.layers[1].activation_bytes, 12);
  EXPECT_EQ(f.layers[1].inputs, (std::vector<int>{0}));
  EXPECT_EQ(f.input_bytes, 8);

  Profile own;
  own.model = "own";
  own.layers.push_back(Layer{"l0", 1, 1, 1, 1, {}});
  write_profile(own, (dir / "own.json").string());
  EXPECT_EQ(read_any_profile((dir / "own.json").string()).model, "own");

  std::ofstream(dir / "other.json") << R"({"something": 1})";
  EXPECT_THROW(read_any_profile((dir / "other.json").string()), FormatError);
  std::ofstream(dir / "wrongtag.json") << R"({"format": "pipetrain.plan/1"})";
  EXPECT_THROW(read_any_profile((dir / "wrongtag.json").string()), FormatError);
  std::filesystem::remove_all(root);
}

TEST(PipedreamGraph, SharedVgg16FiguresAreInTopologicalOrder) {
  std::string path = std::string(PT_SHARED_DIR) + "/data/pipedream-profiles/vgg16.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP();
  Profile p = read_any_profile(path);
  EXPECT_EQ(p.num_layers(), 41);
  EXPECT_EQ(p.batch_size, 128);
  for (int i = 0; i < p.num_layers(); ++i)
    for (int in : p.layers[i].inputs) EXPECT_LT(in, i);
}

}  // namespace
}  // namespace pt::profile
