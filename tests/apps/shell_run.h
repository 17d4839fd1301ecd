#pragma once
// Runs a shell command for the end-to-end tests of the pipetrain binary: its exit code and its
// output. `timeout` turns a hang into exit code 124, so a test fails instead of waiting forever.
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace pt::testing {

struct ShellRun {
  int exit_code = -1;
  std::string output;  // stdout, and stderr too unless the command redirects it
};

inline ShellRun shell_run(const std::string& command, bool with_stderr = true) {
  std::string cmd = "timeout 120 " + command + (with_stderr ? " 2>&1" : "");
  ShellRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace pt::testing
