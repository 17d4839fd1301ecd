// Agreement by construction (issue 35): every option of `pipetrain train` reaches the job digest
// that a job's workers compare at rendezvous, or is one of the few listed as per-worker. A new
// option fails this test until it is given an entry below (its value reaches the digest) or
// is listed as per-worker in train.cpp: a flag cannot be forgotten the way --no-shuffle was.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "../runtime/pipeline_test_util.h"
#include "apps/command.h"
#include "core/json_doc.h"
#include "plan/plan.h"
#include "pt_paths.h"
#include "profile/pipedream_graph.h"
#include "profile/profile.h"
#include "profile/profile_fits_model.h"

namespace pt::app {
namespace {

namespace fs = std::filesystem;

// The profile fixes the plan's figures (a profile measured per run would differ in them).
std::vector<std::string> kBase;

struct TrainRun {
  json digest;
  std::string error;
};

// `pipetrain train <args> --print-job`, in this process: the digest it prints, or its error.
TrainRun run_train(const std::vector<std::string>& args, std::vector<std::string>* options = nullptr) {
  const Command* train = nullptr;
  for (const auto& c : registry())
    if (c.name == "train") train = &c;
  EXPECT_NE(train, nullptr);
  CLI::App app{"test"};
  auto runner = train->setup(app);
  if (options)
    for (const CLI::Option* o : app.get_options()) options->push_back(o->get_name());
  std::vector<std::string> argv = {"pipetrain-train"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargs;
  for (auto& a : argv) cargs.push_back(a.data());
  TrainRun r;
  testing::internal::CaptureStdout();
  try {
    app.parse(static_cast<int>(cargs.size()), cargs.data());
    runner();
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  std::cout.flush();
  std::string out = testing::internal::GetCapturedStdout();
  if (r.error.empty() && std::find(args.begin(), args.end(), "--print-job") != args.end())
    r.digest = parse_json(out, "--print-job");
  return r;
}

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more,
                              const std::vector<std::string>& drop = {}) {
  for (const auto& d : drop) {  // a flag and its value
    auto it = std::find(args.begin(), args.end(), d);
    if (it != args.end()) args.erase(it, it + 2);
  }
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(TrainFlags, EveryOptionReachesTheJobDigestOrIsPerWorker) {
  fs::path tmp = fs::temp_directory_path() / ("pt_train_flags_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  auto m = runtime::testing::seeded_cnn(1);
  profile::Profile prof = runtime::testing::unit_profile(*m);
  std::string plan_file = (tmp / "plan.json").string(), prof_file = (tmp / "prof.json").string();
  std::string cluster_file = (tmp / "cluster.json").string(), text_file = (tmp / "text.txt").string();
  plan::write_plan(plan::even_split(prof, 2), plan_file);
  profile::write_profile(prof, prof_file);
  // A deferred step is a replicated first stage's (refused on one replica, where it changed nothing).
  std::string replicated_plan = (tmp / "replicated.json").string();
  std::ofstream(replicated_plan) << R"({"format": "pipetrain.plan/1", "workers": 3, "stages": [
      {"layers": [0, 1, 2], "replicas": 2}, {"layers": [3, 4], "replicas": 1}]})";
  kBase = {"--data", "synthetic", "--synthetic-samples", "256", "--steps", "2", "--stages", "2", "--schedule", "1f1b",
           "--profile", prof_file, "--print-job"};
  profile::Profile slower = prof;
  for (auto& l : slower.layers) l.forward_ms *= 2;
  std::string slower_file = (tmp / "slower.json").string();
  profile::write_profile(slower, slower_file);
  std::ofstream(cluster_file) << R"({"format": "pipetrain.cluster/1", "levels": [{"name": "server", "fan_out": 2, "bandwidth_gbps": 10}]})";
  std::ofstream(text_file) << std::string(2000, 'a') << "\n";
  // Fashion-MNIST's IDX files of 96 training and 32 test images, for --data-dir.
  fs::path idx = tmp / "idx";
  fs::create_directories(idx);
  auto write_idx = [&](const std::string& name, uint8_t kind, std::vector<int> dims) {
    std::ofstream f(idx / name, std::ios::binary);
    f << '\0' << '\0' << static_cast<char>(0x08) << static_cast<char>(kind);
    int64_t n = 1;
    for (int d : dims) {
      for (int shift : {24, 16, 8, 0}) f << static_cast<char>((d >> shift) & 0xff);
      n *= d;
    }
    for (int64_t i = 0; i < n; ++i) f << static_cast<char>(kind == 3 ? (i * 7) % 256 : i % 10);
  };
  write_idx("train-images-idx3-ubyte", 3, {96, 28, 28});
  write_idx("train-labels-idx1-ubyte", 1, {96});
  write_idx("t10k-images-idx3-ubyte", 3, {32, 28, 28});
  write_idx("t10k-labels-idx1-ubyte", 1, {32});
  std::string tokens_file = (tmp / "tokens.bin").string();  // for --eval-data: token ids, as a model file takes
  std::ofstream(tokens_file, std::ios::binary) << std::string(2 * 4096, '\0');
  std::string schedule_file = (tmp / "gpipe.csv").string();  // 2 stages, as kBase's --stages 2
  std::ofstream(schedule_file) << "0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n";
  // A model file (the only kind --loss and --deferred-batch-norm apply to), exported by Python's pipetrain export.
  // And a language model of token ids, for the token file's --eval-data.
  std::ofstream(tmp / "tiny.py") << "import torch.nn as nn\n"
                                    "def mlp():\n    return nn.Sequential(nn.Flatten(), nn.Linear(784, 16), "
                                    "nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 10))\n"
                                    "def lm():\n    return nn.Sequential(nn.Embedding(16, 8), nn.Linear(8, 16))\n";
  std::string model_file = (tmp / "tiny.pt").string(), lm_file = (tmp / "tiny-lm.pt").string();
  std::string export_cmd = "cd " + tmp.string() + " && " + std::string(PT_BINARY_DIR) +
                           "/pipetrain export --model tiny:mlp --input-shape 4,1,28,28 -o " + model_file +
                           " > export.log 2>&1 && " + std::string(PT_BINARY_DIR) +
                           "/pipetrain export --model tiny:lm --input-shape 4,8 --input-dtype int64 --input-high 16 -o " +
                           lm_file + " >> export.log 2>&1";
  bool have_model_file = std::system(export_cmd.c_str()) == 0;

  // An option -> the arguments that give it another value than kBase has (and the base flags
  // they replace). Any run must still reach --print-job.
  struct Change {
    std::vector<std::string> args;
    std::vector<std::string> drop = {};
  };
  const std::map<std::string, Change> changes = {
      {"--allreduce", {{"--cluster", cluster_file, "--allreduce", "ring"}}},
      {"--batch-size", {{"--batch-size", "32"}}},
      {"--bucket-mb", {{"--bucket-mb", "1"}}},
      {"--byte-scale", {{"--compute", "emulated", "--byte-scale", "2"}}},  // real compute refuses it
      {"--checkpoint-dir", {{"--checkpoint-dir", (tmp / "ck").string()}}},
      {"--checkpoint-every", {{"--checkpoint-every", "5", "--checkpoint-dir", (tmp / "ck").string()}}},
      {"--chunks", {{"--chunks", "2", "--schedule", "interleaved"}, {"--schedule"}}},
      {"--classes", {{"--classes", "5"}}},
      {"--cluster", {{"--cluster", cluster_file}}},
      {"--compute", {{"--compute", "emulated"}}},
      {"--data", {{"--data", "text", "--model", "lstm-lm", "--text", text_file, "--seq-len", "4"}, {"--data", "--synthetic-samples", "--profile"}}},
      {"--data-dir", {{"--data", "fashion-mnist", "--data-dir", idx.string()}, {"--data", "--synthetic-samples"}}},
      {"--deferred-batch-norm", {{"--model", model_file, "--deferred-batch-norm"}, {"--profile"}}},
      {"--deferred-step", {{"--deferred-step", "--schedule", "pipedream", "--plan", replicated_plan}, {"--schedule", "--stages"}}},
      {"--depth", {{"--depth", "3"}}},
      {"--epochs", {{"--epochs", "3"}}},
      {"--eval-every", {{"--eval-every", "1"}}},
      {"--image-size", {{"--image-size", "32"}}},
      {"--label-smoothing", {{"--label-smoothing", "0.1"}}},
      {"--loss", {{"--model", model_file, "--loss", "cross-entropy"}, {"--profile"}}},
      {"--lr", {{"--lr", "0.5"}}},
      {"--optimizer", {{"--optimizer", "adam"}}},
      {"--betas", {{"--optimizer", "adam", "--betas", "0.8,0.9"}}},  // sgd refuses them
      {"--eps", {{"--optimizer", "adam", "--eps", "1e-6"}}},
      {"--clip-grad-norm", {{"--clip-grad-norm", "1"}}},
      {"--precision", {{"--precision", "bf16"}}},
      {"--lr-schedule", {{"--lr-schedule", "cosine"}}},
      {"--min-lr", {{"--lr-schedule", "linear", "--min-lr", "0.001"}, {"--lr-schedule"}}},
      {"--microbatches", {{"--microbatches", "2"}}},
      {"--model", {{"--model", "lstm-lm", "--seq-len", "4"}, {"--profile"}}},
      {"--momentum", {{"--momentum", "0"}}},
      {"--no-deferred-step", {{"--no-deferred-step", "--schedule", "pipedream"}, {"--schedule"}}},
      {"--no-shuffle", {{"--no-shuffle"}}},
      {"--no-weight-prediction", {{"--no-weight-prediction", "--schedule", "pipedream"}, {"--schedule"}}},
      {"--overwrite", {{"--overwrite", "--checkpoint-dir", (tmp / "ck").string()}}},
      {"--plan", {{"--plan", plan_file}, {"--stages"}}},
      {"--profile", {{"--profile", slower_file}, {"--profile"}}},
      {"--recompute", {{"--recompute"}}},
      {"--resume", {{"--resume", "--checkpoint-dir", (tmp / "ck").string()}}},
      {"--schedule", {{"--schedule", "gpipe"}, {"--schedule"}}},
      {"--schedule-file", {{"--schedule-file", schedule_file}, {"--schedule"}}},
      {"--seed", {{"--seed", "7"}}},
      {"--seq-len", {{"--seq-len", "16"}}},
      {"--stages", {{"--stages", "3"}, {"--stages"}}},
      {"--stale-warmup", {{"--stale-warmup", "5", "--schedule", "pipedream"}, {"--schedule"}}},
      {"--replica-gradients", {{"--replica-gradients", "sum", "--schedule", "pipedream"}, {"--schedule"}}},
      {"--steps", {{"--steps", "3"}, {"--steps"}}},
      {"--synthetic-samples", {{"--synthetic-samples", "512"}, {"--synthetic-samples"}}},
      {"--text", {{"--data", "text", "--model", "lstm-lm", "--text", text_file, "--seq-len", "4"}, {"--data", "--synthetic-samples", "--profile"}}},
      {"--token-dtype",  // zeros: as uint32, 2048 ids of 0
       {{"--model", lm_file, "--loss", "lm", "--data", tokens_file, "--token-dtype", "uint32"}, {"--data", "--synthetic-samples", "--profile"}}},
      {"--eval-data",
       {{"--model", lm_file, "--loss", "lm", "--data", tokens_file, "--eval-data", tokens_file}, {"--data", "--synthetic-samples", "--profile"}}},
      {"--time-scale", {{"--compute", "emulated", "--time-scale", "2"}}},
      {"--transport", {{"--transport", "gloo"}}},
      {"--vertical-sync", {{"--vertical-sync", "--schedule", "pipedream"}, {"--schedule"}}},
      {"--warmup-steps", {{"--warmup-steps", "3"}}},
      {"--weight-decay", {{"--weight-decay", "0.001"}}},
      {"--weight-decay-on", {{"--weight-decay-on", "matrices", "--weight-decay", "0.001"}}},
      {"--zero-grad", {{"--zero-grad", "zeros"}}},
      {"--width", {{"--width", "2"}}},
      {"--workers", {{"--workers", "2", "--schedule", "dp"}, {"--stages", "--schedule"}}},
  };
  // What may differ per worker, given any value: the digest stays the same.
  const std::map<std::string, std::vector<std::string>> per_worker = {
      {"--metrics", {"--metrics", (tmp / "m.csv").string()}},
      {"--trace", {"--trace", (tmp / "t.json").string()}},
      {"--prediction-trace", {"--prediction-trace", (tmp / "p.json").string()}},
      {"--quiet", {"--quiet"}},
      {"--no-pin-cores", {"--no-pin-cores"}},
      {"--timeout", {"--timeout", "5"}},
      {"--rendezvous-timeout", {"--rendezvous-timeout", "5"}},
      {"--print-job", {}},
      {"--help", {}}};

  std::vector<std::string> options;
  TrainRun base = run_train(kBase, &options);
  ASSERT_EQ(base.error, "");
  EXPECT_GT(options.size(), 40u);
  for (const auto& name : options) {
    SCOPED_TRACE(name);
    if (auto pw = per_worker.find(name); pw != per_worker.end()) {
      if (pw->second.empty()) continue;
      TrainRun r = run_train(with(kBase, pw->second));
      ASSERT_EQ(r.error, "");
      EXPECT_TRUE(json_differences(base.digest, r.digest).empty()) << r.digest.dump();
      continue;
    }
    if ((name == "--loss" || name == "--deferred-batch-norm" || name == "--eval-data" || name == "--token-dtype") &&
        !have_model_file) {
      ADD_FAILURE() << "`pipetrain export` failed (python3-torch installed?): " << export_cmd;
      continue;
    }
    auto c = changes.find(name);
    ASSERT_NE(c, changes.end()) << "a new option of train: add it to `changes` here (its value must reach the job "
                                   "digest) or, if workers may differ in it, to kPerWorkerFlags in apps/torch/train_flags.cpp";
    TrainRun r = run_train(with(kBase, c->second.args, c->second.drop));
    ASSERT_EQ(r.error, "");
    bool named = false;
    // A flag naming the data reaches the digest by the data's name, sizes and CRCs (its path may
    // differ between workers, the default and the same folder given alike).
    bool data = name == "--data-dir" || name == "--text";
    for (const auto& d : json_differences(base.digest, r.digest))
      named |= d.path == "flags." + name || (data && d.path.rfind("data.", 0) == 0);
    EXPECT_TRUE(named) << r.digest["flags"].dump();
  }
  fs::remove_all(tmp);
}

// Each bad value of train is refused naming its flag and the value, before anything trains (in
// this process: each start of pipetrain-torch costs 0.45 s of CPU; CliErrors runs one of each kind
// of refusal through the binary).
TEST(TrainFlags, BadValuesNameFlagAndValue) {
  const std::vector<std::string> base = {"--data", "synthetic", "--synthetic-samples", "64", "--quiet"};
  const std::vector<std::string> one = {"--batch-size", "16", "--steps", "1"};
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> words;
  };
  const std::vector<Case> cases = {
      {{"--stages", "2", "--schedule", "1f1b", "--microbatches", "0"}, {"--microbatches", "got 0"}},
      {{"--stages", "2", "--schedule", "1f1b", "--microbatches", "1000000"}, {"--microbatches", "got 1000000"}},
      {{"--stages", "2", "--schedule", "gpipe", "--microbatches", "3"}, {"--microbatches: 3 does not divide --batch-size 16"}},
      {{"--stages", "3", "--schedule", "interleaved", "--chunks", "2"}, {"--stages 3 x --chunks 2 = 6", "mnist-cnn"}},
      {{"--stages", "2", "--schedule", "interleaved", "--chunks", "0"}, {"--chunks", "got 0"}},
      {{"--schedule", "dp", "--workers", "-2"}, {"--workers", "-2"}},
      {{"--lr", "-0.5"}, {"--lr: must be > 0 and at most 3.40282e+38 (float32's largest), got -0.5"}},
      {{"--lr-schedule", "exp"}, {"--lr-schedule: must be constant, cosine or linear, got 'exp'"}},
      {{"--lr-schedule", "linear", "--min-lr", "0.5"}, {"--min-lr: must be in [0, --lr] (0.02), got 0.5"}},
      {{"--lr-schedule", "cosine", "--min-lr", "-1"}, {"--min-lr: must be in [0, --lr] (0.02), got -1"}},
      {{"--min-lr", "0.001"}, {"--min-lr is where a decay ends; --lr-schedule constant keeps --lr"}},
  };
  for (const auto& c : cases) {
    TrainRun r = run_train(with(with(base, one), c.args));
    for (const auto& w : c.words) EXPECT_NE(r.error.find(w), std::string::npos) << "missing '" << w << "' in: " << r.error;
  }
  // Cases that vary the batch and steps themselves, or the model.
  const std::vector<Case> own = {
      {{"--steps", "1", "--batch-size", "-16"}, {"--batch-size: must be >= 1, got -16"}},
      {{"--steps", "1", "--batch-size", "1000000"}, {"--batch-size: 1000000 is larger than the 64 training samples"}},
      {{"--batch-size", "16", "--steps", "-1"}, {"--steps: Value -1 not in range 1 to 1000000000000"}},
      // The help's range says 1 too (it said 0, which was refused after it).
      {{"--batch-size", "16", "--steps", "0"}, {"--steps: Value 0 not in range 1 to 1000000000000"}},
  };
  for (const auto& c : own) {
    TrainRun r = run_train(with(base, c.args));
    for (const auto& w : c.words) EXPECT_NE(r.error.find(w), std::string::npos) << "missing '" << w << "' in: " << r.error;
  }
  const std::vector<Case> models = {
      {{"--data", "synthetic", "--model", "vgg16", "--image-size", "100000"}, {"--image-size: must be in 1..4096, got 100000"}},
      {{"--model", "gpt", "--seq-len", "1000000"}, {"--seq-len: must be in 1..65536, got 1000000"}},
      {{"--model", "gpt", "--seq-len", "-5"}, {"--seq-len", "got -5"}},
      // 0 passed for the model's default, and a class count the data set fixes was let go unsaid.
      {{"--model", "gpt", "--depth", "0"}, {"--depth: must be >= 1, got 0 (leave the flag out"}},
      {{"--data", "synthetic", "--model", "resnet18", "--image-size", "0"}, {"--image-size: must be >= 1, got 0"}},
      {{"--model", "mnist-cnn", "--data", "fashion-mnist", "--classes", "5"},
       {"--classes: fashion-mnist has 10 classes, got 5"}},
      // A data flag the data read does not use (each was dropped without a word, exit 0).
      {{"--model", "mnist-cnn", "--text", "small.txt"}, {"--text small.txt: for --data text", "reads --data fashion-mnist"}},
      {{"--data", "synthetic", "--token-dtype", "uint32"}, {"--token-dtype uint32: for --data FILE.bin", "synthetic"}},
      {{"--data", "synthetic", "--data-dir", "/nowhere"}, {"--data-dir /nowhere: for --data fashion-mnist"}},
      {{"--model", "mnist-cnn", "--synthetic-samples", "64"}, {"--synthetic-samples 64: for --data synthetic"}},
  };
  for (const auto& c : models) {
    TrainRun r = run_train(c.args);
    for (const auto& w : c.words) EXPECT_NE(r.error.find(w), std::string::npos) << "missing '" << w << "' in: " << r.error;
  }
}

// Issue 17, item 8: each of these used to train something else, fail late, or hang; each is
// refused before anything runs (CliErrors.EveryCombinationWorksOrIsRefused runs the rest through
// the binary).
TEST(TrainFlags, EveryCombinationWorksOrIsRefused) {
  fs::path tmp = fs::temp_directory_path() / ("pt_train_rules_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream((tmp / name).string()) << text;
    return (tmp / name).string();
  };
  std::string plan2 = write("two_stages.json", R"({"format": "pipetrain.plan/1", "workers": 2, "stages": [
      {"layers": [0, 1, 2], "replicas": 1}, {"layers": [3, 4], "replicas": 1}]})");
  std::string one = write("one_worker.json", R"({"format": "pipetrain.cluster/1", "levels": [{"fan_out": 1, "bandwidth_gbps": 10}]})");
  // A replicated stage's versions do not line up with the others' (it used to stop on an
  // internal check: "weight version 3 was not stashed").
  // A profile that times no layer: refused as plan and simulate refuse it (train predicted
  // -9223372036854775808 samples/s by it).
  profile::Profile untimed = runtime::testing::unit_profile(*runtime::testing::seeded_cnn(1));
  for (auto& l : untimed.layers) l.forward_ms = l.backward_ms = l.optimizer_ms = 0, l.timings.clear();
  std::string untimed_file = (tmp / "untimed.json").string();
  profile::write_profile(untimed, untimed_file);
  profile::Profile renamed = runtime::testing::unit_profile(*runtime::testing::seeded_cnn(1));
  renamed.model = "vgg16";
  std::string renamed_file = (tmp / "renamed.json").string();
  profile::write_profile(renamed, renamed_file);
  // Measured on inputs twice the size (another image size, a sequence length): train predicted
  // lstm-lm at --seq-len 64 from a profile at 8 at 13.7x its measured speed, exit 0.
  profile::Profile resized = runtime::testing::unit_profile(*runtime::testing::seeded_cnn(1));
  resized.input_bytes = resized.batch_size * 2 * 28 * 28 * 4;
  std::string resized_file = (tmp / "resized.json").string();
  profile::write_profile(resized, resized_file);
  std::string replicated = write("replicated.json", R"({"format": "pipetrain.plan/1", "workers": 3, "stages": [
      {"layers": [0, 1, 2], "replicas": 2}, {"layers": [3, 4], "replicas": 1}]})");
  const std::vector<std::string> base = {"--data", "synthetic", "--synthetic-samples", "64", "--quiet"};
  const std::vector<std::string> one_step = {"--batch-size", "16", "--steps", "1"};
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> words;
  };
  const std::vector<Case> cases = {
      {{"--stages", "2", "--timeout", "1e10"}, {"--timeout: must be in (0, 604800] seconds, got 1e+10"}},
      {{"--stages", "2", "--transport", "gloo", "--rendezvous-timeout", "1e10"},
       {"--rendezvous-timeout: must be in (0, 604800] seconds, got 1e+10"}},
      {{"--stages", "2", "--profile", untimed_file}, {untimed_file + ": every layer's forward_ms and backward_ms is 0"}},
      {{"--lr", "inf"}, {"--lr: must be > 0 and at most 3.40282e+38 (float32's largest), got inf"}},
      {{"--plan", plan2, "--workers", "2"}, {"--plan and --workers"}},
      {{"--stages", "2", "--workers", "2"}, {"--stages and --workers"}},
      {{"--stages", "2", "--schedule", "1f1b", "--schedule-file", plan2}, {"--schedule and --schedule-file: give one of them"}},
      {{"--stages", "2", "--overwrite"}, {"--overwrite: give --checkpoint-dir D"}},
      {{"--stages", "2", "--resume"}, {"--resume: give --checkpoint-dir D"}},
      {{"--stages", "2", "--schedule", "1f1b", "--vertical-sync"}, {"--vertical-sync", "1f1b"}},
      {{"--plan", plan2, "--schedule", "dp"}, {"--schedule dp", "the plan has 2 stages"}},
      {{"--stages", "2", "--schedule", "dp"}, {"--stages 2 with --schedule dp", "--workers N"}},  // ran dp on 2
      // A hierarchical all-reduce needs to know which workers share a server, and enough of them.
      {{"--stages", "2", "--allreduce", "hierarchical"}, {"--allreduce: give --cluster FILE"}},
      {{"--stages", "2", "--cluster", one, "--allreduce", "tree"}, {"--allreduce", "tree"}},
      // The asynchronous schedules' settings are refused under the others (they were ignored).
      {{"--stages", "2", "--schedule", "gpipe", "--stale-warmup", "5"}, {"--stale-warmup", "not gpipe", "got 5"}},
      {{"--stages", "2", "--schedule", "1f1b", "--no-weight-prediction"}, {"--no-weight-prediction", "not 1f1b"}},
      {{"--plan", replicated, "--schedule", "1f1b", "--replica-gradients", "sum"},
       {"--replica-gradients sum", "1f1b all-reduces"}},
      {{"--plan", replicated, "--schedule", "2bw", "--replica-gradients", "sum"}, {"--replica-gradients sum", "2bw"}},
      {{"--plan", replicated, "--schedule", "pipedream", "--vertical-sync"},
       {"--vertical-sync: needs one replica per stage", "stage 0 of plan 2-1 has 2"}},
      // Outputs are checked before training.
      {{"--trace", "/nonexistent/dir/out"}, {"--trace", "/nonexistent/dir", "not a directory"}},
      {{"--trace", tmp.string()}, {"--trace", "is a directory"}},
      // A gloo job's workers write their parts beside the trace: beside /dev/stdout, after training.
      {{"--stages", "2", "--transport", "gloo", "--trace", "/dev/stdout"},
       {"--trace '/dev/stdout': a gloo job's workers each write their part beside the trace", "give a file"}},
      {{"--metrics", "/nonexistent/dir/out"}, {"--metrics", "/nonexistent/dir", "not a directory"}},
      {{"--metrics", tmp.string()}, {"--metrics", "is a directory"}},
      {{"--metrics", (tmp / "new.csv").string(), "--checkpoint-dir", (tmp / "new.csv").string()},
       {"--metrics", "is --checkpoint-dir", "new.csv"}},
      {{"--checkpoint-dir", tmp.string(), "--checkpoint-every", "-3"}, {"--checkpoint-every: must be >= 0, got -3"}},
      {{"--plan", replicated, "--schedule", "1f1b", "--deferred-step"},
       {"--deferred-step: only the pipedream schedule defers a step, not 1f1b"}},
      // On a first stage of one replica it deferred nothing, and the checkpoint recorded it on.
      {{"--stages", "2", "--schedule", "pipedream", "--deferred-step"},
       {"--deferred-step: defers a replicated first stage's step", "the plan's first stage has 1 replica"}},
      // A schedule file's microbatches are the file's (the error named a --microbatches never given),
      // and a split of another model's profile names the profile (it said "the plan").
      {{"--stages", "2", "--schedule-file", write("three.csv", "0F0,0F1,0F2,0B0,0B1,0B2\n1F0,1B0,1F1,1B1,1F2,1B2\n")},
       {"three.csv: its 3 microbatches do not divide --batch-size 16"}},
      {{"--stages", "2", "--profile", renamed_file}, {"renamed.json: the profile is for model 'vgg16' but --model is 'mnist-cnn'"}},
      // Another model's profile on one worker and under data parallelism too (they took it).
      {{"--profile", renamed_file}, {"renamed.json: the profile is for model 'vgg16' but --model is 'mnist-cnn'"}},
      {{"--workers", "2", "--profile", renamed_file}, {"renamed.json: the profile is for model 'vgg16'"}},
      {{"--profile", resized_file}, {"resized.json: measured on inputs of", "(field 'input_bytes'), where synthetic gives 3136 bytes a sample"}},
      // Which parameters a decay of 0 shrinks changes nothing.
      {{"--weight-decay-on", "matrices"}, {"--weight-decay-on matrices: --weight-decay is 0"}},
      // Its opposite too: under gpipe it changed nothing, exit 0.
      {{"--plan", replicated, "--schedule", "gpipe", "--no-deferred-step"},
       {"--no-deferred-step: only the pipedream schedule defers a step, not gpipe"}},
  };
  for (const auto& c : cases) {
    TrainRun r = run_train(with(with(base, one_step), c.args));
    for (const auto& w : c.words) EXPECT_NE(r.error.find(w), std::string::npos) << "missing '" << w << "' in: " << r.error;
  }
  TrainRun r = run_train(with(base, {"--batch-size", "16", "--steps", "0"}));
  EXPECT_NE(r.error.find("--steps: Value 0 not in range 1 to"), std::string::npos) << r.error;
  fs::remove_all(tmp);
}

