#include "job/core_pinning.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>

#include "core/error.h"
#include "runtime/gloo_transport.h"
#include "sim/core_placement.h"
#include "sim/stage_costs.h"

namespace pt::job {

namespace {

std::vector<int> read_allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) out.push_back(cpu);
  return out;
}

// The CPUs this process could run on before any of its threads pinned itself, read once: a gloo
// rank pins its whole process, and its report must still see the host's cores (a fork inherits
// what its parent read).
const std::vector<int>& allowed_cpus() {
  static const std::vector<int> allowed = read_allowed_cpus();
  return allowed;
}

}  // namespace

std::vector<int> usable_cpu_ids() { return allowed_cpus(); }

int usable_cores() { return std::max<int>(1, static_cast<int>(allowed_cpus().size())); }

void place_workers(Job& job, const profile::Profile* profile, int cores) {
  job.cores_of_workers.clear();
  if (cores < 1 || job.workers() <= cores) return;
  const schedule::Schedule& s = *job.typical;
  if (profile) {
    try {
      job.cores_of_workers = sim::place_on_cores(s, sim::stage_costs(s, *profile), cores);
    } catch (const ConfigError&) {
      // A profile that does not fit the plan: the prediction says so (predict_host_run); the run
      // goes on unpinned.
    }
    return;
  }
  const plan::Plan& plan = job.plan;
  if (plan.num_stages() != s.num_stages) return;
  std::vector<sim::StageCost> costs(static_cast<size_t>(s.num_stages));
  for (int st = 0; st < s.num_stages; ++st) {
    // A replica's share of the stage's forward and backward, per minibatch: the whole stage's is
    // that times its replicas. Only the workers' shares of it weigh in the placement, which the
    // split between forward and backward (a backward about twice a forward) barely moves.
    double whole = plan.stages[static_cast<size_t>(st)].compute_ms * plan.stages[static_cast<size_t>(st)].replicas;
    if (!(whole > 0)) return;
    costs[static_cast<size_t>(st)].forward_ms = whole / 3;
    costs[static_cast<size_t>(st)].backward_ms = 2 * whole / 3;
  }
  job.cores_of_workers = sim::place_on_cores(s, costs, cores);
}

bool workers_share_this_host() {
  int local = runtime::gloo_local_world_size_in_env(), world = runtime::gloo_world_size_in_env();
  return local <= 0 || world <= 0 || local >= world;
}

void pin_to_core(int core) {
  const std::vector<int>& allowed = allowed_cpus();
  if (allowed.empty() || core < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(allowed[static_cast<size_t>(core) % allowed.size()], &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

void unpin() {
  const std::vector<int>& allowed = allowed_cpus();
  if (allowed.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : allowed) CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

}  // namespace pt::job
