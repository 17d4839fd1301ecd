// `pipetrain checkpoint inspect` (the torch-free front end) on checkpoints written here by hand:
// a checkpoint of a run that had diverged, from before train refused to write one, verified
// and listed as sound (exit 0) though train --resume refuses it. It now names the tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/files.h"
#include "core/json_doc.h"
#include "core/tensor_file.h"
#include "pt_paths.h"
#include "runtime/checkpoint_manifest.h"
#include "runtime/layer_file.h"
#include "tests/apps/shell_run.h"

namespace pt {
namespace {

namespace fs = std::filesystem;

TensorRecord floats(const std::string& name, const std::vector<float>& values) {
  TensorRecord t{name, "float32", {static_cast<int64_t>(values.size())}, std::string(values.size() * 4, '\0')};
  std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

// A checkpoint of two layers at step `at` of run `run` whose second layer's momentum holds `bad`
// (or nothing wrong when bad is 0); `one_plain_worker`: one worker's, of SGD without momentum (no state).
fs::path write_checkpoint(const fs::path& dir, float bad, bool one_plain_worker = false, int64_t at = 12,
                          const std::string& run = "0123456789abcdef") {
  fs::path step = dir / runtime::checkpoint_dir_name(at);
  fs::create_directories(step);
  runtime::CheckpointManifest m;
  m.run_id = run;
  m.model = "two-layers";
  m.layers = 2;
  m.step = at;
  m.batch_size = 8;
  m.schedule = "1f1b";
  m.plan = one_plain_worker ? "1" : "1-1";
  m.workers = one_plain_worker ? 1 : 2;
  m.lr = 0.1;
  m.momentum = one_plain_worker ? 0 : 0.9;
  for (int l = 0; l < 2; ++l) {
    runtime::LayerFile f;
    f.params.push_back(floats("param.0", {1, 2, 3}));
    if (one_plain_worker) f.momentum.push_back(std::nullopt);
    else f.momentum.push_back(floats("momentum.0", {0, l == 1 && bad != 0 ? bad : 0.5f, 0}));
    if (l == 1) f.buffers = {floats("running_mean", {0, 0, 0}), floats("running_var", {1, 1, 1})};
    std::string name = "layer-" + std::to_string(l) + ".tensors", bytes = runtime::layer_file_bytes(f);
    write_text_file_atomic((step / name).string(), bytes);
    m.files.push_back({name, l, static_cast<int64_t>(bytes.size()), runtime::crc32_of(bytes)});
  }
  write_text_file_atomic((step / "manifest.json").string(), runtime::manifest_to_json(m));
  return step;
}

testing::ShellRun inspect(const fs::path& checkpoint) {
  return testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain checkpoint inspect " + checkpoint.string());
}

TEST(CheckpointInspect, NamesATensorHoldingNanOrInfinity) {
  fs::path dir = fs::temp_directory_path() / ("pt_inspect_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto sound = inspect(write_checkpoint(dir / "sound", 0));
  EXPECT_EQ(sound.exit_code, 0) << sound.output;
  EXPECT_NE(sound.output.find("total 6 parameters"), std::string::npos) << sound.output;
  // Each layer's line: its parameters' count and shapes, then its optimizer state and buffers.
  EXPECT_NE(sound.output.find("3 parameters [3], momentum\n"), std::string::npos) << sound.output;
  EXPECT_NE(sound.output.find("3 parameters [3], momentum, 2 buffers\n"), std::string::npos) << sound.output;
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    fs::path step = write_checkpoint(dir / (std::isnan(bad) ? "nan" : "inf"), bad);
    auto r = inspect(step);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find((step / "layer-1.tensors").string() + ": tensor 'momentum.0' holds 1 NaN or infinite values"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("diverged by step 12; train --resume refuses it"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("total 6 parameters"), std::string::npos) << "the listing comes first:\n" << r.output;
  }
  fs::remove_all(dir);
}

// A --checkpoint-dir's steps are listed in step order (they came in the file system's), and a
// step folder without a manifest (a run killed while writing it) is marked, not listed as one.
TEST(CheckpointInspect, ListsTheStepsInOrderAndMarksAnIncompleteOne) {
  fs::path dir = fs::temp_directory_path() / ("pt_inspect_list_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  write_checkpoint(dir, 0);  // step 12
  for (int64_t step : {100, 3}) fs::create_directories(dir / runtime::checkpoint_dir_name(step));
  auto r = inspect(dir);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::string incomplete = " (incomplete: no manifest.json)";
  EXPECT_NE(r.output.find("checkpoints in " + dir.string() + ": " + runtime::checkpoint_dir_name(3) + incomplete + " " +
                          runtime::checkpoint_dir_name(12) + " " + runtime::checkpoint_dir_name(100) + incomplete + "\n"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("newest: " + (dir / runtime::checkpoint_dir_name(12)).string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("on plan 1-1 (2 workers)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", seed 0, run 0123456789abcdef\n"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

// A folder holding two runs' steps (an --overwrite run killed before it removed the earlier
// run's): they are marked, as --resume continues the newest's run (they were listed as one run's).
TEST(CheckpointInspect, MarksTheStepsOfAnotherRun) {
  fs::path dir = fs::temp_directory_path() / ("pt_inspect_runs_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  write_checkpoint(dir, 0, false, 12, "aaaa");
  write_checkpoint(dir, 0, false, 4, "bbbb");
  write_checkpoint(dir, 0, false, 8, "bbbb");
  auto r = inspect(dir);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(": " + runtime::checkpoint_dir_name(4) + " (another run: bbbb) " + runtime::checkpoint_dir_name(8) +
                          " (another run: bbbb) " + runtime::checkpoint_dir_name(12) + "\n"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("step 12, batch size 8, seed 0, run aaaa\n"), std::string::npos) << r.output;
  // A file, not a folder: said so (it "held no complete checkpoint").
  fs::path manifest = dir / runtime::checkpoint_dir_name(12) / "manifest.json";
  auto file = inspect(manifest);
  EXPECT_EQ(file.exit_code, 1) << file.output;
  EXPECT_NE(file.output.find(manifest.string() + ": is not a folder"), std::string::npos) << file.output;
  fs::remove_all(dir);
}

// One worker's run of plain SGD: said as what it was (the manifest calls it a one-stage 1f1b), and
// its layers hold no optimizer state because SGD without momentum keeps none, not "yet".
TEST(CheckpointInspect, OneWorkersPlainSgdIsSaidAsItRan) {
  fs::path dir = fs::temp_directory_path() / ("pt_inspect_plain_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto r = inspect(write_checkpoint(dir, 0, true));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("written by one worker (no pipeline)\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("3 parameters [3], no optimizer state (plain SGD keeps none)\n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("yet"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

// A layer's state is each parameter's: one whose first parameter is frozen (no momentum) and its
// second stepped was said to have "no optimizer state yet".
TEST(CheckpointInspect, ALayerWhoseFirstParameterIsFrozenHasItsOthersState) {
  fs::path dir = fs::temp_directory_path() / ("pt_inspect_frozen_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::path step = write_checkpoint(dir, 0);
  for (int l = 0; l < 2; ++l) {  // layer 0: a frozen weight and a stepped bias; layer 1: all frozen
    runtime::LayerFile f;
    f.params = {floats("param.0", {1, 2, 3}), floats("param.1", {4})};
    f.momentum = {std::nullopt, l == 0 ? std::optional(floats("momentum.1", {0.5f})) : std::nullopt};
    std::string name = "layer-" + std::to_string(l) + ".tensors", bytes = runtime::layer_file_bytes(f);
    write_text_file_atomic((step / name).string(), bytes);
  }
  auto manifest = runtime::manifest_from_json(read_text_file((step / "manifest.json").string()), "manifest.json");
  for (auto& file : manifest.files) {
    std::string bytes = read_text_file((step / file.name).string());
    file.bytes = static_cast<int64_t>(bytes.size());
    file.crc32 = runtime::crc32_of(bytes);
  }
  write_text_file_atomic((step / "manifest.json").string(), runtime::manifest_to_json(manifest));
  auto r = inspect(step);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("4 parameters [3] [1], momentum of 1 of its 2 parameters (the others took no step: frozen, "
                          "or no gradient reached them)\n"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("4 parameters [3] [1], no optimizer state: no step reached its parameters (frozen, or no "
                          "gradient reached them)\n"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("yet"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

// Tied parameters are one tensor: a manifest tying two of unlike shapes is refused, naming both;
// a tie of like ones is counted once.
TEST(CheckpointInspect, ATieOfUnlikeShapesIsRefused) {
  fs::path dir = fs::temp_directory_path() / ("pt_inspect_ties_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::path step = write_checkpoint(dir, 0);
  std::string path = (step / "manifest.json").string();
  runtime::CheckpointManifest m = runtime::manifest_from_json(read_text_file(path), path);
  m.ties = {{{0, 0}, {1, 0}}};
  write_text_file_atomic(path, runtime::manifest_to_json(m));
  auto like = inspect(step);
  EXPECT_EQ(like.exit_code, 0) << like.output;
  EXPECT_NE(like.output.find("total 3 parameters (1 tied, counted once; the layer files hold 6)"), std::string::npos)
      << like.output;
  runtime::LayerFile f;  // layer 1's weight now [4]
  f.params.push_back(floats("param.0", {1, 2, 3, 4}));
  f.momentum.push_back(floats("momentum.0", {0, 0, 0, 0}));
  std::string bytes = runtime::layer_file_bytes(f);
  write_text_file_atomic((step / "layer-1.tensors").string(), bytes);
  m.files[1].bytes = static_cast<int64_t>(bytes.size()), m.files[1].crc32 = runtime::crc32_of(bytes);
  write_text_file_atomic(path, runtime::manifest_to_json(m));
  auto unlike = inspect(step);
  EXPECT_EQ(unlike.exit_code, 1) << unlike.output;
  EXPECT_NE(unlike.output.find("field 'ties[0][1]': layer 1's parameter 0 is [4], layer 0's parameter 0 [3]: tied "
                               "parameters are one tensor"),
            std::string::npos)
      << unlike.output;
  fs::remove_all(dir);
}

// Every floating-point dtype by its exponent bits, read a piece at a time from the file.
TEST(CheckpointInspect, NonFiniteValuesAreCountedInEveryFloatDtype) {
  std::vector<TensorRecord> tensors;
  tensors.push_back(floats("f32", {1, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                                   -0.0f, std::numeric_limits<float>::max()}));
  double d[3] = {1, -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::denorm_min()};
  tensors.push_back({"f64", "float64", {3}, std::string(reinterpret_cast<const char*>(d), sizeof d)});
  const char half[] = {0x00, 0x7C, 0x01, 0x7E, static_cast<char>(0xFF), 0x7B};  // +inf, a NaN, 65504
  tensors.push_back({"f16", "float16", {3}, std::string(half, sizeof half)});
  const char bf16[] = {static_cast<char>(0xC0), static_cast<char>(0xFF), static_cast<char>(0x80), 0x3F};  // NaN, 1
  tensors.push_back({"bf16", "bfloat16", {2}, std::string(bf16, sizeof bf16)});
  tensors.push_back({"i32", "int32", {1}, std::string("\xff\xff\x80\x7f", 4)});  // an int, whatever its bits
  std::vector<float> large(300000, 1.0f);  // past one piece of the read
  large[299999] = std::numeric_limits<float>::quiet_NaN();
  tensors.push_back(floats("large", large));
  std::string path = (fs::temp_directory_path() / ("pt_counts_" + std::to_string(::getpid()))).string();
  write_text_file_atomic(path, tensor_file_bytes(tensors));
  EXPECT_EQ(count_non_finite_in_file(path), (std::vector<int64_t>{2, 1, 2, 1, 0, 1}));
  for (size_t t = 0; t < tensors.size(); ++t)
    EXPECT_EQ(count_non_finite(tensors[t]), count_non_finite_in_file(path)[t]) << tensors[t].name;
  fs::remove(path);
}

}  // namespace
}  // namespace pt
