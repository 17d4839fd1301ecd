// pipetrain export: a user's PyTorch model as a chain of layers (python/pipetrain/export.py),
// run with Debian's python3-torch, which the README's setup installs.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "apps/command.h"

namespace pt::app {
namespace {

int run_export(const std::vector<std::string>& args) {
  const char* env = std::getenv("PIPETRAIN_PYTHON");
  std::string python = env && *env ? env : "/usr/bin/python3";
  std::string script = std::string(PT_PYTHON_DIR) + "/pipetrain/export.py";
  if (::access(script.c_str(), R_OK) != 0) {
    std::cerr << "pipetrain export: " << script << " is missing: this pipetrain was built from a source tree that "
              << "is no longer there\n";
    return 1;
  }
  if (::access(python.c_str(), X_OK) != 0) {
    std::cerr << "pipetrain export: needs " << python << " with PyTorch: apt-get install python3-torch "
              << "python3-torchvision (or set PIPETRAIN_PYTHON)\n";
    return 1;
  }
  std::vector<std::string> argv_s{python, script};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  // TorchScript writes a module's constants in the order of a Python set, which follows the
  // string hash's per-process seed: the same model exported twice gave two files (two SHA-256s,
  // and pipetrain.weights refused a checkpoint of the other). A fixed seed makes the file the same.
  ::setenv("PYTHONHASHSEED", "0", /*overwrite=*/0);
  ::execv(python.c_str(), argv.data());
  std::cerr << "pipetrain export: cannot run " << python << ": " << std::strerror(errno) << "\n";
  return 1;
}

Register export_command({"export", "Export your PyTorch model (MODULE:CALLABLE) as a chain of layers pipetrain trains (--help)",
              nullptr, run_export});

}  // namespace
}  // namespace pt::app
