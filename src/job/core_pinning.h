#pragma once
// Workers that outnumber this host's cores, each pinned to the core sim::place_on_cores gives it:
// the run shares its cores as the prediction simulates (sim::SimOptions::placement), where the
// kernel's own balancing of 4 threads over 2 cores left the busiest replica of the demo's plan
// 11.6 ms a minibatch for 7.3 ms of its compute, under what one pool of cores predicts.
#include <vector>

#include "job/job.h"
#include "profile/profile.h"

namespace pt::job {

// The cores this process may run on (sched_getaffinity), at least 1.
int usable_cores();
// Their CPU numbers, in the order pin_to_core counts them (empty where the kernel would not say).
std::vector<int> usable_cpu_ids();

// Sets job.cores_of_workers: where the job's workers outnumber `cores` and the profile is the
// host's own (not emulated compute, which holds no core), each worker's core by its work per
// minibatch of the typical schedule; else none (the kernel places them). Without a profile, the
// work is the plan's: each stage's compute per minibatch as the planner timed it (a plan file's
// compute_ms), since `plan` replays its candidates pinned so (sim::SimOptions::pin_as_train), and
// `train --plan` alone ran them unpinned: the zoo GPT's chosen 2-2 on 4 threads of 2 cores at
// 363-368 samples/s, pinned 375-378. None where the plan has no times either.
void place_workers(Job& job, const profile::Profile* profile, int cores);

// Whether every worker of this job runs on this host, as far as the environment says: not where
// torchrun's LOCAL_WORLD_SIZE or mpirun's OMPI_COMM_WORLD_LOCAL_SIZE counts fewer than the job's
// workers. A placement on this host's cores of workers spread over several hosts would put two of
// this host's on one core and leave another idle.
bool workers_share_this_host();

// Pins the calling thread (and the threads it starts after) to the core-th of the CPUs this
// process may run on. Silent where the kernel refuses: the run goes on unpinned.
void pin_to_core(int core);
// Lets the calling thread run on every CPU this process could at its start again.
void unpin();

}  // namespace pt::job