// Numbers CLI11's own checks let through (NaN compares false to everything) are refused as the
// flags are parsed, naming flag and value: `--timeout nan` never timed out. In this process; one
// goes through the binary in CliErrors.TrainingValues.
TEST(TrainFlags, NonFiniteNumbersAreRefused) {
  const std::vector<std::string> base = {"--data", "synthetic", "--synthetic-samples", "64", "--steps", "1", "--print-job"};
  for (const char* flag : {"--timeout", "--rendezvous-timeout", "--time-scale", "--byte-scale"})
    for (const char* bad : {"nan", "inf", "-1", "0"}) {
      TrainRun r = run_train(with(base, {flag, bad}));
      EXPECT_NE(r.error.find(std::string(flag) + ": must be a finite number > 0, got '" + bad + "'"), std::string::npos)
          << flag << " " << bad << ": " << r.error;
    }
  for (const char* bad : {"nan", "inf", "-1"}) {
    TrainRun r = run_train(with(base, {"--bucket-mb", bad}));
    EXPECT_NE(r.error.find(std::string("--bucket-mb: must be a finite number >= 0, got '") + bad + "'"), std::string::npos)
        << bad << ": " << r.error;
  }
  EXPECT_EQ(run_train(with(base, {"--stages", "2", "--schedule", "1f1b", "--bucket-mb", "0", "--timeout", "2.5"})).error, "");
}

