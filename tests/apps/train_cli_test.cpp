// The `pipetrain` binary end to end: kill -9 a checkpointing run at a random moment (threads and
// gloo), resume it, and the final weights equal an uninterrupted run's exactly; no worker
// process outlives a killed launcher; checkpoint flags and `checkpoint inspect` errors.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "../runtime/pipeline_test_util.h"
#include "core/json_doc.h"
#include "metrics/metrics.h"
#include "pt_paths.h"
#include "runtime/job_secret.h"
#include "runtime/launcher.h"
#include "schedule/trace.h"

namespace pt::runtime {
namespace {

using namespace testing;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const std::string kBinary = std::string(PT_BINARY_DIR) + "/pipetrain";

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("pt_cli_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// Starts `pipetrain args...` with stdout+stderr to `log`, in its own process group.
pid_t start(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<std::string> argv{kBinary};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargs;
  for (auto& a : argv) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    std::freopen(log.c_str(), "w", stdout);
    ::dup2(::fileno(stdout), 2);
    ::execv(kBinary.c_str(), cargs.data());
    ::_exit(127);
  }
  return pid;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs to completion (at most 120 s); returns the exit code.
int run(const std::vector<std::string>& args, const fs::path& log) {
  pid_t pid = start(args, log);
  auto deadline = Clock::now() + std::chrono::seconds(120);
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "pipetrain did not finish in 120 s: " << slurp(log);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Are processes whose command line mentions `marker` still running (besides the test)?
bool processes_mention(const std::string& marker) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos || std::stoi(name) == ::getpid()) continue;
    std::string cmd = slurp(e.path() / "cmdline");
    if (cmd.find(marker) != std::string::npos) {
      std::string stat = slurp(e.path() / "stat");
      if (stat.find(") Z") == std::string::npos) return true;  // zombies are gone already
    }
  }
  return false;
}

std::vector<std::string> train_args(const std::string& plan, const std::string& dir, const std::string& transport,
                                    int64_t steps) {
  return {"train", "--data", "synthetic", "--synthetic-samples", "4096", "--steps", std::to_string(steps),
          "--batch-size", "32", "--plan", plan, "--schedule", "1f1b", "--microbatches", "4", "--transport", transport,
          "--checkpoint-dir", dir, "--checkpoint-every", "3", "--quiet", "--timeout", "20"};
}

void kill_resume_equals_uninterrupted(const std::string& transport) {
  TempDir tmp("kill_" + transport);
  std::string plan = (tmp.path / "plan.json").string();
  plan::write_plan(plan::even_split(unit_profile(*seeded_cnn(3)), 2), plan);
  // Enough steps that three attempts, each killed at most 200 ms (about 20 steps here) after a
  // new checkpoint, leave some for the last resume.
  const int64_t steps = 150;
  std::string full = (tmp.path / "full").string(), killed = (tmp.path / "killed").string();
  ASSERT_EQ(run(train_args(plan, full, transport, steps), tmp.path / "full.log"), 0) << slurp(tmp.path / "full.log");
  auto expected = checkpoint_weights(newest_checkpoint(full));

  std::random_device rd;
  unsigned seed = rd();
  std::mt19937 rng(seed);
  int kills = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    fs::path log = tmp.path / ("killed" + std::to_string(attempt) + ".log");
    auto args = train_args(plan, killed, transport, steps);
    if (attempt > 0) args.push_back("--resume");
    std::string before = newest_checkpoint(killed);
    pid_t pid = start(args, log);
    // Wait for a new checkpoint, then kill at a random moment (often inside a later write).
    auto deadline = Clock::now() + std::chrono::seconds(60);
    int status = 0;
    bool exited = false;
    while (newest_checkpoint(killed) == before && Clock::now() < deadline)
      if ((exited = ::waitpid(pid, &status, WNOHANG) == pid)) break;
      else std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_FALSE(exited) << "the run ended before its first checkpoint: " << slurp(log);
    int delay_ms = std::uniform_int_distribution<int>(0, 200)(rng);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ::kill(pid, SIGKILL);  // the launcher only: its workers must not outlive it
    ::waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) ++kills;
    std::cerr << transport << ": attempt " << attempt << " killed " << delay_ms << " ms after a checkpoint (seed "
              << seed << "), newest now " << newest_checkpoint(killed) << "\n";
    // Whatever moment the kill hit, the newest complete checkpoint verifies.
    ASSERT_NE(newest_checkpoint(killed), "");
    EXPECT_NO_THROW(read_verified_manifest(newest_checkpoint(killed)));
  }
  EXPECT_GE(kills, 1);
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (processes_mention(killed) && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(processes_mention(killed)) << "a worker outlived its killed launcher";

  auto args = train_args(plan, killed, transport, steps);
  args.push_back("--resume");
  ASSERT_EQ(run(args, tmp.path / "resume.log"), 0) << slurp(tmp.path / "resume.log");
  EXPECT_NE(slurp(tmp.path / "resume.log").find("resuming from"), std::string::npos);
  auto m = read_verified_manifest(newest_checkpoint(killed));
  EXPECT_EQ(m.step, steps);
  EXPECT_TRUE(bitwise_equal(checkpoint_weights(newest_checkpoint(killed)), expected));
}

TEST(TrainCli, KilledThreadsRunResumesToTheSameWeights) { kill_resume_equals_uninterrupted("threads"); }
TEST(TrainCli, KilledGlooRunResumesToTheSameWeights) { kill_resume_equals_uninterrupted("gloo"); }

// A gloo job whose reporting worker was killed (the OOM killer's signal) said where the rows of
// its --metrics were only when the worker died of an error it could report; killed, the rows
// were in FILE.partial unsaid. The launcher says so now.
// A checkpoint within a replica round, resumed under pipedream's rounds, skipped the epoch's last
// minibatches: a 1f1b run at step 35 of epochs of 10, resumed on plan 2-1, trained 36..39 of 40,
// exit 0. It is refused, and the way the message gives trains every minibatch.
TEST(TrainCli, AResumeWithinAReplicaRoundIsRefused) {
  TempDir tmp("resume-round");
  fs::path plan = tmp.path / "plan.json", ck = tmp.path / "ck", log = tmp.path / "log";
  std::ofstream(plan) << R"({"format": "pipetrain.plan/1", "workers": 3, "schedule": "pipedream", "stages": [
      {"layers": [0, 1], "replicas": 2}, {"layers": [2, 3, 4], "replicas": 1}]})";
  auto train = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"train", "--model", "mnist-cnn", "--data", "synthetic", "--synthetic-samples",
                                     "640", "--checkpoint-dir", ck.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    int rc = run(args, log);
    return std::make_pair(rc, slurp(log));
  };
  auto [rc, out] = train({"--stages", "2", "--schedule", "1f1b", "--steps", "35", "--quiet"});
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = train({"--plan", plan.string(), "--steps", "40", "--resume"});
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("/step-00000035: the checkpoint is at step 35, 5 minibatches into its epoch of 10, no whole number "
                     "of the rounds of 2 in which the replicas of plan 2-1 under pipedream take an epoch's minibatches; "
                     "resume up to the epoch's end (--steps 40) with a synchronous schedule"),
            std::string::npos)
      << out;
  std::tie(rc, out) = train({"--stages", "2", "--schedule", "1f1b", "--steps", "40", "--resume", "--quiet"});
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = train({"--plan", plan.string(), "--steps", "44", "--resume"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("steps 4 (41..44, resumed)"), std::string::npos) << out;
}

