// Bad values at the command line and bad files behind its flags (issue 7, item 4), through the
// built binary: each run must end quickly with a non-zero exit and a message that names the
// flag or file and the value, never a crash, an uncaught exception or a hang.
#include <gtest/gtest.h>
#include <unistd.h>
#include <sys/wait.h>

#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

#include "pt_paths.h"
#include "tests/apps/shell_run.h"

namespace {

namespace fs = std::filesystem;

using Run = pt::testing::ShellRun;

Run pipetrain(const std::string& args) { return pt::testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain " + args); }

// A folder of this process (ctest runs each test as its own process, several at once),
// removed when the process ends.
fs::path scratch() {
  struct Scratch {
    fs::path dir = fs::temp_directory_path() / ("pt_cli_errors_" + std::to_string(::getpid()));
    Scratch() { fs::create_directories(dir); }
    ~Scratch() { fs::remove_all(dir); }
  };
  static Scratch s;
  return s.dir;
}

std::string write(const std::string& name, const std::string& text) {
  fs::path p = scratch() / name;
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

// Fails unless the run ended with a usage/other error (2 or 1, as apps/main.cpp maps them)
// and its output holds every one of `words`.
void expect_rejected(const std::string& args, int exit_code, const std::vector<std::string>& words) {
  Run r = pipetrain(args);
  SCOPED_TRACE("pipetrain " + args + "\n" + r.output);
  EXPECT_EQ(r.exit_code, exit_code);
  for (const auto& w : words) EXPECT_NE(r.output.find(w), std::string::npos) << "missing '" << w << "'";
  for (const char* bad : {"terminate called", "Segmentation", "Aborted", "core dumped", "AddressSanitizer"})
    EXPECT_EQ(r.output.find(bad), std::string::npos) << bad;
}

// A flag may be given once, so the cases that vary --batch-size or --steps start from kTrainBase.
const std::string kTrainBase = "train --data synthetic --synthetic-samples 64 --quiet ";
const std::string kTrain = kTrainBase + "--batch-size 16 --steps 1 ";

// Train's values are checked one by one in process (TrainFlags.BadValuesNameFlagAndValue); here
// one of each way a refusal reaches the exit code: train's own check, CLI11's conversion and range
// checks, and a check on the built model.
// A helper's audit of bad input (each ran with exit 0): an empty value (`--checkpoint-dir "$CK"`, CK
// unset) turned checkpoints and --resume off; `--metrics= --quiet` wrote the metrics to a file named
// --quiet; emulated compute trained the profile's model whatever --model or --data said; real
// compute took --time-scale; --deferred-step and --no-deferred-step together took the last.
TEST(CliErrors, ValuesAndFlagsThatWouldChangeNothingAreRefused) {
  expect_rejected(kTrain + "--checkpoint-dir '' --resume", 2, {"--checkpoint-dir: the value is empty"});
  expect_rejected(kTrain + "--metrics= --steps 2", 2, {"--metrics: '--steps' is a flag, not this option's value"});
  expect_rejected("plan --profile x.json --workers 2 --bandwidth-gbps 10 -o ''", 2, {"--output: the value is empty"});
  const std::string profile = std::string(PT_SOURCE_DIR) + "/data/profiles/vgg16.json";
  expect_rejected(kTrain + "--compute emulated --profile " + profile + " --model mnist-cnn", 2,
                  {"--model mnist-cnn: emulated compute runs the layers of --profile", "a profile of 'vgg16'"});
  expect_rejected("train --quiet --batch-size 16 --steps 1 --compute emulated --profile " + profile + " --data fashion-mnist",
                  2, {"--data fashion-mnist: emulated compute trains on synthetic data"});
  expect_rejected(kTrain + "--time-scale 2", 2, {"--time-scale: for --compute emulated"});
  expect_rejected(kTrain + "--deferred-step --no-deferred-step", 2, {"--deferred-step excludes --no-deferred-step"});
}

TEST(CliErrors, MicrobatchCounts) {
  expect_rejected(kTrain + "--stages 2 --schedule 1f1b --microbatches -3", 2, {"--microbatches", "got -3"});
  // Too large for an int: CLI11 rejects it while parsing (exit code 104, ConversionError).
  expect_rejected(kTrain + "--stages 2 --microbatches 99999999999", 2, {"--microbatches", "99999999999"});
  std::string profile = write("p.json", R"({"format": "pipetrain.profile/1", "model": "m", "batch_size": 8, "layers": [
      {"name": "a", "forward_ms": 1, "backward_ms": 1, "activation_bytes": 1, "parameter_bytes": 1},
      {"name": "b", "forward_ms": 1, "backward_ms": 1, "activation_bytes": 1, "parameter_bytes": 1}]})");
  for (const char* mb : {"0", "-1", "100000"})
    expect_rejected("simulate --profile " + profile + " --workers 2 --bandwidth-gbps 1 --microbatches " + mb, 2,
                    {"--microbatches", std::string("got ") + mb});
  expect_rejected("simulate --profile " + profile + " --workers 2 --bandwidth-gbps 1 --schedule interleaved --chunks 100000000",
                  2, {"--chunks", "got 100000000"});
  // dp's microbatches share the batch as train's do (it simulated 2.67-sample microbatches), and
  // without a plan the refusal names the profile (it printed "()").
  for (const char* kind : {"dp", "1f1b"})
    expect_rejected("simulate --profile " + profile + " --workers 2 --bandwidth-gbps 1 --microbatches 3 --schedule " + kind,
                    1, {"3 microbatches (--microbatches) do not divide the batch of 8 (" + profile + ")"});
  // compare says so once, where it skipped every pipeline schedule as if none could run.
  expect_rejected("compare --profile " + profile + " --workers 2 --bandwidth-gbps 1 --microbatches 3", 1,
                  {"3 microbatches (--microbatches) do not divide the batch of 8 (" + profile + "): train refuses it"});
  // Flags nothing read, exit 0: compare's --chunks 0 was taken as not given (searched), and
  // --staleness-cost is for the time-to-accuracy objective alone.
  for (const char* flag : {"--vertical-sync", "--deferred-step"})  // pipedream's alone: gpipe ran as without them
    expect_rejected("simulate --profile " + profile + " --workers 2 --bandwidth-gbps 1 --schedule gpipe " + flag, 2,
                    {std::string(flag) + ": only the pipedream schedule has it, not gpipe"});
  expect_rejected("simulate --profile " + profile + " --workers 2 --bandwidth-gbps 1 --json --grid", 2,
                  {"--json and --grid: give one"});
  for (const char* command : {"simulate", "plan"})
    expect_rejected(std::string(command) + " --profile " + profile +
                        " --workers 2 --bandwidth-gbps 1 --schedule gpipe --no-weight-prediction",
                    2, {"--no-weight-prediction: only pipedream and 2bw predict weights, not gpipe"});
  expect_rejected("plan --profile " + profile + " --workers 2 --bandwidth-gbps 1 --no-activation-transfer", 2,
                  {"--no-activation-transfer: leaves activation transfers out of PipeDream's cost model"});
  expect_rejected("compare --profile " + profile + " --workers 2 --bandwidth-gbps 1 --chunks 0", 2,
                  {"--chunks: must be in 2..64, got 0"});
  expect_rejected("plan --profile " + profile + " --workers 2 --bandwidth-gbps 1 --staleness-cost 0.5", 2,
                  {"--staleness-cost 0.5: weighs staleness for --objective time-to-accuracy; --objective is throughput"});
}

// A cap no configuration fits names the cap given and what the process takes off it (it named
// only the tensors' share, a figure the user never typed).
TEST(CliErrors, AMemoryCapNothingFitsNamesTheCapGiven) {
  std::string profile = write("cap.json", R"({"format": "pipetrain.profile/1", "model": "m", "batch_size": 8, "layers": [
      {"name": "a", "forward_ms": 1, "backward_ms": 1, "activation_bytes": 1048576, "parameter_bytes": 104857600},
      {"name": "b", "forward_ms": 1, "backward_ms": 1, "activation_bytes": 1048576, "parameter_bytes": 104857600}]})");
  std::string cluster = write("cap_cluster.json", R"({"format": "pipetrain.cluster/1", "process_bytes": 104857600,
      "levels": [{"fan_out": 2, "bandwidth_gbps": 10}]})");
  expect_rejected("plan --profile " + profile + " --cluster " + cluster + " --memory 300MiB", 1,
                  {"no configuration fits 200.0 MiB per worker (the tensors' share of the 300.0 MiB cap, less the "
                   "process's 100.0 MiB as calibrate measured it): the smallest of",
                   "a larger --memory, or more workers"});
  // A cluster file's cap: its field named, not a flag the user did not give.
  std::string capped = write("capped_cluster.json", R"({"format": "pipetrain.cluster/1", "memory_bytes_per_worker": 209715200,
      "levels": [{"fan_out": 2, "bandwidth_gbps": 10}]})");
  expect_rejected("plan --profile " + profile + " --cluster " + capped, 1,
                  {"no configuration fits 200.0 MiB per worker", "a larger memory_bytes_per_worker in '" + capped +
                   "', or more workers"});
  auto compared = pipetrain("compare --profile " + profile + " --cluster " + capped);
  EXPECT_NE(compared.output.find("a larger memory_bytes_per_worker in the --cluster file, or more workers"),
            std::string::npos) << compared.output;
  // A pipeline schedule on one worker: the workers are at fault, not the model's layers.
  expect_rejected("plan --profile " + profile + " --workers 1 --bandwidth-gbps 1 --schedule 1f1b", 1,
                  {"no configuration of 1f1b runs 2 layers on 1 worker: a pipeline is planned on 2 workers or more"});
  // Interleaved on a batch of 1, which splits into no group of 2 microbatches: it blamed the layers.
  std::string single = write("single.json", R"({"format": "pipetrain.profile/1", "model": "m", "batch_size": 1, "layers": [
      {"name": "a", "forward_ms": 1, "backward_ms": 1, "activation_bytes": 1024, "parameter_bytes": 1024},
      {"name": "b", "forward_ms": 1, "backward_ms": 1, "activation_bytes": 1024, "parameter_bytes": 1024},
      {"name": "c", "forward_ms": 1, "backward_ms": 1, "activation_bytes": 1024, "parameter_bytes": 1024},
      {"name": "d", "forward_ms": 1, "backward_ms": 1, "activation_bytes": 1024, "parameter_bytes": 1024}]})");
  expect_rejected("plan --profile " + single + " --workers 2 --bandwidth-gbps 1 --schedule interleaved", 1,
                  {"no configuration of interleaved runs 4 layers on 2 workers (interleaved runs its microbatches in "
                   "groups of its workers, as Megatron's: a batch of 1 splits into no such group; profile a larger "
                   "batch)"});
  // Other causes name none of it: a batch that does not split into the microbatches given, whatever
  // the workers (VGG-16's 64 into 6 on 3 workers read "6 microbatches are no multiple of them"), and
  // interleaved-zb has no groups.
  for (const char* kind : {"interleaved", "interleaved-zb"}) {
    auto other = pipetrain(std::string("plan --profile ") + single + " --workers 2 --bandwidth-gbps 1 --schedule " + kind +
                           " --microbatches 3");
    EXPECT_EQ(other.output.find("groups of its workers"), std::string::npos) << other.output;
  }
  auto split = pipetrain("compare --profile " + single + " --workers 2 --bandwidth-gbps 1");
  EXPECT_NE(split.output.find("skipping dp-split: the batch of 1 does not split into 2 microbatches of whole samples"),
            std::string::npos)
      << split.output;
}