// A file flag compares the file's contents, not its path: the same plan at two paths agrees,
// another plan at the same path does not.
TEST(TrainFlags, FilesCompareByContents) {
  fs::path tmp = fs::temp_directory_path() / ("pt_train_files_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  auto prof = runtime::testing::unit_profile(*runtime::testing::seeded_cnn(1));
  std::string a = (tmp / "a.json").string(), b = (tmp / "b.json").string();
  plan::write_plan(plan::even_split(prof, 2), a);
  plan::write_plan(plan::even_split(prof, 2), b);
  auto args = [](const std::string& plan) {
    return std::vector<std::string>{"--data", "synthetic", "--synthetic-samples", "256", "--steps", "2",
                                    "--schedule", "1f1b", "--plan", plan, "--print-job"};
  };
  TrainRun ra = run_train(args(a)), rb = run_train(args(b));
  ASSERT_EQ(ra.error, "");
  ASSERT_EQ(rb.error, "");
  EXPECT_TRUE(json_differences(ra.digest, rb.digest).empty());
  plan::Plan other = plan::even_split(prof, 2);
  std::swap(other.stages[0].workers, other.stages[1].workers);
  plan::write_plan(other, b);
  rb = run_train(args(b));
  ASSERT_EQ(rb.error, "");
  bool named = false;
  for (const auto& d : json_differences(ra.digest, rb.digest)) named |= d.path == "flags.--plan";
  EXPECT_TRUE(named);
  // Data a folder names is compared by its tensors (data.crc32): the default folder and the same
  // one given were told apart, and the workers refused to train together.
  const std::vector<std::string> images = {"--data", "fashion-mnist"}, drop = {"--data", "--synthetic-samples"};
  TrainRun fallback = run_train(with(args(a), images, drop));
  TrainRun given = run_train(with(args(a), {"--data", "fashion-mnist", "--data-dir", "/usr/share/datasets/fashion-mnist"}, drop));
  ASSERT_EQ(fallback.error, "");
  ASSERT_EQ(given.error, "");
  EXPECT_TRUE(json_differences(fallback.digest, given.digest).empty()) << given.digest["flags"]["--data-dir"];
  fs::remove_all(tmp);
}

// The job's plan as it runs: an interleaved plan of 4 chunks on 2 workers, listed as `plan` writes
// it, digests as 2 workers, each chunk on the worker the schedule runs it on (--print-job read
// "workers": 4, a worker a chunk).
TEST(TrainFlags, TheJobsPlanListsTheWorkersItRunsOn) {
  fs::path file = fs::temp_directory_path() / ("pt_train_placed_" + std::to_string(::getpid()) + ".json");
  json stages = json::array();
  for (const auto& [layers, worker] : std::vector<std::pair<std::vector<int>, int>>{{{0}, 0}, {{1}, 1}, {{2, 3}, 0}, {{4}, 1}})
    stages.push_back({{"layers", layers}, {"replicas", 1}, {"workers", {worker}}});
  std::ofstream(file) << json{{"format", "pipetrain.plan/1"}, {"workers", 2}, {"schedule", "interleaved"},
                              {"chunks", 2}, {"microbatches", 4}, {"stages", stages}}.dump();
  TrainRun r = run_train({"--data", "synthetic", "--synthetic-samples", "256", "--steps", "2", "--plan", file.string(),
                          "--print-job"});
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.digest["plan"]["workers"], 2);
  EXPECT_EQ(r.digest["plan"]["stages"][2]["workers"], json::array({0}));
  EXPECT_EQ(r.digest["plan"]["stages"][3]["workers"], json::array({1}));
  fs::remove(file);
}

