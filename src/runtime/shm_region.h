#pragma once
// A region of /dev/shm that the gloo workers of a group map when they share a host (one boot of
// one kernel, one network and one pid namespace): what shm_allreduce.h and shm_channel.h build on.
// Over loopback, gloo's device thread spins on a socket it cannot read while another of its
// threads holds the pair's lock; on 2 cores that spinner keeps the lock holder off a core until
// the kernel's next tick (4 ms), so every hand-over through gloo may cost a tick (docs/runtime.md).
//
// The region's first page is its own: each member's pid and which member aborted it. Its name is
// removed once every member has it mapped, so a killed job leaves none behind; it is reserved
// when made, so a full /dev/shm refuses it then (the group keeps gloo) rather than with SIGBUS.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace pt::runtime {

class SharedRegion {
 public:
  // What must be equal for two workers to share memory: this boot of the kernel, and the network
  // and pid namespaces (the emulated testbed gives each worker a network of its own, whose links
  // its transfers must cross). Empty where it cannot be read.
  static std::string host_key();
  // This boot of the kernel (its random boot_id), empty where it cannot be read: processes that
  // read the same one share CLOCK_MONOTONIC, the steady clock their traces are timed on.
  static std::string boot_id();

  // Collective over `ranks` (sorted, containing `rank`), through `store` under keys starting with
  // `prefix`: `bytes` shared by all of them (after the region's own page), or null on every member
  // alike where they are not on one host, `enabled` is false on any of them, or the region cannot
  // be made or mapped.
  static std::unique_ptr<SharedRegion> connect(c10d::Store& store, const std::string& prefix,
                                               const std::vector<int>& ranks, int rank, bool enabled, size_t bytes);
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  char* data() const;  // the members' bytes, zeroed when made
  int me() const { return me_; }  // this worker's place among ranks()
  const std::vector<int>& ranks() const { return ranks_; }

  // Marks the region aborted by this worker (its members' waits end); the worker that did, or -1.
  void abort();
  int aborted_by() const;
  // Throws JobAborted "<what>: worker R aborted the job" or TransportError "<what>: worker R
  // (process P) has exited" where a member of `members` (places among ranks()) did either.
  void check_members(const std::vector<int>& members, const std::string& what) const;

  struct Page;  // the region's own first page (shm_region.cpp)

 private:
  SharedRegion(void* base, size_t bytes, int me, std::vector<int> ranks);
  Page& page() const;
  void* base_;
  size_t bytes_;
  int me_;
  std::vector<int> ranks_;
};

// How long a waiter on a futex word sleeps between its checks of stop, abort, its deadline and
// its peers (shm_channel.cpp, shm_allreduce.cpp).
constexpr auto kFutexSlice = std::chrono::milliseconds(50);

// A futex word in a region: wake every waiter; wait while it still reads `seen`, for at most `slice`.
void futex_wake_all(std::atomic<uint32_t>* word);
void futex_wait(std::atomic<uint32_t>* word, uint32_t seen, std::chrono::milliseconds slice);

}  // namespace pt::runtime