TEST(CliErrors, StagesChunksAndWorkers) {
  expect_rejected(kTrain + "--stages 9 --schedule 1f1b", 2, {"--stages", "9 stages", "mnist-cnn"});
  expect_rejected(kTrain + "--stages 0", 2, {"--stages", "0"});  // CLI11 range check
  // simulate's even split has a stage per worker (per chunk, per arm of a V): it made as many as
  // the layers allowed and ran them on fewer workers without a word (interleaved on 4 x 2 chunks
  // of 2 layers ran on 1, its bubble that of a worker that never waits).
  std::string profile = write("two.json", R"({"format": "pipetrain.profile/1", "model": "m", "batch_size": 8, "layers": [
      {"name": "a", "forward_ms": 1, "backward_ms": 2, "activation_bytes": 1, "parameter_bytes": 1},
      {"name": "b", "forward_ms": 1, "backward_ms": 2, "activation_bytes": 1, "parameter_bytes": 1}]})");
  const std::string sim = "simulate --profile " + profile + " --bandwidth-gbps 1 ";
  expect_rejected(sim + "--workers 2 --schedule interleaved --chunks 2", 1,
                  {"--workers 2 x --chunks 2 makes 4 stages, but the profile of 'm' has 2 layers"});
  expect_rejected(sim + "--workers 2 --schedule zb-v", 1, {"--workers 2 under zb-v (two stages each) makes 4 stages"});
  expect_rejected(sim + "--workers 3 --schedule 1f1b", 1, {"--workers 3 makes 3 stages"});
  // Data parallelism has one stage, on every worker the cluster has (it ran on 2 of 4, one per layer).
  pt::testing::ShellRun dp = pipetrain(sim + "--workers 4 --schedule dp --microbatches 4");
  EXPECT_EQ(dp.exit_code, 0) << dp.output;
  EXPECT_NE(dp.output.find("dp on 4 "), std::string::npos) << dp.output;
  EXPECT_NE(dp.output.find("\n     3 "), std::string::npos) << dp.output;  // a row for the fourth worker
  expect_rejected("plan --profile x.json --workers 0 --bandwidth-gbps 1", 2, {"--workers", "got 0"});
  expect_rejected("plan --profile x.json --workers 4 --bandwidth-gbps -1", 2, {"--bandwidth-gbps", "got -1"});
  // --top raises --candidates to list them all, but not a bad value into a good one (it said "got 0").
  expect_rejected("plan --profile x.json --workers 4 --bandwidth-gbps 1 --candidates -3 --top 5", 2,
                  {"--candidates", "got -3"});
  expect_rejected("plan --profile x.json --workers 4 --bandwidth-gbps 1 --time-limit nan", 2, {"--time-limit", "nan"});
}

