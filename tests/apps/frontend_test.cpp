// The front end (apps/command.h): `pipetrain` never loads LibTorch, lists every subcommand, and
// hands train and profile to pipetrain-torch, or, in a build without LibTorch, says so.
#include <gtest/gtest.h>

#include <string>

#include "pt_paths.h"
#include "tests/apps/shell_run.h"

namespace {

using Outcome = pt::testing::ShellRun;
Outcome shell(const std::string& cmd) { return pt::testing::shell_run(cmd); }

const std::string kRealised = std::string(PT_BINARY_DIR) + "/pipetrain";

bool has(const std::string& text, const std::string& word) { return text.find(word) != std::string::npos; }

TEST(Frontend, LinksNoLibTorch) {
  Outcome r = shell("ldd " + kRealised);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(has(r.output, "libc.so")) << r.output;  // ldd did list the libraries
  for (const char* lib : {"libtorch", "libc10", "libgloo", "libopenblas", "libmpi"})
    EXPECT_FALSE(has(r.output, lib)) << lib << " in:\n" << r.output;
}

TEST(Frontend, HelpListsEverySubcommand) {
  Outcome r = shell(kRealised + " --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* sub : {"plan", "simulate", "compare", "trace", "checkpoint", "train", "profile"})
    EXPECT_TRUE(has(r.output, std::string("\n  ") + sub + " ")) << sub << " missing from:\n" << r.output;
}

TEST(Frontend, PlansWithoutLibTorch) {
  Outcome r = shell(kRealised + " plan --profile " + PT_SOURCE_DIR + "/data/profiles/vgg16.json --workers 4,4 " +
                "--bandwidth-gbps 96,10");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "stage")) << r.output;
}

// simulate replays workers that outnumber the cores each on its core, as train pins them (and
// --no-pin-cores as one pool): VGG-16's even split on 4 workers of 2 cores then runs its 4
// stages' uneven work two to a core, where one pool of cores balances them (55.7 samples/s
// against 80.8); --pin-cores without cores to pin to says so.
TEST(Frontend, SimulatePinsWorkersToCoresUnlessTold) {
  const std::string base = kRealised + " simulate --profile " + PT_SOURCE_DIR +
                           "/data/profiles/vgg16.json --workers 4 --bandwidth-gbps 10 --schedule 1f1b";
  auto throughput = [](const std::string& out) {
    size_t at = out.find("throughput");
    return at == std::string::npos ? -1.0 : std::stod(out.substr(out.find_first_of("0123456789", at)));
  };
  Outcome pool = shell(base + " --cores 2 --no-pin-cores"), pinned = shell(base + " --cores 2 --pin-cores");
  Outcome fallback = shell(base + " --cores 2");
  EXPECT_EQ(throughput(fallback.output), throughput(pinned.output)) << fallback.output;
  ASSERT_EQ(pool.exit_code, 0) << pool.output;
  ASSERT_EQ(pinned.exit_code, 0) << pinned.output;
  EXPECT_GT(throughput(pinned.output), 0) << pinned.output;
  EXPECT_LT(throughput(pinned.output), throughput(pool.output)) << pinned.output << pool.output;
  Outcome none = shell(base + " --pin-cores");
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_TRUE(has(none.output, "--pin-cores: the workers share no cores to pin them to")) << none.output;
}

#ifdef PT_WITH_TORCH_BUILD
TEST(Frontend, HandsTrainAndProfileToTheTorchHalf) {
  // Their own options appear: the arguments reached pipetrain-torch unchanged.
  Outcome train = shell(kRealised + " train --help");
  EXPECT_EQ(train.exit_code, 0) << train.output;
  EXPECT_TRUE(has(train.output, "--schedule")) << train.output;
  EXPECT_TRUE(has(train.output, "pipetrain train")) << train.output;
  Outcome profile = shell(kRealised + " profile --help");
  EXPECT_EQ(profile.exit_code, 0) << profile.output;
  EXPECT_TRUE(has(profile.output, "--batch-size")) << profile.output;
  // Errors keep the subcommand's name and exit code.
  Outcome bad = shell(kRealised + " train --batch-size 0 --data synthetic --steps 1 --quiet");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_TRUE(has(bad.output, "pipetrain train: error: --batch-size")) << bad.output;
}
#else
TEST(Frontend, SaysTrainNeedsLibTorch) {
  for (const char* sub : {"train", "profile"}) {
    Outcome r = shell(kRealised + " " + sub + " --help");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(has(r.output, "-DPT_WITH_TORCH=OFF")) << r.output;
    EXPECT_TRUE(has(r.output, std::string("pipetrain ") + sub + ": needs LibTorch")) << r.output;
  }
}
#endif

}  // namespace