// What sets an asynchronous run's weight lag is recorded, and a resume under other settings says
// so: --stale-warmup 0 on resume moved the weights 6.5e-4 off the run it continued, unsaid.
TEST(TrainCli, AResumeUnderAnotherWeightLagIsNoted) {
  TempDir tmp("resume-lag");
  fs::path plan = tmp.path / "plan.json", other = tmp.path / "other.json", ck = tmp.path / "ck", log = tmp.path / "log";
  std::ofstream(plan) << R"({"format": "pipetrain.plan/1", "workers": 2, "schedule": "pipedream", "stages": [
      {"layers": [0, 1], "replicas": 1}, {"layers": [2, 3, 4], "replicas": 1}]})";
  std::ofstream(other) << R"({"format": "pipetrain.plan/1", "workers": 2, "schedule": "pipedream", "stages": [
      {"layers": [0, 1, 2], "replicas": 1}, {"layers": [3, 4], "replicas": 1}]})";
  auto train = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"train", "--model", "mnist-cnn", "--data", "synthetic", "--synthetic-samples",
                                     "640", "--checkpoint-dir", ck.string(), "--checkpoint-every", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    int rc = run(args, log);
    return std::make_pair(rc, slurp(log));
  };
  auto [rc, out] = train({"--plan", plan.string(), "--steps", "4", "--quiet"});
  ASSERT_EQ(rc, 0) << out;
  const std::string lag = "pipedream on plan 1-1: layers 0-1 | 2-4; weight prediction on; stale warm-up 100; vertical "
                          "sync off; replica gradients mean; deferred step off";
  EXPECT_NE(slurp(ck / "step-00000004" / "manifest.json").find("\"weight_lag\": \"" + lag + "\""), std::string::npos);
  std::tie(rc, out) = train({"--plan", plan.string(), "--steps", "6", "--resume"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("weights' lag"), std::string::npos) << out;
  std::tie(rc, out) = train({"--plan", plan.string(), "--steps", "8", "--resume", "--stale-warmup", "0"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("/step-00000006 was trained with other settings of its weights' lag (" + lag + " -> " +
                     "pipedream on plan 1-1: layers 0-1 | 2-4; weight prediction on; stale warm-up 0;"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("): steps 7 on differ from an uninterrupted run's"), std::string::npos) << out;
  std::tie(rc, out) = train({"--plan", other.string(), "--steps", "10", "--resume", "--stale-warmup", "0"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("-> pipedream on plan 1-1: layers 0-2 | 3-4;"), std::string::npos) << out;
  // From asynchronous to synchronous and back, said: 1f1b's checkpoint resumed under pipedream
  // moved 0.074 off the run it continued, unsaid.
  std::tie(rc, out) = train({"--plan", plan.string(), "--schedule", "1f1b", "--steps", "12", "--resume"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("-> 1f1b: none): steps 11 on differ"), std::string::npos) << out;
  // A synchronous schedule's split changes no weight: nothing to say.
  std::tie(rc, out) = train({"--plan", other.string(), "--schedule", "1f1b", "--steps", "14", "--resume"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("weights' lag"), std::string::npos) << out;
  std::tie(rc, out) = train({"--plan", plan.string(), "--steps", "16", "--resume"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("weights' lag (1f1b: none -> " + lag + "): steps 15 on differ"), std::string::npos) << out;
  // One worker runs each minibatch on the weights it updates: pipedream there lags nothing, and a
  // synchronous checkpoint resumed under it was said to.
  std::tie(rc, out) = train({"--stages", "2", "--schedule", "1f1b", "--steps", "18", "--resume"});
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = train({"--stages", "1", "--schedule", "pipedream", "--steps", "20", "--resume"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("resuming from"), std::string::npos) << out;
  EXPECT_EQ(out.find("weights' lag"), std::string::npos) << out;
  // and its checkpoint, which records no lag, resumed under a pipeline's lag is said to change it.
  std::tie(rc, out) = train({"--plan", plan.string(), "--steps", "22", "--resume"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("weights' lag (pipedream: none -> " + lag + "): steps 21 on differ"), std::string::npos) << out;
  // 2bw warms its stale stages up too: resumed under another --stale-warmup it moved 8.3% off the
  // run it continued, unsaid; a checkpoint from before it was recorded, with no other change, is
  // the same lag.
  std::tie(rc, out) = train({"--plan", plan.string(), "--schedule", "2bw", "--steps", "24", "--resume", "--stale-warmup", "10"});
  ASSERT_EQ(rc, 0) << out;
  const std::string lag_2bw = "2bw on plan 1-1: layers 0-1 | 2-4; weight prediction on; weights lag 1 steps";
  EXPECT_NE(slurp(ck / "step-00000024" / "manifest.json").find("\"weight_lag\": \"" + lag_2bw + "; stale warm-up 10\""),
            std::string::npos)
      << slurp(ck / "step-00000024" / "manifest.json");
  std::tie(rc, out) = train({"--plan", plan.string(), "--schedule", "2bw", "--steps", "26", "--resume", "--stale-warmup", "0"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("weights' lag (" + lag_2bw + "; stale warm-up 10 -> " + lag_2bw + "; stale warm-up 0): steps 25 on differ"),
            std::string::npos)
      << out;
  const fs::path manifest = ck / "step-00000026" / "manifest.json";
  std::string older = slurp(manifest);
  const std::string recorded = "; weights lag 1 steps; stale warm-up 0\"";
  ASSERT_NE(older.find(recorded), std::string::npos) << older;
  older.replace(older.find(recorded), recorded.size(), "; weights lag 1 steps\"");
  std::ofstream(manifest) << older;
  std::tie(rc, out) = train({"--plan", plan.string(), "--schedule", "2bw", "--steps", "28", "--resume", "--stale-warmup", "0"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("weights' lag"), std::string::npos) << out;
  // A pipedream checkpoint from before recorded a deferred step on where its first stage, of one
  // replica, deferred none: the same lag as this run's "off".
  std::tie(rc, out) = train({"--plan", plan.string(), "--steps", "30", "--resume"});
  ASSERT_EQ(rc, 0) << out;
  const fs::path deferred = ck / "step-00000030" / "manifest.json";
  std::string manifest_30 = slurp(deferred);
  const std::string off = "; deferred step off\"";
  ASSERT_NE(manifest_30.find(off), std::string::npos) << manifest_30;
  manifest_30.replace(manifest_30.find(off), off.size(), "; deferred step on\"");
  std::ofstream(deferred) << manifest_30;
  std::tie(rc, out) = train({"--plan", plan.string(), "--steps", "32", "--resume"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("weights' lag"), std::string::npos) << out;
}

// SIGTERM (a scheduler's) or Ctrl-C to a gloo job's launcher while its workers write a checkpoint:
// it stops them, removes the checkpoint they left half written and says so. Killed at once, it
// left a .tmp-step of 177-249 MB behind and said nothing.
TEST(TrainCli, AnInterruptedLauncherLeavesNoHalfWrittenCheckpoint) {
  TempDir tmp("interrupted-launcher");
  const fs::path ck = tmp.path / "ck", log = tmp.path / "log";
  pid_t pid = start({"train", "--model", "mlp", "--width", "2", "--depth", "8", "--data", "synthetic",
                     "--synthetic-samples", "4096", "--batch-size", "8", "--stages", "2", "--schedule", "1f1b",
                     "--transport", "gloo", "--steps", "400", "--checkpoint-dir", ck.string(), "--checkpoint-every", "1",
                     "--quiet", "--timeout", "60"},
                    log);
  auto half_written = [&] {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(ck, ec))
      if (e.path().filename().string().rfind(".tmp-step-", 0) == 0) return true;
    return false;
  };
  auto deadline = Clock::now() + std::chrono::seconds(90);
  while (!half_written() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_TRUE(half_written()) << slurp(log);
  ::kill(pid, SIGTERM);
  int status = 0;
  deadline = Clock::now() + std::chrono::seconds(60);
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      FAIL() << "the launcher did not stop within 60 s of SIGTERM: " << slurp(log);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM) << status << "\n" << slurp(log);
  EXPECT_NE(slurp(log).find("pipetrain: interrupted (Terminated): stopping the workers"), std::string::npos)
      << slurp(log);
  EXPECT_FALSE(half_written()) << slurp(log);
  EXPECT_FALSE(processes_mention(ck.string()));
}

// Step folders that are no checkpoint: one this run would write into is refused before training
// (it was, after training up to it), and those after the one resumed are named (the resume was
// silently an earlier step's).
TEST(TrainCli, StepFoldersThatAreNoCheckpointAreNamedBeforeTraining) {
  TempDir tmp("not-checkpoints");
  fs::path ck = tmp.path / "ck", log = tmp.path / "log";
  auto train = [&](const std::string& steps, bool resume) {
    std::vector<std::string> args = {"train", "--model", "mnist-cnn", "--data", "synthetic", "--synthetic-samples", "640",
                                     "--checkpoint-dir", ck.string(), "--checkpoint-every", "2", "--steps", steps};
    if (resume) args.push_back("--resume");
    int rc = run(args, log);
    return std::make_pair(rc, slurp(log));
  };
  auto [rc, out] = train("2", false);
  ASSERT_EQ(rc, 0) << out;
  fs::create_directories(ck / "step-00000004");
  std::ofstream(ck / "step-00000004" / "notes.txt") << "mine";
  fs::create_directories(ck / "step-00000009");
  std::tie(rc, out) = train("6", true);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("step-00000004' is not a checkpoint (no manifest.json that reads), and this run writes its step-4 "
                     "checkpoint there: move it away"), std::string::npos) << out;
  EXPECT_EQ(out.find("step 3/"), std::string::npos) << out;  // refused before training
  EXPECT_FALSE(fs::exists(ck / ".tmp-step-00000004"));
  fs::remove_all(ck / "step-00000004");
  // A model flag that changes the synthetic data says so (it read as other data alone).
  int classes = run({"train", "--model", "mnist-cnn", "--classes", "5", "--data", "synthetic", "--synthetic-samples", "640",
                     "--checkpoint-dir", ck.string(), "--steps", "4", "--resume"}, log);
  EXPECT_NE(classes, 0);
  EXPECT_NE(slurp(log).find("a model flag such as --width, --classes"), std::string::npos) << slurp(log);
  std::tie(rc, out) = train("4", true);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("note: --resume: step-00000009 in '" + ck.string() + "' is no checkpoint (no manifest.json that "
                     "reads): resuming from the newest that is, step-00000002"), std::string::npos) << out;
}

TEST(TrainCli, AKilledReportingWorkersMetricsAreNamed) {
  TempDir tmp("killed_reporter");
  std::string plan = (tmp.path / "plan.json").string();
  plan::write_plan(plan::even_split(unit_profile(*seeded_cnn(3)), 2), plan);
  fs::path metrics = tmp.path / "m.csv", log = tmp.path / "log";
  pid_t pid = start({"train", "--data", "synthetic", "--synthetic-samples", "4096", "--epochs", "1000", "--batch-size",
                     "32", "--plan", plan, "--transport", "gloo", "--metrics", metrics.string(), "--quiet"},
                    log);
  fs::path partial = metrics.string() + ".partial";
  auto rows = [&] {
    std::string text = slurp(partial);
    return std::count(text.begin(), text.end(), '\n');
  };
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (rows() < 3 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_GE(rows(), 3) << slurp(log);
  // The workers are the launcher's children in rank order; worker 1 holds the last stage and reports.
  std::istringstream children(slurp("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children"));
  std::vector<pid_t> workers{std::istream_iterator<pid_t>(children), std::istream_iterator<pid_t>()};
  ASSERT_EQ(workers.size(), 2u);
  ::kill(workers[1], SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  std::string said = slurp(log);
  EXPECT_NE(said.find("worker 1 was killed by signal 9"), std::string::npos) << said;
  // No earlier file to keep: it said "(m.csv is as it was)".
  EXPECT_NE(said.find("note: --metrics: the rows up to the failure are in " + partial.string() + " (" +
                      metrics.string() + " was not written)"),
            std::string::npos)
      << said;
  EXPECT_GE(rows(), 3);
  EXPECT_FALSE(fs::exists(metrics));
  // Its workers were this launcher's: the note for workers started apart (torchrun) is not theirs.
  EXPECT_EQ(said.find("does not report"), std::string::npos) << said;
}

// A launcher that timed the layers has LibTorch's threads and runs this binary again for each
// worker, which said "worker 0 does not report" as a worker torchrun started would.
TEST(TrainCli, ALaunchersWorkersStartedAgainSayNothingOfTheMetrics) {
  TempDir tmp("exec_workers");
  fs::path metrics = tmp.path / "m.csv", log = tmp.path / "log";
  // OpenBLAS's own threads (the tests run with one) make the launcher's timing leave it threaded.
  const char* had = std::getenv("OPENBLAS_NUM_THREADS");
  std::string before = had ? had : "";
  ::setenv("OPENBLAS_NUM_THREADS", "2", 1);
  int status = run({"train", "--data", "synthetic", "--stages", "2", "--steps", "2", "--transport", "gloo",
                    "--metrics", metrics.string()},
                   log);
  had ? ::setenv("OPENBLAS_NUM_THREADS", before.c_str(), 1) : ::unsetenv("OPENBLAS_NUM_THREADS");
  ASSERT_EQ(status, 0) << slurp(log);
  std::string said = slurp(log);
  ASSERT_NE(said.find("started the workers as new processes"), std::string::npos) << said;
  EXPECT_EQ(said.find("does not report"), std::string::npos) << said;
  EXPECT_TRUE(fs::exists(metrics));
}

TEST(TrainCli, MpirunStartsAGlooJob) {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun is not installed (openmpi-bin)";
  TempDir tmp("mpirun");
  std::string plan = (tmp.path / "plan.json").string();
  plan::write_plan(plan::even_split(unit_profile(*seeded_cnn(3)), 2), plan);
  std::string log = (tmp.path / "log").string();
  std::string cmd = "MASTER_PORT=" + std::to_string(free_tcp_port()) + " PIPETRAIN_JOB_SECRET=" + new_job_secret() +
                    " timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 -x MASTER_PORT -x PIPETRAIN_JOB_SECRET " +
                    kBinary +
                    " train --data synthetic --synthetic-samples 512 --steps 6 --batch-size 32 --plan " + plan +
                    " --schedule 1f1b --transport gloo --quiet > " + log + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(log);
  EXPECT_NE(slurp(log).find("steps 6"), std::string::npos) << slurp(log);
}

// Workers started by hand (as under torchrun) with flags that differ: the job stops before it
// trains, on every worker, naming the field and the workers (issue 17).
TEST(TrainCli, GlooWorkersThatDisagreeStop) {
  TempDir tmp("disagree");
  std::string plan2 = (tmp.path / "plan2.json").string(), plan3 = (tmp.path / "plan3.json").string();
  auto prof = unit_profile(*seeded_cnn(3));
  plan::write_plan(plan::even_split(prof, 2), plan2);
  plan::Plan other = plan::even_split(prof, 2);
  std::swap(other.stages[0].workers, other.stages[1].workers);  // same shape, workers swapped
  plan::write_plan(other, plan3);
  struct Case {
    std::vector<std::string> rank1_flags;
    std::string field;
  };
  // Each is named at its innermost field, with both values.
  for (const Case& c : {Case{{"--seed", "7"}, "'seed'"}, Case{{"--plan", plan3}, "'plan.stages[0].workers[0]'"},
                        Case{{"--lr", "0.5"}, "'sgd.lr'"}, Case{{"--momentum", "0"}, "'sgd.momentum': worker 0 has 0.9, worker 1 has 0.0)"},
                        Case{{"--no-shuffle"}, "'flags.--no-shuffle'"},
                        Case{{"--weight-decay", "0.01"}, "'sgd.weight_decay'"}}) {
    SCOPED_TRACE(c.field);
    std::string port = std::to_string(free_tcp_port());
    std::vector<pid_t> pids;
    for (int r = 0; r < 2; ++r) {
      std::vector<std::string> args = {"train", "--data", "synthetic", "--synthetic-samples", "512", "--steps", "4",
                                       "--batch-size", "32", "--schedule", "1f1b", "--transport", "gloo",
                                       "--quiet", "--timeout", "20"};
      bool own_plan = r == 1 && c.rank1_flags[0] == "--plan";
      if (!own_plan) args.insert(args.end(), {"--plan", plan2});
      if (r == 1) args.insert(args.end(), c.rank1_flags.begin(), c.rank1_flags.end());
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", "2", 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      ::setenv("PIPETRAIN_JOB_SECRET", "the-same-on-both-workers", 1);
      pids.push_back(start(args, tmp.path / ("rank" + std::to_string(r) + ".log")));
    }
    for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PIPETRAIN_JOB_SECRET"}) ::unsetenv(v);
    for (int r = 0; r < 2; ++r) {
      int status = 0;
      ::waitpid(pids[r], &status, 0);
      std::string log = slurp(tmp.path / ("rank" + std::to_string(r) + ".log"));
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << log;
      EXPECT_NE(log.find("the workers disagree ("), std::string::npos) << log;
      std::string named = c.field.back() == ')' ? c.field : c.field + ": worker 0 has";
      EXPECT_NE(log.find(named), std::string::npos) << log;
      EXPECT_EQ(log.find("steps 4"), std::string::npos) << log;  // nothing trained
    }
  }
}

// What a run's weights depend on is said where it is not plain: a split measured here under
// pipedream (its stages' staleness follows it; 2bw's delay is every stage's, so no note), and
// 2bw's delay where too few microbatches cover the warm-up (it ran 2, not 1, without a word).
TEST(TrainCli, WhatTheWeightsDependOnIsNoted) {
  TempDir tmp("notes");
  fs::path log = tmp.path / "log";
  auto train = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"train", "--data", "synthetic", "--synthetic-samples", "256", "--batch-size", "32",
                                     "--steps", "4", "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(run(args, log), 0) << slurp(log);
    return slurp(log);
  };
  const std::string split = "note: the stages split the model by times measured just now";
  EXPECT_NE(train({"--stages", "2", "--schedule", "pipedream"}).find(split), std::string::npos);
  std::string two_bw = train({"--stages", "2", "--schedule", "2bw", "--microbatches", "2"});
  EXPECT_EQ(two_bw.find(split), std::string::npos) << two_bw;
  EXPECT_EQ(two_bw.find("2bw's weights lag"), std::string::npos) << two_bw;
  std::string few = train({"--stages", "4", "--schedule", "2bw", "--microbatches", "2"});
  EXPECT_NE(few.find("note: 2bw's weights lag 2 steps here, not PipeDream-2BW's 1: 2 microbatches"),
            std::string::npos) << few;
}

// A checkpoint's step has its row in the metrics before the checkpoint exists: a job killed just
// after the checkpoint lost that row, its accuracy too, for good (its resume starts after it).
TEST(TrainCli, ACheckpointsRowIsWrittenBeforeIt) {
  TempDir tmp("row-before-checkpoint");
  fs::path ck = tmp.path / "ck", csv = tmp.path / "m.csv";
  pid_t pid = start({"train", "--data", "synthetic", "--synthetic-samples", "4096", "--batch-size", "32", "--steps",
                     "2000", "--stages", "2", "--schedule", "1f1b", "--eval-every", "5", "--checkpoint-dir", ck.string(),
                     "--checkpoint-every", "5", "--metrics", csv.string(), "--quiet"},
                    tmp.path / "log");
  fs::path first = ck / "step-00000005";
  auto began = std::chrono::steady_clock::now();
  while (!fs::exists(first) && std::chrono::steady_clock::now() - began < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  ::kill(-pid, SIGSTOP);  // the moment the checkpoint is there
  std::string rows = slurp(csv.string() + ".partial");
  ::kill(-pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  ASSERT_TRUE(fs::exists(first)) << slurp(tmp.path / "log");
  size_t at = rows.find("\n5,1,");
  ASSERT_NE(at, std::string::npos) << "no row of step 5 when its checkpoint appeared:\n" << rows;
  std::stringstream row(rows.substr(at + 1, rows.find('\n', at + 1) - at - 1));
  std::vector<std::string> f;
  for (std::string field; std::getline(row, field, ',');) f.push_back(field);
  ASSERT_GE(f.size(), 5u) << rows;
  EXPECT_FALSE(f[4].empty()) << "step 5's row has no accuracy:\n" << rows;
}

// A resumed run that cannot write its metrics (a full disk) leaves the rows of the run it resumes
// where they were: it removed the partial file, their only copy where that run was killed (313
// rows deleted). The file size limit stands in for the full disk.
TEST(TrainCli, AResumeThatCannotWriteItsMetricsKeepsTheEarlierRows) {
  TempDir tmp("metrics-full");
  fs::path ck = tmp.path / "ck", csv = tmp.path / "m.csv", partial = tmp.path / "m.csv.partial";
  std::vector<std::string> args = {"train", "--data", "synthetic", "--synthetic-samples", "512", "--batch-size", "32",
                                   "--checkpoint-dir", ck.string(), "--checkpoint-every", "100", "--metrics",
                                   csv.string(), "--quiet"};
  std::vector<std::string> first = args;
  first.insert(first.end(), {"--steps", "100"});
  ASSERT_EQ(run(first, tmp.path / "log"), 0) << slurp(tmp.path / "log");
  fs::rename(csv, partial);  // as a killed run leaves them
  std::string before = slurp(partial);
  std::vector<std::string> argv{kBinary};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"--steps", "120", "--resume"});
  std::vector<char*> cargs;
  for (auto& a : argv) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  std::string log = (tmp.path / "resume.log").string();
  pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen(log.c_str(), "w", stdout);
    ::dup2(::fileno(stdout), 2);
    ::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG instead
    rlimit small{4096, 4096};    // under the 100 rows, over what the run prints
    ::setrlimit(RLIMIT_FSIZE, &small);
    ::execv(kBinary.c_str(), cargs.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << slurp(log);
  EXPECT_NE(slurp(log).find("the earlier run's rows are as they were"), std::string::npos) << slurp(log);
  EXPECT_EQ(slurp(partial), before) << slurp(log);
}

// Rows missing from the metrics a resume keeps (a run in between wrote none) are named, with what
// they leave out of train_s: the file jumped from row 209 to 351 without a word.
TEST(TrainCli, RowsMissingFromAResumedRunsMetricsAreNamed) {
  TempDir tmp("metrics-gap");
  fs::path csv = tmp.path / "m.csv";
  std::vector<std::string> args = {"train", "--data", "synthetic", "--synthetic-samples", "512", "--batch-size", "32",
                                   "--checkpoint-dir", (tmp.path / "ck").string(), "--checkpoint-every", "10",
                                   "--metrics", csv.string(), "--quiet"};
  std::vector<std::string> first = args, second = args;
  first.insert(first.end(), {"--steps", "20"});
  second.insert(second.end(), {"--steps", "30", "--resume"});
  ASSERT_EQ(run(first, tmp.path / "log"), 0) << slurp(tmp.path / "log");
  std::string rows = slurp(csv), kept;
  std::istringstream in(rows);
  std::string line;
  for (int i = 0; i < 6 && std::getline(in, line); ++i) kept += line + "\n";  // the header and rows 1-5
  std::ofstream(csv) << kept;
  ASSERT_EQ(run(second, tmp.path / "log"), 0) << slurp(tmp.path / "log");
  EXPECT_NE(slurp(tmp.path / "log").find("the rows kept from " + csv.string() + " end at step 5, and the checkpoint "
                                         "holds 20 steps: steps 6..20 have no row"),
            std::string::npos)
      << slurp(tmp.path / "log");
  // Its result line counts its own steps, and says which: "steps 10" read as the whole run's.
  EXPECT_NE(slurp(tmp.path / "log").find("steps 10 (21..30, resumed), "), std::string::npos) << slurp(tmp.path / "log");
}

// Pipedream's 3 replicas take rounds of 3: an epoch of 16 minibatches trains 15, its 16th left
// out. A resumed run's line names the steps it trained, positions in the data: it printed 16..45
// for a run that trained 17..47 (its checkpoint step-00000047).
TEST(TrainCli, AResumedRunNamesTheStepsItTrained) {
  TempDir tmp("resumed-range");
  std::vector<std::string> args = {"train", "--data", "synthetic", "--synthetic-samples", "512", "--batch-size", "32",
                                   "--workers", "3", "--schedule", "pipedream", "--checkpoint-dir",
                                   (tmp.path / "ck").string(), "--quiet"};
  std::vector<std::string> first = args, second = args;
  first.insert(first.end(), {"--epochs", "1"});
  second.insert(second.end(), {"--epochs", "3", "--resume"});
  ASSERT_EQ(run(first, tmp.path / "log"), 0) << slurp(tmp.path / "log");
  ASSERT_EQ(run(second, tmp.path / "log"), 0) << slurp(tmp.path / "log");
  std::string out = slurp(tmp.path / "log");
  EXPECT_NE(out.find("steps 30 (17..47, resumed), "), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(tmp.path / "ck" / "step-00000047")) << out;
}

// A --warmup-steps longer than the run is named (the rate stayed at a twentieth of --lr).
TEST(TrainCli, AWarmUpLongerThanTheRunIsNamed) {
  TempDir tmp("long-warmup");
  auto args = [](const std::string& warmup) {
    return std::vector<std::string>{
        "train",   "--data", "synthetic", "--synthetic-samples", "256", "--batch-size", "32",
        "--steps", "5",      "--quiet",   "--warmup-steps",      warmup};
  };
  ASSERT_EQ(run(args("100"), tmp.path / "log"), 0) << slurp(tmp.path / "log");
  EXPECT_NE(slurp(tmp.path / "log")
                .find("note: --warmup-steps 100 is more than this run's 5 steps: the rate rises to "
                      "5/100 of --lr and never reaches it"),
            std::string::npos)
      << slurp(tmp.path / "log");
  ASSERT_EQ(run(args("5"), tmp.path / "log"), 0) << slurp(tmp.path / "log");
  EXPECT_EQ(slurp(tmp.path / "log").find("--warmup-steps"), std::string::npos) << slurp(tmp.path / "log");
}

// A resumed run given a new metrics file says that the file starts at the resumed step and counts
// this run's time alone (the earlier 10 rows went missing without a word).
TEST(TrainCli, AResumedRunsNewMetricsFileSaysItIsNotTheWholeTraining) {
  TempDir tmp("metrics-new");
  std::vector<std::string> args = {"train",        "--data", "synthetic",        "--synthetic-samples",      "512",
                                   "--batch-size", "32",     "--checkpoint-dir", (tmp.path / "ck").string(), "--quiet"};
  std::vector<std::string> first = args, second = args;
  first.insert(first.end(), {"--steps", "10", "--metrics", (tmp.path / "m1.csv").string()});
  second.insert(second.end(), {"--steps", "12", "--resume", "--metrics", (tmp.path / "m2.csv").string()});
  ASSERT_EQ(run(first, tmp.path / "log"), 0) << slurp(tmp.path / "log");
  ASSERT_EQ(run(second, tmp.path / "log"), 0) << slurp(tmp.path / "log");
  EXPECT_NE(slurp(tmp.path / "log")
                .find((tmp.path / "m2.csv").string() +
                      " holds no rows of the run being resumed (a new file?): its rows start at "
                      "step 11"),
            std::string::npos)
      << slurp(tmp.path / "log");
  EXPECT_EQ(slurp(tmp.path / "m2.csv").find("\n1,"), std::string::npos);
}

// 2bw's stages, the last included, lag a step: each warms its rate up over --stale-warmup
// minibatches, and the metrics' lr column is the rate the last stage applied.
TEST(TrainCli, TwoBwsStagesWarmUpAndTheCsvSaysTheirRate) {
  TempDir tmp("2bw-warmup");
  // The paper's 2bw lags every stage, the last included; predicting, the last stage runs each
  // minibatch on the weights its gradient applies to and does not warm up.
  for (bool paper : {true, false}) {
    std::string csv = (tmp.path / (paper ? "paper.csv" : "predicting.csv")).string();
    std::vector<std::string> args{"train", "--data", "synthetic", "--synthetic-samples", "256", "--batch-size", "32",
                                  "--steps", "6", "--stages", "2", "--schedule", "2bw", "--microbatches", "2", "--lr",
                                  "0.04", "--stale-warmup", "4", "--metrics", csv, "--quiet"};
    if (paper) args.push_back("--no-weight-prediction");
    ASSERT_EQ(run(args, tmp.path / "log"), 0) << slurp(tmp.path / "log");
    std::ifstream in(csv);
    std::string line;
    std::getline(in, line);
    std::vector<double> lr;
    while (std::getline(in, line)) {  // the tenth column
      std::stringstream row(line);
      std::string field;
      for (int k = 0; k < 10; ++k) std::getline(row, field, ',');
      lr.push_back(std::stod(field));
    }
    std::vector<double> want = paper ? std::vector<double>{0.01, 0.02, 0.03, 0.04, 0.04, 0.04}
                                     : std::vector<double>(6, 0.04);
    ASSERT_EQ(lr.size(), want.size()) << slurp(csv);
    for (size_t i = 0; i < lr.size(); ++i)
      EXPECT_NEAR(lr[i], want[i], 1e-9) << (paper ? "paper " : "predicting ") << "step " << i + 1 << "\n" << slurp(csv);
    EXPECT_EQ(slurp(tmp.path / "log").find("never reach"), std::string::npos) << slurp(tmp.path / "log");
  }
  // A warm-up longer than the run is named: those stages never reach --lr.
  ASSERT_EQ(run({"train", "--data", "synthetic", "--synthetic-samples", "256", "--batch-size", "32", "--steps", "6",
                 "--stages", "2", "--schedule", "2bw", "--microbatches", "2", "--stale-warmup", "10", "--quiet"},
                tmp.path / "log"),
            0);
  EXPECT_NE(slurp(tmp.path / "log").find("as many as 10 minibatches (stage 0: --stale-warmup 10 times its lag), more "
                                         "than this run's 6 steps: they never reach --lr"),
            std::string::npos)
      << slurp(tmp.path / "log");
}

// A second process given a rank already taken is told so at once, and the job trains: it failed
// on gloo's "Connection refused", or waited 76 s in silence when the job was running.
TEST(TrainCli, ARankTakenTwiceIsNamed) {
  TempDir tmp("rank-twice");
  auto prof = unit_profile(*seeded_cnn(3));
  std::string plan = (tmp.path / "plan.json").string();
  plan::write_plan(plan::even_split(prof, 2), plan);
  std::string port = std::to_string(free_tcp_port());
  std::vector<std::string> args = {"train", "--data", "synthetic", "--synthetic-samples", "256", "--steps", "400",
                                   "--batch-size", "32", "--plan", plan, "--schedule", "1f1b", "--transport", "gloo",
                                   "--quiet", "--timeout", "20", "--rendezvous-timeout", "20"};
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", port.c_str(), 1);
  ::setenv("PIPETRAIN_JOB_SECRET", "the-same-on-both-workers", 1);
  // Both worker-1 processes start first and wait for worker 0's rendezvous, so both join while the
  // job runs: started after worker 0, the second one (slow to start under CI's load) came when the
  // job had ended and found the port closed. 400 steps keep the job up for seconds after worker 0
  // starts, should a worker 1 still be loading LibTorch then.
  std::vector<pid_t> pids;
  for (int r : {1, 1, 0}) {
    if (r == 0) std::this_thread::sleep_for(std::chrono::seconds(2));
    ::setenv("RANK", std::to_string(r).c_str(), 1);
    pids.push_back(start(args, tmp.path / ("p" + std::to_string(pids.size()) + ".log")));
  }
  for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PIPETRAIN_JOB_SECRET"}) ::unsetenv(v);
  int refused = 0, trained = 0;
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    ::waitpid(pids[i], &status, 0);
    std::string log = slurp(tmp.path / ("p" + std::to_string(i) + ".log"));
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    trained += ok;
    if (!ok) {
      ++refused;
      EXPECT_NE(log.find("another process has joined the rendezvous at 127.0.0.1:" + port + " as worker 1"),
                std::string::npos) << log;
    }
  }
  EXPECT_EQ(refused, 1);
  EXPECT_EQ(trained, 2);
}

// A worker started apart that fails before it joins tells the rendezvous, and the others stop at
// once naming its failure: they waited out --rendezvous-timeout (300 s by default), saying only
// that it had not joined. Worker 1 failing, then worker 0 (which serves the rendezvous).
TEST(TrainCli, AWorkerThatFailsBeforeJoiningStopsTheOthers) {
  TempDir tmp("fails-before-joining");
  auto prof = unit_profile(*seeded_cnn(3));
  std::string plan = (tmp.path / "plan.json").string();
  plan::write_plan(plan::even_split(prof, 2), plan);
  std::vector<std::string> args = {"train", "--data", "synthetic", "--synthetic-samples", "256", "--steps", "4",
                                   "--batch-size", "32", "--plan", plan, "--schedule", "1f1b", "--transport", "gloo",
                                   "--quiet", "--timeout", "60", "--rendezvous-timeout", "60"};
  std::vector<std::string> failing = args;
  failing[2] = (tmp.path / "missing.pt").string();  // --data: refused for a zoo model
  for (int bad : {1, 0}) {
    SCOPED_TRACE("worker " + std::to_string(bad) + " fails");
    std::string port = std::to_string(free_tcp_port());
    ::setenv("WORLD_SIZE", "2", 1);
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", port.c_str(), 1);
    ::setenv("PIPETRAIN_JOB_SECRET", "the-same-on-both-workers", 1);
    auto began = std::chrono::steady_clock::now();
    std::vector<pid_t> pids;
    for (int r : {0, 1}) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      pids.push_back(start(r == bad ? failing : args, tmp.path / ("w" + std::to_string(r) + ".log")));
    }
    for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PIPETRAIN_JOB_SECRET"}) ::unsetenv(v);
    for (int r : {0, 1}) {
      int status = 0;
      ::waitpid(pids[r], &status, 0);
      std::string log = slurp(tmp.path / ("w" + std::to_string(r) + ".log"));
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << log;
      EXPECT_NE(log.find("missing.pt is your own data"), std::string::npos) << log;
      if (r != bad) {
        EXPECT_NE(log.find(str("the job stops: worker ", bad, ": ")), std::string::npos) << log;
      }
    }
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    EXPECT_LT(took, 30) << "the healthy worker waited for the rendezvous' timeout";
  }
}

// pipedream with its stage replicated (one stage on 2 workers): the metrics CSV's rows carry the
// time each step ended and the rate its round applied, and the trace leaves the evaluations out.
// Every row of a segment had carried its end (row 1 of 1,000 read 34 samples/s where the run went
// at 3,400), the lr column each minibatch's own rate (0.000146 where the step applied 0.0005),
// and the trace counted the evaluations as training (40.8 ms per minibatch against 0.43).
TEST(TrainCli, ReplicatedPipedreamReportsEachStepsTimeRateAndPauses) {
  TempDir tmp("replicated-pipedream");
  std::string csv = (tmp.path / "m.csv").string(), trace = (tmp.path / "t.json").string();
  ASSERT_EQ(run({"train", "--data", "synthetic", "--synthetic-samples", "512", "--batch-size", "8", "--steps", "48",
                 "--schedule", "pipedream", "--workers", "2", "--lr", "0.01", "--warmup-steps", "4", "--lr-schedule",
                 "cosine", "--eval-every", "16", "--metrics", csv, "--trace", trace, "--quiet"},
                tmp.path / "log"),
            0)
      << slurp(tmp.path / "log");
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);
  ASSERT_EQ(line,
            "step,epoch,loss,samples_per_s,test_accuracy,train_s,peak_memory_bytes,test_loss,grad_norm,lr,peak_rss_bytes");
  std::vector<double> train_s, lr;
  for (; std::getline(in, line);) {
    std::stringstream row(line);
    std::vector<std::string> f;
    for (std::string field; std::getline(row, field, ',');) f.push_back(field);
    ASSERT_EQ(f.size(), 11u) << line;
    train_s.push_back(std::stod(f[5]));
    lr.push_back(std::stod(f[9]));
  }
  ASSERT_EQ(train_s.size(), 48u) << slurp(csv);
  std::set<double> distinct(train_s.begin(), train_s.end());
  // The two replicas end their minibatches about together (24 to 44 distinct times to the ms
  // here); every row of a segment alike gave 3.
  EXPECT_GT(distinct.size(), 16u) << slurp(csv);
  EXPECT_TRUE(std::is_sorted(train_s.begin(), train_s.end())) << slurp(csv);
  for (size_t m = 1; m < lr.size(); m += 2) EXPECT_EQ(lr[m], lr[m - 1]) << "minibatch " << m << " steps in the round of " << m - 1;
  EXPECT_NE(lr[2], lr[0]);  // warming up
  json doc = parse_json(slurp(trace), "trace");
  ASSERT_TRUE(doc.contains("pauses")) << "no evaluation left out of the trace";
  EXPECT_GE(doc["pauses"].size(), 2u);
  // Each the evaluation's length (about 20 ms here), where the worker outside its chain had
  // paused for a few microseconds and the common pause was as short.
  for (const auto& p : doc["pauses"]) EXPECT_GT(p[1].get<double>() - p[0].get<double>(), 1.0) << doc["pauses"].dump();
}

// pipedream's replicated stage steps once a round with its replicas' mean gradient (the runtime's
// PipelineEquivalence test holds the weights): the note says so, and with every stage replicated,
// that each step trains on r x the batch where --schedule dp would not. Summed (the default until
// 2026-12-05, said nowhere), the 8 replicas of `plan --workers 8` trained mnist-cnn to chance.
TEST(TrainCli, PipedreamsReplicaRoundsAreNoted) {
  TempDir tmp("replica-rounds");
  for (const char* reduce : {"mean", "sum"}) {
    ASSERT_EQ(run({"train", "--data", "synthetic", "--synthetic-samples", "256", "--batch-size", "8", "--steps", "4",
                   "--schedule", "pipedream", "--workers", "2", "--replica-gradients", reduce, "--quiet"},
                  tmp.path / "log"),
              0)
        << slurp(tmp.path / "log");
    std::string out = slurp(tmp.path / "log");
    EXPECT_NE(out.find(str("note: under pipedream the stage's 2 replicas take a minibatch each and step once a round "
                           "with their gradients' ", reduce, ", on 2 x 8 samples",
                           std::string(reduce) == "mean" ? ", as PipeDream and DDP do" : " at r times the rate")),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("with every stage replicated, a step trains on 16 samples or more, where `train --schedule dp`"),
              std::string::npos)
        << out;
  }
  EXPECT_NE(run({"train", "--data", "synthetic", "--steps", "2", "--schedule", "pipedream", "--workers", "2",
                 "--replica-gradients", "average"},
                tmp.path / "log"),
            0);
  EXPECT_NE(slurp(tmp.path / "log").find("--replica-gradients"), std::string::npos) << slurp(tmp.path / "log");
}

// An accuracy row's training time is when the weights it evaluated existed: under pipedream the
// first stage steps a segment's last minibatch after the reporter, the last stage, has its loss,
// and rows stamped before that drain read 0.186 s for weights that existed at 0.29 (5 stages);
// the run's last row fell 37-53 ms short of the total printed here (of about 0.4 s).
TEST(TrainCli, AnAccuracyRowsTimeIncludesThePipelinesDrain) {
  TempDir tmp("drain");
  std::string csv = (tmp.path / "m.csv").string(), trace = (tmp.path / "t.json").string();
  ASSERT_EQ(run({"train", "--data", "synthetic", "--synthetic-samples", "1024", "--batch-size", "64", "--steps", "16",
                 "--stages", "4", "--schedule", "pipedream", "--eval-every", "4", "--metrics", csv, "--trace", trace,
                 "--quiet"},
                tmp.path / "log"),
            0)
      << slurp(tmp.path / "log");
  std::vector<std::vector<std::string>> rows;
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::stringstream row(line);
    rows.emplace_back();
    for (std::string field; std::getline(row, field, ',');) rows.back().push_back(field);
    ASSERT_GE(rows.back().size(), 6u) << line;
  }
  ASSERT_EQ(rows.size(), 16u) << slurp(csv);
  ASSERT_FALSE(rows[3][4].empty()) << "no accuracy at step 4\n" << slurp(csv);
  // The first evaluation, before any pause: trace times run from an origin at or before the
  // reporter's training clock starts, which is before its first action (another worker's may
  // come earlier: on 2 cores the reporter's thread woke up to 4 ms after the start barrier).
  json doc = parse_json(slurp(trace), "trace");
  double first_start = 1e300, stepped = -1;
  for (const auto& a : doc["workers"].back()) first_start = std::min(first_start, a["start_ms"].get<double>());
  for (const auto& a : doc["workers"][0])
    if (a["action"].get<std::string>() == "0ST3" && stepped < 0) stepped = a["end_ms"].get<double>();
  ASSERT_GT(stepped, 0) << "worker 0 has no step of minibatch 3";
  EXPECT_GE(std::stod(rows[3][5]) * 1000 + 0.5, stepped - first_start)  // the CSV's 3 decimals
      << "step 4's accuracy is stamped before worker 0 stepped minibatch 3\n" << slurp(csv);
  // The last row's time is the run's.
  std::string log = slurp(tmp.path / "log");
  size_t at = log.find("steps 16, ");
  ASSERT_NE(at, std::string::npos) << log;
  // Within a scheduler's slice or two: the bug read 37-53 ms early.
  EXPECT_NEAR(std::stod(rows.back()[5]), std::stod(log.substr(at + 10)), 0.01) << log << slurp(csv);
}

// A replicated last stage's rows are stamped when the replicas stepped their minibatch: stamped at
// its loss, before the backward, the all-reduce and the step, the last row of a data-parallel mlp
// read 0.700 s of a run that took 0.746 (threads; gloo 0.997 of 1.085).
TEST(TrainCli, AReplicatedLastStagesRowsAreStampedOnceItStepped) {
  TempDir tmp("dp_rows");
  std::string csv = (tmp.path / "m.csv").string();
  ASSERT_EQ(run({"train", "--model", "mlp", "--steps", "8", "--workers", "2", "--schedule", "dp", "--metrics", csv,
                 "--quiet"},
                tmp.path / "log"),
            0)
      << slurp(tmp.path / "log");
  std::ifstream in(csv);
  std::string line, last;
  std::getline(in, line);
  while (std::getline(in, line)) last = line;
  std::vector<std::string> row;
  std::stringstream fields(last);
  for (std::string field; std::getline(fields, field, ',');) row.push_back(field);
  ASSERT_GE(row.size(), 6u) << slurp(csv);
  std::string log = slurp(tmp.path / "log");
  size_t at = log.find("steps 8, ");
  ASSERT_NE(at, std::string::npos) << log;
  // Within a few scheduler slices on 2 loaded cores: the bug read 46 ms early.
  EXPECT_NEAR(std::stod(row[5]), std::stod(log.substr(at + 9)), 0.025) << log << slurp(csv);
}

// ... but the row before a pause, here the run's end, once every worker has ended the segment: the
// first stage's last backward and step come after the last stage's, and a replicated last stage's
// last row left them out (1f1b on mnist-cnn, the last stage on 2 workers: 0.085 s of 0.088).
// Emulated compute makes the first stage's backward 40 ms, a drain no scheduler's slice hides.
TEST(TrainCli, AReplicatedLastStagesLastRowIncludesTheDrain) {
  TempDir tmp("drain_rows");
  fs::path profile = tmp.path / "p.json", plan = tmp.path / "plan.json", log = tmp.path / "log";
  ASSERT_EQ(run({"profile", "--model", "mnist-cnn", "--batch-size", "64", "-o", profile.string()}, log), 0) << slurp(log);
  json p = parse_json(slurp(profile), "profile");
  p["layers"][0]["backward_ms"] = 160.0;  // 40 ms a microbatch of 16
  p["layers"][0].erase("timings");        // the times measured at other batches
  std::ofstream(profile) << p.dump();
  std::ofstream(plan) << R"({"format": "pipetrain.plan/1", "workers": 3, "batch_size": 64, "schedule": "1f1b",
    "microbatches": 4, "stages": [{"layers": [0, 1], "replicas": 1}, {"layers": [2, 3, 4], "replicas": 2}]})";
  std::string csv = (tmp.path / "m.csv").string();
  ASSERT_EQ(run({"train", "--compute", "emulated", "--profile", profile.string(), "--plan", plan.string(), "--steps", "2",
                 "--metrics", csv, "--quiet"},
                log),
            0)
      << slurp(log);
  std::string out = slurp(log), last, line;
  std::ifstream in(csv);
  while (std::getline(in, line)) last = line;
  std::vector<std::string> row;
  std::stringstream fields(last);
  for (std::string field; std::getline(fields, field, ',');) row.push_back(field);
  ASSERT_GE(row.size(), 6u) << slurp(csv);
  size_t at = out.find("steps 2, ");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_NEAR(std::stod(row[5]), std::stod(out.substr(at + 9)), 0.015) << out << slurp(csv);
}

// An asynchronous schedule's rows are stamped at their step on the last stage, not when the next
// minibatch's loss reports them: pipedream's rows each read one last-stage forward late (row 1 at
// 27.6 ms where its step ended at 20.3). Held against the reporter's trace, row k's time is nearer
// its step k's end than the end of forward k + 1 (a 12 ms forward at batch 256).
TEST(TrainCli, AnAsynchronousRunsRowsAreStampedAtTheirStep) {
  TempDir tmp("async_rows");
  std::string csv = (tmp.path / "m.csv").string(), trace = (tmp.path / "t.json").string();
  ASSERT_EQ(run({"train", "--data", "synthetic", "--synthetic-samples", "4096", "--batch-size", "256", "--steps", "12",
                 "--stages", "2", "--schedule", "pipedream", "--metrics", csv, "--trace", trace, "--quiet"},
                tmp.path / "log"),
            0)
      << slurp(tmp.path / "log");
  std::vector<double> row_ms;
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::stringstream fields(line);
    std::vector<std::string> row;
    for (std::string field; std::getline(fields, field, ',');) row.push_back(field);
    ASSERT_GE(row.size(), 6u) << line;
    row_ms.push_back(std::stod(row[5]) * 1000);
  }
  ASSERT_EQ(row_ms.size(), 12u) << slurp(csv);
  json doc = parse_json(slurp(trace), "trace");
  std::vector<std::tuple<double, std::string, double>> events;  // the reporter's, in the order they ran
  for (const auto& a : doc["workers"].back())
    events.emplace_back(a["start_ms"].get<double>(), a["action"].get<std::string>(), a["end_ms"].get<double>());
  std::sort(events.begin(), events.end());
  std::vector<double> forward_end, step_end;
  for (const auto& [start, action, end] : events) {
    if (action.find("ST") != std::string::npos) step_end.push_back(end);
    else if (action.find('F') != std::string::npos) forward_end.push_back(end);
  }
  ASSERT_EQ(step_end.size(), 12u);
  ASSERT_EQ(forward_end.size(), 12u);
  std::vector<double> from_step, from_next_forward, gap;
  for (size_t k = 0; k + 1 < row_ms.size(); ++k) {
    from_step.push_back(std::abs(row_ms[k] - step_end[k]));
    from_next_forward.push_back(std::abs(row_ms[k] - forward_end[k + 1]));
    gap.push_back(forward_end[k + 1] - step_end[k]);
  }
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  ASSERT_GT(median(gap), 3) << "the forwards are too short to tell the stamps apart";
  EXPECT_LT(median(from_step), median(from_next_forward)) << slurp(csv);
}

// A checkpoint folder one worker does not see (another host's own disk) is named as not shared,
// not only "cannot write file". Worker 1 runs in a mount namespace where the folder is another.
TEST(TrainCli, ACheckpointFolderTheWorkersDoNotShareIsNamed) {
  TempDir tmp("unshared");
  auto prof = unit_profile(*seeded_cnn(3));
  std::string plan = (tmp.path / "plan.json").string();
  plan::write_plan(plan::even_split(prof, 2), plan);
  fs::path ck = tmp.path / "ck", other = tmp.path / "other";
  fs::create_directories(ck);
  fs::create_directories(other);
  std::string port = std::to_string(free_tcp_port());
  std::vector<std::string> args = {"train", "--data", "synthetic", "--synthetic-samples", "256", "--steps", "4",
                                   "--batch-size", "32", "--plan", plan, "--schedule", "1f1b", "--transport", "gloo",
                                   "--quiet", "--timeout", "20", "--checkpoint-dir", ck.string(),
                                   "--checkpoint-every", "2"};
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", port.c_str(), 1);
  ::setenv("PIPETRAIN_JOB_SECRET", "the-same-on-both-workers", 1);
  ::setenv("RANK", "0", 1);
  pid_t first = start(args, tmp.path / "rank0.log");
  ::setenv("RANK", "1", 1);
  std::vector<std::string> argv{kBinary};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargs;
  for (auto& a : argv) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  std::string log1 = (tmp.path / "rank1.log").string();
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  pid_t second = ::fork();
  if (second == 0) {
    char ok = ::unshare(CLONE_NEWNS) == 0 && ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
              ::mount(other.c_str(), ck.c_str(), nullptr, MS_BIND, nullptr) == 0;
    (void)!::write(pipe_fds[1], &ok, 1);
    if (!ok) ::_exit(77);
    std::freopen(log1.c_str(), "w", stdout);
    ::dup2(::fileno(stdout), 2);
    ::execv(kBinary.c_str(), cargs.data());
    ::_exit(127);
  }
  for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PIPETRAIN_JOB_SECRET"}) ::unsetenv(v);
  char ok = 0;
  (void)!::read(pipe_fds[0], &ok, 1);
  int status = 0;
  if (!ok) {
    ::kill(-first, SIGKILL);
    ::waitpid(first, &status, 0);
    ::waitpid(second, &status, 0);
    GTEST_SKIP() << "no mount namespace here (not root?)";
  }
  ::waitpid(second, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << slurp(log1);
  EXPECT_NE(slurp(log1).find("but worker 1 does not see it: --checkpoint-dir must be a folder every worker shares"),
            std::string::npos)
      << slurp(log1);
  ::waitpid(first, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << slurp(tmp.path / "rank0.log");
}

// Launch state a user can set by accident is refused, not followed (issue 35): a launch plan in
// the environment of a plain run (it would override --stages), and --transport threads in a
// worker of a multi-worker job (each would train alone, exit 0).
TEST(TrainCli, LaunchStateFromTheEnvironmentIsRefused) {
  TempDir tmp("launch_state");
  std::string plan = (tmp.path / "plan.json").string();
  plan::write_plan(plan::even_split(unit_profile(*seeded_cnn(3)), 2), plan);
  std::vector<std::string> args = {"train", "--data", "synthetic", "--synthetic-samples", "256", "--steps", "2",
                                   "--batch-size", "32", "--stages", "3", "--schedule", "1f1b", "--quiet"};
  for (const std::string& value : {plan, "1:" + plan, std::to_string(::getpid()) + ":" + plan}) {
    ::setenv("PIPETRAIN_LAUNCH_PLAN", value.c_str(), 1);
    fs::path log = tmp.path / "plain.log";
    EXPECT_NE(run(args, log), 0) << slurp(log);
    EXPECT_NE(slurp(log).find("PIPETRAIN_LAUNCH_PLAN is set"), std::string::npos) << slurp(log);
    EXPECT_EQ(slurp(log).find("steps 2"), std::string::npos) << slurp(log);
  }
  ::unsetenv("PIPETRAIN_LAUNCH_PLAN");
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  fs::path log = tmp.path / "threads.log";
  EXPECT_NE(run(args, log), 0) << slurp(log);
  EXPECT_NE(slurp(log).find("--transport threads trains alone"), std::string::npos) << slurp(log);
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
}

// Two runs at once into one folder (issue 35): the second is refused, naming the first one's
// pid, while the first (a gloo job, whose worker 0 holds the lock) trains on to the end.
TEST(TrainCli, SecondRunIntoAFolderInUseIsRefused) {
  TempDir tmp("folder_in_use");
  std::string ck = (tmp.path / "ck").string();
  std::vector<std::string> common = {"train", "--data", "synthetic", "--synthetic-samples", "512", "--batch-size", "32",
                                     "--stages", "2", "--schedule", "1f1b", "--quiet", "--checkpoint-dir", ck};
  std::vector<std::string> first = common;
  first.insert(first.end(), {"--steps", "60", "--checkpoint-every", "2", "--transport", "gloo"});
  pid_t a = start(first, tmp.path / "first.log");
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (newest_checkpoint(ck).empty() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // The first job (its launcher and workers, one process group) is held while the second runs,
  // still holding its lock: left running, it ended before a second process slow to start under
  // CI's load reached the lock.
  ::kill(-a, SIGSTOP);
  std::vector<std::string> second = common;
  second.insert(second.end(), {"--steps", "4", "--overwrite"});
  fs::path log = tmp.path / "second.log";
  EXPECT_NE(run(second, log), 0);
  ::kill(-a, SIGCONT);
  EXPECT_NE(slurp(log).find("is in use by another run (pid "), std::string::npos) << slurp(log);
  int status = 0;
  ::waitpid(a, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(tmp.path / "first.log");
  EXPECT_EQ(read_verified_manifest(newest_checkpoint(ck)).step, 60);
}

// Train's checkpoint flags are refused in process (TrainFlags.EveryCombinationWorksOrIsRefused).
TEST(TrainCli, CheckpointFlagErrors) {
  TempDir tmp("flags");
  fs::path log = tmp.path / "log";
  std::string missing = (tmp.path / "nothing").string();
  EXPECT_EQ(run({"checkpoint", "inspect", missing}, log), 1);
  EXPECT_NE(slurp(log).find(missing + ": does not exist"), std::string::npos) << slurp(log);
}

// A plan's compute order (Plan::order, the planner's for the zero-bubble kinds) is the order
// trained, on threads too, where train would order its own on the unit clock: regnet's
// interleaved-zb planned at 10 Gbps ran another order there, a worker at 37.3 MiB planned at 33.8.
TEST(TrainCli, APlansComputeOrderIsTheOrderTrained) {
  TempDir tmp("order");
  std::string plan = (tmp.path / "p.json").string(), trace = (tmp.path / "t.json").string();
  // Every W after its worker's B's (the unit clock interleaves them): mnist-cnn's 5 layers in 4 chunks.
  const std::vector<std::string> order = {"0F0 0F1 2F0 2F1 2B0 0B0 2B1 0B1 2W0 2W1 0W0 0W1",
                                          "1F0 1F1 3F0 3B0 3F1 3B1 1B0 1B1 3W0 3W1 1W0 1W1"};
  std::ofstream(plan) << R"({"format": "pipetrain.plan/1", "workers": 4, "schedule": "interleaved-zb",
    "microbatches": 2, "chunks": 2, "order": [")" << order[0] << R"(", ")" << order[1] << R"("], "stages": [
    {"layers": [0], "replicas": 1}, {"layers": [1], "replicas": 1}, {"layers": [2], "replicas": 1},
    {"layers": [3, 4], "replicas": 1}]})";
  fs::path log = tmp.path / "log";
  ASSERT_EQ(run({"train", "--data", "synthetic", "--synthetic-samples", "256", "--batch-size", "32", "--steps", "2",
                 "--plan", plan, "--trace", trace, "--quiet"}, log), 0) << slurp(log);
  schedule::Trace t = schedule::read_trace(trace);
  ASSERT_EQ(t.workers.size(), 2u);
  for (size_t w = 0; w < 2; ++w) {
    std::string ran;
    size_t first = 12;  // the first minibatch's computes: 2 chunks x 2 microbatches x F, B, W
    for (const auto& e : t.workers[w])
      if (schedule::is_compute(e.action.kind) && first > 0)
        ran += (ran.empty() ? "" : " ") + schedule::to_string(e.action), --first;
    EXPECT_EQ(ran, order[w]) << "worker " << w;
  }
}

// A run of two epochs evaluates after each (Trace::pauses): its trace leaves the evaluations
// out of the steady state, on threads and over gloo (whose workers' traces are merged).
TEST(TrainCli, TheTracesSteadyStateLeavesOutTheEvaluations) {
  TempDir tmp("pauses");
  for (const char* transport : {"threads", "gloo"}) {
    std::string trace = (tmp.path / (std::string(transport) + ".trace.json")).string();
    fs::path log = tmp.path / "log";
    ASSERT_EQ(run({"train", "--data", "synthetic", "--synthetic-samples", "1024", "--epochs", "2", "--batch-size", "32",
                   "--stages", "2", "--schedule", "1f1b", "--microbatches", "2", "--transport", transport, "--quiet",
                   "--trace", trace}, log), 0) << slurp(log);
    schedule::Trace t = schedule::read_trace(trace);
    ASSERT_EQ(t.pauses.size(), 2u) << transport;  // one evaluation per epoch
    double last_end = 0;
    for (const auto& w : t.workers)
      for (const auto& e : w) last_end = std::max(last_end, e.end_ms);
    // No worker computes inside a pause.
    for (const auto& [start, end] : t.pauses) {
      EXPECT_LT(start, end) << transport;
      for (const auto& w : t.workers)
        for (const auto& e : w)
          if (schedule::is_compute(e.action.kind)) {
            EXPECT_TRUE(e.end_ms <= start || e.start_ms >= end) << transport;
          }
    }
    EXPECT_LT(t.pauses[0].second, last_end) << transport;  // the first epoch's, before the second trains
    // The training time printed is the trace's span less its pauses: each pause from the last
    // worker's stop to the first one's resume (job::TrainingClock). The reporter timed its own
    // pauses, and beside a busy process printed 454.9 ms where the trace spanned 456.7 less its
    // pauses. The span's ends: the first action's start, the last one's end.
    std::string out = slurp(log);
    size_t at = out.find("steps 64, ");
    ASSERT_NE(at, std::string::npos) << out;
    double first_start = last_end, paused = 0;
    for (const auto& w : t.workers)
      for (const auto& e : w) first_start = std::min(first_start, e.start_ms);
    for (const auto& [start, end] : t.pauses) paused += std::min(end, last_end) - std::min(start, last_end);
    EXPECT_NEAR(std::stod(out.substr(at + 10)) * 1000, last_end - first_start - paused, 1.0) << transport << "\n" << out;
    ASSERT_EQ(run({"trace", trace}, log), 0) << slurp(log);
    EXPECT_NE(slurp(log).find("of evaluations and checkpoints in the window left out"), std::string::npos) << slurp(log);
  }
}

// A measured 2bw trace over segments says whether its run predicted, and its weight copies are
// the runtime's (StageReplica::peak_weight_copies on this schedule): predicting, 3 on the stages
// but the last and 1 there; the paper's 2 on every stage. `trace` counted the paper's for both.
TEST(TrainCli, A2bwTracesWeightCopiesAreTheRunsOwn) {
  TempDir tmp("2bw-copies");
  for (bool predict : {true, false}) {
    std::string trace = (tmp.path / (predict ? "predicting.json" : "paper.json")).string();
    std::vector<std::string> args{"train", "--data", "synthetic", "--synthetic-samples", "1024", "--steps", "30",
                                  "--eval-every", "10", "--stages", "4", "--schedule", "2bw", "--quiet", "--trace", trace};
    if (!predict) args.push_back("--no-weight-prediction");
    ASSERT_EQ(run(args, tmp.path / "log"), 0) << slurp(tmp.path / "log");
    schedule::Trace t = schedule::read_trace(trace);
    EXPECT_EQ(t.predicted_weights, predict);
    metrics::Metrics m = metrics::compute_metrics(t);
    ASSERT_EQ(m.workers.size(), 4u);
    for (int w = 0; w < 4; ++w)
      EXPECT_EQ(m.workers[w].weight_versions, predict ? (w == 3 ? 1 : 3) : 2) << (predict ? "predicting" : "paper")
                                                                              << ", worker " << w;
  }
}

// An asynchronous run's all-reduces and steps are numbered over the run, not per segment: with an
// evaluation every 4 of 16 minibatches, the segments' collectives shared ids and `trace` counted
// 2.5 MiB all-reduced where a run without evaluations counted 10.0.
TEST(TrainCli, AnAsynchronousTracesCollectivesAreCountedOverEverySegment) {
  TempDir tmp("async_ids");
  std::string plan = (tmp.path / "plan.json").string();
  std::ofstream(plan) << R"({"format": "pipetrain.plan/1", "workers": 3, "stages": [{"layers": [0, 1, 2], "replicas": 2},
    {"layers": [3, 4], "replicas": 1}]})";
  std::vector<int64_t> bytes;
  for (const char* every : {"0", "4"}) {
    std::string trace = (tmp.path / (std::string(every) + ".json")).string();
    ASSERT_EQ(run({"train", "--data", "synthetic", "--synthetic-samples", "1024", "--steps", "16", "--eval-every", every,
                   "--plan", plan, "--schedule", "pipedream", "--quiet", "--trace", trace},
                  tmp.path / "log"),
              0)
        << slurp(tmp.path / "log");
    schedule::Trace t = schedule::read_trace(trace);
    bytes.push_back(metrics::compute_metrics(t).allreduce_bytes);
    for (const auto& list : t.workers) {
      std::set<std::pair<int, int>> steps;
      for (const auto& e : list)
        if (e.action.kind == schedule::ActionKind::kStep) {
          EXPECT_TRUE(steps.insert({e.action.stage, e.action.microbatch}).second)
              << "--eval-every " << every << ": " << schedule::to_string(e.action) << " twice";
        }
    }
  }
  EXPECT_GT(bytes[0], 0);
  EXPECT_EQ(bytes[1], bytes[0]);
}

// A cluster calibrated over threads, given to a gloo run: its process_bytes is a threads process's
// and was charged to every rank without a word (the modelled peak RSS 39% over the OS's, the
// hostile pass of 2026-12-01). The run says so; over the transport it was calibrated on, nothing.
// Nor is a peak RSS modelled from it: a threads run given a gloo-calibrated cluster printed 178.9
// MiB as the model where the OS counted 253.2.
TEST(TrainCli, AClusterCalibratedOverAnotherTransportIsNamed) {
  TempDir tmp("cluster-transport");
  fs::path cluster = tmp.path / "threads.json";
  std::ofstream(cluster) << R"({"format": "pipetrain.cluster/1", "process_bytes": 104857600,
      "levels": [{"fan_out": 2, "bandwidth_gbps": 10}], "calibration": {"transport": "threads"}})";
  const std::string note = " was calibrated over threads, this run is over gloo: its figures";
  fs::path profile = tmp.path / "profile.json";  // the modelled memory is printed with --profile
  ASSERT_EQ(run({"profile", "--model", "mnist-cnn", "--batch-size", "64", "-o", profile.string()}, tmp.path / "log"), 0)
      << slurp(tmp.path / "log");
  for (const std::string transport : {"gloo", "threads"}) {
    std::vector<std::string> args{"train", "--data", "synthetic", "--synthetic-samples", "256", "--steps", "2",
                                  "--stages", "2", "--schedule", "1f1b", "--quiet", "--transport", transport,
                                  "--cluster", cluster.string(), "--profile", profile.string()};
    ASSERT_EQ(run(args, tmp.path / "log"), 0) << slurp(tmp.path / "log");
    std::string out = slurp(tmp.path / "log");
    EXPECT_EQ(out.find(note) != std::string::npos, transport == "gloo") << transport << "\n" << out;
    const std::string unmodelled = "peak RSS (modelled): not modelled: " + cluster.string() +
                                   "'s process_bytes were measured of a threads run's process (every worker in it), "
                                   "this run's are a gloo worker's process";
    EXPECT_EQ(out.find(unmodelled) != std::string::npos, transport == "gloo") << transport << "\n" << out;
    // Over its own transport the model is printed: the process's figure, a worker's tensors and the data.
    EXPECT_EQ(out.find("peak RSS (modelled): ") != std::string::npos, true) << transport << "\n" << out;
    EXPECT_EQ(out.find("peak RSS per worker process (modelled)"), std::string::npos) << transport << "\n" << out;
    if (transport == "threads") {
      EXPECT_NE(out.find(" for this process (the tensors above, the data "), std::string::npos) << out;
    }
  }
  // An emulated run's model is a run of the real layers': the OS counted 328 MiB of an emulated
  // VGG-16's 597 modelled, printed as this process's peak RSS.
  ASSERT_EQ(run({"train", "--compute", "emulated", "--profile", profile.string(), "--steps", "2", "--stages", "2",
                 "--schedule", "1f1b", "--quiet", "--cluster", cluster.string()},
                tmp.path / "log"),
            0)
      << slurp(tmp.path / "log");
  std::string emulated = slurp(tmp.path / "log");
  EXPECT_NE(emulated.find(" as calibrate measured it; a run of the real layers': emulated ones write little of what "
                          "they allocate, and the OS counts less)"),
            std::string::npos)
      << emulated;
}