TEST(CliErrors, TrainingValues) {
  expect_rejected(kTrainBase + "--steps 1 --batch-size 0", 2, {"--batch-size: must be >= 1, got 0"});
  // NaN passed CLI11's number checks: a timeout of NaN never fired.
  expect_rejected(kTrain + "--timeout nan", 2, {"--timeout: must be a finite number > 0, got 'nan'"});
  // Each of these passed and failed later: a raw LibTorch error while profiling, an overflow in the
  // first step, a seed wrapped to 2^64 - 1, a step count read as INT64_MAX (issue 70, item 10).
  expect_rejected(kTrainBase + "--steps 1 --batch-size -1 --stages 2", 2, {"--batch-size: must be >= 1, got -1"});
  expect_rejected(kTrain + "--lr 1e39", 2, {"--lr: must be > 0 and at most 3.40282e+38 (float32's largest), got 1e+39"});
  expect_rejected(kTrain + "--weight-decay 1e308", 2, {"--weight-decay: must be >= 0 and at most"});
  expect_rejected(kTrain + "--microbatches 0", 2, {"--microbatches: must be >= 1, got 0"});  // one worker took it
  expect_rejected(kTrain + "--seed -1", 2, {"--seed: must be an integer in 0..18446744073709551615, got -1"});
  // A seed past 2^64 - 1 became that one: two seeds, one run.
  expect_rejected(kTrain + "--seed 18446744073709551616", 2, {"--seed: must be an integer in 0..18446744073709551615"});
  // Its int64 sum with the test share wrapped: LibTorch's overflow and stack, or "-9223372036854775808 bytes".
  expect_rejected("train --data synthetic --synthetic-samples 9223372036854775807 --model mnist-cnn", 2,
                  {"--synthetic-samples: 9223372036854775807 training", "TiB (must be >= 1 and fit in 8.00 GiB)"});
  // Five pools of 28 px: LibTorch's "Output size is too small" and its stack, at the first forward.
  expect_rejected("train --model vgg16 --width 0.05 --data fashion-mnist --steps 1 --batch-size 4", 2,
                  {"vgg16: its five 2x2 max-pools need images of 32 px or more, got 28"});
  // A run meant for adamw that forgot --optimizer trained with sgd, its --betas and --eps unread.
  expect_rejected(kTrain + "--betas 0.9,0.95", 2, {"--betas and --eps are adam's and adamw's; --optimizer sgd takes --momentum"});
  expect_rejected(kTrain + "--eps 1e-6", 2, {"--betas and --eps are adam's and adamw's"});
  expect_rejected(kTrainBase + "--steps 1e20", 2, {"--steps"});
  expect_rejected(kTrain + "--model mlp --width nan", 2, {"--width: must be in (0, 16], got nan"});
  // mnist-cnn builds in milliseconds (vgg16's 138M weights took 2.5 s before the refusal).
  expect_rejected("train --data synthetic --synthetic-samples 10000000000 --model mnist-cnn", 2,
                  {"--synthetic-samples: 10000000000 training"});
}

