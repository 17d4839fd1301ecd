// Checkpoints: a stopped and resumed synchronous run ends with exactly the weights of an
// uninterrupted one; a checkpoint resumes into another plan (4 stages -> 2 stages -> 1 worker);
// interrupted writes leave the previous checkpoint loadable; bad checkpoints are named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "core/json_doc.h"
#include "pipeline_test_util.h"
#include "core/input_limits.h"
#include "model/memory_meter.h"
#include "runtime/checkpoint.h"
#include "runtime/checkpoint_lock.h"

namespace pt::runtime {
namespace {

using namespace testing;
namespace fs = std::filesystem;

model::DataSplit small_data() { return model::synthetic_data(*seeded_cnn(3), 256, 64, 10, 11); }

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("pt_ckpt_" + std::to_string(::getpid()) + "_" +
                                               std::to_string(counter()++));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

PipelineOptions options(const std::string& kind, int64_t steps, const std::string& dir, int64_t every, bool resume) {
  PipelineOptions o;
  o.schedule = kind;
  o.microbatches = 4;
  o.train.steps = steps;
  o.train.batch_size = 32;
  o.train.sgd = {0.05, 0.9, 1e-4};
  o.train.seed = 3;
  o.train.quiet = true;
  o.train.evaluate = false;
  o.checkpoint.dir = dir;
  o.checkpoint.every = every;
  o.checkpoint.resume = resume;
  return o;
}

plan::Plan stages(int n) { return plan::even_split(unit_profile(*seeded_cnn(3)), n); }

std::vector<torch::Tensor> run(const plan::Plan& plan, const PipelineOptions& o) {
  std::vector<std::unique_ptr<Worker>> workers;
  train_pipeline([](const model::LayerSet& held = {}) { return seeded_cnn(3, held); }, small_data(), plan, o, &workers);
  return pipeline_weights(generate_schedule(plan, o, 1), workers);
}

// The weights a checkpoint holds, in layer order.
TEST(Checkpoint, StopAndResumeEqualsUninterruptedExactly) {
  for (const std::string kind : {"1f1b", "gpipe", "dp"}) {
    SCOPED_TRACE(kind);
    plan::Plan plan = kind == "dp" ? replicated_plan(*seeded_cnn(3), 2) : stages(3);
    TempDir full, parts;
    auto uninterrupted = run(plan, options(kind, 6, full.path.string(), 2, false));
    run(plan, options(kind, 4, parts.path.string(), 2, false));  // "killed" after step 4
    EXPECT_TRUE(fs::exists(parts.path / checkpoint_dir_name(4)));
    auto resumed = run(plan, options(kind, 6, parts.path.string(), 2, true));
    EXPECT_TRUE(bitwise_equal(resumed, uninterrupted));
    EXPECT_TRUE(bitwise_equal(checkpoint_weights(newest_checkpoint(parts.path.string())), uninterrupted));
    // Two kept: steps 4 and 6.
    EXPECT_FALSE(fs::exists(parts.path / checkpoint_dir_name(2)));
  }
}

// Adam's two moments and its step count (the bias corrections) travel with each layer: a run
// resumed under adamw equals the uninterrupted one bit for bit, also into another plan; an sgd
// checkpoint is not resumed under adam (its momentum is not adam's first moment).
TEST(Checkpoint, AdamStateResumesExactlyAndIntoOtherPlans) {
  auto adamw = [](PipelineOptions o) {
    o.train.sgd.kind = "adamw";
    o.train.sgd.lr = 0.002;
    o.train.sgd.weight_decay = 0.1;
    o.train.sgd.beta2 = 0.95;
    return o;
  };
  TempDir full, parts, other;
  auto uninterrupted = run(stages(3), adamw(options("1f1b", 6, full.path.string(), 2, false)));
  run(stages(3), adamw(options("1f1b", 4, parts.path.string(), 2, false)));
  auto resumed = run(stages(3), adamw(options("1f1b", 6, parts.path.string(), 2, true)));
  EXPECT_TRUE(bitwise_equal(resumed, uninterrupted));
  auto manifest = read_verified_manifest(newest_checkpoint(parts.path.string()));
  EXPECT_EQ(manifest.optimizer, "adamw");
  LayerState layer = read_layer_state(newest_checkpoint(parts.path.string()) + "/" + manifest.files[0].name);
  EXPECT_EQ(layer.optimizer_steps, std::vector<int64_t>{6});
  ASSERT_EQ(layer.variance.size(), layer.params.size());
  EXPECT_TRUE(layer.variance[0].defined());
  // Into another plan: 2 steps on 3 stages, 4 more on 2.
  run(stages(3), adamw(options("1f1b", 2, other.path.string(), 2, false)));
  auto elsewhere = run(stages(2), adamw(options("gpipe", 6, other.path.string(), 2, true)));
  EXPECT_LE(max_relative_error(elsewhere, uninterrupted), 1e-5);
  try {
    run(stages(3), options("1f1b", 8, parts.path.string(), 2, true));
    FAIL() << "an adamw checkpoint resumed under sgd";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("the checkpoint holds adamw's state, but this run trains with --optimizer sgd"),
              std::string::npos)
        << e.what();
  }
}

// Linear, ReLU, Linear: a middle layer without parameters.
std::shared_ptr<model::LayeredModel> relu_mlp(const model::LayerSet& held = {}) {
  auto m = std::make_shared<model::LayeredModel>("relu-mlp", model::Task::kClassification, std::vector<int64_t>{8},
                                                 false, held, 7);
  m->add("fc", [] { return torch::nn::Sequential(torch::nn::Linear(8, 16)); });
  m->add("relu", [] { return torch::nn::Sequential(torch::nn::ReLU()); });
  m->add("out", [] { return torch::nn::Sequential(torch::nn::Linear(16, 4)); });
  return m;
}

PipelineOptions with_adam(PipelineOptions o) {
  o.train.sgd.kind = "adam";
  o.train.sgd.lr = 0.01;
  return o;
}

// A stage whose last layer holds no parameters (a ReLU's file records no Adam step count) keeps
// the count of the layers that do: it was set to 0, and Adam's bias corrections started over on
// a resume into such a split (2.4e-3 off the uninterrupted run after 2 steps, exit 0).
TEST(Checkpoint, AdamResumesIntoAStageEndingInALayerWithoutParameters) {
  auto make = relu_mlp;
  auto data = model::synthetic_data(*relu_mlp(), 256, 32, 4, 5);
  auto split = [](std::vector<int> first, std::vector<int> second) {
    plan::Plan p = plan::data_parallel_plan(3, 1);
    p.stages = {{first, 1, {0}}, {second, 1, {1}}};
    p.workers = 2;
    return p;
  };
  auto weights = [&](const plan::Plan& p, const PipelineOptions& o) {
    std::vector<std::unique_ptr<Worker>> workers;
    train_pipeline(make, data, p, o, &workers);
    return pipeline_weights(generate_schedule(p, o, 1), workers);
  };
  TempDir full, parts;
  auto uninterrupted = weights(split({0}, {1, 2}), with_adam(options("1f1b", 6, full.path.string(), 2, false)));
  weights(split({0}, {1, 2}), with_adam(options("1f1b", 4, parts.path.string(), 2, false)));
  auto resumed = weights(split({0, 1}, {2}), with_adam(options("1f1b", 6, parts.path.string(), 2, true)));
  EXPECT_LE(max_relative_error(resumed, uninterrupted), 1e-6);
}

// pipedream's replicated stage steps once a round, so its layers' Adam counts trail the others';
// resumed into a stage that holds layers of both, each keeps its own count, as torch.optim keeps
// one per parameter: the stage kept one, the last layer's, and restarted the others' bias
// corrections (0.12 of a weight off the split that keeps them apart, exit 0).
TEST(Checkpoint, AdamCountsOfLayersThatSteppedApartResumeIntoOneStage) {
  auto make = relu_mlp;
  auto data = model::synthetic_data(*relu_mlp(), 256, 32, 4, 5);
  auto weights = [&](const plan::Plan& p, const PipelineOptions& o) {
    std::vector<std::unique_ptr<Worker>> workers;
    train_pipeline(make, data, p, o, &workers);
    return pipeline_weights(generate_schedule(p, o, 1), workers);
  };
  plan::Plan replicated = plan::data_parallel_plan(3, 1);
  replicated.stages = {{{0}, 2, {0, 1}}, {{1, 2}, 1, {2}}};
  replicated.workers = 3;
  plan::Plan apart = replicated, whole = replicated;
  apart.stages = {{{0}, 1, {0}}, {{1, 2}, 1, {1}}};
  apart.workers = 2;
  whole.stages = {{{0, 1, 2}, 1, {0}}};
  whole.workers = 1;
  TempDir first, second;
  train_pipeline(make, data, replicated, with_adam(options("pipedream", 8, first.path.string(), 8, false)));
  fs::copy(first.path, second.path, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  auto kept_apart = weights(apart, with_adam(options("1f1b", 12, first.path.string(), 0, true)));
  auto in_one = weights(whole, with_adam(options("1f1b", 12, second.path.string(), 0, true)));
  EXPECT_LE(max_relative_error(in_one, kept_apart), 1e-6);
}

// BatchNorm's running statistics are part of what a checkpoint keeps: a resumed run ends with
// the uninterrupted run's, not with statistics started again from their initial values.
TEST(Checkpoint, KeepsBuffers) {
  model::ModelOptions mo;
  mo.width = 0.125;
  mo.image_size = 16;
  mo.channels = 1;
  mo.classes = 10;
  auto make = [mo](const model::LayerSet& held = {}) { return model::build_model("resnet18", mo, held); };
  auto data = model::synthetic_data(*make(), 256, 64, 10, 11);
  plan::Plan plan = plan::even_split(unit_profile(*make()), 2);
  auto buffers = [](const std::string& checkpoint) {
    std::vector<torch::Tensor> out;
    for (const auto& f : read_verified_manifest(checkpoint).files) {
      std::string path = checkpoint + "/" + f.name;
      for (auto& b : read_layer_state(path).buffers) out.push_back(b);
    }
    return out;
  };
  TempDir full, parts;
  train_pipeline(make, data, plan, options("1f1b", 6, full.path.string(), 2, false));
  train_pipeline(make, data, plan, options("1f1b", 4, parts.path.string(), 2, false));
  train_pipeline(make, data, plan, options("1f1b", 6, parts.path.string(), 2, true));
  auto want = buffers(newest_checkpoint(full.path.string()));
  ASSERT_FALSE(want.empty());
  auto fresh = make();  // the statistics moved from their initial values
  EXPECT_FALSE(bitwise_equal(want, [&] {
    std::vector<torch::Tensor> out;
    for (int i = 0; i < fresh->num_layers(); ++i)
      for (auto& b : fresh->layer(i).module->buffers()) out.push_back(b);
    return out;
  }()));
  EXPECT_TRUE(bitwise_equal(buffers(newest_checkpoint(parts.path.string())), want));
}

TEST(Checkpoint, ResumesIntoOtherPlans) {
  TempDir dir;
  std::string d = dir.path.string();
  auto uninterrupted = run(stages(4), options("1f1b", 6, "", 0, false));
  run(stages(4), options("1f1b", 2, d, 2, false));
  run(stages(2), options("gpipe", 4, d, 2, true));
  auto resumed = run(stages(1), options("1f1b", 6, d, 2, true));
  EXPECT_LE(max_relative_error(resumed, uninterrupted), 1e-5);
  auto m = read_verified_manifest(newest_checkpoint(d));
  EXPECT_EQ(m.step, 6);
  EXPECT_EQ(m.plan, stages(1).shape());
}

// A checkpoint records the data it was trained on; resuming on other data (another file, another
// --synthetic-samples) is refused by name, where it went on without a word (issue 70, item 5).
TEST(Checkpoint, ResumingOnOtherDataIsRefused) {
  TempDir dir;
  std::string d = dir.path.string();
  run(stages(2), options("1f1b", 2, d, 2, false));
  auto manifest = read_verified_manifest(newest_checkpoint(d));
  EXPECT_EQ(manifest.data, data_identity(small_data()));
  EXPECT_EQ(manifest.data.train_samples, 256);
  auto model = [](const model::LayerSet& held = {}) { return seeded_cnn(3, held); };
  for (const auto& other : {model::synthetic_data(*seeded_cnn(3), 256, 64, 10, 12),    // other values
                            model::synthetic_data(*seeded_cnn(3), 320, 64, 10, 11)}) {  // more samples
    try {
      train_pipeline(model, other, stages(2), options("1f1b", 4, d, 2, true));
      FAIL() << "resumed on other data";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("the checkpoint was trained on synthetic (256 training samples, CRC-32 "),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(str("but this run's data is synthetic (", other.train.size(), " training")),
                std::string::npos)
          << e.what();
    }
  }
  // The same data resumes.
  train_pipeline(model, small_data(), stages(2), options("1f1b", 4, d, 2, true));
  EXPECT_EQ(read_verified_manifest(newest_checkpoint(d)).step, 4);
}

// The data's CRC reads the tensor where it lies: a copy of Fashion-MNIST's training images
// (188 MB) was each gloo worker's peak resident memory, 150 MiB over its training.
TEST(Checkpoint, TheDataCrcReadsTheTensorInPlace) {
  torch::Tensor small = torch::arange(0, 1000, torch::kFloat32).reshape({10, 100}).t();  // not contiguous
  torch::Tensor copy = small.contiguous();
  EXPECT_EQ(job::tensor_crc32(small),
            crc32_of(std::string(static_cast<const char*>(copy.data_ptr()), copy.numel() * copy.element_size())));
  EXPECT_EQ(job::tensor_crc32(torch::Tensor()), 0u);
  torch::Tensor big = torch::ones({24 << 20}, torch::kFloat32);  // 96 MiB, resident
  std::ofstream reset("/proc/self/clear_refs");                  // the peak back to what is resident now
  reset << "5" << std::flush;
  if (!reset || model::process_peak_rss_bytes() < 0) GTEST_SKIP() << "this kernel does not reset or report a process's peak memory";
  int64_t before = model::process_peak_rss_bytes();
  uint32_t crc = job::tensor_crc32(big);
  EXPECT_NE(crc, 0u);
  EXPECT_LT(model::process_peak_rss_bytes() - before, int64_t{16} << 20) << "the CRC of 96 MiB raised the peak by that much";
}

// Images kept as bytes are named by the CRC of the floats the model takes, as when a float copy
// was held: a checkpoint of that time still resumes on the same data, and no other.
TEST(Checkpoint, TheDataCrcOfPixelsKeptAsBytesIsThatOfTheirFloats) {
  model::DataSplit d = model::load_fashion_mnist(model::kFashionMnistDir);
  torch::Tensor whole = d.test.inputs.to(torch::kFloat32);
  whole.div_(255.0).sub_(0.2860).div_(0.3530);
  EXPECT_EQ(job::inputs_crc32(d.test), job::tensor_crc32(whole));
  EXPECT_NE(job::inputs_crc32(d.test), job::tensor_crc32(d.test.inputs));
  model::Dataset other = d.test;
  other.pixels.mean = 0.2861;
  EXPECT_NE(job::inputs_crc32(other), job::inputs_crc32(d.test));
  std::string bytes = "a checkpoint's data, in two pieces";
  EXPECT_EQ(crc32_of(bytes.data() + 9, bytes.size() - 9, crc32_of(bytes.data(), 9)), crc32_of(bytes));
}

TEST(Checkpoint, PipedreamDrainsAtCheckpoints) {
  TempDir dir;
  std::string d = dir.path.string();
  auto uninterrupted = run(stages(2), options("pipedream", 8, d + "/a", 4, false));
  run(stages(2), options("pipedream", 4, d + "/b", 4, false));
  auto resumed = run(stages(2), options("pipedream", 8, d + "/b", 4, true));
  // Both drained at step 4, so the resumed run repeats the uninterrupted one.
  EXPECT_TRUE(bitwise_equal(resumed, uninterrupted));
}

TEST(Checkpoint, InterruptedWriteLeavesThePreviousOne) {
  TempDir dir;
  std::string d = dir.path.string();
  run(stages(2), options("1f1b", 2, d, 2, false));
  // What a kill in the middle of writing step 4 leaves: a temporary directory, half written.
  fs::create_directories(dir.path / (".tmp-" + checkpoint_dir_name(4)));
  std::ofstream(dir.path / (".tmp-" + checkpoint_dir_name(4)) / "layer-0.tensors") << "half";
  EXPECT_EQ(newest_checkpoint(d), (dir.path / checkpoint_dir_name(2)).string());
  auto resumed = run(stages(2), options("1f1b", 4, d, 2, true));
  auto uninterrupted = run(stages(2), options("1f1b", 4, "", 0, false));
  EXPECT_TRUE(bitwise_equal(resumed, uninterrupted));
  EXPECT_FALSE(fs::exists(dir.path / (".tmp-" + checkpoint_dir_name(4))));
}

// A write that fails part way (here a file-size limit, as a full disk fails it) leaves no
// half-written temporary behind: it held the disk's room until the next run's save.
TEST(Checkpoint, AFailedWriteLeavesNoHalfCheckpoint) {
  TempDir dir;
  std::string d = dir.path.string();
  run(stages(2), options("1f1b", 2, d + "/sizes", 2, false));
  uintmax_t largest = 0;
  for (const auto& e : fs::directory_iterator(fs::path(d) / "sizes" / checkpoint_dir_name(2)))
    largest = std::max(largest, fs::file_size(e.path()));
  rlimit was{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &was), 0);
  rlimit small = was;
  small.rlim_cur = largest / 2;  // the largest layer file cannot be written
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);  // a write past it fails with EFBIG, not the signal
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  bool failed = false;
  try {
    run(stages(2), options("1f1b", 2, d + "/full", 2, false));
  } catch (const std::exception&) {
    failed = true;
  }
  ::setrlimit(RLIMIT_FSIZE, &was);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(failed);
  EXPECT_FALSE(fs::exists(fs::path(d) / "full" / (".tmp-" + checkpoint_dir_name(2))));
  EXPECT_FALSE(fs::exists(fs::path(d) / "full" / checkpoint_dir_name(2)));
}

