// pipetrain: one thin subcommand per step of the data flow (docs/design.md). The same main serves
// both executables (apps/command.h); a registered hand-off runs pipetrain-torch before any
// parsing, so its flags and --help are the LibTorch half's own.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>

#include "apps/command.h"
#include "core/error.h"
#include "core/input_limits.h"
#include "core/version.h"

namespace pt::app {
namespace {

// The directory of this executable (pipetrain-torch is installed beside it).
std::string own_directory() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

// Replaces this process by pipetrain-torch with the same arguments; returns only on failure.
int hand_off(const std::string& name, char** argv) {
  std::string exe = own_directory() + "/" + kTorchExecutable;
  if (::access(exe.c_str(), X_OK) != 0) {
    std::cerr << "pipetrain " << name << ": needs LibTorch, and " << exe << " is not there: this pipetrain was "
              << "built without it (cmake -DPT_WITH_TORCH=OFF); build with -DPT_WITH_TORCH=ON (scripts/build.sh)\n";
    return 1;
  }
  // Every LibTorch command runs one compute thread per worker (docs/design.md), but OpenBLAS starts a
  // thread per core as it loads, before main can say so, and spins them: about 0.1 s of CPU per
  // start here, on every worker process. A user's own setting stands.
  ::setenv("OPENBLAS_NUM_THREADS", "1", 0);
  ::execv(exe.c_str(), argv);
  std::cerr << "pipetrain " << name << ": cannot run " << exe << ": " << std::strerror(errno) << "\n";
  return 1;
}

// A value left empty (`--checkpoint-dir "$CK"` with CK unset) or one that is the next flag
// (`--metrics= --quiet`) is refused: taken, the first turned checkpoints and --resume off and the
// second wrote the metrics to a file named --quiet, exit 0 both.
void refuse_missing_values(CLI::App& app) {
  static const CLI::Validator given(
      [](std::string& v) -> std::string {
        if (v.empty()) return "the value is empty (an unset shell variable?)";
        if (v.rfind("--", 0) == 0) return "'" + v + "' is a flag, not this option's value";
        return "";
      },
      "", "a value");
  for (CLI::Option* o : app.get_options())
    if (o->get_type_size_max() > 0) o->check(given);
  for (CLI::App* sub : app.get_subcommands({})) refuse_missing_values(*sub);
}

int run(int argc, char** argv) {
  auto& commands = pt::app::registry();
  if (argc > 1)
    for (const auto& c : commands) {
      if (c.name != argv[1]) continue;
      if (c.pass_through) return c.pass_through(std::vector<std::string>(argv + 2, argv + argc));
      if (!c.setup) return pt::app::hand_off(c.name, argv);
    }
  CLI::App app{"pipetrain: pipeline-parallel DNN training (PipeDream, GPipe, 1F1B, 2BW, ...)", "pipetrain"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("pipetrain ") + pt::kPipetrainVersion);
  std::sort(commands.begin(), commands.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  std::map<CLI::App*, std::function<int()>> runners;
  std::vector<std::string> max_input;  // --max-input, on every command that reads files
  for (auto& c : commands) {
    CLI::App* sub = app.add_subcommand(c.name, c.description);
    if (c.setup) runners[sub] = c.setup(*sub);
    if (c.pass_through) {
      sub->allow_extras();
      continue;
    }
    sub->add_option("--max-input", max_input,
                    "KIND=SIZE: read input files of KIND up to SIZE (caps: " + pt::input_limits_text() + ")");
    for (CLI::App* nested : sub->get_subcommands({})) nested->fallthrough();
    refuse_missing_values(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message (or the help); a bad flag exits 2 like every usage error.
    return app.exit(e) == 0 ? 0 : 2;
  }
  std::string name = "pipetrain";
  try {
    for (const auto& spec : max_input) pt::set_input_limit(spec);
    for (auto& [sub, run] : runners) {
      if (sub->parsed()) {
        name += " " + sub->get_name();
        return run();
      }
    }
  } catch (const pt::UsageError& e) {
    std::cerr << name << ": error: " << pt::printable(e.what()) << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << name << ": error: " << pt::printable(e.what()) << "\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace pt::app

// Ends without running static destructors: every file a command writes is closed by then, and
// LibTorch's destructors deregister each of its thousands of operators, writing pages a forked
// gloo worker shares with its launcher (copied one fault at a time): 0.3-0.5 s of CPU for each
// process of a short `train`.
// What a command printed is its output (`plan --json > plan.json`, `calibrate --refit C > new.json`):
// a write that failed (a full disk, a closed pipe end) fails the command, where it exited 0 with
// the output lost.
int main(int argc, char** argv) {
  // Line by line even into a pipe or a file, as into a terminal: `train ... > log 2>&1` keeps the
  // order things happened in, what goes to stderr (progress, "wrote ...", a worker's error) between
  // the standard output's lines, not before all of them or inside one where a 4 KiB buffer ended.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int status = pt::app::run(argc, argv);
  errno = 0;
  std::cout.flush();
  bool lost = std::fflush(stdout) != 0 || std::ferror(stdout) || !std::cout.good();
  if (lost) {
    std::cerr << "pipetrain: error: writing the standard output failed"
              << (errno != 0 ? std::string(": ") + std::strerror(errno) : std::string()) << "\n";
    if (status == 0) status = 1;
  }
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(status);
}
