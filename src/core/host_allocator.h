#pragma once
// The host allocator's settings for training and for replaying plans: glibc's malloc gives a
// freed block of a few MB back to the kernel and faults it in again on the next allocation. A
// training step frees and reallocates the same activations every step, so on a virtual machine,
// where a page fault is dear, that costs more than the compute: plain PyTorch trained mnist-cnn
// here at 1,200-1,700 samples/s, and 4,300-4,600 with the settings below. pipetrain's own steps
// mostly reuse their blocks already: its gain here is inside this machine's run-to-run noise.
// The planner's replays each allocate and free a few MB (action lists, link bookings, traces):
// over the 52 default-model cases of bench/plan_speed, 3.38 -> 3.06 s (kernel 0.80 -> 0.66 s),
// the median of 3 paired passes, the same plans.
namespace pt {

// Once per process, before training, profiling or replaying plans (plan, simulate, compare):
// blocks under 32 MiB come from the heap, and up to 256 MiB freed at its top stays mapped for
// reuse. The memory meter counts allocations, not resident pages, so measured peaks are
// unchanged. bench/runtime_vs_peers.sh gives its Python peers the same settings through
// GLIBC_TUNABLES.
void keep_freed_host_memory();

// Gives the blocks malloc keeps for reuse back to the kernel (malloc_trim): where a process has
// freed much it will not allocate again, before it forks workers (a child's RSS counts the
// pages it shares with its parent) and after the profiler drops a layer it built to measure.
void release_freed_host_memory();

}  // namespace pt
