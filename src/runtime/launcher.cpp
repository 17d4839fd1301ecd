#include "runtime/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <thread>

#include "core/error.h"
#include "core/host_allocator.h"
#include "runtime/gloo_transport.h"
#include "runtime/job_secret.h"
#include "schedule/trace.h"

namespace pt::runtime {

namespace {
// Set by launch_gloo_job for its workers: "<launcher pid>:<plan file>", the plan every worker
// runs. The pid binds it to the process that set it: a value left in a shell or set by hand is
// refused, not followed (a plain run would take its plan over --stages; each worker of a
// torchrun job would train alone).
constexpr const char* kLaunchPlanVar = "PIPETRAIN_LAUNCH_PLAN";
// "FD:PORT": the socket that holds the rendezvous port for worker 0 (reserve_tcp_port).
constexpr const char* kRendezvousSocketVar = "PIPETRAIN_RENDEZVOUS_SOCKET";

// Whether this process runs one thread, and so may fork (/proc/self/task lists its threads).
bool single_threaded() {
  std::error_code ec;
  int threads = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/task", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec))
    ++threads;
  return !ec && threads == 1;
}
}  // namespace

bool launched_as_gloo_worker() { return gloo_rank_in_env(); }

bool started_apart() { return launched_as_gloo_worker() && gloo_world_size_in_env() > 1 && !std::getenv(kLaunchPlanVar); }

std::string launched_plan_path() {
  const char* p = std::getenv(kLaunchPlanVar);
  if (!p) return "";
  std::string value = p;
  size_t colon = value.find(':');
  std::string pid = value.substr(0, colon == std::string::npos ? 0 : colon);
  bool from_parent = colon != std::string::npos && !pid.empty() &&
                     pid.find_first_not_of("0123456789") == std::string::npos && pid.size() < 10 &&
                     std::stol(pid) == static_cast<long>(::getppid());
  if (!from_parent || !launched_as_gloo_worker())
    throw UsageError(str(kLaunchPlanVar, " is set (to '", value, "'), but this process was not started by `pipetrain ",
                         "train --transport gloo`, which sets it for the workers it starts: unset it"));
  return value.substr(colon + 1);
}

namespace {

// The workers' parts of --trace merged into trace_path. After a failure too where every worker
// wrote its part: a loss that diverged fails the run in its report, after training, and a threads
// run keeps its trace so (the parts were left unmerged and unnamed). Else the parts written are
// named, as they are when the merge fails. Parts older than `since` are an earlier run's: a
// worker whose part could not be written left a failed run's in its place. `failed`: the run
// failed (an interrupt too, which merges nothing: a second Ctrl-C would wait for the merge).
void merge_trace_parts(int world_size, const std::string& trace_path, bool failed, bool interrupted,
                       std::filesystem::file_time_type since) {
  std::string written, missing;  // this run's parts there, and the workers of those not, for the messages
  int parts = 0;
  for (int r = 0; r < world_size; ++r) {
    std::string part = trace_path + ".worker" + std::to_string(r);
    std::error_code ec;
    if (auto at = std::filesystem::last_write_time(part, ec); !ec && at >= since)
      written += (parts++ ? ", " : "") + part;
    else
      missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  }
  std::string stay = parts ? str("; the parts written stay: ", written) : std::string();
  if (failed && (parts < world_size || interrupted)) {  // killed, interrupted or failed in training
    if (parts > 0) print_line_to_stderr(str("pipetrain: --trace ", trace_path, ":", stay.substr(1)));
    return;
  }
  if (parts < world_size)
    throw RuntimeFailure(str("--trace ", trace_path, ": worker", missing.find(',') == std::string::npos ? " " : "s ",
                             missing, " wrote no part of it in this run", stay, " (the run's report is above)"));
  try {
    schedule::merge_worker_traces(world_size, trace_path);
    if (failed) print_line_to_stderr(str("wrote ", trace_path, " (every worker's part: the run failed after training)"));
  } catch (const std::exception& e) {
    std::string what = str("--trace ", trace_path, ": ", e.what(),
                           stay, " (`pipetrain trace ", trace_path, " --merge ", world_size,
                           "` joins them once every worker's is there)");
    if (failed) print_line_to_stderr("pipetrain: " + what);
    else throw RuntimeFailure(what + " (the run's report is above)");
  }
}


Launch run_workers(int world_size, const std::vector<std::string>* argv, const std::string& trace_path, double grace_s);

// Ctrl-C or a scheduler's SIGTERM to the launcher: noted here, acted on in its wait loop, so that
// it stops the workers and its caller removes a checkpoint they were writing. Killed at once, it
// left a .tmp-step of 177-249 MB behind and said nothing. Set after the workers are forked: a
// worker that inherited it would not stop.
volatile sig_atomic_t g_interrupted = 0;
void note_interrupt(int sig) { g_interrupted = sig; }

struct InterruptNoted {
  struct sigaction old_int {}, old_term {};
  InterruptNoted() {
    g_interrupted = 0;
    struct sigaction a {};
    a.sa_handler = note_interrupt;
    sigemptyset(&a.sa_mask);
    ::sigaction(SIGINT, &a, &old_int);
    ::sigaction(SIGTERM, &a, &old_term);
  }
  ~InterruptNoted() {
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGTERM, &old_term, nullptr);
  }
};

// launch_gloo_job, with what became of each worker.
Launch launch_with_plan(const plan::Plan& plan, int workers, const std::string& trace_path) {
  // The plan lives in an anonymous in-memory file that the workers inherit: nothing is left
  // behind when the launcher is killed, whatever the signal.
  std::string text = plan::to_json(plan).dump(1) + "\n";
  int fd = ::memfd_create("pipetrain-plan", 0);
  if (fd < 0) throw RuntimeFailure(str("launcher: memfd_create failed: ", std::strerror(errno)));
  for (size_t off = 0; off < text.size();) {
    ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n <= 0) {
      ::close(fd);
      throw RuntimeFailure(str("launcher: cannot write the plan: ", std::strerror(errno)));
    }
    off += static_cast<size_t>(n);
  }
  // Each worker opens its inherited descriptor by path, which starts reading at 0.
  std::string value = std::to_string(::getpid()) + ":/proc/self/fd/" + std::to_string(fd);
  ::setenv(kLaunchPlanVar, value.c_str(), 1);
  std::vector<std::string> argv = self_argv();
  Launch launch = run_workers(workers, &argv, trace_path, 3);
  ::unsetenv(kLaunchPlanVar);
  ::close(fd);
  return launch;
}
}  // namespace

