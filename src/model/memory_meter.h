#pragma once
// Measured memory: LibTorch's CPU allocator wrapped so that every allocation is charged to the
// account of the thread that makes it (a worker, or the profiler) until it is freed, whichever
// thread frees it. The runtime's peak memory per worker and the profiler's stash bytes per
// layer are read from it; the memory model (schedule/memory.h) is checked against them.
// Threads without an account allocate as before, uncharged.
#include <atomic>
#include <cstdint>
#include <memory>

namespace c10 {
class DataPtr;
}

namespace pt::model {

class MemoryAccount {
 public:
  int64_t live() const { return live_.load(std::memory_order_relaxed); }
  int64_t peak() const { return peak_.load(std::memory_order_relaxed); }
  void reset_peak() { peak_.store(live(), std::memory_order_relaxed); }
  void add(int64_t bytes);
  void sub(int64_t bytes) { live_.fetch_sub(bytes, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> live_{0}, peak_{0};
};

// Installs the counting allocator (once per process; later calls do nothing). Allocations made
// before it are never charged.
void install_memory_meter();

// Charges the calling thread's allocations to `account` while the scope lives (nullptr: none).
// Each allocation keeps its account alive until freed.
class ChargeTo {
 public:
  explicit ChargeTo(std::shared_ptr<MemoryAccount> account);
  ~ChargeTo();
  ChargeTo(const ChargeTo&) = delete;
  ChargeTo& operator=(const ChargeTo&) = delete;

 private:
  std::shared_ptr<MemoryAccount> previous_;
};

// The calling thread's account (nullptr when none).
std::shared_ptr<MemoryAccount> charged_account();

// Moves a block's charge to `account` (nullptr: none) from whichever it was charged to: a
// transport's thread allocates what arrives before it knows which receive takes it. A block the
// counting allocator did not make is left as it is.
void move_charge(const c10::DataPtr& block, std::shared_ptr<MemoryAccount> account);

// This process's peak resident set as the OS counts it (/proc/self/status's VmHWM; getrusage's
// ru_maxrss where that is unreadable), in bytes: what a memory limit (a device's size, a cgroup)
// holds a worker to. Beyond the accounts above it holds LibTorch's code and data, the data set,
// the runtime's buffers and freed blocks malloc keeps. Not ru_maxrss: it survives execve, so a
// gloo worker the launcher forked and exec'd started at the launcher's resident set.
int64_t process_peak_rss_bytes();
// Its resident set now (/proc/self/statm), in bytes.
int64_t process_rss_bytes();
// The part of it that is shared memory this process mapped and touched (/proc/self/status's
// RssShmem: gloo workers' rings and all-reduce slots on one host), in bytes; 0 where unknown.
int64_t process_shared_memory_bytes();

}  // namespace pt::model