// A run's own trace reads back on a busy machine: a compute's start was stamped as the action's
// start plus its wait for input, so what ran before the wait, or a preemption there, put a stage's
// forward up to 0.03 ms before the forward it takes its input from ended, and `trace` refused 1 to 3
// of the traces of 4 to 6 runs at once as parts on different clocks (8 stages of 4 MiB weights on threads).
TEST(TrainCli, TracesOfRunsOnABusyMachineReadBack) {
  TempDir tmp("busy-traces");
  const fs::path profile = tmp.path / "balanced8.json";
  {
    std::ofstream out(profile);
    out << R"({"format": "pipetrain.profile/1", "model": "balanced8", "batch_size": 64, "device": "emulated", "layers": [)";
    for (int l = 0; l < 8; ++l)
      out << (l ? ", " : "") << R"({"name": "l)" << l << R"(", "forward_ms": 10, "backward_ms": 20, )"
          << R"("activation_bytes": 1048576, "parameter_bytes": 4194304})";
    out << "]}\n";
  }
  std::string runs;
  for (int k = 0; k < 6; ++k)
    runs += str(std::string(PT_BINARY_DIR), "/pipetrain train --compute emulated --profile ", profile.string(),
                " --byte-scale 1 --stages 8 --schedule pipedream --steps 100 --quiet --trace ",
                (tmp.path / str("t", k, ".json")).string(), " > ", (tmp.path / str("log", k)).string(), " 2>&1 & ");
  ASSERT_EQ(std::system((runs + "wait").c_str()), 0);
  for (int k = 0; k < 6; ++k) {
    ASSERT_NE(slurp(tmp.path / str("log", k)).find("steps 100"), std::string::npos) << slurp(tmp.path / str("log", k));
    const fs::path read = tmp.path / str("read", k);
    EXPECT_EQ(run({"trace", (tmp.path / str("t", k, ".json")).string()}, read), 0) << slurp(read);
  }
}