void expect_resume_error(const std::string& dir, const std::string& expect) {
  try {
    run(stages(2), options("1f1b", 4, dir, 2, true));
    ADD_FAILURE() << "no error; expected: " << expect;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
  }
}

// A damaged newest checkpoint names the newest one that verifies, which resumes once the damaged
// are moved aside (the error alone left the user to find it).
TEST(Checkpoint, ADamagedNewestCheckpointNamesTheOneBefore) {
  TempDir dir;
  std::string d = dir.path.string();
  run(stages(2), options("1f1b", 4, d, 2, false));
  ASSERT_TRUE(fs::exists(dir.path / checkpoint_dir_name(2)));
  fs::path layer = dir.path / checkpoint_dir_name(4) / "layer-0.tensors";
  std::string bytes = read_text_file(layer.string());
  bytes[bytes.size() / 2] ^= 0x55;
  write_text_file_atomic(layer.string(), bytes);
  expect_resume_error(d, layer.string() + ": checksum");
  expect_resume_error(d, "; the newest checkpoint that verifies, " + checkpoint_dir_name(2) + ", resumes once " +
                             checkpoint_dir_name(4) + " is moved out of '" + d + "'");
  // The one offered is verified first: with it damaged too, none is offered.
  fs::path earlier = dir.path / checkpoint_dir_name(2) / "layer-1.tensors";
  std::string kept = read_text_file(earlier.string()), flipped = kept;
  flipped[flipped.size() / 2] ^= 0x55;
  write_text_file_atomic(earlier.string(), flipped);
  expect_resume_error(d, "; no earlier checkpoint verifies either (" + checkpoint_dir_name(2) + ")");
  write_text_file_atomic(earlier.string(), kept);
  fs::rename(dir.path / checkpoint_dir_name(4), dir.path.parent_path() / ("moved-" + checkpoint_dir_name(4)));
  auto resumed = run(stages(2), options("1f1b", 4, d, 2, true));
  auto uninterrupted = run(stages(2), options("1f1b", 4, "", 0, false));
  EXPECT_TRUE(bitwise_equal(resumed, uninterrupted));
  fs::remove_all(dir.path.parent_path() / ("moved-" + checkpoint_dir_name(4)));
}