int launch_gloo_job(const plan::Plan& plan, int workers, const std::string& trace_path) {
  return launch_with_plan(plan, workers, trace_path).status;
}

Launch fork_gloo_job(const plan::Plan& plan, int workers, const std::string& trace_path) {
  if (!single_threaded()) return launch_with_plan(plan, workers, trace_path);
  // One thread: no other can start one before the fork, so the workers are forks.
  Launch launch = fork_gloo_workers(workers, self_argv(), trace_path);
  launch.forked = true;
  return launch;
}

std::vector<std::string> self_argv() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> out;
  for (std::string arg; std::getline(in, arg, '\0');) out.push_back(arg);
  if (out.empty()) throw RuntimeFailure("launcher: cannot read /proc/self/cmdline");
  return out;
}

ReservedPort reserve_tcp_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw RuntimeFailure(str("launcher: socket() failed: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;  // the kernel picks one
  socklen_t len = sizeof(addr);
  int one = 1;
  if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw RuntimeFailure(str("launcher: cannot find a free port: ", std::strerror(errno)));
  }
  return {fd, ntohs(addr.sin_port)};
}

int free_tcp_port() {
  ReservedPort held = reserve_tcp_port();
  ::close(held.fd);
  return held.port;
}

int take_reserved_rendezvous_socket(int port) {
  const char* v = std::getenv(kRendezvousSocketVar);
  if (!v) return -1;
  int fd = -1, held = 0;
  bool parsed = std::sscanf(v, "%d:%d", &fd, &held) == 2;
  ::unsetenv(kRendezvousSocketVar);
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  // Only a socket bound to this very port: the variable may be stale (inherited from a shell).
  if (!parsed || held != port || fd < 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      addr.sin_family != AF_INET || ntohs(addr.sin_port) != port)
    return -1;
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  return fd;
}