// `profile --compute emulated` measures the emulated profile's batch unless --batch-size says, as
// `train --compute emulated` trains it: at profile's 64 an awd-lm profile of batch 80 was measured
// at 0.8 of its times and bytes, a profile of another run than the one it was made to predict.
TEST(EmulatedProfile, TakesTheEmulatedProfilesBatch) {
  TempDir tmp("emulated-profile-batch");
  const fs::path source = tmp.path / "p32.json";
  std::ofstream(source) << R"({"format": "pipetrain.profile/1", "model": "small", "batch_size": 32, "device": "test",
    "layers": [{"name": "a", "forward_ms": 0.2, "backward_ms": 0.4, "activation_bytes": 65536, "parameter_bytes": 4096},
               {"name": "b", "forward_ms": 0.2, "backward_ms": 0.4, "activation_bytes": 65536, "parameter_bytes": 4096}]})";
  for (const auto& [given, batch] : std::vector<std::pair<std::string, std::string>>{{"", "32"}, {"16", "16"}}) {
    const fs::path out = tmp.path / ("out" + batch + ".json");
    std::vector<std::string> args = {"profile", "--compute", "emulated", "--profile", source.string(), "--repeats", "1",
                                     "--warmup", "0", "-o", out.string()};
    if (!given.empty()) args.insert(args.end(), {"--batch-size", given});
    ASSERT_EQ(run(args, tmp.path / "log"), 0) << slurp(tmp.path / "log");
    EXPECT_NE(slurp(out).find("\"batch_size\": " + batch + ","), std::string::npos) << given << "\n" << slurp(out);
  }
}

