// A worker holds only its stage (docs/runtime.md): the `pipetrain` binary trains a model of 134M
// parameters (mlp --width 4 --depth 8: 8 dense layers of 4096 x 4096, 1.6 GB of weights,
// gradients and momentum) on one worker and on 4 stages, over gloo and threads, and each
// process's peak RSS is read from the OS (wait4), not from pipetrain: a gloo rank must hold at
// most 0.40x of one worker's, the threads' process at most 1.25x. The peaks the run prints are
// checked against the same figures. And the memory model's peak RSS, calibrated, is the OS's.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "pt_paths.h"

namespace pt {
namespace {

const std::string kBinary = std::string(PT_BINARY_DIR) + "/pipetrain";

struct Measured {
  int exit_code = -1;
  int64_t peak_rss = 0;  // the largest of the process and every descendant it waited for, bytes
  std::string output;
};

// Runs the command through sh and waits for it with wait4: its rusage's ru_maxrss is the peak
// RSS of the largest single process among it and the children it waited for (gloo's ranks).
Measured run_measured(const std::string& args) {
  std::string log = ::testing::TempDir() + "stage_memory_" + std::to_string(::getpid()) + ".log";
  std::string cmd = "exec timeout 300 " + kBinary + " " + args + " > " + log + " 2>&1";
  Measured r;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  struct rusage u {};
  ::wait4(pid, &status, 0, &u);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.peak_rss = static_cast<int64_t>(u.ru_maxrss) * 1024;
  std::ifstream in(log);
  std::stringstream s;
  s << in.rdbuf();
  r.output = s.str();
  std::remove(log.c_str());
  return r;
}

double bytes_of(const std::string& value, const std::string& unit) {
  double v = std::stod(value);
  for (const char* u : {"B", "KiB", "MiB", "GiB", "TiB"}) {
    if (unit == u) return v;
    v *= 1024;
  }
  ADD_FAILURE() << "unknown unit " << unit;
  return 0;
}

// The largest figure on the first line that starts with `head`.
double largest_printed(const std::string& output, const std::string& head) {
  size_t at = output.find(head);
  if (at == std::string::npos) return -1;
  std::string line = output.substr(at, output.find('\n', at) - at);
  std::regex figure(R"(([0-9.]+) (B|KiB|MiB|GiB|TiB))");
  double most = -1;
  for (std::sregex_iterator it(line.begin(), line.end(), figure), end; it != end; ++it)
    most = std::max(most, bytes_of((*it)[1], (*it)[2]));
  return most;
}

// Each worker's figure on the first line that starts with `head` ("w0 16.5 MiB, w1 ...").
std::vector<double> per_worker(const std::string& output, const std::string& head) {
  std::vector<double> out;
  size_t at = output.find(head);
  if (at == std::string::npos) return out;
  std::string line = output.substr(at, output.find('\n', at) - at);
  std::regex figure(R"(w[0-9]+ ([0-9.]+) (B|KiB|MiB|GiB|TiB))");
  for (std::sregex_iterator it(line.begin(), line.end(), figure), end; it != end; ++it)
    out.push_back(bytes_of((*it)[1], (*it)[2]));
  return out;
}

const std::string kModel = "train --model mlp --width 4 --depth 8 --data synthetic --synthetic-samples 64 "
                           "--batch-size 8 --steps 2 --quiet --timeout 120 ";

// Each of `workers` workers' measured tensors between `under` and `over` times the modelled.
void expect_measured_within_model(const std::string& output, size_t workers, double over, double under) {
  std::vector<double> measured = per_worker(output, "peak tensor memory per worker (measured");
  std::vector<double> modelled = per_worker(output, "peak tensor memory per worker (modelled)");
  ASSERT_EQ(measured.size(), workers) << output;
  ASSERT_EQ(modelled.size(), workers) << output;
  for (size_t w = 0; w < workers; ++w) {
    EXPECT_LE(measured[w], over * modelled[w]) << "w" << w << "\n" << output;
    EXPECT_GE(measured[w], under * modelled[w]) << "w" << w << "\n" << output;
  }
}

TEST(StageMemory, FourStagesHoldAQuarterOfTheModelEachAsTheOsCountsIt) {
  Measured one = run_measured(kModel);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  Measured gloo = run_measured(kModel + "--stages 4 --schedule 1f1b --microbatches 2 --transport gloo");
  ASSERT_EQ(gloo.exit_code, 0) << gloo.output;
  Measured threads = run_measured(kModel + "--stages 4 --schedule 1f1b --microbatches 2");
  ASSERT_EQ(threads.exit_code, 0) << threads.output;
  double gloo_ratio = static_cast<double>(gloo.peak_rss) / one.peak_rss;
  double threads_ratio = static_cast<double>(threads.peak_rss) / one.peak_rss;
  std::printf("peak RSS: one worker %.0f MB; gloo, the largest rank %.0f MB (%.2fx); threads %.0f MB (%.2fx)\n",
              one.peak_rss / 1e6, gloo.peak_rss / 1e6, gloo_ratio, threads.peak_rss / 1e6, threads_ratio);
  // One worker holds 1.6 GB of training state; each of 4 stages a quarter of it.
  EXPECT_GT(one.peak_rss, int64_t{1600} << 20) << one.output;
  EXPECT_LE(gloo_ratio, 0.40) << gloo.output;
  EXPECT_LE(threads_ratio, 1.25) << threads.output;

  // What the runs print is what the OS counted: one worker's and the threads' process peak, and
  // the largest of the gloo ranks' and the launcher's, which wait4 counts too. The launcher holds
  // no stage, but builds and times each layer for the split (--stages without --profile), and its
  // peak sits near the ranks' or above: 554 MiB against ranks of 538-541 on 2026-12-06, 653
  // against 578-581 on a loaded machine (the allocator's layout: one 4096 x 4096 layer, 64 MiB,
  // kept or given back).
  EXPECT_NEAR(largest_printed(one.output, "peak RSS (measured"), one.peak_rss, 0.10 * one.peak_rss) << one.output;
  EXPECT_NEAR(largest_printed(threads.output, "peak RSS (measured"), threads.peak_rss, 0.10 * threads.peak_rss)
      << threads.output;
  EXPECT_NEAR(std::max(largest_printed(gloo.output, "peak RSS per worker process"),
                       largest_printed(gloo.output, "peak RSS of the launcher process")),
              gloo.peak_rss, 0.10 * gloo.peak_rss)
      << gloo.output;
  // The threads' workers hold their stages' tensors, a quarter of the state each and no more.
  double tensors = largest_printed(threads.output, "peak tensor memory per worker");
  EXPECT_GT(tensors, 0.15 * one.peak_rss) << threads.output;
  EXPECT_LT(tensors, 0.40 * one.peak_rss) << threads.output;
  // Their peaks are not at one moment: what the process held besides is a bound, said so.
  EXPECT_NE(threads.output.find("less the workers' peaks"), std::string::npos) << threads.output;
  EXPECT_NE(threads.output.find("each at its own moment): at least "), std::string::npos) << threads.output;
}

// The peaks printed are each process's whole run, the trace's gathering and writing included:
// read at the end of training, 3 stages of 200 steps with --trace printed 249.6 MiB where the
// kernel counted 270.5 (threads), and each gloo rank 0.1-2.4 MiB under its own.
TEST(StageMemory, ThePeaksPrintedIncludeWritingTheTrace) {
  const std::string trace = ::testing::TempDir() + "stage_memory_trace_" + std::to_string(::getpid()) + ".json";
  const std::string run = "train --data synthetic --synthetic-samples 2048 --stages 3 --schedule 1f1b "
                          "--microbatches 16 --steps 200 --quiet --timeout 120 --trace " + trace + " ";
  Measured threads = run_measured(run);
  ASSERT_EQ(threads.exit_code, 0) << threads.output;
  EXPECT_NEAR(largest_printed(threads.output, "peak RSS (measured"), threads.peak_rss, 0.01 * threads.peak_rss)
      << threads.output;
  // wait4's is the largest of the ranks and the launcher, which merges their traces.
  Measured gloo = run_measured(run + "--transport gloo");
  ASSERT_EQ(gloo.exit_code, 0) << gloo.output;
  double printed = std::max(largest_printed(gloo.output, "peak RSS per worker process"),
                            largest_printed(gloo.output, "peak RSS of the launcher"));
  EXPECT_NEAR(printed, gloo.peak_rss, 0.01 * gloo.peak_rss) << gloo.output;
  std::remove(trace.c_str());
}

// gloo workers on one host receive through shared memory, whose reader copies a tensor in as it
// arrives, not when its receive is posted (schedule::kSharedMemoryReceivesAhead): modelled as
// posted 8 ahead, mnist-cnn's 2 pipedream stages read 22.2 and 22.3 MiB against 16.5 measured.
TEST(StageMemory, GlooWorkersTensorsOnOneHostAreModelledAsTheyArrive) {
  std::string dir = ::testing::TempDir() + "stage_memory_shm_" + std::to_string(::getpid()) + "/";
  ::mkdir(dir.c_str(), 0755);
  Measured profiled = run_measured("profile -o " + dir + "cnn.json");
  ASSERT_EQ(profiled.exit_code, 0) << profiled.output;
  Measured run = run_measured("train --stages 2 --schedule pipedream --steps 40 --quiet --timeout 120 --transport gloo "
                              "--profile " + dir + "cnn.json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::vector<double> measured = per_worker(run.output, "peak tensor memory per worker (measured");
  std::vector<double> modelled = per_worker(run.output, "peak tensor memory per worker (modelled)");
  ASSERT_EQ(measured.size(), 2u) << run.output;
  ASSERT_EQ(modelled.size(), 2u) << run.output;
  for (size_t w = 0; w < 2; ++w) EXPECT_NEAR(modelled[w], measured[w], 0.10 * measured[w]) << "w" << w << "\n" << run.output;
  std::system(("rm -rf " + dir).c_str());
}

// Emulated layers hold what the model holds of real ones, over gloo: 4 layers of 4 MiB outputs and
// 64 KiB of weights (scratch the emulation does not make is small), gpipe and zb-h1 on 4 stages.
// Each output was an allocation of its own beside the stash, made contiguous by the transport and
// held by its send until the backward: gpipe's first worker measured 10.2 MiB against 6.2
// modelled. And the stash was freed at B where a zero-bubble stage keeps it to W: zb-h1's last
// worker measured 9.2 against 12.2. (Gradients that arrive ahead of their backward, which the
// model holds for one, move a worker by a microbatch's 1 MiB or two between runs: 7.2 against
// 6.2 once, 5.2 against 6.2 another time.)
TEST(StageMemory, EmulatedLayersHoldWhatTheModelHoldsOverGloo) {
  std::string dir = ::testing::TempDir() + "stage_memory_emulated_" + std::to_string(::getpid()) + "/";
  ::mkdir(dir.c_str(), 0755);
  std::ofstream profile(dir + "acts.json");
  profile << R"({"format": "pipetrain.profile/1", "model": "acts", "batch_size": 64, "device": "test", "layers": [)";
  for (int l = 0; l < 4; ++l)
    profile << (l ? ", " : "") << R"({"name": "l)" << l
            << R"(", "forward_ms": 0.5, "backward_ms": 1.0, "activation_bytes": 4194304, "parameter_bytes": 65536})";
  profile << "]}\n";
  profile.close();
  for (const std::string schedule : {"gpipe", "zb-h1"}) {
    SCOPED_TRACE(schedule);
    Measured run = run_measured("train --compute emulated --profile " + dir + "acts.json --stages 4 --schedule " +
                                schedule + " --microbatches 4 --steps 6 --quiet --timeout 120 --transport gloo");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    expect_measured_within_model(run.output, 4, 1.35, 0.75);
  }
  std::system(("rm -rf " + dir).c_str());
}

// On threads a received tensor is its sender's, and a zero-bubble stage keeps its input and its
// output's gradient to its W, which it defers: VGG-16 (width 0.25, 64x64, batch 32) on 4 workers,
// 4 microbatches, real layers. Modelled to the receiver's B, zb-v's first worker read 14.6 MiB
// against 19.7 measured; a gradient one chunk hands to another on its own worker was not counted
// at all. Within 2% over and 20% under (the model counts the profile's scratch at its peak). The
// split follows the profile's times: profiled on a loaded machine, zb-v's 8 stages fell as
// 0 | 1 | 2 | 3-4 | 5-6 | 7-8 | 9-14 | 15 and worker 2 held 17.2 MiB against 20.8 modelled (0.83).
TEST(StageMemory, ZeroBubbleStagesOnThreadsHoldWhatTheModelHolds) {
  std::string dir = ::testing::TempDir() + "stage_memory_zb_" + std::to_string(::getpid()) + "/";
  ::mkdir(dir.c_str(), 0755);
  const std::string model = "--model vgg16 --width 0.25 --image-size 64 --data synthetic --classes 10 --batch-size 32 ";
  Measured profiled = run_measured("profile " + model + "-o " + dir + "vgg.json");
  ASSERT_EQ(profiled.exit_code, 0) << profiled.output;
  for (const std::string schedule : {"zb-v", "zb-h1"}) {
    SCOPED_TRACE(schedule);
    Measured run = run_measured("train " + model + "--profile " + dir + "vgg.json --stages 4 --schedule " + schedule +
                                " --microbatches 4 --steps 6 --quiet --timeout 120");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    expect_measured_within_model(run.output, 4, 1.02, 0.80);
  }
  std::system(("rm -rf " + dir).c_str());
}

// What the memory model prints as a process's peak RSS (its tensors, the data, and what calibrate
// measured a process to hold besides) is what the OS counts, within 10% (15% above it): 4 worker
// threads of an MLP of 2048-wide layers, and 4 gloo ranks, microbatches of 16. Under glibc's malloc
// the threads' process measured 884-930 MiB against 733 modelled, the gloo ranks 12-19% over
// theirs: the arenas kept what each step freed (src/core/host_allocator.h).
TEST(StageMemory, TheModelledPeakRssIsTheOssOnThreadsAndGloo) {
  std::string dir = ::testing::TempDir() + "stage_memory_model_" + std::to_string(::getpid()) + "/";
  ::mkdir(dir.c_str(), 0755);
  const std::string mlp = "--model mlp --width 2 --depth 8 --batch-size 64 ";
  for (const std::string& step : {"profile " + mlp + "-o " + dir + "mlp.json",
                                  "calibrate --workers 4 -o " + dir + "threads.json",
                                  "calibrate --workers 4 --transport gloo -o " + dir + "gloo.json"}) {
    Measured done = run_measured(step);
    ASSERT_EQ(done.exit_code, 0) << step << "\n" << done.output;
  }
  const std::string train = "train " + mlp + "--microbatches 4 --steps 8 --stages 4 --schedule 1f1b --quiet " +
                            "--timeout 120 --profile " + dir + "mlp.json ";
  Measured threads = run_measured(train + "--cluster " + dir + "threads.json");
  ASSERT_EQ(threads.exit_code, 0) << threads.output;
  Measured gloo = run_measured(train + "--transport gloo --cluster " + dir + "gloo.json");
  ASSERT_EQ(gloo.exit_code, 0) << gloo.output;
  double threads_modelled = largest_printed(threads.output, "peak RSS (modelled)");
  double gloo_modelled = largest_printed(gloo.output, "peak RSS per worker process (modelled)");
  std::printf("peak RSS, modelled against the OS's: threads %.0f against %.0f MB; gloo's largest rank %.0f against %.0f MB\n",
              threads_modelled / 1e6, threads.peak_rss / 1e6, gloo_modelled / 1e6, gloo.peak_rss / 1e6);
  // The OS counts no more than 10% over the model (the arenas' bug read 12-30% over), and the
  // model no more than 15% over the OS: one layer freed back or kept by the allocator's layout
  // moves the OS's figure by 6% (gloo's model read 7.7% over it here).
  auto within = [](double modelled, double os) { return modelled >= os / 1.10 && modelled <= 1.15 * os; };
  EXPECT_TRUE(within(threads_modelled, threads.peak_rss)) << threads.output;
  // wait4's peak is the largest process's: a rank's (the launcher holds no stage, 180 MiB here).
  EXPECT_TRUE(within(gloo_modelled, gloo.peak_rss)) << gloo.output;
  std::system(("rm -rf " + dir).c_str());
}

// A gloo worker holds the data its stages read, not the whole set (job/worker_data.h): the first
// stage's the inputs, the last's the targets, a middle stage's neither. 3 ranks of an MLP of
// 2048-wide layers (about 150 MB of weights, gradients and momentum a stage) on 9,000 synthetic
// samples (74 MB of inputs): what each process held besides its tensors was the same, the inputs
// included, on every rank. (A forked rank starts at the launcher's resident set, data included,
// so its peak drops where its stage's tensors outgrow the data it let go of.)
TEST(StageMemory, AGlooWorkerHoldsOnlyTheDataItsStagesRead) {
  const double inputs = 9000.0 * 2048 * 4;
  Measured gloo = run_measured("train --model mlp --width 2 --depth 9 --data synthetic --synthetic-samples 8000 "
                               "--batch-size 64 --steps 4 --stages 3 --schedule 1f1b --transport gloo --quiet "
                               "--timeout 120");
  ASSERT_EQ(gloo.exit_code, 0) << gloo.output;
  std::vector<double> besides = per_worker(gloo.output, "  each process's peak less its worker's tensors");
  ASSERT_EQ(besides.size(), 3u) << gloo.output;
  std::printf("peak RSS less the tensors per rank: %.0f, %.0f, %.0f MB; inputs %.0f MB\n", besides[0] / 1e6,
              besides[1] / 1e6, besides[2] / 1e6, inputs / 1e6);
  EXPECT_GT(besides[0] - besides[1], 0.6 * inputs) << gloo.output;
  EXPECT_GT(besides[0] - besides[2], 0.6 * inputs) << gloo.output;
}

}  // namespace
}  // namespace pt
