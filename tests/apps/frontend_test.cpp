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