// A trace that cannot be written at the end (a full disk) fails the run after its report: it
// printed only "write failed", the loss, accuracy and throughput lost.
TEST(CliErrors, ATraceThatCannotBeWrittenFailsAfterTheReport) {
  auto r = pipetrain(kTrain + "--stages 2 --trace /dev/full");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--trace: /dev/full: write failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("throughput: measured"), std::string::npos) << r.output;
}

// Issue 17, item 8: each of these used to train something else, fail late, or hang.
// An output over one of the run's own files is refused before anything runs, and the file is
// left as it was: --metrics given the --data file's path wrote its rows over the data, exit 0.
TEST(CliErrors, AnOutputOverAnInputIsRefused) {
  const std::string text = R"({"format": "pipetrain.plan/1", "workers": 2, "stages": [
      {"layers": [0, 1, 2], "replicas": 1}, {"layers": [3, 4], "replicas": 1}]})";
  std::string plan = write("kept_plan.json", text);
  expect_rejected(kTrain + "--plan " + plan + " --metrics " + plan, 2,
                  {"--metrics '" + plan + "' is --plan '" + plan + "', which this command reads"});
  // By another path to the same file, too.
  std::string other = (fs::path(plan).parent_path() / "." / fs::path(plan).filename()).string();
  expect_rejected(kTrain + "--plan " + plan + " --trace " + other, 2, {"--trace '" + other + "' is --plan"});
  std::ifstream in(plan);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), text);
  std::string csv = (scratch() / "both.csv").string();
  expect_rejected(kTrain + "--metrics " + csv + " --trace " + csv, 2, {"--trace '" + csv + "' is --metrics"});
  fs::path folder = scratch() / "checkpoints";
  fs::create_directories(folder);
  expect_rejected(kTrain + "--checkpoint-dir " + folder.string() + " --metrics " + (folder / "m.csv").string(), 2,
                  {"lies in --checkpoint-dir"});
  expect_rejected("profile --model mnist-cnn --data synthetic --batch-size 16 --eval-data " + plan + " -o " + plan, 2,
                  {"-o '" + plan + "' is --eval-data"});
  // A smaller batch larger than the batch was dropped without a word (times then scaled linearly).
  expect_rejected("profile --model mnist-cnn --data synthetic --batch-size 16 --batch-sizes 4,32", 2,
                  {"--batch-sizes: 32 is more than --batch-size 16"});
  // A --profile only emulated compute reads was dropped without a word.
  expect_rejected("profile --model mnist-cnn --data synthetic --batch-size 16 --profile " + plan, 2,
                  {"--profile " + plan + ": the profile --compute emulated emulates"});
  // plan, simulate and trace wrote over their inputs, exit 0: `plan -o` over the profile, `simulate
  // --svg` over it, `trace --chrome` over the trace (whose next reading then failed).
  std::ifstream vgg(std::string(PT_SOURCE_DIR) + "/data/profiles/vgg16.json");
  const std::string profile_text(std::istreambuf_iterator<char>(vgg), {});
  std::string profile = write("kept_profile.json", profile_text);
  const std::string cluster = " --workers 2 --bandwidth-gbps 10";
  expect_rejected("plan --profile " + profile + cluster + " -o " + profile, 2,
                  {"-o '" + profile + "' is --profile '" + profile + "', which this command reads"});
  expect_rejected("simulate --profile " + profile + cluster + " --svg " + profile, 2, {"--svg '" + profile + "' is --profile"});
  expect_rejected("simulate --profile " + profile + cluster + " --plan " + plan + " --emit-schedule " + plan, 2,
                  {"--emit-schedule '" + plan + "' is --plan"});
  std::string svg = (scratch() / "t.svg").string();
  expect_rejected("simulate --profile " + profile + cluster + " --svg " + svg + " --save-trace " + svg, 2,
                  {"--save-trace '" + svg + "' is --svg '" + svg + "' too"});
  EXPECT_FALSE(fs::exists(svg)) << "nothing written before the refusal";
  std::string trace = (scratch() / "t.json").string();
  ASSERT_EQ(pipetrain("simulate --profile " + profile + cluster + " --save-trace " + trace).exit_code, 0);
  expect_rejected("trace " + trace + " --chrome " + trace, 2, {"--chrome '" + trace + "' is TRACE"});
  expect_rejected("trace " + trace + " --svg /nonexistent/t.svg", 2, {"--svg: '/nonexistent/t.svg'"});
  EXPECT_EQ(pipetrain("trace " + trace).exit_code, 0);
  std::ifstream kept(profile);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), profile_text);
  std::ifstream plan_kept(plan);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(plan_kept), {}), text);
}

