#pragma once
// Subcommand registry: each apps/<name>.cpp registers itself with a static Register object,
// so adding a subcommand touches no other file.
//
// Two executables share it (apps/CMakeLists.txt): `pipetrain`, the torch-free front end that
// starts in milliseconds, and `pipetrain-torch` beside it, which holds the subcommands that need
// LibTorch (train, profile). The front end registers those as hand-offs: it runs
// pipetrain-torch with the same arguments, as git runs git-<subcommand>.
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace pt::app {

struct Command {
  std::string name;
  std::string description;
  // Adds the subcommand's options to `sub` and returns the function that runs it; empty for a
  // hand-off.
  std::function<std::function<int()>(CLI::App& sub)> setup;
  // A subcommand that is another program (export runs Python): given every argument after its
  // name, unparsed, so that program's own --help and errors are the user's.
  std::function<int(const std::vector<std::string>& args)> pass_through = {};
};

std::vector<Command>& registry();

struct Register {
  explicit Register(Command c) { registry().push_back(std::move(c)); }
};

// The subcommands that need LibTorch, described once for both executables.
inline constexpr const char* kTrainDescription =
    "Train a model: one worker, or pipeline-parallel with --plan/--stages and --schedule";
inline constexpr const char* kProfileDescription =
    "Measure per-layer forward/backward time, activation and parameter bytes";
inline constexpr const char* kCalibrateDescription =
    "Measure the cluster's latency per message and rate per level over the job's transport; write a cluster file";
inline constexpr const char* kTorchExecutable = "pipetrain-torch";

// Checks of numeric flags that refuse NaN and infinity, which CLI11's PositiveNumber and
// NonNegativeNumber let through (NaN compares false to everything): `train --timeout nan`
// disabled the timeout, `--bucket-mb nan` became an undefined byte count.
CLI::Validator finite_positive();
CLI::Validator finite_non_negative();
// An all-reduce bucket in MiB: finite, 0 to plan::kMaxBucketMb, as a plan file's bucket_mb must
// be (plan --bucket-mb 1e308 wrote a plan that simulate and train then refused to read).
CLI::Validator bucket_mb_range();

}  // namespace pt::app