// A real run given --profile trains the profile's batch on every road unless --batch-size says
// otherwise: one worker and --workers N trained 64 where --stages N trained the profile's 32.
TEST(TrainCli, EveryRoadTakesTheProfilesBatch) {
  TempDir tmp("profile-batch");
  const fs::path profile = tmp.path / "p32.json", log = tmp.path / "log";
  ASSERT_EQ(run({"profile", "--model", "mnist-cnn", "--data", "synthetic", "--batch-size", "32", "--repeats", "1",
                 "--warmup", "0", "-o", profile.string()}, log), 0) << slurp(log);
  // A plan file that names no batch (written by hand) takes the profile's too.
  const fs::path plan = tmp.path / "plan.json";
  std::ofstream(plan) << R"({"format": "pipetrain.plan/1", "workers": 2, "stages": [{"layers": [0, 1], "replicas": 1},
                                                                              {"layers": [2, 3, 4], "replicas": 1}]})";
  for (const std::vector<std::string>& road : std::vector<std::vector<std::string>>{
           {}, {"--workers", "2"}, {"--stages", "2"}, {"--stages", "2", "--schedule", "gpipe"}, {"--plan", plan.string()},
           {"--batch-size", "16"}}) {
    std::vector<std::string> args = {"train", "--model", "mnist-cnn", "--data", "synthetic", "--profile",
                                     profile.string(), "--steps", "1", "--print-job"};
    args.insert(args.end(), road.begin(), road.end());
    ASSERT_EQ(run(args, log), 0) << slurp(log);
    const json job = json::parse(slurp(log).substr(slurp(log).find("{\n")));
    EXPECT_EQ(job["batch_size"], road.size() == 2 && road[0] == "--batch-size" ? 16 : 32)
        << args.back() << "\n" << slurp(log);
  }
  EXPECT_NE(slurp(log).find("was measured at batch 32; training with --batch-size 16, the prediction takes its times"),
            std::string::npos) << slurp(log);
}

// Samples past the last whole minibatch are left out of each epoch, and train says so: with
// --no-shuffle, which ones (they are never trained on); none left over, no note.
TEST(TrainCli, SamplesLeftOutOfEachEpochAreNamed) {
  TempDir tmp("left-out");
  fs::path log = tmp.path / "log";
  auto train = [&](const std::string& samples, std::vector<std::string> extra) {
    std::vector<std::string> args = {"train", "--data", "synthetic", "--synthetic-samples", samples, "--steps", "1",
                                     "--batch-size", "32", "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(run(args, log), 0) << slurp(log);
    return slurp(log);
  };
  std::string out = train("100", {"--no-shuffle"});
  EXPECT_NE(out.find("note: 100 training samples make 3 minibatches of 32 an epoch; 4 are left out of each epoch, the "
                     "same every time with --no-shuffle: samples 96-99 never trained on"),
            std::string::npos) << out;
  out = train("97", {"--stages", "2", "--schedule", "1f1b"});
  EXPECT_NE(out.find("97 training samples make 3 minibatches of 32 an epoch; 1 is left out of each epoch (different "
                     "ones each time: the order is shuffled)"),
            std::string::npos) << out;
  out = train("96", {});
  EXPECT_EQ(out.find("left out of each epoch"), std::string::npos) << out;
  // A plan's batch, which train takes where --batch-size is not given, is the one counted (it said
  // minibatches of 64, the default, where the plan's 16 ran).
  fs::path plan = tmp.path / "plan.json";
  std::ofstream(plan) << R"({"format": "pipetrain.plan/1", "workers": 2, "batch_size": 16, "schedule": "1f1b",
    "stages": [{"layers": [0, 1], "replicas": 1}, {"layers": [2, 3, 4], "replicas": 1}]})";
  EXPECT_EQ(run({"train", "--data", "synthetic", "--synthetic-samples", "100", "--steps", "1", "--quiet", "--plan",
                 plan.string()},
                log),
            0)
      << slurp(log);
  out = slurp(log);
  EXPECT_NE(out.find("note: 100 training samples make 6 minibatches of 16 an epoch; 4 are left out"), std::string::npos)
      << out;
}

// A plan made from a bf16 AdamW profile, trained in fp32 with SGD, says so as a --profile of them
// does: its times and memory are the profile's (it said nothing).
TEST(TrainCli, APlanOfAnotherPrecisionOrOptimizerIsNoted) {
  TempDir tmp("plan-precision");
  fs::path plan = tmp.path / "plan.json", log = tmp.path / "log";
  std::ofstream(plan) << R"({"format": "pipetrain.plan/1", "workers": 2, "batch_size": 16, "schedule": "1f1b",
    "precision": "bf16", "optimizer": "adamw",
    "stages": [{"layers": [0, 1], "replicas": 1}, {"layers": [2, 3, 4], "replicas": 1}]})";
  auto train = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"train", "--data", "synthetic", "--synthetic-samples", "64", "--steps", "1",
                                     "--quiet", "--plan", plan.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(run(args, log), 0) << slurp(log);
    return slurp(log);
  };
  std::string out = train({});
  EXPECT_NE(out.find("note: " + plan.string() + " was planned from a profile measured in bf16 and this run computes in "
                     "fp32"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("note: " + plan.string() + " was planned for adamw's step and state, and this run steps with sgd"),
            std::string::npos)
      << out;
  out = train({"--precision", "bf16", "--optimizer", "adamw"});
  EXPECT_EQ(out.find("was planned"), std::string::npos) << out;
}

// A plan file's microbatches that do not divide the batch are named as the file's field (the
// message named --microbatches and --batch-size, which the user had not given).
TEST(TrainCli, APlansMicrobatchesThatDoNotDivideItsBatchNameTheFile) {
  TempDir tmp("plan-microbatches");
  fs::path plan = tmp.path / "plan.json", log = tmp.path / "log";
  std::ofstream(plan) << R"({"format": "pipetrain.plan/1", "workers": 2, "batch_size": 128, "schedule": "1f1b",
    "microbatches": 3, "stages": [{"layers": [0, 1], "replicas": 1}, {"layers": [2, 3, 4], "replicas": 1}]})";
  auto train = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"train", "--data", "synthetic", "--synthetic-samples", "512", "--steps", "1",
                                     "--quiet", "--plan", plan.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    int rc = run(args, log);
    return std::make_pair(rc, slurp(log));
  };
  auto [rc, out] = train({});
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("3 microbatches (" + plan.string() + "'s field 'microbatches') do not divide the batch of 128 (" +
                     plan.string() + "'s field 'batch_size')"),
            std::string::npos)
      << out;
  std::tie(rc, out) = train({"--batch-size", "64"});
  EXPECT_NE(out.find("'s field 'microbatches') do not divide the batch of 64 (--batch-size)"), std::string::npos) << out;
  // The file's batch, larger than the data: it named --batch-size, which was not given.
  rc = run({"train", "--data", "synthetic", "--synthetic-samples", "100", "--steps", "1", "--quiet", "--plan",
            plan.string()},
           log);
  out = slurp(log);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(plan.string() + R"(: field 'batch_size': 128 is larger than the \d+ )"
                                                                R"(training samples of synthetic; give --batch-size)")))
      << out;
  std::tie(rc, out) = train({"--microbatches", "3"});
  EXPECT_NE(out.find("3 microbatches (--microbatches) do not divide the batch of 128 (" + plan.string() +
                     "'s field 'batch_size')"),
            std::string::npos)
      << out;
  // Both from the flags: the flags' own message, a usage error.
  std::tie(rc, out) = train({"--microbatches", "3", "--batch-size", "64"});
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--microbatches: 3 does not divide --batch-size 64"), std::string::npos) << out;
  // The default count, which the user did not give, is named as the default, with what divides.
  rc = run({"train", "--data", "synthetic", "--synthetic-samples", "64", "--steps", "1", "--quiet", "--stages", "2",
            "--schedule", "1f1b", "--batch-size", "10"},
           log);
  out = slurp(log);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("4 microbatches (--microbatches's default) do not divide the batch of 10 (--batch-size); give "
                     "--microbatches one of its divisors: 1, 2, 5, 10"),
            std::string::npos)
      << out;
  // pipedream (the default here) runs each minibatch whole: the count it never uses was refused.
  rc = run({"train", "--data", "synthetic", "--synthetic-samples", "64", "--steps", "1", "--quiet", "--stages", "2",
            "--batch-size", "10"},
           log);
  out = slurp(log);
  EXPECT_EQ(rc, 0) << out;
  // A split made here, with no plan file: the batch is --batch-size's default (it named "the
  // plan's field 'batch_size'", a file the user had not given).
  rc = run({"train", "--data", "synthetic", "--synthetic-samples", "64", "--steps", "1", "--quiet", "--stages", "2",
            "--schedule", "gpipe", "--microbatches", "5"},
           log);
  out = slurp(log);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("5 microbatches (--microbatches) do not divide the batch of 64 (--batch-size's default)"),
            std::string::npos)
      << out;
}

// A profile of another size is refused by each worker that builds a layer it misrecords, over
// threads and gloo, naming the file, the layer and both figures: mlp --width 2's profile trained
// --width 1 with the memory modelled at 113 MiB of tensors where the run held 29, exit 0.
TEST(TrainCli, AProfileOfAnotherSizeIsRefused) {
  TempDir tmp("other-size");
  fs::path wide = tmp.path / "wide.json", profile = tmp.path / "profile.json", log = tmp.path / "log";
  ASSERT_EQ(run({"profile", "--model", "mlp", "--width", "2", "--depth", "2", "--batch-size", "8", "-o", wide.string()},
                log),
            0)
      << slurp(log);
  // Its inputs are twice the run's: named by them, before any worker starts.
  int wide_rc = run({"train", "--model", "mlp", "--width", "1", "--depth", "2", "--data", "synthetic", "--batch-size", "8",
                     "--stages", "2", "--schedule", "1f1b", "--steps", "2", "--quiet", "--profile", wide.string()},
                    log);
  EXPECT_EQ(wide_rc, 1) << slurp(log);
  EXPECT_NE(slurp(log).find("--profile " + wide.string() + ": measured on inputs of 65536 bytes a batch of 8 (field "
                            "'input_bytes'), where synthetic gives 4096 bytes a sample"),
            std::string::npos)
      << slurp(log);
  // The run's own inputs but a layer of other weights: named by the layer, on each transport.
  ASSERT_EQ(run({"profile", "--model", "mlp", "--width", "1", "--depth", "2", "--batch-size", "8", "-o", profile.string()},
                log),
            0)
      << slurp(log);
  json edited = parse_json(slurp(profile), "profile");
  edited["layers"][1]["parameter_bytes"] = edited["layers"][1]["parameter_bytes"].get<int64_t>() + 4;
  std::ofstream(profile) << edited.dump();
  for (const char* transport : {"threads", "gloo"}) {
    int rc = run({"train", "--model", "mlp", "--width", "1", "--depth", "2", "--data", "synthetic", "--batch-size", "8",
                  "--stages", "2", "--schedule", "1f1b", "--steps", "2", "--quiet", "--profile", profile.string(),
                  "--transport", transport},
                 log);
    std::string out = slurp(log);
    EXPECT_EQ(rc, 1) << transport << "\n" << out;
    EXPECT_NE(out.find("--profile " + profile.string() + ": layer "), std::string::npos) << transport << "\n" << out;
    EXPECT_NE(out.find("field 'parameter_bytes' is "), std::string::npos) << transport << "\n" << out;
    EXPECT_NE(out.find("but the model built, mlp, holds "), std::string::npos) << transport << "\n" << out;
  }
}

