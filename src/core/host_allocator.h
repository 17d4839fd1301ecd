#pragma once
// The host allocator. pipetrain-torch, which trains and profiles, allocates through tcmalloc
// (linked in: cmake/pipetrain.cmake, pt_host_allocator). glibc's malloc gives each thread an
// arena of its own and keeps what a step frees there: 4 worker threads of an MLP of 2048-wide
// layers (1f1b, microbatches of 16) held 830-870 MiB resident at 453 MiB of tensors, and 4 gloo
// ranks 307-330 MiB each; under tcmalloc 640 MiB and 235 MiB, with mnist-cnn's speed and peak
// unchanged (paired runs, docs/runtime.md).
//
// Where glibc's malloc allocates (the front end's plan, simulate and compare; the tests), it is
// told to keep freed blocks: by default it gives a freed block of a few MB back to the kernel and
// faults it in again on the next allocation. A training step frees and reallocates the same
// activations every step, so on a virtual machine, where a page fault is dear, that cost more
// than the compute: plain PyTorch trained mnist-cnn here at 1,200-1,700 samples/s, and
// 4,300-4,600 with the settings below. The planner's replays each allocate and free a few MB
// (action lists, link bookings, traces): over the 52 default-model cases of bench/plan_speed,
// 3.38 -> 3.06 s (kernel 0.80 -> 0.66 s), the median of 3 paired passes, the same plans.
namespace pt {

// Once per process, before training, profiling or replaying plans (plan, simulate, compare):
// under glibc's malloc, blocks under 32 MiB come from the heap, and up to 256 MiB freed at its
// top stays mapped for reuse (tcmalloc keeps freed spans for reuse by itself). The memory meter
// counts allocations, not resident pages, so measured peaks are unchanged.
void keep_freed_host_memory();

// Gives the blocks the allocator keeps for reuse back to the kernel (tcmalloc's
// ReleaseFreeMemory, else glibc's malloc_trim): where a process has freed much it will not
// allocate again, before it forks workers (a child's RSS counts the pages it shares with its
// parent) and after the profiler drops a layer it built to measure.
void release_freed_host_memory();

}  // namespace pt