TEST(Checkpoint, BadCheckpointsAreNamed) {
  TempDir dir;
  std::string d = dir.path.string();
  run(stages(2), options("1f1b", 2, d, 2, false));
  fs::path ck = dir.path / checkpoint_dir_name(2);
  fs::path layer = ck / "layer-0.tensors";
  std::string good = read_text_file(layer.string());
  std::string manifest = read_text_file((ck / "manifest.json").string());

  write_text_file_atomic(layer.string(), good.substr(0, good.size() / 2));  // truncated
  expect_resume_error(d, layer.string() + ": " + std::to_string(good.size() / 2) + " bytes but the manifest says");
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x55;  // same size, wrong checksum
  write_text_file_atomic(layer.string(), flipped);
  expect_resume_error(d, layer.string() + ": checksum");
  write_text_file_atomic(layer.string(), good);

  auto edit = [&](const std::string& from, const std::string& to) {
    std::string m = manifest;
    auto at = m.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    write_text_file_atomic((ck / "manifest.json").string(), m.replace(at, from.size(), to));
  };
  edit("\"model\": \"mnist-cnn\"", "\"model\": \"vgg16\"");
  expect_resume_error(d, "the checkpoint is of model 'vgg16' but this job trains 'mnist-cnn'");
  edit("pipetrain.checkpoint/2", "pipetrain.checkpoint/7");
  expect_resume_error(d, "pipetrain.checkpoint/7");
  edit("\"batch_size\": 32", "\"batch_size\": 64");
  expect_resume_error(d, "batch_size is 64 but this run's batch is 32 (--batch-size; where not given, the plan's or --profile's)");
  // The data order depends on shuffling too: a resume that changed it went on silently.
  edit("\"shuffle\": true", "\"shuffle\": false");
  expect_resume_error(d, "the run did not shuffle (--no-shuffle) but this one shuffles");
  // A step that is not its folder's: named (it resumed there, deleting the good ones past it).
  edit("\"step\": 2", "\"step\": 1");
  expect_resume_error(d, "manifest.json: field \"step\" is 1 but the folder is step 2");
  // A finished run resumed: said, not "steps 0, final loss 0".
  edit("\"step\": 2", "\"step\": 600");
  fs::rename(ck, dir.path / checkpoint_dir_name(600));
  ck = dir.path / checkpoint_dir_name(600);
  expect_resume_error(d, "the checkpoint is at step 600, and this run ends at step 4: nothing to train");
  fs::remove(ck / "manifest.json");  // no manifest: not a complete checkpoint, so none to resume
  EXPECT_EQ(newest_checkpoint(d), "");
}