// A plan made under a memory cap (its memory_cap_bytes) warns where a worker's measured peak is
// over it (a worker measured 236.9 MiB under a 230 MiB plan without a word), and only there.
TEST(TrainCli, AWorkerOverThePlansMemoryCapIsNamed) {
  TempDir tmp("plan-memory-cap");
  fs::path log = tmp.path / "log";
  auto train = [&](int64_t cap, int64_t process = 0, const char* transport = "threads") {
    fs::path plan = tmp.path / str("plan-", cap, "-", process, ".json");
    std::ofstream(plan) << R"({"format": "pipetrain.plan/1", "workers": 2, "schedule": "1f1b", "memory_cap_bytes": )"
                        << cap << R"(, "memory_cap_process_bytes": )" << process
                        << R"(, "stages": [{"layers": [0, 1], "replicas": 1}, {"layers": [2, 3, 4], "replicas": 1}]})";
    int rc = run({"train", "--data", "synthetic", "--synthetic-samples", "256", "--steps", "2", "--quiet", "--plan",
                  plan.string(), "--transport", transport},
                 log);
    return std::make_pair(rc, slurp(log));
  };
  auto [rc, out] = train(4096);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("was planned to fit 4.0 KiB a worker (its field 'memory_cap_bytes', its tensors'), and measured, "
                     "over it: w0's tensors "),
            std::string::npos)
      << out;
  EXPECT_NE(out.find(", w1's tensors "), std::string::npos) << out;
  std::tie(rc, out) = train(int64_t{1} << 40);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("memory_cap_bytes"), std::string::npos) << out;
  // A cap that set some aside for the process holds a gloo worker's own process to it whole: the
  // tensors (a few MiB) fit their 59 MiB, a process of LibTorch does not fit 60.
  std::tie(rc, out) = train(60 << 20, 1 << 20, "gloo");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("(its field 'memory_cap_bytes', of which its tensors 59.0 MiB, the process the rest), and "
                     "measured, over it: w0's process "),
            std::string::npos)
      << out;
  // Less the shared memory of its transfers too, which the cap leaves out as calibrate does; the
  // measured line says how much it was.
  EXPECT_NE(out.find("(a process: its peak RSS less the data's "), std::string::npos) << out;
  EXPECT_NE(out.find(" and its transfers' shared memory)"), std::string::npos) << out;
  EXPECT_NE(out.find("; of it, the shared memory their transfers mapped: w0 "), std::string::npos) << out;
  EXPECT_EQ(out.find("w0's tensors"), std::string::npos) << out;
}

// A checkpoint resumed under other optimizer settings says which, with both values: a cosine
// schedule laid over more steps, another learning rate, Adam's betas and eps, the clipping cap.
// The same settings say nothing, and so do a schedule's others whose rates the steps trained took
// alike (all inside a warm-up both share: it said the result differs where every weight was an
// uninterrupted run's).
TEST(TrainCli, ResumingUnderOtherOptimizerSettingsIsNamed) {
  TempDir tmp("resume-settings");
  fs::path log = tmp.path / "log";
  auto train = [&](const std::string& dir, std::vector<std::string> extra) {
    std::vector<std::string> args = {"train", "--data", "synthetic", "--synthetic-samples", "256", "--batch-size", "32",
                                     "--stages", "2", "--schedule", "1f1b", "--quiet", "--checkpoint-dir",
                                     (tmp.path / dir).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(run(args, log), 0) << slurp(log);
    return slurp(log);
  };
  train("warm", {"--steps", "3", "--lr-schedule", "cosine", "--warmup-steps", "6"});
  std::string out = train("warm", {"--steps", "9", "--lr-schedule", "cosine", "--warmup-steps", "6", "--resume"});
  EXPECT_EQ(out.find("other optimizer settings"), std::string::npos) << out;
  train("cosine", {"--steps", "4", "--lr-schedule", "cosine"});
  out = train("cosine", {"--steps", "8", "--lr-schedule", "cosine", "--lr", "0.05", "--resume"});
  EXPECT_NE(out.find("was trained with other optimizer settings (lr 0.02 -> 0.05; lr schedule cosine over 4 steps -> "
                     "cosine over 8 steps): steps 5 on follow this run's"),
            std::string::npos) << out;
  // Adam's betas and eps, the clipping cap and --zero-grad too (a resume took new ones without a
  // word: another --zero-grad moved a top-1 mixture of experts' weights 7.2e-3 off an uninterrupted run's).
  train("adam", {"--steps", "4", "--optimizer", "adam", "--lr", "0.001", "--betas", "0.9,0.95", "--clip-grad-norm", "0.5",
                 "--zero-grad", "zeros"});
  out = train("adam", {"--steps", "8", "--optimizer", "adam", "--lr", "0.001", "--betas", "0.5,0.6", "--eps", "0.001",
                       "--clip-grad-norm", "50", "--resume"});
  EXPECT_NE(out.find("other optimizer settings (--zero-grad zeros -> none; betas 0.9,0.95 -> 0.5,0.6; eps 1e-08 -> "
                     "0.001; clip grad norm 0.5 -> 50)"),
            std::string::npos) << out;
  // The metrics file of a resumed run keeps the earlier run's rows (a resume wrote its own over
  // them), up to the checkpoint: a row past it, as a killed run leaves, is trained again.
  fs::path metrics = tmp.path / "m.csv";
  train("constant", {"--steps", "4", "--metrics", metrics.string()});
  { std::ofstream(metrics, std::ios::app) << "5,1,9.9,1.0,,99.0,,,\n"; }
  out = train("constant", {"--steps", "8", "--resume", "--metrics", metrics.string()});
  EXPECT_NE(out.find("resuming from"), std::string::npos) << out;
  EXPECT_EQ(out.find("other optimizer settings"), std::string::npos) << out;
  std::ifstream in(metrics);
  std::vector<std::string> steps;
  double train_s = 0;
  bool grows = true;
  for (std::string line; std::getline(in, line);) {
    steps.push_back(line.substr(0, line.find(',')));
    if (steps.size() == 1) continue;
    std::stringstream row(line);
    std::string field;
    for (int k = 0; k < 6; ++k) std::getline(row, field, ',');
    grows &= std::stod(field) >= train_s;
    train_s = std::stod(field);
  }
  EXPECT_EQ(steps, (std::vector<std::string>{"step", "1", "2", "3", "4", "5", "6", "7", "8"})) << slurp(metrics);
  EXPECT_TRUE(grows) << "train_s goes on from the kept rows: " << slurp(metrics);
  EXPECT_EQ(slurp(metrics).find(",9.9,"), std::string::npos) << slurp(metrics);  // the planted loss
  // A killed run's rows are in the partial file, never moved into place: a resume keeps those,
  // not the file's, which may be another run's (it kept another run's and deleted the killed one's).
  fs::path killed = tmp.path / "k.csv";
  train("killed", {"--steps", "4", "--metrics", killed.string()});
  fs::rename(killed, killed.string() + ".partial");
  {
    std::ofstream other(killed);
    other << "step,epoch,loss,samples_per_s,test_accuracy,train_s,peak_memory_bytes,test_loss,grad_norm,lr\n";
    for (int step = 1; step <= 8; ++step) other << step << ",1,7.7,1.0,,0.1,,,,0.02\n";
  }
  train("killed", {"--steps", "8", "--resume", "--metrics", killed.string()});
  std::string kept = slurp(killed);
  EXPECT_EQ(kept.find(",7.7,"), std::string::npos) << kept;  // the other run's loss
  EXPECT_EQ(std::count(kept.begin(), kept.end(), '\n'), 9) << kept;
  EXPECT_FALSE(fs::exists(killed.string() + ".partial"));
  // Another run's file, whose step 1 lost what the checkpoint's run did not: its rows were joined
  // to this run's, exit 0. Refused before a row is written.
  fs::path other = tmp.path / "o.csv";
  train("seed9", {"--steps", "4", "--seed", "9", "--metrics", other.string()});
  train("own", {"--steps", "4"});
  const std::string before = slurp(other);
  EXPECT_EQ(run({"train", "--data", "synthetic", "--synthetic-samples", "256", "--batch-size", "32", "--stages", "2",
                 "--schedule", "1f1b", "--quiet", "--checkpoint-dir", (tmp.path / "own").string(), "--steps", "8",
                 "--resume", "--metrics", other.string()},
                log),
            1);
  EXPECT_NE(slurp(log).find("--metrics " + other.string() + ": line 2, field 'loss' is '"), std::string::npos) << slurp(log);
  EXPECT_NE(slurp(log).find(": these rows are another run's"), std::string::npos) << slurp(log);
  EXPECT_EQ(slurp(other), before);
  // A checkpoint that records no first loss (an older pipetrain's): the resume's checkpoints keep
  // none either, not its own first step's (step 5's), by which a second resume refused the run's
  // own rows as another run's.
  fs::path old_rows = tmp.path / "old.csv";
  train("old", {"--steps", "4", "--metrics", old_rows.string()});
  std::string manifest = (fs::path(newest_checkpoint((tmp.path / "old").string())) / "manifest.json").string();
  json doc = parse_json(slurp(manifest), manifest);
  doc.erase("first_loss");
  write_text_file_atomic(manifest, doc.dump(2));
  train("old", {"--steps", "8", "--resume", "--metrics", old_rows.string()});
  train("old", {"--steps", "12", "--resume", "--metrics", old_rows.string()});
  const std::string rows = slurp(old_rows);
  EXPECT_EQ(std::count(rows.begin(), rows.end(), '\n'), 13) << rows;
}

// One worker with no runtime feature asked for runs the one-stage pipeline too (job::choose_road),
// so its report holds what every pipeline's does: the worker's measured tensors.
TEST(TrainCli, OneWorkerRunsOnTheRuntimeEveryScheduleRunsOn) {
  TempDir tmp("one_worker");
  fs::path log = tmp.path / "log";
  ASSERT_EQ(run({"train", "--data", "synthetic", "--synthetic-samples", "256", "--steps", "4", "--batch-size", "32",
                 "--quiet"}, log), 0) << slurp(log);
  std::string out = slurp(log);
  EXPECT_NE(out.find("test samples, 1 worker\n"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(peak tensor memory per worker \(measured[^\n]*: w0 [0-9.]+ MiB\n)")))
      << out;
}

// A checkpoint keeps the run's first loss, and a resume judges divergence by it; a checkpoint is
// not written once the loss has diverged (on threads, and on gloo, where the reporting worker is
// not worker 0, which writes the manifest). A run refused as diverged kept the checkpoints it
// wrote on the way up, and a resume from them, judged by its own first loss, exited 0 at 2.8e31.
TEST(TrainCli, ACheckpointKeepsTheRunsFirstLossAndNoneIsWrittenOnceItDiverged) {
  for (std::string transport : {"threads", "gloo"}) {
    TempDir tmp("diverged_" + transport);
    std::string dir = (tmp.path / "ck").string(), metrics = (tmp.path / "m.csv").string();
    fs::path log = tmp.path / "log";
    auto train = [&](const std::string& steps, std::vector<std::string> extra) {
      std::vector<std::string> args{"train", "--data", "synthetic", "--synthetic-samples", "256", "--batch-size", "16",
                                    "--stages", "2", "--schedule", "1f1b", "--microbatches", "2", "--transport",
                                    transport, "--steps", steps, "--checkpoint-dir", dir, "--checkpoint-every", "2",
                                    "--quiet", "--timeout", "20"};
      args.insert(args.end(), extra.begin(), extra.end());
      return run(args, log);
    };
    ASSERT_EQ(train("4", {"--metrics", metrics}), 0) << slurp(log);
    std::string manifest = (fs::path(newest_checkpoint(dir)) / "manifest.json").string();
    json doc = parse_json(slurp(manifest), manifest);
    std::string rows = slurp(metrics);
    size_t row1 = rows.find("\n1,");
    ASSERT_NE(row1, std::string::npos) << rows;
    double first = std::stod(rows.substr(rows.find(',', rows.find(',', row1 + 1) + 1) + 1));
    ASSERT_TRUE(doc.contains("first_loss")) << slurp(manifest);
    EXPECT_NEAR(doc["first_loss"].get<double>(), first, 1e-5 * first) << transport;
    ASSERT_EQ(run({"checkpoint", "inspect", dir}, log), 0) << slurp(log);
    EXPECT_NE(slurp(log).find("the run's first step's loss 2."), std::string::npos) << slurp(log);
    // As if the run had begun far lower: the resumed losses, near 2.3, are a divergence from it.
    // The checkpoints at steps 6 and 8 are not written (over fewer steps than a whole window a
    // spike the run comes back from looks the same: it goes on), and the run fails at its end;
    // step 4's stays the newest.
    doc["first_loss"] = 0.01;
    write_text_file_atomic(manifest, doc.dump(2));
    EXPECT_EQ(train("8", {"--resume"}), 1) << slurp(log);
    std::string out = slurp(log);
    EXPECT_NE(out.find("note: no checkpoint written at step 6: the loss rose from 0.01 (the first step's) to 2."),
              std::string::npos) << transport << ": " << out;
    EXPECT_NE(out.find("training diverged: the loss rose from 0.01 (the first step's) to 2."), std::string::npos)
        << transport << ": " << out;
    EXPECT_EQ(fs::path(newest_checkpoint(dir)).filename().string(), checkpoint_dir_name(4)) << transport;
  }
}

// A spike the run comes back from (Adam at 0.2: 3,932 in the median of steps 1-3, 2.4 over the
// last 30) passes without checkpoints, with a note. With one every 3 steps it was failed at step 3
// as diverged: a checkpoint judged over fewer steps than a whole window skips itself and the run
// goes on, its end judging it.
TEST(TrainCli, ASpikeInsideACheckpointsWindowSkipsItNotTheRun) {
  TempDir tmp("spike");
  fs::path log = tmp.path / "log";
  std::string dir = (tmp.path / "ck").string();
  ASSERT_EQ(run({"train", "--data", "synthetic", "--synthetic-samples", "512", "--batch-size", "16", "--optimizer",
                 "adam", "--lr", "0.2", "--steps", "30", "--checkpoint-dir", dir, "--checkpoint-every", "3", "--quiet"},
                log),
            0)
      << slurp(log);
  std::string out = slurp(log);
  EXPECT_NE(out.find("note: no checkpoint written at step 3: the loss rose from "), std::string::npos) << out;
  EXPECT_NE(out.find("note: the loss spiked"), std::string::npos) << out;
  EXPECT_EQ(fs::path(newest_checkpoint(dir)).filename().string(), checkpoint_dir_name(30)) << out;
}

// A loss that turns NaN stops the run at that step (mnist-cnn at --lr 1e6 went NaN at step 3
// and trained its 3,000 steps on, to fail at the end), on one worker and on a pipeline of
// threads or gloo processes, said as the run's error (not as a worker's action); the rows up
// to it are kept.
TEST(TrainCli, ANonFiniteLossStopsTheRunAtOnce) {
  for (std::vector<std::string> extra : std::vector<std::vector<std::string>>{
           {}, {"--stages", "2", "--schedule", "pipedream"}, {"--stages", "2", "--schedule", "1f1b", "--transport", "gloo"}}) {
    SCOPED_TRACE(extra.size());
    TempDir tmp("nan_loss");
    fs::path log = tmp.path / "log", metrics = tmp.path / "m.csv";
    std::vector<std::string> args{"train", "--data", "synthetic", "--lr", "1e6", "--steps", "3000", "--quiet",
                                  "--metrics", metrics.string(), "--timeout", "20"};
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(run(args, log), 1) << slurp(log);
    std::string out = slurp(log);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, std::regex(R"((pipetrain train: error: |pipetrain )training diverged: )"
                                                     R"(the loss is -?(nan|inf) at step (\d+) .*the run stopped there)")))
        << out;
    EXPECT_LT(std::stoi(m[3]), 20) << out;
    EXPECT_EQ(out.find(" at training (between"), std::string::npos) << out;
    std::string rows = slurp(metrics.string() + ".partial");
    EXPECT_EQ(std::count(rows.begin(), rows.end(), '\n'), std::stoi(m[3]) + 1) << rows;  // the header, each step's
  }
}

// A gloo job that fails leaves no interrupted save's folder: a worker 0 stopped by a signal (the
// launcher's, after another failed) never unwound to remove its .tmp-step-<N>, which held its
// layer files until the next save. The launcher removes pipetrain's files there once the workers
// are gone; a file of anyone else's stays, and so does its folder.
TEST(TrainCli, AFailedGlooJobLeavesNoInterruptedSave) {
  TempDir tmp("interrupted_save");
  fs::path log = tmp.path / "log", dir = tmp.path / "ck";
  fs::create_directories(dir / ".tmp-step-00000099");
  fs::create_directories(dir / ".tmp-step-00000098");
  std::ofstream(dir / ".tmp-step-00000099" / "layer-0.tensors") << "x";
  std::ofstream(dir / ".tmp-step-00000099" / "layer-1.tensors.tmp.123") << "y";
  std::ofstream(dir / ".tmp-step-00000098" / "layer-0.tensors") << "x";
  std::ofstream(dir / ".tmp-step-00000098" / "notes.txt") << "mine";
  // A complete checkpoint a failed rename left, which the run told the user to move: kept.
  fs::create_directories(dir / ".tmp-step-00000097");
  std::ofstream(dir / ".tmp-step-00000097" / "layer-0.tensors") << "x";
  std::ofstream(dir / ".tmp-step-00000097" / "manifest.json") << "{}";
  EXPECT_EQ(run({"train", "--data", "synthetic", "--lr", "1e6", "--steps", "3000", "--quiet", "--stages", "2",
                 "--schedule", "1f1b", "--transport", "gloo", "--checkpoint-dir", dir.string(), "--checkpoint-every",
                 "1000", "--timeout", "20"},
                log),
            1)
      << slurp(log);
  EXPECT_FALSE(fs::exists(dir / ".tmp-step-00000099")) << slurp(log);
  EXPECT_FALSE(fs::exists(dir / ".tmp-step-00000098" / "layer-0.tensors"));
  EXPECT_TRUE(fs::exists(dir / ".tmp-step-00000098" / "notes.txt"));
  EXPECT_TRUE(fs::exists(dir / ".tmp-step-00000097" / "layer-0.tensors"));
}

// A gloo run that fails in its report (a loss that diverged), after every worker wrote its part
// of --trace, keeps the trace merged, as a threads run keeps it: the parts were left unmerged and
// unnamed.
TEST(TrainCli, AGlooRunThatDivergesKeepsItsTrace) {
  TempDir tmp("diverged_trace");
  fs::path log = tmp.path / "log", trace = tmp.path / "t.json";
  EXPECT_EQ(run({"train", "--model", "mnist-cnn", "--stages", "2", "--schedule", "1f1b", "--steps", "60", "--optimizer",
                 "adam", "--lr", "5", "--transport", "gloo", "--trace", trace.string(), "--quiet"},
                log),
            1)
      << slurp(log);
  EXPECT_NE(slurp(log).find("diverged"), std::string::npos) << slurp(log);
  EXPECT_TRUE(fs::exists(trace)) << slurp(log);
  EXPECT_FALSE(fs::exists(trace.string() + ".worker0")) << slurp(log);
}

// Worker 0 evaluates the test set alone while a data-parallel replica waits for it: that wait is
// not held to --timeout. A healthy job failed after training, worker 1 "did not arrive within
// 30 s" while worker 0 evaluated a language model's test set for 45 s. Here each evaluation of
// Fashion-MNIST's 10,000 test samples takes longer than --timeout 0.5 s here, on threads and gloo
// (each training step's waits take milliseconds).
TEST(TrainCli, AnEvaluationLongerThanTheTimeoutDoesNotFailTheJob) {
  TempDir tmp("long_evaluation");
  for (std::string transport : {"threads", "gloo"}) {
    fs::path log = tmp.path / (transport + ".log");
    EXPECT_EQ(run({"train", "--model", "mnist-cnn", "--schedule", "dp", "--workers", "2", "--steps", "2", "--eval-every",
                   "1", "--timeout", "0.5", "--transport", transport, "--quiet"},
                  log),
              0)
        << transport << "\n" << slurp(log);
    EXPECT_NE(slurp(log).find("test accuracy"), std::string::npos) << transport << "\n" << slurp(log);
  }
}

TEST(TrainCli, SingleWorkerCheckpointsAndInspectVerifies) {
  TempDir tmp("inspect");
  std::string dir = (tmp.path / "ck").string();
  fs::path log = tmp.path / "log";
  ASSERT_EQ(run({"train", "--data", "synthetic", "--synthetic-samples", "512", "--steps", "4", "--batch-size", "32",
                 "--checkpoint-dir", dir, "--checkpoint-every", "2", "--quiet"}, log), 0) << slurp(log);
  ASSERT_EQ(run({"checkpoint", "inspect", dir}, log), 0) << slurp(log);
  std::string out = slurp(log);
  EXPECT_NE(out.find("model mnist-cnn"), std::string::npos) << out;
  EXPECT_NE(out.find("step 4"), std::string::npos) << out;
  EXPECT_NE(out.find("files verified"), std::string::npos) << out;
  // A flipped byte is caught and named.
  std::string layer = (fs::path(newest_checkpoint(dir)) / "layer-0.tensors").string();
  std::string bytes = read_text_file(layer);
  bytes[bytes.size() / 2] ^= 0x11;
  write_text_file_atomic(layer, bytes);
  EXPECT_EQ(run({"checkpoint", "inspect", dir}, log), 1);
  EXPECT_NE(slurp(log).find(layer + ": checksum"), std::string::npos) << slurp(log);
}

}  // namespace
}  // namespace pt::runtime