TEST(CliErrors, EveryCombinationWorksOrIsRefused) {
  std::string plan2 = write("two_stages.json", R"({"format": "pipetrain.plan/1", "workers": 2, "stages": [
      {"layers": [0, 1, 2], "replicas": 1}, {"layers": [3, 4], "replicas": 1}]})");
  // The rest of train's rules (kFlagRules) and checks are in process:
  // TrainFlags.EveryCombinationWorksOrIsRefused. Here one rule through the binary, a file that
  // disagrees with the cluster (exit 1), and what only a whole run shows.
  expect_rejected(kTrain + "--plan " + plan2 + " --stages 2", 2, {"--plan and --stages: give one of them"});
  std::string one = write("one_worker.json", R"({"format": "pipetrain.cluster/1", "levels": [{"fan_out": 1, "bandwidth_gbps": 10}]})");
  expect_rejected(kTrain + "--plan " + plan2 + " --cluster " + one, 1, {one, "has 1 worker but", "uses 2"});
  // Two chunks on one worker: it hands its first chunk's output to its second itself (worker.cpp).
  expect_rejected(kTrain + "--schedule interleaved --stages 1 --chunks 2", 0, {"steps 1,"});
  // A write that fails is an error, not a cut file.
  expect_rejected(kTrain + "--metrics /dev/full", 1, {"--metrics: writing '/dev/full' failed"});
  // A plan handed over in the launcher's variable is checked like any other. The variable
  // names its launcher's pid: here the shell's ($$), which the trailing command keeps as the
  // parent (a shell runs its last command in its own place).
  std::string bad = write("launched.json", R"({"format": "pipetrain.plan/1", "workers": 1, "stages": [
      {"layers": [0, 1, 2], "replicas": 1}]})");
  expect_rejected("--version >/dev/null; RANK=0 WORLD_SIZE=1 PIPETRAIN_LAUNCH_PLAN=$$:" + bad + " " + PT_BINARY_DIR +
                      "/pipetrain " + kTrain + "--schedule 1f1b --transport gloo 2>&1; exit $?",
                  1, {bad, "its stages hold layers 0..2 but the profile of", "it was made for another model"});
  // A process the environment counts as one of several never trains alone (it did, and exited 0:
  // under mpirun a forgotten --plan gave separate trainings), whichever launcher set it.
  for (const char* env : {"RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29999",
                          "OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=4", "PMI_RANK=1 PMI_SIZE=2"})
    for (const char* transport : {"", "--transport gloo "})
      expect_rejected(std::string("--version >/dev/null; env ") + env + " " + PT_BINARY_DIR + "/pipetrain " + kTrain +
                          transport,
                      2, {"this process is one worker of a job of", "trains one worker alone", "--plan PLAN"});
  // An address that does not resolve fails at once instead of retrying for minutes.
  expect_rejected("--version >/dev/null; RANK=0 WORLD_SIZE=2 MASTER_ADDR=no-such-host.invalid " +
                      std::string(PT_BINARY_DIR) + "/pipetrain " + kTrain + "--plan " + plan2 + " --transport gloo",
                  1, {"MASTER_ADDR=no-such-host.invalid does not resolve"});
  // Worker 0 where MASTER_ADDR is not this machine's (a second RANK=0, or worker 0 on the wrong
  // host) said only "Cannot assign requested address".
  expect_rejected("--version >/dev/null; PIPETRAIN_JOB_SECRET=0123456789abcdef RANK=0 WORLD_SIZE=2 MASTER_ADDR=192.0.2.1 "
                  "MASTER_PORT=29991 " +
                      std::string(PT_BINARY_DIR) + "/pipetrain " + kTrain + "--plan " + plan2 + " --transport gloo",
                  1, {"rendezvous: cannot listen on 192.0.2.1:29991", "not an address of this machine",
                      "RANK=0 given twice?"});
}