namespace {

std::string describe(int status) {
  if (WIFEXITED(status)) return str("exited with status ", WEXITSTATUS(status));
  // SIGKILL is what the kernel's out-of-memory killer sends (a cgroup's limit, the machine's):
  // said, since nothing else in the message would tell.
  if (WIFSIGNALED(status))
    return str("was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")",
               WTERMSIG(status) == SIGKILL ? ": out of memory (the kernel's OOM killer), or a kill -9" : "");
  return "stopped";
}

// Whether a process is stopped (SIGSTOP, Ctrl-Z, a debugger): a stopped worker fails nothing
// itself, the others time out waiting for it, and the first of them to exit was named alone.
bool is_stopped(pid_t pid) {
  std::ifstream in(str("/proc/", pid, "/stat"));
  std::string line;
  std::getline(in, line);
  size_t end = line.rfind(')');  // the state follows the command's name, which may hold anything
  return end != std::string::npos && end + 2 < line.size() && (line[end + 2] == 'T' || line[end + 2] == 't');
}

// Starts worker `rank`: `argv` again, or where argv is null a fork of this process that returns
// 0 here with the worker's environment set (the parent gets the child's pid either way).
pid_t spawn(const std::vector<std::string>* argv, int rank, int world_size, ReservedPort port,
            const std::string& secret) {
  std::vector<std::string> env_strings = {"RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(world_size),
                                          "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port.port),
                                          std::string(kJobSecretVar) + "=" + secret};
  // Worker 0 serves the rendezvous on the socket the launcher holds the port with.
  if (rank == 0)
    env_strings.push_back(str(kRendezvousSocketVar, "=", port.fd, ":", port.port));
  // Built before fork: after it only async-signal-safe calls may run in an exec'ing child.
  std::vector<char*> args;
  if (argv)
    for (const auto& a : *argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t parent = ::getpid();
  release_freed_host_memory();  // a forked worker's RSS counts what it shares with this process
  pid_t pid = ::fork();
  if (pid < 0) throw RuntimeFailure(str("launcher: fork failed: ", std::strerror(errno)));
  if (pid == 0) {
    // A worker must not outlive its launcher (killed, or interrupted with Ctrl-C).
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    if (!argv) {  // one thread, forked: the worker's part runs on in this process
      for (auto& e : env_strings) {
        size_t eq = e.find('=');
        ::setenv(e.substr(0, eq).c_str(), e.c_str() + eq + 1, 1);
      }
      return 0;
    }
    for (auto& e : env_strings) ::putenv(const_cast<char*>(e.c_str()));
    if (rank == 0) ::fcntl(port.fd, F_SETFD, 0);  // kept across exec for worker 0 alone
    ::execv("/proc/self/exe", args.data());
    ::_exit(127);
  }
  return pid;
}

// launch_gloo_workers, or where argv is null fork_gloo_workers' forks.
Launch run_workers(int world_size, const std::vector<std::string>* argv, const std::string& trace_path, double grace_s) {
  if (world_size < 1) throw UsageError(str("launcher: world size must be >= 1, got ", world_size));
  const auto launched = std::filesystem::file_time_type::clock::now();
  ReservedPort port = reserve_tcp_port();
  // A secret of this job's own, which its workers prove to each other at rendezvous.
  std::string secret = new_job_secret();
  std::vector<pid_t> pids;
  // What is buffered now would be written again by every forked worker.
  std::cout.flush(), std::cerr.flush(), std::fflush(nullptr);
  for (int r = 0; r < world_size; ++r) {
    pids.push_back(spawn(argv, r, world_size, port, secret));
    if (pids.back() == 0) {
      if (r > 0) ::close(port.fd);
      return {true, 0, false, {}, 0};
    }
  }
  ::close(port.fd);  // worker 0 holds it now
  InterruptNoted interrupts;
  std::vector<bool> running(world_size, true);
  int left = world_size;
  int failed = -1;
  Launch out;
  // SIGTERM to the workers still running, SIGKILL to those that do not stop within grace_s
  // (stuck in a blocking call).
  auto stop_the_others = [&] {
    for (int o = 0; o < world_size; ++o)
      if (running[o]) ::kill(pids[o], SIGTERM);
    int status = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
    while (left > 0 && std::chrono::steady_clock::now() < deadline) {
      pid_t p = ::waitpid(-1, &status, WNOHANG);
      if (p > 0) {
        int q = static_cast<int>(std::find(pids.begin(), pids.end(), p) - pids.begin());
        if (q < world_size && running[q]) {
          running[q] = false;
          --left;
          if (WIFSIGNALED(status)) out.signalled.push_back(q);
          // Workers often fail together (a dead peer breaks the others' connections): report
          // every failure that is not our SIGTERM, so the root cause is named even when a
          // consequence was reaped first.
          bool ours = WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM;
          if (!ours && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
            print_line_to_stderr(str("pipetrain: worker ", q, " ", describe(status)));
        }
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    for (int o = 0; o < world_size; ++o)
      if (running[o]) ::kill(pids[o], SIGKILL), out.signalled.push_back(o);
  };
  while (left > 0) {
    if (g_interrupted && failed < 0) {
      failed = world_size;  // none of the workers: the launcher was told to stop them
      out.interrupted = g_interrupted;
      print_line_to_stderr(str("pipetrain: interrupted (", strsignal(g_interrupted), "): stopping the workers"));
      stop_the_others();
      continue;
    }
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WUNTRACED);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    int r = static_cast<int>(std::find(pids.begin(), pids.end(), pid) - pids.begin());
    if (r >= world_size) continue;  // not ours
    // Said when it happens: a worker stopped before the job starts left the others silent for
    // --rendezvous-timeout (300 s). Not where it runs again already (Ctrl-Z stopped this process
    // too, and `fg` resumed them all).
    if (WIFSTOPPED(status)) {
      if (is_stopped(pid))
        print_line_to_stderr(str("pipetrain: worker ", r, " (pid ", pid, ") is stopped (SIGSTOP, Ctrl-Z or a debugger): "
                                 "the others wait for it until their timeouts (train --timeout, --rendezvous-timeout "
                                 "while the job starts); kill -CONT ", pid, " resumes it"));
      continue;
    }
    running[r] = false;
    --left;
    if (WIFSIGNALED(status)) out.signalled.push_back(r);
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && failed < 0) {
      failed = r;
      print_line_to_stderr(str("pipetrain: worker ", r, " ", describe(status), "; stopping the other workers"));
      for (int o = 0; o < world_size; ++o)
        if (running[o] && is_stopped(pids[o]))
          print_line_to_stderr(str("pipetrain: worker ", o, " (pid ", pids[o], ") is stopped (SIGSTOP, Ctrl-Z or a "
                                   "debugger): the others' timeouts waiting on it follow from that"));
      stop_the_others();
    }
  }
  if (failed >= 0) out.status = out.interrupted ? 128 + out.interrupted : 1;
  if (!trace_path.empty()) merge_trace_parts(world_size, trace_path, failed >= 0, out.interrupted != 0, launched);
  return out;
}

}  // namespace

int launch_gloo_workers(int world_size, const std::vector<std::string>& argv, const std::string& trace_path,
                        double grace_s) {
  return run_workers(world_size, &argv, trace_path, grace_s).status;
}

Launch fork_gloo_workers(int world_size, const std::vector<std::string>& argv, const std::string& trace_path,
                         double grace_s) {
  return run_workers(world_size, single_threaded() ? nullptr : &argv, trace_path, grace_s);
}


}  // namespace pt::runtime