namespace pt::runtime {
namespace {

// train follows a plan's deferred_step unless --deferred-step / --no-deferred-step say
// otherwise: the replicated first stage's AllReduce comes after the next forward, or before it.
// train --schedule-file: a CSV that runs a backward before its forward stops with the
// validator's error naming the file, the worker and the step, before any worker starts (no
// hang); a sound one trains, at its own microbatches.
TEST(TrainCli, ScheduleFileIsValidatedBeforeItRuns) {
  TempDir tmp("schedule_file");
  fs::path good = tmp.path / "good.csv", broken = tmp.path / "broken.csv", log = tmp.path / "log";
  std::ofstream(good) << "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n";
  std::ofstream(broken) << "0B0,0F0,0F1,0B1\n1F0,1B0,1F1,1B1\n";
  for (const char* transport : {"threads", "gloo"}) {
    SCOPED_TRACE(transport);
    EXPECT_EQ(run({"train", "--model", "mnist-cnn", "--data", "synthetic", "--stages", "2", "--schedule-file",
                   broken.string(), "--steps", "4", "--transport", transport},
                  log),
              1);
    EXPECT_NE(slurp(log).find(broken.string() + ": file schedule is invalid: worker 0, step 0, action 0B0: runs before 0F0 on its worker"),
              std::string::npos)
        << slurp(log);
    EXPECT_EQ(run({"train", "--model", "mnist-cnn", "--data", "synthetic", "--stages", "2", "--schedule-file",
                   good.string(), "--steps", "4", "--transport", transport},
                  log),
              0)
        << slurp(log);
    // The split is measured here: stage 0 holds layer 0 and maybe more.
    EXPECT_NE(slurp(log).find("with file, plan 1-1 (2 workers, 2 stages: layers 0"), std::string::npos) << slurp(log);
    EXPECT_NE(slurp(log).find("), 2 microbatches"), std::string::npos) << slurp(log);
  }
  // The file runs its own 2 microbatches: --microbatches 4 was quietly ignored.
  EXPECT_EQ(run({"train", "--model", "mnist-cnn", "--data", "synthetic", "--stages", "2", "--schedule-file",
                 good.string(), "--steps", "4", "--microbatches", "4"},
                log),
            2);
  EXPECT_NE(slurp(log).find("--microbatches 4: --schedule-file " + good.string() +
                            " runs 2 microbatches per minibatch (its own); leave --microbatches out or give 2"),
            std::string::npos)
      << slurp(log);
  // A file of two minibatches ran the data's 0,1,1,2,2,... with two steps each: 12 steps of a 6-step
  // run, exit 0. Refused, naming the field.
  fs::path two = tmp.path / "two.json";
  std::ofstream(two) << R"({"format": "pipetrain.schedule/1", "kind": "1f1b", "flush": true, "chunks": 1,
      "microbatches": 2, "minibatches": 2, "weight_delay": 0, "vertical_sync": false, "stages": [
      {"layers": [0, 1], "workers": [0], "weight_versions": 1, "split_backward": false},
      {"layers": [2, 3, 4], "workers": [1], "weight_versions": 1, "split_backward": false}], "workers": [
      ["0F0", "0SA0>1", "0F1", "0SA1>1", "0RG0<1", "0B0", "0RG1<1", "0B1", "0ST0",
       "0F2", "0SA2>1", "0F3", "0SA3>1", "0RG2<1", "0B2", "0RG3<1", "0B3", "0ST1"],
      ["1RA0<0", "1F0", "1RA1<0", "1B0", "1SG0>0", "1F1", "1B1", "1SG1>0", "1ST0",
       "1RA2<0", "1F2", "1RA3<0", "1B2", "1SG2>0", "1F3", "1B3", "1SG3>0", "1ST1"]]})";
  EXPECT_EQ(run({"train", "--model", "mnist-cnn", "--data", "synthetic", "--schedule-file", two.string(), "--steps",
                 "6"},
                log),
            2)
      << slurp(log);
  EXPECT_NE(slurp(log).find("--schedule-file " + two.string() + ": minibatches is 2; train runs a synchronous file's "
                            "one minibatch again for each minibatch of the run"),
            std::string::npos)
      << slurp(log);
}

TEST(TrainCli, DeferredStepFollowsThePlanUnlessTheFlagsSay) {
  TempDir tmp("deferred");
  fs::path plan = tmp.path / "plan.json", log = tmp.path / "log";
  std::ofstream(plan) << R"({"format": "pipetrain.plan/1", "workers": 4, "deferred_step": true, "stages": [
      {"layers": [0, 1], "replicas": 3}, {"layers": [2, 3, 4], "replicas": 1}]})";
  // Worker 0's first actions, as its trace recorded them.
  auto first_actions = [&](const std::vector<std::string>& extra) {
    fs::path trace = tmp.path / "trace.json";
    std::vector<std::string> args = {"train", "--model", "mnist-cnn", "--data", "synthetic", "--plan", plan.string(),
                                     "--steps", "12", "--trace", trace.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(run(args, log), 0) << slurp(log);
    std::string out;
    json doc = parse_json(slurp(trace), "trace");
    const json& w0 = doc["workers"][0];
    for (size_t i = 0; i < 12 && i < w0.size(); ++i) out += w0[i]["action"].get<std::string>() + " ";
    return out;
  };
  EXPECT_NE(first_actions({}).find("0B0 0F6 0SA6>3 0RG3<3 0AR0 0ST0"), std::string::npos);
  // The launcher starts the schedule's workers, which it counts with the asynchronous schedule's
  // own minibatches (one would not be a whole round of stage 0's 3 replicas).
  EXPECT_EQ(run({"train", "--model", "mnist-cnn", "--data", "synthetic", "--plan", plan.string(), "--steps", "6",
                 "--transport", "gloo"},
                log),
            0)
      << slurp(log);
  EXPECT_NE(first_actions({"--no-deferred-step"}).find("0B0 0AR0 0RG3<3 0ST0 0F6"), std::string::npos);
  // --deferred-step under 1f1b is refused in process (TrainFlags.EveryCombinationWorksOrIsRefused).
}


// With --profile, train prints the simulator's figure for the run it made (the schedule and
// microbatches it ran, threads handing tensors over in memory, the machine's cores), and never
// above what the cores can compute.
// A run that misses its simulation by more than 10% is told where the time went: a profile whose
// every time is 32x what the layers take (as one timed in a slow spell of the machine would read)
// makes the simulation 32x slow, and the note puts the gap in the pace-setting worker's computes.
// (At 4x, a gloo run beside another test's on 2 cores read 1.85; 8x left a ratio over 2 to a run
// no more than 4x slower than its profile.)
TEST(TrainCli, AMissedPredictionSaysWhereItsTimeWent) {
  TempDir tmp("missed");
  fs::path profile = tmp.path / "profile.json", slow = tmp.path / "slow.json", log = tmp.path / "log";
  ASSERT_EQ(run({"profile", "--model", "mnist-cnn", "--batch-size", "64", "-o", profile.string()}, log), 0) << slurp(log);
  json p = parse_json(slurp(profile), "profile");
  std::function<void(json&)> slower = [&](json& j) {
    if (j.is_array())
      for (auto& e : j) slower(e);
    if (!j.is_object()) return;
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& key = it.key();
      if (it->is_number() && key.size() > 3 && key.compare(key.size() - 3, 3, "_ms") == 0) *it = 32 * it->get<double>();
      else slower(*it);
    }
  };
  slower(p["layers"]);
  std::ofstream(slow) << p.dump();
  // A gloo run's reporter gathers the other workers' traces for it; each still writes its own part.
  std::vector<size_t> threads_events;
  for (std::string transport : {"threads", "gloo"}) {
    SCOPED_TRACE(transport);
    fs::path trace = tmp.path / (transport + ".trace.json");
    ASSERT_EQ(run({"train", "--model", "mnist-cnn", "--data", "synthetic", "--stages", "2", "--schedule", "1f1b",
                   "--microbatches", "4", "--steps", "30", "--profile", slow.string(), "--transport", transport,
                   "--trace", trace.string()},
                  log),
              0)
        << slurp(log);
    std::string out = slurp(log);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(for this run \(1f1b.*; ratio ([0-9.]+))"))) << out;
    EXPECT_GT(std::stod(m[1]), 2) << out;
    // The note splits the steady states' gap, and says what they were (the ratio above is the
    // whole run's): "of the" gap is the run's less its simulation's.
    ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(note: off by more than 10%; in the steady state the run took )"
                                                     R"(([0-9.]+) ms a minibatch, its simulation ([0-9.]+) \(ratio )"
                                                     R"(([0-9.]+)\): worker (\d) set the pace .*: of the )"
                                                     R"((-[0-9.]+) ms, (-[0-9.]+) in its computes and steps)")))
        << out;
    const double run_ms = std::stod(m[1]), sim_ms = std::stod(m[2]);
    EXPECT_NEAR(std::stod(m[3]), sim_ms / run_ms, 2e-3) << out;
    EXPECT_NEAR(std::stod(m[5]), run_ms - sim_ms, 2e-3) << out;
    EXPECT_GT(std::stod(m[6]) / std::stod(m[5]), 0.5) << out;  // most of the gap
    EXPECT_NE(out.find("its layers ran at another speed than the profile timed them"), std::string::npos) << out;
    json written = parse_json(slurp(trace), trace.string());
    ASSERT_EQ(written["workers"].size(), 2u);
    std::vector<size_t> events;
    for (const auto& w : written["workers"]) events.push_back(w.size());
    if (transport == "threads") threads_events = events;
    else EXPECT_EQ(events, threads_events);  // the same actions, each once
  }
}