// A run owns its checkpoint folder (issue 17): a fresh run into a folder that holds another
// run's checkpoints is refused before it trains and leaves them as they are; with --overwrite it
// runs, and its first checkpoint, though of a lower step than the old run's, is kept while the
// old run's go; --resume then continues the new run. Bad folders are named before training.
TEST(Checkpoint, ARunOwnsItsFolder) {
  TempDir dir;
  std::string d = dir.path.string();
  run(stages(2), options("1f1b", 4, d, 2, false));
  std::string old_run = read_verified_manifest(newest_checkpoint(d)).run_id;
  std::string old_bytes = read_text_file((dir.path / checkpoint_dir_name(4) / "manifest.json").string());
  try {
    run(stages(2), options("1f1b", 2, d, 2, false));
    ADD_FAILURE() << "a fresh run into a used folder was not refused";
  } catch (const ConfigError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("holds checkpoints of an earlier run (newest step-00000004)"), std::string::npos) << what;
    EXPECT_NE(what.find("--resume"), std::string::npos) << what;
    EXPECT_NE(what.find("--overwrite"), std::string::npos) << what;
  }
  EXPECT_EQ(read_text_file((dir.path / checkpoint_dir_name(4) / "manifest.json").string()), old_bytes);

  PipelineOptions fresh = options("1f1b", 2, d, 2, false);
  fresh.checkpoint.overwrite = true;
  run(stages(2), fresh);
  ASSERT_EQ(newest_checkpoint(d), (dir.path / checkpoint_dir_name(2)).string());
  std::string new_run = read_verified_manifest(newest_checkpoint(d)).run_id;
  EXPECT_NE(new_run, old_run);
  EXPECT_FALSE(fs::exists(dir.path / checkpoint_dir_name(4)));
  run(stages(2), options("1f1b", 4, d, 2, true));
  auto m = read_verified_manifest(newest_checkpoint(d));
  EXPECT_EQ(m.step, 4);
  EXPECT_EQ(m.run_id, new_run);
  EXPECT_TRUE(fs::exists(dir.path / checkpoint_dir_name(2)));  // two of this run kept

  auto usage_error = [&](const PipelineOptions& o) -> std::string {
    try {
      run(stages(2), o);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(usage_error(options("1f1b", 2, d + "/misspelt", 2, true)).find("does not exist (misspelt?)"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(d + "/misspelt"));
  std::ofstream(dir.path / "a-file") << "x";
  EXPECT_NE(usage_error(options("1f1b", 2, d + "/a-file", 2, false)).find("exists and is not a directory"),
            std::string::npos);
}

// Checkpoints are data (issue 17): a layer file is read only if it is a pipetrain tensor file of
// the size the manifest gives, so a TorchScript archive (the old format, which runs the code it
// carries when torch::load reads it), a link out of the folder or a FIFO is refused by name
// before anything parses it, and a manifest of the old format is refused with the reason.
TEST(Checkpoint, OnlyDataIsEverLoaded) {
  TempDir dir;
  std::string d = dir.path.string();
  run(stages(2), options("1f1b", 2, d, 2, false));
  fs::path ck = dir.path / checkpoint_dir_name(2);
  fs::path layer = ck / "layer-0.tensors";
  std::string manifest = read_text_file((ck / "manifest.json").string());
  // The size and CRC-32 of layer 0 in the manifest replaced by those of `bytes`.
  auto forge = [&](const std::string& bytes) {
    CheckpointManifest m = manifest_from_json(manifest, "manifest");
    m.files[0].bytes = static_cast<int64_t>(bytes.size());
    m.files[0].crc32 = crc32_of(bytes);
    write_text_file_atomic((ck / "manifest.json").string(), manifest_to_json(m));
  };
  std::ostringstream archive;
  torch::save(std::vector<torch::Tensor>{torch::ones({2, 2})}, archive);  // what version 1 wrote
  ASSERT_EQ(archive.str().substr(0, 2), "PK");                            // a zip: TorchScript's container
  write_text_file_atomic(layer.string(), archive.str());
  forge(archive.str());
  expect_resume_error(d, layer.string() + ": not a pipetrain tensor file");

  fs::remove(layer);
  fs::create_symlink("/etc/hostname", layer);
  expect_resume_error(d, layer.string() + ": is a symbolic link");
  fs::remove(layer);
  ASSERT_EQ(::mkfifo(layer.c_str(), 0600), 0);  // would block a reader forever
  expect_resume_error(d, layer.string() + ": not a regular file");
  fs::remove(layer);

  std::string old = manifest;
  old.replace(old.find("pipetrain.checkpoint/2"), 22, "pipetrain.checkpoint/1");
  write_text_file_atomic((ck / "manifest.json").string(), old);
  expect_resume_error(d, "pipetrain.checkpoint/1 is the old checkpoint format, whose layer files are TorchScript");
}

TEST(CheckpointManifest, RoundTripsAndRejectsBadFields) {
  CheckpointManifest m;
  m.run_id = "0123456789abcdef";
  m.model = "mnist-cnn";
  m.layers = 2;
  m.step = 12;
  m.batch_size = 64;
  m.seed = 5;
  m.schedule = "1f1b";
  m.plan = "1-1";
  m.workers = 2;
  m.lr = 0.02;
  m.momentum = 0.9;
  m.lr_schedule = "cosine";
  m.warmup_steps = 3;
  m.schedule_steps = 40;
  m.min_lr = 0.001;
  m.files = {{"layer-0.tensors", 0, 10, 123}, {"layer-1.tensors", 1, 20, 4294967295u}};
  auto back = manifest_from_json(manifest_to_json(m), "m.json");
  EXPECT_EQ(back.step, 12);
  EXPECT_EQ(back.lr_schedule, "cosine");
  EXPECT_EQ(back.warmup_steps, 3);
  EXPECT_EQ(back.schedule_steps, 40);
  EXPECT_EQ(back.min_lr, 0.001);
  EXPECT_EQ(lr_course(back.lr_schedule, back.schedule_steps, back.min_lr), "cosine to 0.001 over 40 steps");
  EXPECT_EQ(lr_course("linear", 40, 0), "linear over 40 steps");
  {  // an older manifest, without the learning rate's course: read as unknown
    std::string text = manifest_to_json(m);
    for (const char* key : {"\"lr_schedule\"", "\"warmup_steps\"", "\"schedule_steps\""}) {  // a line each
      size_t at = text.find(key);
      ASSERT_NE(at, std::string::npos) << text;
      size_t line = text.rfind('\n', at) + 1;
      text.erase(line, text.find('\n', at) + 1 - line);
    }
    CheckpointManifest old = manifest_from_json(text, "m.json");
    EXPECT_EQ(old.lr_schedule, "") << text;
    EXPECT_EQ(manifest_from_json(manifest_to_json(old), "m.json").lr_schedule, "");  // and written back so
  }
  EXPECT_EQ(back.files[1].crc32, 4294967295u);
  // A replicated stage's other replicas' buffers: kept with their layer and replica, and checked
  // (among the cases below).
  EXPECT_EQ(manifest_to_json(m).find("replica_buffers"), std::string::npos);  // none: as before
  m.replica_buffers = {{"layer-1.replica-2.tensors", 1, 30, 7, 2}};
  auto replicas = manifest_from_json(manifest_to_json(m), "m.json").replica_buffers;
  ASSERT_EQ(replicas.size(), 1u);
  EXPECT_EQ(replicas[0].name, "layer-1.replica-2.tensors");
  EXPECT_EQ(replicas[0].layer, 1);
  EXPECT_EQ(replicas[0].replica, 2);
  EXPECT_EQ(replicas[0].bytes, 30);
  EXPECT_EQ(replicas[0].crc32, 7u);
  struct Case {
    std::string from, to, expect;
  };
  for (const Case& c : {Case{"\"step\": 12", "\"step\": -1", "step"}, Case{"\"layer-1.tensors\"", "\"../x\"", "files[1].name"},
                        Case{"\"layers\": 2", "\"layers\": 3", "lists 2 files but field 'layers' is 3"},
                        Case{"\"crc32\": 123", "\"crc32\": 99999999999", "crc32"},
                        Case{"\"run_id\": \"0123456789abcdef\"", "\"run_id\": \"../x\"", "run_id"},
                        Case{"\"cosine\"", "\"exp\"", "field 'sgd.lr_schedule' must be constant, cosine or linear, got 'exp'"},
                        Case{"\"min_lr\": 0.001", "\"min_lr\": -1", "sgd.min_lr"},
                        Case{"\"schedule_steps\": 40", "\"schedule_steps\": -2", "sgd.schedule_steps"},
                        Case{"\"replica\": 2", "\"replica\": 0", "replica_buffers[0].replica"},
                        // Printed by a resume's notes ("written by bogus on plan 7-x"; a helper's audit).
                        Case{"\"1f1b\"", "\"Bogus\\n\"", "field 'schedule' must name a schedule (1f1b, zb-v, file), got "},
                        Case{"\"1-1\"", "\"7-x\"", "field 'plan' must be a plan's shape (replicas per stage: 2-1-1), got '7-x'"},
                        Case{"\"layer-1.replica-2.tensors\"", "\"/etc/x\"", "replica_buffers[0].name"},
                        // Another layer's file (two names swapped with their CRCs loaded each into the other).
                        Case{"\"layer-1.tensors\"", "\"layer-0.tensors\"", "files[1].name' must be layer-1.tensors"},
                        Case{"\"layer-1.replica-2.tensors\"", "\"layer-1.replica-3.tensors\"",
                             "replica_buffers[0].name' must be layer-1.replica-2.tensors"}}) {
    std::string text = manifest_to_json(m);
    ASSERT_NE(text.find(c.from), std::string::npos) << c.from;
    text.replace(text.find(c.from), c.from.size(), c.to);
    try {
      manifest_from_json(text, "m.json");
      ADD_FAILURE() << "no error for " << c.to;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("m.json"), std::string::npos) << e.what();
    }
  }
  m.replica_buffers.clear();
  EXPECT_EQ(checkpoint_step_of(checkpoint_dir_name(123)), 123);
  EXPECT_EQ(checkpoint_step_of("step-12x"), -1);
  // The run's first loss, which a resume judges divergence by: kept where known (a loss below 0
  // too), absent where not (an older file's, an emulated run's).
  EXPECT_TRUE(std::isnan(back.first_loss));
  EXPECT_EQ(manifest_to_json(m).find("first_loss"), std::string::npos);
  m.first_loss = -0.5625;
  EXPECT_EQ(manifest_from_json(manifest_to_json(m), "m.json").first_loss, -0.5625);
  // A tied parameter is listed once: a self-tie, or one in two groups, miscounted the parameters.
  m.ties = {{{0, 0}, {1, 0}}};
  EXPECT_EQ(manifest_from_json(manifest_to_json(m), "m.json").ties, m.ties);
  for (auto ties : {std::vector<std::vector<std::pair<int, int>>>{{{0, 0}, {0, 0}}},
                    std::vector<std::vector<std::pair<int, int>>>{{{0, 0}, {1, 0}}, {{1, 0}, {1, 1}}}}) {
    m.ties = ties;
    try {
      manifest_from_json(manifest_to_json(m), "m.json");
      ADD_FAILURE() << "a parameter tied twice was read";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("a second time (each tied parameter is listed once)"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace pt::runtime

namespace pt::runtime {
namespace {

using ::testing::HasSubstr;

// One run per folder (issue 35): while a run holds a folder, a second one is refused before it
// trains, naming the holder's pid and host; once the first ends, the folder is free again.
TEST(Checkpoint, OneRunPerFolder) {
  TempDir dir;
  std::string d = dir.path.string();
  {
    CheckpointLock first(d);
    try {
      run(stages(2), options("1f1b", 2, d, 2, false));
      ADD_FAILURE() << "a second run was accepted";
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr("is in use by another run (pid " + std::to_string(::getpid()) + " on host "));
    }
    EXPECT_EQ(newest_checkpoint(d), "");  // it wrote nothing
    // The lock is the folder's: deleting the note that names its holder unlocks nothing (a
    // second --resume then ran beside the first; issue 70, item 9).
    fs::remove(fs::path(d) / kCheckpointLockFile);
    try {
      run(stages(2), options("1f1b", 2, d, 2, false));
      ADD_FAILURE() << "a second run was accepted once the lock file was deleted";
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr("is in use by another run (unknown)"));
    }
    EXPECT_EQ(newest_checkpoint(d), "");
  }
  run(stages(2), options("1f1b", 2, d, 2, false));
  EXPECT_NE(newest_checkpoint(d), "");
}

// Rotation survives a kill at any instant (issue 70, item 8): a checkpoint is renamed out of the
// step names before it is deleted, so a kill leaves it whole or a `.del-` folder, which the next
// save removes; a step folder an older pipetrain left half deleted (layer files, no manifest) is
// removed too, where --resume never removed it and a later save of that step was refused.
TEST(Checkpoint, ARotationKilledAtAnyPointLeavesNoHalfCheckpoint) {
  TempDir dir;
  fs::path d = dir.path;
  run(stages(2), options("1f1b", 2, d.string(), 2, false));
  fs::path two = d / checkpoint_dir_name(2);
  ASSERT_TRUE(fs::exists(two / "layer-0.tensors"));
  // The states a kill leaves: renamed whole, renamed and partly deleted, and (an older
  // pipetrain's) deleted in place past its manifest, here for the step the resumed run writes next.
  fs::create_directories(d / (".del-" + checkpoint_dir_name(1)));
  fs::copy(two, d / (".del-" + checkpoint_dir_name(1)), fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  fs::create_directories(d / (".del-" + checkpoint_dir_name(3)));
  fs::copy_file(two / "layer-1.tensors", d / (".del-" + checkpoint_dir_name(3)) / "layer-1.tensors");
  fs::create_directories(d / checkpoint_dir_name(4));
  fs::copy_file(two / "layer-0.tensors", d / checkpoint_dir_name(4) / "layer-0.tensors");
  EXPECT_EQ(newest_checkpoint(d.string()), two.string());  // the half-deleted step 4 is no checkpoint
  run(stages(2), options("1f1b", 6, d.string(), 2, true));
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(d))
    if (e.path().filename().string()[0] != '.' || e.path().filename() != ".pipetrain.lock")
      left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  // The newest two of the run, complete; nothing half deleted.
  EXPECT_EQ(left, (std::vector<std::string>{checkpoint_dir_name(4), checkpoint_dir_name(6)}));
  EXPECT_EQ(read_verified_manifest((d / checkpoint_dir_name(4)).string()).step, 4);
}

// Cleanup removes only what pipetrain wrote: a user's file in a temporary checkpoint folder
// stays (the checkpoint of that step is refused, naming it), and a folder named like a
// checkpoint that is not one is not replaced.
TEST(Checkpoint, CleanupRemovesOnlyWhatPipetrainWrote) {
  TempDir dir;
  fs::path d = dir.path;
  fs::create_directories(d / (".tmp-" + checkpoint_dir_name(2)));
  std::ofstream(d / (".tmp-" + checkpoint_dir_name(2)) / "notes.txt") << "mine";
  std::ofstream(d / (".tmp-" + checkpoint_dir_name(2)) / "layer-0.tensors") << "half written";
  try {
    run(stages(2), options("1f1b", 2, d.string(), 2, false));
    ADD_FAILURE() << "the checkpoint wrote over a user's file";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("notes.txt' is in the way and pipetrain did not write it"));
  }
  EXPECT_TRUE(fs::exists(d / (".tmp-" + checkpoint_dir_name(2)) / "notes.txt"));
  EXPECT_FALSE(fs::exists(d / (".tmp-" + checkpoint_dir_name(2)) / "layer-0.tensors"));
  fs::remove_all(d / (".tmp-" + checkpoint_dir_name(2)));

  fs::create_directories(d / checkpoint_dir_name(2));  // empty: not a checkpoint
  try {
    run(stages(2), options("1f1b", 2, d.string(), 2, false));
    ADD_FAILURE() << "a folder that is not a checkpoint was replaced";
  } catch (const Error& e) {
    // Before training: it was refused only once the run had trained up to that step.
    EXPECT_THAT(e.what(), HasSubstr(checkpoint_dir_name(2) + "' is not a checkpoint (no manifest.json that reads), and "
                                    "this run writes its step-2 checkpoint there: move it away"));
  }
  EXPECT_FALSE(fs::exists(d / (".tmp-" + checkpoint_dir_name(2))));  // no checkpoint was made
  EXPECT_TRUE(fs::is_directory(d / checkpoint_dir_name(2)));
  EXPECT_TRUE(fs::is_empty(d / checkpoint_dir_name(2)));
}

}  // namespace
}  // namespace pt::runtime

namespace pt::runtime {
namespace {

// A checkpoint of a diverged run (NaN weights) is refused on resume, naming the file and the
// tensor, instead of training on to "final loss nan" and exit 0 (issue 35).
// A layer file edited with its CRC made consistent again: NaN weights would train on as NaN, and
// a step count of -1 gave Adam's bias correction 1 - beta^0 = 0 to divide by.
TEST(Checkpoint, NonFiniteWeightsAndImpossibleStepCountsAreRefused) {
  struct Edit {
    std::function<void(LayerState&)> apply;
    std::string says;
  };
  for (const Edit& edit : {Edit{[](LayerState& s) { s.params[1][0] = std::numeric_limits<float>::quiet_NaN(); },
                                ": param.1 holds NaN or infinite values"},
                           Edit{[](LayerState& s) { s.optimizer_steps = {-1}; }, ": optimizer_steps holds -1; a "},
                           Edit{[](LayerState& s) { s.optimizer_steps = {3}; },
                                ": optimizer_steps holds 3; a parameter's count of optimizer steps is 0 to the "
                                "checkpoint's step (2)"}}) {
    SCOPED_TRACE(edit.says);
    TempDir dir;
    std::string d = dir.path.string();
    run(stages(2), with_adam(options("1f1b", 2, d, 2, false)));
    std::string ck = newest_checkpoint(d);
    CheckpointManifest m = read_verified_manifest(ck);
    std::string layer0 = (fs::path(ck) / m.files[0].name).string();
    LayerState s = read_layer_state(layer0);
    ASSERT_EQ(s.optimizer_steps, std::vector<int64_t>{2});
    edit.apply(s);
    write_layer_state(layer0, s);
    m.files[0].bytes = static_cast<int64_t>(fs::file_size(layer0));
    m.files[0].crc32 = crc32_of_file(layer0);
    write_text_file_atomic((fs::path(ck) / "manifest.json").string(), manifest_to_json(m));
    try {
      run(stages(2), with_adam(options("1f1b", 4, d, 2, true)));
      ADD_FAILURE() << "the edited checkpoint was resumed";
    } catch (const Error& e) {  // the worker's FormatError, as the job reports it
      EXPECT_THAT(e.what(), HasSubstr(m.files[0].name + edit.says));
    }
  }
}

// A run that diverges writes no checkpoint with NaN weights: with two kept, its NaN steps 4 and
// 6 rotated out the finite step 2, and resuming was refused with nothing earlier left; with
// --overwrite its first NaN checkpoint removed the previous run's. The job stops at the first
// checkpoint after the divergence, naming it, and the folder keeps what it held.
TEST(Checkpoint, ADivergedRunWritesNoCheckpoint) {
  for (bool overwrite : {false, true}) {
    SCOPED_TRACE(overwrite ? "a fresh run with --overwrite" : "resumed");
    TempDir dir;
    std::string d = dir.path.string();
    run(stages(2), options("1f1b", 2, d, 2, false));  // step 2, finite
    PipelineOptions wild = options("1f1b", 6, d, 2, !overwrite);
    wild.checkpoint.overwrite = overwrite;
    wild.train.sgd.lr = 1e30;
    try {
      run(stages(2), wild);
      ADD_FAILURE() << "a diverged run ended without an error";
    } catch (const Error& e) {
      // The loss, judged before any file is written (the weights' NaN check comes after it): at
      // the first NaN loss, or at the checkpoint where it rose or the weights are not finite.
      EXPECT_THAT(e.what(), ::testing::ContainsRegex("training diverged(: the loss is -?nan at step|"
                                                     " by step .*no checkpoint written for this step)"));
    }
    EXPECT_EQ(newest_checkpoint(d), (dir.path / checkpoint_dir_name(2)).string());
    EXPECT_NO_THROW(run(stages(2), options("1f1b", 4, d, 2, true)));  // it resumes, finite
  }
}

}  // namespace
}  // namespace pt::runtime
