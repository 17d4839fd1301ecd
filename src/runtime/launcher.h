#pragma once
// `pipetrain train --transport gloo` without torchrun or mpirun: this process starts one child
// process per worker (itself again, with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT and a fresh
// PIPETRAIN_JOB_SECRET set), waits for them, and when one fails stops the others, so a job never
// outlives its first failure.
#include <string>
#include <vector>

#include "plan/plan.h"

namespace pt::runtime {

// True when this process is one worker of a gloo job (RANK or OMPI_COMM_WORLD_RANK is set).
bool launched_as_gloo_worker();
// True when this process is one worker of a gloo job of several that pipetrain's own launcher
// did not start (torchrun, mpirun, by hand): no launcher stops the others when it fails.
bool started_apart();

// The plan file of the launch_gloo_job that started this worker, or "" when none did. A
// launch plan this process did not get from its launcher (set by hand, inherited from a shell,
// or in a process that is no worker) is a UsageError, not a plan to follow.
std::string launched_plan_path();

// `pipetrain train --transport gloo` on this host: hands `plan` to every worker (an in-memory
// file they inherit, at launched_plan_path), so that all run the same one even when it was
// measured rather than read from a file, and runs this process's command line as `workers`
// workers (launch_gloo_workers): the schedule's, which may place several of the plan's stages on
// one. Leaves no file behind. Returns 0 when all succeed.
int launch_gloo_job(const plan::Plan& plan, int workers, const std::string& trace_path);

// Where this process runs as a gloo job's launcher or becomes one of its workers.
struct Launch {
  bool worker = false;  // this process is a worker forked by the launcher: run the worker's part
  int status = 0;       // the launcher's: 0 when every worker succeeded (launch_gloo_workers)
  bool forked = false;  // the launcher's: its workers were forks (they share its pages), not new processes
  std::vector<int> signalled;  // the launcher's: the workers a signal ended (none ran its own clean-up)
  int interrupted = 0;  // the launcher's: the signal (SIGINT, SIGTERM) that told it to stop the workers
};

// As launch_gloo_job, but the workers are forks of this process, which has set up the command
// already (LibTorch, the data, the model and the plan): each returns here as a worker, with
// RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and the job secret set, to run the worker's part.
// That saves each worker about half a second of CPU here, mostly loading LibTorch again. A
// process of several threads cannot fork safely (a lock another thread holds stays locked in
// the child; LibTorch's thread pools do not survive fork): it starts its command line again
// (launch_gloo_job), and its workers take the worker's part there.
Launch fork_gloo_job(const plan::Plan& plan, int workers, const std::string& trace_path);

// This process's command line, from /proc/self/cmdline (the launcher re-runs it per worker).
std::vector<std::string> self_argv();

// A TCP port free on 127.0.0.1 now (for the rendezvous).
int free_tcp_port();

// A TCP port on 127.0.0.1 held for the rendezvous: a socket bound to it, not listening (a
// worker connecting early is refused, and retries, as before worker 0 starts). The launcher's
// worker 0 inherits the socket (take_reserved_rendezvous_socket): with the port only looked up
// and closed, another process could take it before worker 0, a second later, bound it.
struct ReservedPort {
  int fd = -1;
  int port = 0;
};
ReservedPort reserve_tcp_port();

// The socket reserve_tcp_port held for `port`, inherited from the launcher (close-on-exec set
// again; taken once), or -1 where this process has none for that port.
int take_reserved_rendezvous_socket(int port);

// As launch_gloo_workers, with workers forked from this process where it runs one thread
// (fork_gloo_job), else `argv` again.
Launch fork_gloo_workers(int world_size, const std::vector<std::string>& argv, const std::string& trace_path = "",
                         double grace_s = 3);

// Runs `argv` (argv[0] ignored: /proc/self/exe runs) as world_size workers on this host.
// Returns 0 when all succeed. When a worker exits non-zero or dies by a signal, prints
// "pipetrain: worker <r> <how>; stopping the other workers", sends SIGTERM to the rest and
// SIGKILL after `grace_s`, and returns 1. When trace_path is set, merges the workers'
// trace_path.worker<r> files into trace_path (schedule::merge_worker_traces).
int launch_gloo_workers(int world_size, const std::vector<std::string>& argv, const std::string& trace_path = "",
                        double grace_s = 3);

}  // namespace pt::runtime