// A training run reads its --profile once (the split, the zero-bubble budget, the prediction and
// the memory model all take that one), where it read it up to five times.
TEST(TrainFlags, ARunReadsItsProfileOnce) {
  fs::path tmp = fs::temp_directory_path() / ("pt_train_profile_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  std::string prof_file = (tmp / "prof.json").string(), plan_file = (tmp / "plan.json").string();
  auto cnn = runtime::testing::seeded_cnn(1);
  auto prof = runtime::testing::unit_profile(*cnn);
  for (int i = 0; i < prof.num_layers(); ++i) {  // the bytes the workers hold it against
    profile::LayerBytes bytes = profile::layer_bytes(cnn->layer(i).module);
    prof.layers[i].parameter_bytes = bytes.parameters;
    prof.layers[i].buffer_bytes = bytes.buffers;
  }
  profile::write_profile(prof, prof_file);
  plan::write_plan(plan::even_split(prof, 2), plan_file);
  for (const auto& how : std::vector<std::vector<std::string>>{{"--stages", "2"}, {"--plan", plan_file}}) {
    int64_t before = profile::profiles_read();
    TrainRun r = run_train(with({"--data", "synthetic", "--synthetic-samples", "64", "--steps", "2", "--schedule",
                                 "zb-h1", "--profile", prof_file, "--quiet"},
                                how));
    ASSERT_EQ(r.error, "") << how[0];
    EXPECT_EQ(profile::profiles_read() - before, 1) << how[0];
  }
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace pt::app