TEST(TrainCli, ThroughputIsPredictedForTheRunItMade) {
  TempDir tmp("predicted");
  fs::path profile = tmp.path / "profile.json", plan = tmp.path / "plan.json", log = tmp.path / "log";
  ASSERT_EQ(run({"profile", "--model", "mnist-cnn", "--batch-size", "64", "-o", profile.string()}, log), 0) << slurp(log);
  std::ofstream(plan) << R"({"format": "pipetrain.plan/1", "workers": 4, "schedule": "pipedream", "stages": [
      {"layers": [0, 1], "replicas": 3}, {"layers": [2, 3, 4], "replicas": 1}],
      "predicted": {"pipeline_ms_per_minibatch": 5.0, "simulated_schedule": "pipedream"}})";
  ASSERT_EQ(run({"train", "--model", "mnist-cnn", "--data", "synthetic", "--plan", plan.string(), "--schedule", "1f1b",
                 "--microbatches", "4", "--steps", "30", "--profile", profile.string()},
                log),
            0)
      << slurp(log);
  std::string out = slurp(log);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(simulated (\d+) samples/s for this run \(1f1b, 4 microbatches, 4 )"
                                                   R"(workers on threads, transfers in memory)")))
      << out;
  // No calibrated --cluster: the simulation leaves the runtime's own work out, and says so (an
  // exported model of small layers measured 0.25 of it).
  EXPECT_NE(out.find("the host's time per action not charged (a --cluster from `pipetrain calibrate` charges it)"),
            std::string::npos)
      << out;
  // The machine's limit: every core computing one worker's rate (the profile's one-worker time).
  json p = parse_json(slurp(profile), "profile");
  double one_worker_ms = 0;
  for (const auto& l : p["layers"])
    one_worker_ms += l["forward_ms"].get<double>() + l["backward_ms"].get<double>() + l.value("optimizer_ms", 0.0);
  int cores = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_LE(std::stod(m[1]), std::min(cores, 4) * 64 * 1000.0 / one_worker_ms * 1.001) << out;
  EXPECT_EQ(out.find("planner predicted"), std::string::npos) << out;  // not the plan's pipedream figure
  // The plan as pipedream, whose replicas take rounds of 3 minibatches: the prediction replays a
  // long segment in whole rounds (it replayed 128 of 201, and the run failed after training, its
  // trace unwritten); a short run's figure counts its fill and drain and says the steady state
  // beside it, which is what --prediction-trace holds. Its second stage is made the bottleneck
  // (three times the first's share of a minibatch): where the first's replicas were, as measured
  // in CI once, the second hid in their wait and 6 minibatches took 6 steady periods exactly.
  double first = 0, second = 0;
  for (size_t i = 0; i < p["layers"].size(); ++i)
    (i < 2 ? first : second) += p["layers"][i]["forward_ms"].get<double>() + p["layers"][i]["backward_ms"].get<double>();
  json slow_second = p;
  for (size_t i = 2; i < p["layers"].size(); ++i) {
    json& l = slow_second["layers"][i];
    for (const char* field : {"forward_ms", "backward_ms", "input_gradient_ms"})
      if (l.contains(field)) l[field] = l[field].get<double>() * first / second;
    if (l.contains("timings"))
      for (json& t : l["timings"])
        for (const char* field : {"forward_ms", "backward_ms"}) t[field] = t[field].get<double>() * first / second;
  }
  fs::path async_profile = tmp.path / "slow-second.json";
  std::ofstream(async_profile) << slow_second.dump();
  fs::path run_trace = tmp.path / "run.json", predicted = tmp.path / "predicted.json";
  for (const char* steps : {"201", "6"}) {
    SCOPED_TRACE(steps);
    ASSERT_EQ(run({"train", "--compute", "emulated", "--profile", async_profile.string(), "--plan", plan.string(), "--steps",
                   steps, "--time-scale", "0.1", "--byte-scale", "0.01", "--synthetic-samples", "16384", "--trace",
                   run_trace.string(), "--prediction-trace", predicted.string()},
                  log),
              0)
        << slurp(log);
    std::string async = slurp(log);
    EXPECT_TRUE(fs::exists(run_trace)) << async;
    if (std::string(steps) != "6") continue;
    std::smatch steady;
    ASSERT_TRUE(std::regex_search(async, steady, std::regex(R"(its segments' fill and drain included: (\d+) samples/s )"
                                                            R"(in the steady state, the replay --prediction-trace holds)")))
        << async;
    ASSERT_EQ(run({"trace", predicted.string()}, log), 0) << slurp(log);
    std::smatch traced;
    std::string trace_out = slurp(log);
    ASSERT_TRUE(std::regex_search(trace_out, traced, std::regex(R"(throughput +([0-9.]+) samples/s)"))) << trace_out;
    EXPECT_NEAR(std::stod(steady[1]), std::stod(traced[1]), 1.0) << async << trace_out;
  }
  // A plan of another batch predicted another run: its figure is not set beside this one (it was,
  // after the note that it does not apply).
  fs::path other = tmp.path / "other-batch.json";
  std::ofstream(other) << R"({"format": "pipetrain.plan/1", "workers": 2, "schedule": "1f1b", "batch_size": 32,
      "microbatches": 2, "stages": [{"layers": [0, 1], "replicas": 1}, {"layers": [2, 3, 4], "replicas": 1}],
      "predicted": {"pipeline_ms_per_minibatch": 5.0, "simulated_schedule": "1f1b"}})";
  for (const char* batch : {"32", "64"}) {
    ASSERT_EQ(run({"train", "--model", "mnist-cnn", "--data", "synthetic", "--plan", other.string(), "--batch-size", batch,
                   "--steps", "2"},
                  log),
              0)
        << slurp(log);
    std::string other_batch = slurp(log);
    bool planned = std::string(batch) == "32";
    EXPECT_EQ(other_batch.find("its predicted throughput does not apply") == std::string::npos, planned) << other_batch;
    EXPECT_EQ(other_batch.find("planner predicted") != std::string::npos, planned) << other_batch;
  }
  // The plan's figure is for its 2 microbatches: a run of 4 says so beside it (only another
  // schedule was said).
  ASSERT_EQ(run({"train", "--model", "mnist-cnn", "--data", "synthetic", "--plan", other.string(), "--microbatches", "4",
                 "--steps", "2"},
                log),
            0)
      << slurp(log);
  std::string more = slurp(log);
  EXPECT_NE(more.find(" samples/s for 1f1b, 2 microbatches, this ran 1f1b, 4 microbatches (ratio "), std::string::npos)
      << more;
  // A split made here without a profile balances its stages' compute alone, no prediction of the
  // run: none is printed (its busiest stage's time was, as the planner's).
  ASSERT_EQ(run({"train", "--model", "mnist-cnn", "--data", "synthetic", "--stages", "2", "--schedule", "1f1b", "--steps",
                 "2"},
                log),
            0)
      << slurp(log);
  std::string split_here = slurp(log);
  EXPECT_EQ(split_here.find("planner predicted"), std::string::npos) << split_here;
  EXPECT_NE(split_here.find("split here by their compute alone, which predicts no run: with --profile P"),
            std::string::npos)
      << split_here;
  // Gloo processes are not threads: the figure says which ran and that their transfers were free.
  ASSERT_EQ(run({"train", "--compute", "emulated", "--profile", profile.string(), "--stages", "2", "--steps", "4",
                 "--transport", "gloo", "--time-scale", "0.1", "--byte-scale", "0.01"},
                log),
            0)
      << slurp(log);
  std::string gloo = slurp(log);
  EXPECT_NE(gloo.find("2 workers as gloo processes, their transfers not charged: no --cluster"), std::string::npos) << gloo;
  // The launcher is a process of the job too: its peak is said, and what raised it.
  EXPECT_NE(gloo.find("peak RSS of the launcher process (measured, as the OS counts it): "), std::string::npos) << gloo;
  EXPECT_EQ(gloo.find("timed each layer"), std::string::npos) << gloo;
  // A split timed here ran each layer in the launcher: 531 of an MLP launcher's 701 MiB, said to be
  // the data and the model's check alone.
  ASSERT_EQ(run({"train", "--model", "mnist-cnn", "--data", "synthetic", "--stages", "2", "--schedule", "1f1b", "--steps",
                 "2", "--transport", "gloo"},
                log),
            0)
      << slurp(log);
  std::string timed = slurp(log);
  EXPECT_NE(timed.find(" (it read the data and checked the model, timed each layer for the split (--stages without "
                       "--profile), then "),
            std::string::npos)
      << timed;
  // Emulated layers compute no loss: none is printed (it said "final loss 0").
  EXPECT_NE(gloo.find("no loss (emulated layers compute none)"), std::string::npos) << gloo;
  EXPECT_EQ(gloo.find("final loss"), std::string::npos) << gloo;
  // pipedream (the default here) predicts each minibatch's weights and stashes none: said so (it
  // read "every weight version stashed").
  EXPECT_NE(gloo.find("(a long run's: a predicted copy of the weights for every minibatch in flight)"), std::string::npos)
      << gloo;
  // With a cluster calibrated on threads (the demo's), the prediction charges the hand-over,
  // the host's time per action and the all-reduce as measured: never faster than the same
  // cluster's cores with the hand-over free (the measured core rates can differ from even
  // time-slicing either way, so the run without a cluster is no bound).
  fs::path cluster = tmp.path / "threads.json";
  ASSERT_EQ(run({"calibrate", "--workers", "4", "--transport", "threads", "--max-mb", "1", "-o", cluster.string()}, log),
            0)
      << slurp(log);
  ASSERT_EQ(run({"train", "--model", "mnist-cnn", "--data", "synthetic", "--plan", plan.string(), "--schedule", "1f1b",
                 "--microbatches", "4", "--steps", "30", "--profile", profile.string(), "--cluster", cluster.string()},
                log),
            0)
      << slurp(log);
  std::string calibrated = slurp(log);
  std::smatch c;
  ASSERT_TRUE(std::regex_search(calibrated, c, std::regex(R"(simulated (\d+) samples/s for this run \(1f1b, 4 microbatches, )"
                                                          R"(4 workers on threads, their hand-over as calibrated)")))
      << calibrated;
  json free = parse_json(slurp(cluster), "cluster");
  free["action_us"] = 0;
  free["reduce_us_per_mib"] = 0;
  for (auto& level : free["levels"]) level["latency_us"] = 0;
  fs::path free_cluster = tmp.path / "free.json";
  std::ofstream(free_cluster) << free.dump();
  ASSERT_EQ(run({"train", "--model", "mnist-cnn", "--data", "synthetic", "--plan", plan.string(), "--schedule", "1f1b",
                 "--microbatches", "4", "--steps", "30", "--profile", profile.string(), "--cluster",
                 free_cluster.string()},
                log),
            0)
      << slurp(log);
  std::string freed = slurp(log);
  std::smatch f;
  ASSERT_TRUE(std::regex_search(freed, f, std::regex(R"(simulated (\d+) samples/s for this run)"))) << freed;
  EXPECT_LT(std::stod(c[1]), std::stod(f[1])) << calibrated << freed;
  // Gloo processes on this host, with a cluster calibrated over gloo: their measured hand-over.
  fs::path gloo_cluster = tmp.path / "gloo.json";
  ASSERT_EQ(run({"calibrate", "--workers", "2", "--transport", "gloo", "--max-mb", "1", "-o", gloo_cluster.string()}, log),
            0)
      << slurp(log);
  ASSERT_EQ(run({"train", "--model", "mnist-cnn", "--data", "synthetic", "--stages", "2", "--schedule", "1f1b",
                 "--steps", "10", "--profile", profile.string(), "--cluster", gloo_cluster.string(), "--transport",
                 "gloo"},
                log),
            0)
      << slurp(log);
  std::string gloo_run = slurp(log);
  EXPECT_TRUE(std::regex_search(gloo_run, std::regex(R"(simulated \d+ samples/s for this run \(1f1b, 4 microbatches, 2 )"
                                                 R"(workers as gloo processes, their hand-over as calibrated)")))
      << gloo_run;
}

}  // namespace
// A V schedule puts two stages on each worker: the job's cluster needs the schedule's workers,
// not the plan's stages, and the throughput line simulates the run on that cluster (emulated
// compute waits the profile's times, so the run cannot beat its simulation by much).
// Four workers on at most 2 cores (this test's own CPUs narrowed to its first two, which its
// children inherit): each is pinned to one, the note says which, and the prediction shares each
// core among the workers on it; a gloo rank, pinned with its whole process, still reports on the
// host's cores (it once checked its placement against its own one core and stopped).
TEST(TrainCli, WorkersThatOutnumberTheCoresArePinned) {
  TempDir tmp("pinned");
  fs::path profile = tmp.path / "profile.json", log = tmp.path / "log";
  cpu_set_t before, two;
  ASSERT_EQ(sched_getaffinity(0, sizeof(before), &before), 0);
  CPU_ZERO(&two);
  int cores = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE && cores < 2; ++cpu)
    if (CPU_ISSET(cpu, &before)) CPU_SET(cpu, &two), ++cores;
  ASSERT_EQ(sched_setaffinity(0, sizeof(two), &two), 0);
  ASSERT_EQ(run({"profile", "--model", "mnist-cnn", "--batch-size", "64", "-o", profile.string()}, log), 0) << slurp(log);
  for (const char* transport : {"threads", "gloo"}) {
    EXPECT_EQ(run({"train", "--model", "mnist-cnn", "--data", "synthetic", "--stages", "4", "--schedule", "1f1b",
                   "--microbatches", "4", "--steps", "8", "--profile", profile.string(), "--transport", transport},
                  log),
              0)
        << slurp(log);
    std::string out = slurp(log);
    EXPECT_NE(out.find("note: the 4 workers outnumber this host's " + std::to_string(cores) +
                       " cores: each is pinned to one"),
              std::string::npos)
        << transport << "\n" << out;
    EXPECT_NE(out.find("sharing this machine's " + std::to_string(cores) + " cores"), std::string::npos)
        << transport << "\n" << out;
  }
  // Left to the kernel: no pins, and the prediction shares the cores as one pool.
  EXPECT_EQ(run({"train", "--model", "mnist-cnn", "--data", "synthetic", "--stages", "4", "--schedule", "1f1b",
                 "--microbatches", "4", "--steps", "8", "--profile", profile.string(), "--no-pin-cores"},
                log),
            0)
      << slurp(log);
  std::string unpinned = slurp(log);
  EXPECT_EQ(unpinned.find("each is pinned"), std::string::npos) << unpinned;
  EXPECT_NE(unpinned.find("sharing this machine's " + std::to_string(cores) + " cores"), std::string::npos) << unpinned;
  sched_setaffinity(0, sizeof(before), &before);
}

// zb-v's 4 stages on 2 workers, predicted so; on threads whatever links the --cluster gives.
TEST(TrainCli, EmulatedVRunIsPredictedOnItsOwnWorkers) {
  TempDir tmp("vrun");
  fs::path profile = tmp.path / "profile.json", cluster = tmp.path / "cluster.json", log = tmp.path / "log";
  std::ofstream(profile) << R"({"format": "pipetrain.profile/1", "model": "four", "batch_size": 8, "layers": [
      {"name": "a", "forward_ms": 4, "backward_ms": 8, "activation_bytes": 4096, "parameter_bytes": 4096},
      {"name": "b", "forward_ms": 4, "backward_ms": 8, "activation_bytes": 4096, "parameter_bytes": 4096},
      {"name": "c", "forward_ms": 4, "backward_ms": 8, "activation_bytes": 4096, "parameter_bytes": 4096},
      {"name": "d", "forward_ms": 4, "backward_ms": 8, "activation_bytes": 4096, "parameter_bytes": 4096}]})";
  std::ofstream(cluster) << R"({"format": "pipetrain.cluster/1", "levels": [{"fan_out": 2, "bandwidth_gbps": 10}]})";
  ASSERT_EQ(run({"train", "--compute", "emulated", "--profile", profile.string(), "--stages", "2", "--schedule", "zb-v",
                 "--microbatches", "4", "--steps", "12", "--cluster", cluster.string()},
                log),
            0)
      << slurp(log);
  std::string out = slurp(log);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(simulated \d+ samples/s for this run \(zb-v, 4 microbatches, 2 )"
                                                   R"(workers on threads, transfers in memory, the host's time per )"
                                                   R"(action not charged \(a --cluster from `pipetrain calibrate` )"
                                                   R"(charges it\); ratio ([0-9.e+-]+)\))")))
      << out;
  EXPECT_LT(std::stod(m[1]), 1.1) << out;
  EXPECT_GT(std::stod(m[1]), 0.3) << out;
}

// --prediction-trace writes the replay the printed figure was read from, and `trace --against`
// sets the run's own trace beside it, worker by worker and action by action: emulated layers
// wait the profile's times, so their forwards and backwards measure close to the simulated ones.
TEST(TrainCli, APredictionTraceIsTheFiguresReplayAndTheRunIsSetAgainstIt) {
  TempDir tmp("prediction-trace");
  fs::path profile = tmp.path / "profile.json", measured = tmp.path / "run.json", predicted = tmp.path / "sim.json",
           log = tmp.path / "log";
  std::ofstream(profile) << R"({"format": "pipetrain.profile/1", "model": "two", "batch_size": 8, "layers": [
      {"name": "a", "forward_ms": 12, "backward_ms": 24, "activation_bytes": 4096, "parameter_bytes": 4096},
      {"name": "b", "forward_ms": 8, "backward_ms": 16, "activation_bytes": 4096, "parameter_bytes": 4096}]})";
  // Times long enough that a stall of 100 ms on a loaded machine moves no mean past the bounds.
  ASSERT_EQ(run({"train", "--compute", "emulated", "--profile", profile.string(), "--stages", "2", "--schedule", "1f1b",
                 "--microbatches", "2", "--steps", "12", "--trace", measured.string(), "--prediction-trace",
                 predicted.string()},
                log),
            0)
      << slurp(log);
  std::string out = slurp(log);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(simulated (\d+) samples/s for this run)"))) << out;
  schedule::Trace sim = schedule::read_trace(predicted.string());
  EXPECT_EQ(sim.source, "simulated");
  EXPECT_EQ(sim.schedule, "1f1b");
  EXPECT_EQ(sim.microbatches, 2);
  EXPECT_NEAR(metrics::compute_metrics(sim).samples_per_s, std::stod(m[1]), 1.0) << out;

  ASSERT_EQ(run({"trace", measured.string(), "--against", predicted.string(), "--json"}, log), 0) << slurp(log);
  json gap = json::parse(slurp(log));
  ASSERT_EQ(gap["workers"].size(), 2u) << gap.dump(1);
  for (int w = 0; w < 2; ++w) {
    const json& worker = gap["workers"][w];
    for (const char* kind : {"F", "B"}) {
      auto mean = worker["actions"][kind]["mean_ms"];
      double run_ms = mean[0].get<double>(), sim_ms = mean[1].get<double>();
      EXPECT_GT(sim_ms, 0) << w << kind;
      EXPECT_GT(run_ms, 0.9 * sim_ms) << w << kind << " " << gap.dump(1);  // waits are never short
      EXPECT_LT(run_ms, 2.0 * sim_ms) << w << kind << " " << gap.dump(1);
      EXPECT_NEAR(worker["actions"][kind]["count_per_minibatch"][0].get<double>(), 2.0, 0.01) << w << kind;
    }
    for (int i = 0; i < 2; ++i)
      EXPECT_NEAR(worker["compute_ms"][i].get<double>() + worker["outside_ms"][i].get<double>(),
                  gap["ms_per_minibatch"][i].get<double>(), 1e-6);
  }
  // The stage of the longer layer (a) sets the pace.
  EXPECT_EQ(gap["pace_worker"].get<int>(), 0) << gap.dump(1);
  // With the pictures asked for, which it left unwritten, exit 0.
  fs::path svg = tmp.path / "run.svg", chrome = tmp.path / "run.chrome.json";
  ASSERT_EQ(run({"trace", measured.string(), "--against", predicted.string(), "--svg", svg.string(), "--chrome",
                 chrome.string()},
                log),
            0)
      << slurp(log);
  EXPECT_NE(slurp(log).find("worker 0 set the pace"), std::string::npos) << slurp(log);
  EXPECT_NE(slurp(svg.string()).find("<svg"), std::string::npos);
  EXPECT_NE(slurp(chrome.string()).find("traceEvents"), std::string::npos);

  // The same order from a schedule file: the run's trace was stamped 'file', its replay '1f1b',
  // and `trace --against` refused them as traces of two runs.
  fs::path order = tmp.path / "order.json";
  ASSERT_EQ(run({"simulate", "--profile", profile.string(), "--workers", "2", "--bandwidth-gbps", "100", "--schedule",
                 "1f1b", "--microbatches", "2", "--emit-schedule", order.string()},
                log),
            0)
      << slurp(log);
  ASSERT_EQ(run({"train", "--compute", "emulated", "--profile", profile.string(), "--schedule-file", order.string(),
                 "--steps", "4", "--trace", measured.string(), "--prediction-trace", predicted.string()},
                log),
            0)
      << slurp(log);
  EXPECT_EQ(slurp(log).find("do not compare"), std::string::npos) << slurp(log);
  EXPECT_EQ(run({"trace", measured.string(), "--against", predicted.string()}, log), 0) << slurp(log);

  // Without --profile there is no prediction to write.
  EXPECT_EQ(run({"train", "--data", "synthetic", "--stages", "2", "--steps", "2", "--prediction-trace",
                 predicted.string()},
                log),
            2)
      << slurp(log);
  EXPECT_NE(slurp(log).find("--prediction-trace: the prediction is --profile P's simulation"), std::string::npos)
      << slurp(log);
}

// On threads the process that trains first timed each layer for the split (--stages without
// --profile): a 104M-parameter model's process peaked at 1.07 GiB, 324 MiB of it from the timing,
// and the report put that on LibTorch and the data (a helper's audit). It says so now.
TEST(TrainCli, AThreadsReportSaysTheProcessTimedTheLayersForTheSplit) {
  TempDir tmp("timed-split");
  fs::path profile = tmp.path / "profile.json";
  ASSERT_EQ(run({"profile", "--model", "mnist-cnn", "--batch-size", "64", "-o", profile.string()}, tmp.path / "log"), 0)
      << slurp(tmp.path / "log");
  for (bool timed : {true, false}) {
    std::vector<std::string> args{"train", "--data", "synthetic", "--synthetic-samples", "256", "--steps", "2",
                                  "--stages", "2", "--schedule", "1f1b", "--quiet"};
    if (!timed) args.insert(args.end(), {"--profile", profile.string()});
    ASSERT_EQ(run(args, tmp.path / "log"), 0) << slurp(tmp.path / "log");
    std::string out = slurp(tmp.path / "log");
    EXPECT_EQ(out.find(" workers, which timed each layer for the split first (--stages without --profile)") !=
                  std::string::npos,
              timed)
        << out;
    EXPECT_EQ(out.find(" (timing each layer for the split, LibTorch, the data, ") != std::string::npos, timed) << out;
  }
}

}  // namespace pt::runtime
