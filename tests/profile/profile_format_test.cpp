#include <gtest/gtest.h>

#include "core/error.h"
#include "profile/profile.h"

namespace pt::profile {
namespace {

json good() {
  return json::parse(R"({"format": "pipetrain.profile/1", "model": "m", "batch_size": 64,
    "device": "cpu", "layers": [
      {"name": "a", "forward_ms": 1.5, "backward_ms": 2.5, "activation_bytes": 100,
       "parameter_bytes": 40, "inputs": [], "optimizer_ms": 0.25, "stash_copy_ms": 0.125},
      {"name": "b", "forward_ms": 1, "backward_ms": 2, "activation_bytes": 10,
       "parameter_bytes": 0},
      {"name": "c", "forward_ms": 0, "backward_ms": 0, "activation_bytes": 10,
       "parameter_bytes": 0, "inputs": [0, 1]}]})");
}

std::string error_of(const json& doc) {
  try {
    profile_from_json(doc, "p.json");
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

TEST(ProfileFormat, RoundTrips) {
  Profile p = profile_from_json(good(), "p.json");
  ASSERT_EQ(p.num_layers(), 3);
  EXPECT_EQ(p.layers[1].inputs, std::vector<int>{0});  // missing inputs = previous layer
  EXPECT_EQ(p.layers[2].inputs, (std::vector<int>{0, 1}));
  EXPECT_FALSE(p.is_chain());
  Profile q = profile_from_json(to_json(p), "q.json");
  EXPECT_EQ(to_json(q), to_json(p));
  EXPECT_DOUBLE_EQ(p.total_compute_ms(), 7.0);
  EXPECT_EQ(p.total_parameter_bytes(), 40);
  EXPECT_DOUBLE_EQ(p.layers[0].optimizer_ms, 0.25);
  EXPECT_DOUBLE_EQ(p.layers[1].optimizer_ms, 0);  // optional: not measured
  EXPECT_EQ(p.precision, "fp32");  // optional: PipeDream's profiles and the earlier ones are fp32
  json bf16 = good();
  bf16["precision"] = "bf16";
  EXPECT_EQ(profile_from_json(bf16, "p.json").precision, "bf16");
  EXPECT_DOUBLE_EQ(compute_step_ms(p, 0), 0.25);
  EXPECT_DOUBLE_EQ(p.layers[0].stash_copy_ms, 0.125);
  EXPECT_DOUBLE_EQ(compute_step_ms(p, 0, /*stashes=*/false), 0.125);  // a flushing schedule makes no copy
  EXPECT_DOUBLE_EQ(compute_step_ms(p, 1, false), 0);
  EXPECT_EQ(p.timing_spread, 0);  // optional: not measured
  p.timing_spread = 0.07;
  EXPECT_DOUBLE_EQ(profile_from_json(to_json(p), "s.json").timing_spread, 0.07);
  EXPECT_FALSE(p.timed_busy());  // a quiet machine's spread
  p.timing_spread = 0.34;        // beside two busy processes on 2 cores
  EXPECT_TRUE(p.timed_busy());
  p.timing_spread = 0;
  EXPECT_EQ(p.batch_norms, 0);  // optional: none, or not known
  EXPECT_FALSE(to_json(p).contains("batch_norms"));
  p.batch_norms = 53;
  EXPECT_EQ(with_batch_size(profile_from_json(to_json(p), "b.json"), 8).batch_norms, 53);
  p.batch_norms = 0;
  EXPECT_FALSE(to_json(p).contains("input_bytes"));  // optional: not measured
  p.input_bytes = 6000;
  EXPECT_EQ(with_batch_size(profile_from_json(to_json(p), "i.json"), 2 * p.batch_size).input_bytes, 12000);
  p.input_bytes = 0;
  // A zero-bubble split's figures (optional): round trip, and keep their share at another batch.
  p.layers[1].input_gradient_ms = 1.5;
  p.layers[1].split_bytes = 4096;
  p.layers[1].split_workspace_bytes = 2048;
  Profile r = profile_from_json(to_json(p), "r.json");
  EXPECT_DOUBLE_EQ(r.layers[1].input_gradient_ms, 1.5);
  EXPECT_EQ(r.layers[1].split_bytes, 4096);
  EXPECT_EQ(r.layers[1].split_workspace_bytes, 2048);
  EXPECT_EQ(with_batch_size(r, 2 * r.batch_size).layers[1].split_workspace_bytes, 4096);
  EXPECT_DOUBLE_EQ(input_gradient_share(r, 1), 0.75);
  EXPECT_DOUBLE_EQ(input_gradient_share(r, 0), kInputGradientShare);  // not measured
  EXPECT_DOUBLE_EQ(input_gradient_share(with_batch_size(r, 2 * r.batch_size), 1), 0.75);
  // A stash measured at 0 (a view: Flatten) stays 0 through the file; one not measured is the
  // activation (it was written as no field and read back as a whole activation).
  EXPECT_EQ(stash_bytes(p, 1), 10);
  p.layers[1].stash_bytes = 0, p.layers[1].stash_measured = true;
  Profile v = profile_from_json(to_json(p), "v.json");
  EXPECT_EQ(stash_bytes(v, 1), 0);
  EXPECT_EQ(stash_bytes(with_batch_size(v, 2 * v.batch_size), 1), 0);
}

TEST(ProfileFormat, EachValidationError) {
  struct Case {
    std::function<void(json&)> spoil;
    std::string message;
  };
  std::vector<Case> cases = {
      {[](json& d) { d["format"] = "pipetrain.profile/9"; },
       "p.json: field 'format' is \"pipetrain.profile/9\", expected \"pipetrain.profile/1\""},
      {[](json& d) { d.erase("format"); }, "p.json: missing field 'format' (expected \"pipetrain.profile/1\")"},
      {[](json& d) { d.erase("model"); }, "p.json: missing field 'model'"},
      // A misspelled field was read as absent ("precison": "bf16" as fp32).
      {[](json& d) { d["precison"] = "bf16"; }, "p.json: unknown field 'precison' in the top level; did you mean 'precision'?"},
      {[](json& d) { d["layers"][1]["stash_byte"] = 5; },
       "p.json: unknown field 'stash_byte' in 'layers[1]'; did you mean 'stash_bytes'?"},
      {[](json& d) { d["batch_size"] = 0; }, "p.json: field 'batch_size' must be >= 1, got 0"},
      {[](json& d) { d["layers"] = json::array(); }, "p.json: field 'layers' must list at least one layer"},
      {[](json& d) { d["layers"][1]["forward_ms"] = -1; },
       "p.json: field 'layers[1].forward_ms' must be >= 0, got -1"},
      {[](json& d) { d["layers"][0]["backward_ms"] = "slow"; },
       "p.json: field 'layers[0].backward_ms' must be a number, got \"slow\""},
      {[](json& d) { d["layers"][0].erase("activation_bytes"); },
       "p.json: missing field 'layers[0].activation_bytes'"},
      {[](json& d) { d["layers"][2]["parameter_bytes"] = 1.5; },
       "p.json: field 'layers[2].parameter_bytes' must be a whole number, got 1.5"},
      {[](json& d) { d["layers"][2]["inputs"] = {0, 2}; },
       "p.json: field 'layers[2].inputs[1]' must name an earlier layer (0..1), got 2"},
      {[](json& d) { d["layers"][1]["inputs"] = {-1}; },
       "p.json: field 'layers[1].inputs[0]' must name an earlier layer (0..0), got -1"},
      {[](json& d) { d["layers"][1]["inputs"] = 3; }, "p.json: field 'layers[1].inputs' must be a list, got 3"},
      {[](json& d) { d["layers"][0]["optimizer_ms"] = -0.5; },
       "p.json: field 'layers[0].optimizer_ms' must be >= 0, got -0.5"},
      {[](json& d) { d["layers"][0]["stash_copy_ms"] = 0.5; },
       "p.json: field 'layers[0].stash_copy_ms' must be at most the layer's optimizer_ms (0.25), which includes it, got 0.5"},
      {[](json& d) { d["layers"][0]["stash_copy_ms"] = -0.5; },
       "p.json: field 'layers[0].stash_copy_ms' must be >= 0, got -0.5"},
      {[](json& d) { d["layers"][1]["input_gradient_ms"] = 3; },
       "p.json: field 'layers[1].input_gradient_ms' must be at most the layer's backward_ms (2), which includes it, got 3"},
      {[](json& d) { d["layers"][1]["split_bytes"] = -1; },
       "p.json: field 'layers[1].split_bytes' must be in 0..1125899906842624, got -1"},
      {[](json& d) { d["layers"][1]["split_workspace_bytes"] = -1; },
       "p.json: field 'layers[1].split_workspace_bytes' must be in 0..1125899906842624, got -1"},
      {[](json& d) { d["precision"] = "fp16"; }, "p.json: field 'precision' must be fp32 or bf16, got 'fp16'"},
      {[](json& d) { d["optimizer"] = "lamb"; }, "p.json: field 'optimizer' must be sgd, adam or adamw, got 'lamb'"},
      {[](json& d) { d["timed"] = "warm"; }, "p.json: field 'timed' must be 'in sequence' or 'alone', got 'warm'"},
      {[](json& d) { d["timing_spread"] = -0.1; }, "p.json: field 'timing_spread' must be >= 0, got -0.1"},
      {[](json& d) { d["layers"][0]["timings"] = json::parse(R"([{"batch": 32, "forward_ms": 1, "backward_ms": 1},
                                                                 {"batch": 16, "forward_ms": 1, "backward_ms": 1}])"); },
       "p.json: field 'layers[0].timings[1].batch' must be above the batch before it (32), got 16"},
      {[](json& d) { d["layers"][0]["timings"] = json::parse(R"([{"batch": 8, "forward_ms": -1, "backward_ms": 1}])"); },
       "p.json: field 'layers[0].timings[0].forward_ms' must be >= 0, got -1"},
      // At the profile's own batch a timing is the layer's figures (100 ms there was accepted).
      {[](json& d) { d["layers"][0]["timings"] = json::parse(R"([{"batch": 64, "forward_ms": 100, "backward_ms": 2.5}])"); },
       "p.json: field 'layers[0].timings[0].forward_ms' and 'backward_ms' are 100 and 2.5 ms at the profile's batch of 64, "
       "where the layer's forward_ms and backward_ms are 1.5 and 2.5"},
      {[](json& d) { d["alike_layers"] = json::parse("[[1]]"); },
       "p.json: field 'alike_layers[0]' must list two layers or more, got 1"},
      {[](json& d) { d["alike_layers"] = json::parse("[[2, 1]]"); },
       "p.json: field 'alike_layers[0][1]' must name layers in ascending order within 0..2, got 1"},
      {[](json& d) { d["alike_layers"] = json::parse("[[0, 1], [1, 2]]"); },
       "p.json: field 'alike_layers[1][0]' names layer 1, which an earlier group holds"},
  };
  for (const auto& c : cases) {
    json d = good();
    c.spoil(d);
    EXPECT_EQ(error_of(d), c.message);
  }
}

// Layers computing alike take their group's medians, figure by figure, and the file keeps the groups.
TEST(ProfileFormat, AlikeLayersTakeTheirGroupsMedians) {
  Profile p = profile_from_json(good(), "p.json");
  Layer extra = p.layers[1];
  p.layers.push_back(extra);  // layer 3
  p.layers[1].forward_ms = 1, p.layers[2].forward_ms = 4, p.layers[3].forward_ms = 2;
  p.layers[1].backward_ms = 6, p.layers[2].backward_ms = 3, p.layers[3].backward_ms = 5;
  p.layers[1].input_gradient_ms = 6, p.layers[2].input_gradient_ms = 1, p.layers[3].input_gradient_ms = 2;
  for (int l = 1; l <= 3; ++l) p.layers[l].timings = {{32, 0.5 * l, 1.0 * l}, {64, p.layers[l].forward_ms, p.layers[l].backward_ms}};
  time_alike(p, {"a", "block", "block", "block"});
  EXPECT_EQ(p.alike, (std::vector<std::vector<int>>{{1, 2, 3}}));
  for (int l = 1; l <= 3; ++l) {
    EXPECT_DOUBLE_EQ(p.layers[l].forward_ms, 2);
    EXPECT_DOUBLE_EQ(p.layers[l].backward_ms, 5);
    EXPECT_DOUBLE_EQ(p.layers[l].input_gradient_ms, 2);  // each figure's own median, at most the backward's
    EXPECT_DOUBLE_EQ(p.layers[l].timings[0].forward_ms, 1);
    EXPECT_DOUBLE_EQ(p.layers[l].timings[1].backward_ms, 5);
  }
  EXPECT_DOUBLE_EQ(p.layers[0].forward_ms, 1.5);  // alone in its group: as measured
  Profile q = profile_from_json(to_json(p), "q.json");  // the timings at the batch still agree
  EXPECT_EQ(q.alike, p.alike);
  // Two of a kind: their mean.
  p.layers[1].forward_ms = 1, p.layers[3].forward_ms = 4;
  for (int l : {1, 3}) p.layers[l].timings.clear();
  time_alike(p, {"a", "b", "c", "b"});
  EXPECT_EQ(p.alike, (std::vector<std::vector<int>>{{1, 3}}));
  EXPECT_DOUBLE_EQ(p.layers[3].forward_ms, 2.5);
  EXPECT_DOUBLE_EQ(p.layers[2].forward_ms, 2);
}

// A layer timed at 16, 32 and 64 (a fixed cost of 1 ms a call, then 0.1 ms a sample, forward; the
// backward twice that), in a profile of batch 64.
Profile timed() {
  Profile p = profile_from_json(good(), "p.json");
  Layer& l = p.layers[0];
  for (int64_t b : {16, 32, 64}) l.timings.push_back({b, 1 + 0.1 * b, 2 * (1 + 0.1 * b)});
  l.forward_ms = 1 + 6.4, l.backward_ms = 2 * 7.4;
  return p;
}

TEST(ProfileTimings, RoundTripAndInterpolate) {
  Profile p = timed();
  Profile q = profile_from_json(to_json(p), "q.json");
  ASSERT_EQ(q.layers[0].timings.size(), 3u);
  EXPECT_EQ(q.layers[0].timings[1].batch, 32);
  EXPECT_TRUE(q.layers[1].timings.empty());
  const Layer& l = p.layers[0];
  EXPECT_DOUBLE_EQ(forward_ms_at(l, 24, 64), 1 + 2.4);   // between two timings
  EXPECT_DOUBLE_EQ(backward_ms_at(l, 48, 64), 2 * 5.8);
  EXPECT_DOUBLE_EQ(forward_ms_at(l, 8, 64), 1 + 0.8);    // below: along the line of 16 and 32
  EXPECT_DOUBLE_EQ(forward_ms_at(l, 128, 64), 1 + 12.8); // above: along 32 and 64
  // Below the smallest timing the line is kept above the smallest's time scaled linearly, and
  // above the largest under it scaled linearly.
  Layer steep = l;
  steep.timings = {{16, 1, 1}, {32, 4, 4}};
  EXPECT_DOUBLE_EQ(forward_ms_at(steep, 8, 64), 0.5);
  Layer flat = l;
  flat.timings = {{16, 2, 2}, {32, 1, 1}};  // noise: the larger batch measured faster
  EXPECT_DOUBLE_EQ(forward_ms_at(flat, 64, 64), 1);  // not the line's -1: at least the largest's time
  // Without timings: linear from the profile's batch (layer 1: 1 ms at 64).
  EXPECT_DOUBLE_EQ(forward_ms_at(p.layers[1], 16, 64), 0.25);
}

TEST(ProfileTimings, MicrobatchesCostTheirOwnSize) {
  Profile p = timed();
  // 4 microbatches of 16: 4 x 2.6 ms, where linear scaling said the minibatch's 7.4.
  EXPECT_DOUBLE_EQ(compute_forward_ms(p, 0, 4), 4 * 2.6);
  EXPECT_DOUBLE_EQ(compute_backward_ms(p, 0, 4), 4 * 5.2);
  EXPECT_DOUBLE_EQ(compute_forward_ms(p, 0, 1), 7.4);
  EXPECT_DOUBLE_EQ(compute_forward_ms(p, 1, 4), 1);  // untimed: linear
  // Another batch takes its time from the timings, bytes scaled.
  Profile half = with_batch_size(p, 32);
  EXPECT_DOUBLE_EQ(half.layers[0].forward_ms, 4.2);
  EXPECT_EQ(half.layers[0].activation_bytes, 50);
  EXPECT_DOUBLE_EQ(compute_forward_ms(half, 0, 2), 2 * 2.6);
  EXPECT_TRUE(knows_batch_sizes(p) == false);  // layers 1 and 2 have none
  EXPECT_DOUBLE_EQ(microbatch_share_floor(p), 1.0);  // every microbatch costs more per sample
  p.layers[0].timings[0].forward_ms = 0.5;            // at 16: 0.5 x 4 = 2 of the minibatch's 7.4
  EXPECT_NEAR(microbatch_share_floor(p), 2 / 7.4, 1e-12);
}

}  // namespace
}  // namespace pt::profile