// Control characters that a file name carries into an error are shown escaped, never sent to
// the terminal as they are.
TEST(CliErrors, ErrorsEscapeControlCharacters) {
  auto r = pipetrain(std::string("plan --profile '/nonexistent/\x1b[2Jevil.json' --workers 2 --bandwidth-gbps 1"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output.find('\x1b'), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/\\x1b[2Jevil.json"), std::string::npos) << r.output;
  // Bytes that are not UTF-8 are escaped too (they went to the terminal raw); UTF-8 stays as it is.
  auto bytes = pipetrain(std::string("plan --profile '/nonexistent/\xff\xfe-\xc3\xa9t\xc3\xa9-\xc2\x9b.json' --workers 2 "
                                     "--bandwidth-gbps 1"));
  EXPECT_EQ(bytes.exit_code, 1) << bytes.output;
  EXPECT_NE(bytes.output.find("/nonexistent/\\xff\\xfe-\xc3\xa9t\xc3\xa9-\\xc2\\x9b.json"), std::string::npos)
      << bytes.output;
}

// A command's printed output is what it made (`plan --json > plan.json`): a write that fails, as on
// a full disk, fails the command instead of exit 0 with the output lost. Both executables share
// the main that checks it (`checkpoint inspect` hands off to pipetrain-torch).
TEST(CliErrors, AFailedWriteOfTheOutputFailsTheCommand) {
  std::string profile = std::string(PT_SHARED_DIR) + "/data/pipedream-profiles/alexnet.json";
  for (const std::string& args : std::vector<std::string>{"plan --profile " + profile + " --workers 4 --bandwidth-gbps 10 --json",
                                                          "--help", "checkpoint inspect --help"}) {
    // stderr to the pipe the test reads, then stdout to the full device.
    auto r = pt::testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain " + args + " 2>&1 >/dev/full", false);
    SCOPED_TRACE(args + "\n" + r.output);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("error: writing the standard output failed"), std::string::npos);
    EXPECT_EQ(pipetrain(args + " >/dev/null").exit_code, 0);
  }
}

// A gloo worker's part of --trace that cannot be written (a file size limit standing in for a
// full disk) fails the run after its report, as a threads run's trace does, naming the parts
// left: it failed before, and the run's steps, loss, accuracy and throughput were lost.
TEST(CliErrors, AGlooTracePartThatCannotBeWrittenKeepsTheReport) {
  std::string trace = (scratch() / "limited-trace.json").string();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    // 1 KiB a file for pipetrain (dash's ulimit counts 512-byte blocks), not for the log, which
    // `cat` writes; and no shared memory, whose regions the limit would refuse too.
    std::string cmd = "(ulimit -f 2; PIPETRAIN_SHARED_MEMORY=0 " + std::string(PT_BINARY_DIR) + "/pipetrain " +
                      kTrainBase + "--batch-size 16 --steps 4 --stages 2 --transport gloo --trace " + trace +
                      "; echo \"exit status $?\") 2>&1 | cat > " + (scratch() / "trace-fsize.log").string();
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::ifstream log(scratch() / "trace-fsize.log");
  std::string out((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_NE(out.find("exit status 1"), std::string::npos) << out;
  EXPECT_NE(out.find("final loss"), std::string::npos) << out;  // the report
  EXPECT_NE(out.find(": --trace: " + trace + ".worker"), std::string::npos) << out;
  EXPECT_NE(out.find("(the run's report is above)"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(trace));
}

// --bucket-mb takes what a plan file's bucket_mb may hold: plan --bucket-mb 1e308 wrote a plan
// that simulate and train then refused ("field 'bucket_mb' must be at most 1.04858e+06 MiB").
TEST(CliErrors, BucketFlagsTakeWhatAPlanFileMayHold) {
  std::string profile = std::string(PT_SHARED_DIR) + "/data/pipedream-profiles/alexnet.json";
  for (const std::string cmd : {"plan", "simulate"})
    expect_rejected(cmd + " --profile " + profile + " --workers 4 --bandwidth-gbps 10 --bucket-mb 1e308", 2,
                    {"--bucket-mb", "1e308", "1048576"});
  expect_rejected(kTrain + "--bucket-mb 2e6", 2, {"--bucket-mb", "2e6"});
}

TEST(CliErrors, BadFilesBehindFlagsNameTheFile) {
  std::string plan = write("bad_plan.json", R"({"format": "pipetrain.plan/1", "workers": 1, "stages": [{"layers": [0, 1, 2, 3, 4, 5, 6, 7, 8], "replicas": 1}]})");
  expect_rejected(kTrain + "--plan " + plan, 1, {plan, "holds layer", "mnist-cnn"});
  // A plan of another model is named so, not by a layer it misses (it said "layer 4 is in no stage").
  std::string other = write("other_model_plan.json", R"({"format": "pipetrain.plan/1", "workers": 1, "model": "gpt.pt",
      "stages": [{"layers": [0, 1, 2], "replicas": 1}]})");
  expect_rejected(kTrain + "--plan " + other, 1, {other, "the plan is for model 'gpt.pt' but --model is 'mnist-cnn'"});
  // A plan of this model missing its last layers says so (it said "made for another model").
  std::string shortened = write("short_plan.json", R"({"format": "pipetrain.plan/1", "workers": 1, "model": "mnist-cnn",
      "stages": [{"layers": [0, 1, 2], "replicas": 1}]})");
  expect_rejected(kTrain + "--plan " + shortened, 1, {shortened, "layers 3..4 are in no stage, though the plan names this model"});
  std::string garbled = write("garbled_plan.json", "{\"format\": \"pipetrain.plan/1\", \"workers\": ");
  expect_rejected(kTrain + "--plan " + garbled, 1, {garbled, "not valid JSON"});
  std::string profile = write("bad_profile.txt", "a -- A -- forward_compute_time=-1, backward_compute_time=1, "
                                                 "activation_size=1, parameter_size=1\n");
  expect_rejected(kTrain + "--stages 2 --profile " + profile, 1, {profile, "line 1", "negative time"});
  expect_rejected("plan --profile " + profile + " --workers 2 --bandwidth-gbps 1", 1, {profile, "negative time"});
  std::string cluster = write("bad_cluster.json", R"({"format": "pipetrain.cluster/1", "levels": [{"fan_out": 99999999999, "bandwidth_gbps": 1}]})");
  expect_rejected("plan --profile " + profile + " --cluster " + cluster, 1, {cluster, "fan_out", "99999999999"});
  // Text corpus: missing, a directory, too short.
  expect_rejected("train --model lstm-lm --text /nonexistent/corpus.txt", 1, {"--text", "/nonexistent/corpus.txt"});
  // Traces: missing, and a --merge whose per-worker parts are not all there.
  expect_rejected("trace /nonexistent/trace.json", 1, {"/nonexistent/trace.json"});
  std::string part = write("t.json.worker0", "{}");
  expect_rejected("trace " + part.substr(0, part.size() - 8) + " --merge 2", 1, {"t.json.worker1: missing", "--merge 2"});
  std::string dir = scratch().string();
  expect_rejected("train --model lstm-lm --text " + dir, 1, {dir, "is a directory"});
  std::string tiny = write("tiny.txt", "too short");
  expect_rejected("train --model lstm-lm --text " + tiny, 1, {tiny, "9 bytes is too short"});
  // IDX data: a garbled image file names itself.
  fs::path data = scratch() / "fmnist";
  fs::create_directories(data);
  for (std::string split : {"train", "t10k"}) {
    std::ofstream((data / (split + "-images-idx3-ubyte")).string(), std::ios::binary) << "not an idx file";
    std::ofstream((data / (split + "-labels-idx1-ubyte")).string(), std::ios::binary) << std::string("\0\0\x08\x01\0\0\0\0", 8);
  }
  expect_rejected("train --steps 1 --data-dir " + data.string(), 1,
                  {(data / "train-images-idx3-ubyte").string(), "bad IDX magic number"});
  expect_rejected("train --steps 1 --data-dir /nonexistent/fmnist", 1, {"--data-dir", "/nonexistent/fmnist"});
}

// The most memory `pipetrain args` held (KiB), with its exit code: the process is exec'd in
// place of the shell, so the child's rusage is pipetrain's own.
std::pair<int, long> exit_and_peak_kib(const std::string& args) {
  std::string cmd = "exec " + std::string(PT_BINARY_DIR) + "/pipetrain " + args + " > /dev/null 2>&1";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  struct rusage use {};
  ::wait4(pid, &status, 0, &use);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, use.ru_maxrss};
}

// Bounded reads (issue 35): no input file, whatever its size or whatever a manifest claims,
// makes a command hold more than its kind's cap plus a fixed margin; the error names the file,
// the cap and the flag that raises it.
TEST(CliErrors, ReadsAreBoundedByKind) {
  expect_rejected(kTrain + "--plan /dev/zero", 1, {"/dev/zero", "16.0 MiB pipetrain reads from a plan file",
                                                    "--max-input plan=SIZE"});
  EXPECT_LT(exit_and_peak_kib(kTrain + "--plan /dev/zero").second, 400 * 1024);  // LibTorch alone: ~200 MiB
  fs::path big = scratch() / "big_profile.json";
  std::ofstream(big).close();
  fs::resize_file(big, int64_t(17) << 20);  // sparse: its size is what is checked
  expect_rejected("plan --profile " + big.string() + " --workers 2 --bandwidth-gbps 1", 1,
                  {big.string(), "17.0 MiB, more than the 16.0 MiB pipetrain reads from a profile file"});
  expect_rejected("plan --max-input profile=32MB --profile " + big.string() + " --workers 2 --bandwidth-gbps 1", 1,
                  {big.string(), "line 1"});  // raised: read, and found to be no profile
  expect_rejected("plan --max-input profiles=1GB --profile " + big.string(), 2, {"--max-input 'profiles=1GB'", "KIND=SIZE"});

  // A checkpoint whose manifest lists a layer file of 1 GiB (sparse): verified in pieces, never
  // held whole; over a lowered cap, refused before it is read.
  fs::path ck = scratch() / "ck";
  auto r = pipetrain(kTrain + "--checkpoint-dir " + ck.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  fs::path step;
  for (const auto& e : fs::directory_iterator(ck))
    if (e.path().filename().string().rfind("step-", 0) == 0) step = e.path();
  ASSERT_FALSE(step.empty());
  std::ifstream in(step / "manifest.json");
  std::string manifest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto at = manifest.rfind("\"bytes\"", manifest.find("layer-0.tensors"));  // keys are in name order
  ASSERT_NE(at, std::string::npos) << manifest;
  auto end = manifest.find_first_of(",}", at);
  manifest.replace(at, end - at, "\"bytes\":1073741824");
  std::ofstream(step / "manifest.json", std::ios::trunc) << manifest;
  fs::resize_file(step / "layer-0.tensors", int64_t(1) << 30);
  auto [code, peak] = exit_and_peak_kib("checkpoint inspect " + step.string());
  EXPECT_EQ(code, 1);
  EXPECT_LT(peak, 64 * 1024);  // the front end, without LibTorch, and no file in memory
  expect_rejected("checkpoint inspect " + step.string(), 1, {"layer-0.tensors: checksum"});
  expect_rejected("checkpoint --max-input layer-file=1MB inspect " + step.string(), 1,
                  {"layer-0.tensors", "more than the 1.0 MiB pipetrain reads from a layer-file file"});
}

}  // namespace

namespace {

// The low items of issue 35's hostile pass, each now a clear error or a working feature.
TEST(CliErrors, HostilePassLowItems) {
  // --trace on one worker writes the trace (it runs as a one-stage pipeline).
  std::string trace = (scratch() / "one.json").string();
  auto r = pipetrain(kTrain + "--trace " + trace);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(trace)) << r.output;
  // A run that diverges fails, after printing, rather than exit 0 with "final loss nan".
  expect_rejected(kTrainBase + "--batch-size 16 --steps 8 --lr 1e8", 1, {"training diverged: the loss is"});
  // So does one whose loss stays finite but ends 10x over its first step's (Adam at 0.2: 2.3 to
  // 2e12, exit 0 before), on one worker and on a pipeline; its metrics are all written. One whose
  // loss spiked and came back (the CNN at the same rate: 311,382 at step 2, 2.3 from step 10 on)
  // is noted, and exits 0.
  std::string rows = (scratch() / "diverged.csv").string();
  for (const char* run : {"", "--stages 2 --schedule 1f1b --microbatches 2 "}) {
    std::string adam = kTrainBase + run + "--batch-size 16 --steps 30 --optimizer adam --lr 0.2 --metrics " + rows;
    expect_rejected(adam + " --model mlp --width 2 --depth 8", 1,
                    {"training diverged: the loss rose from 2.3", "(the first step's)", "(the median of the last 30 steps)",
                     "by 9 times the first's size or more"});
    std::ifstream in(rows);
    EXPECT_EQ(std::count(std::istreambuf_iterator<char>(in), {}, '\n'), 31) << run;
    auto spiked = pipetrain(adam);
    EXPECT_EQ(spiked.exit_code, 0) << spiked.output;
    EXPECT_NE(spiked.output.find("note: the loss spiked: the mean of the last 30 steps is "), std::string::npos)
        << spiked.output;
  }
  // Adam's rate where --lr is not given is torch.optim's, not SGD's (which diverged it); SGD's stays.
  // The lr column, then peak_rss_bytes.
  for (auto [optimizer, lr] : {std::pair{"adam", ",0.001,"}, {"adamw", ",0.001,"}, {"sgd", ",0.02,"}}) {
    auto given = pipetrain(kTrainBase + "--batch-size 16 --steps 2 --optimizer " + optimizer + " --metrics " + rows);
    EXPECT_EQ(given.exit_code, 0) << given.output;
    std::ifstream in(rows);
    std::string csv((std::istreambuf_iterator<char>(in)), {});
    const std::string last = csv.substr(csv.rfind('\n', csv.size() - 2) + 1);
    EXPECT_NE(last.find(lr), std::string::npos) << optimizer << ": " << csv;
    EXPECT_EQ(std::count(last.begin(), last.end(), ','), 10) << optimizer << ": " << csv;
  }
  // --metrics whose writes fail (a file size limit standing in for a full disk): the run
  // stops naming the file, an earlier metrics file is left as it was, and the rows written stay
  // in the partial file, as a failed run's do (they were removed: a run whose checkpoints exist
  // lost its rows up to them for good).
  std::string metrics = (scratch() / "m.csv").string();
  std::ofstream(metrics) << "an earlier run's rows\n";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim {4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    std::string cmd = std::string(PT_BINARY_DIR) + "/pipetrain " + kTrainBase +
                      "--batch-size 4 --steps 200 --metrics " + metrics + " > " + (scratch() / "fsize.log").string() +
                      " 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::ifstream log(scratch() / "fsize.log");
  std::string out((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << out;
  EXPECT_NE(out.find("--metrics: writing '" + metrics + ".partial' failed"), std::string::npos) << out;
  std::ifstream kept(metrics);
  std::string first;
  std::getline(kept, first);
  EXPECT_EQ(first, "an earlier run's rows");
  EXPECT_NE(out.find("it keeps the rows written and '" + metrics + "' is left as it was"), std::string::npos) << out;
  std::ifstream partial(metrics + ".partial");
  std::string header, row;
  std::getline(partial, header);
  std::getline(partial, row);
  EXPECT_EQ(header.rfind("step,epoch,loss,", 0), 0u) << header;
  EXPECT_EQ(row.rfind("1,1,", 0), 0u) << row;
  // checkpoint inspect shows a manifest's text with its control characters escaped.
  std::string ck = (scratch() / "esc-ck").string();
  ASSERT_EQ(pipetrain(kTrain + "--checkpoint-dir " + ck).exit_code, 0);
  fs::path manifest;
  for (const auto& e : fs::directory_iterator(ck))
    if (e.path().filename().string().rfind("step-", 0) == 0) manifest = e.path() / "manifest.json";
  std::ifstream min(manifest);
  std::string text((std::istreambuf_iterator<char>(min)), std::istreambuf_iterator<char>());
  text.replace(text.find("\"mnist-cnn\""), 11, "\"evil\\u001b[2Jcnn\"");
  std::ofstream(manifest, std::ios::trunc) << text;
  auto shown = pipetrain("checkpoint inspect " + ck);
  EXPECT_EQ(shown.exit_code, 0) << shown.output;
  EXPECT_EQ(shown.output.find('\x1b'), std::string::npos);
  EXPECT_NE(shown.output.find("model evil\\x1b[2Jcnn"), std::string::npos) << shown.output;
  // A worker that never starts is named by the one that waits for it.
  std::string port = std::to_string(29000 + ::getpid() % 2000), prof = (scratch() / "cnn.json").string();
  ASSERT_EQ(pipetrain("profile --data synthetic --synthetic-samples 64 -o " + prof).exit_code, 0);
  auto w = pt::testing::shell_run("env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port +
                                  " PIPETRAIN_JOB_SECRET=0123456789abcdefgh " + std::string(PT_BINARY_DIR) +
                                  "/pipetrain " + kTrain + "--stages 2 --schedule 1f1b --transport gloo "
                                  "--rendezvous-timeout 2 --timeout 60 --profile " + prof);
  EXPECT_EQ(w.exit_code, 1) << w.output;
  // Within --rendezvous-timeout, not the larger --timeout (it waited 60 s here).
  EXPECT_NE(w.output.find("worker 1 of 2 did not join the rendezvous at 127.0.0.1:" + port + " within 2 s"),
            std::string::npos)
      << w.output;
}

}  // namespace
