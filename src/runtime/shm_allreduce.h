#pragma once
// The all-reduce of gloo workers that share a host (one kernel, one network and one pid
// namespace): through a shared memory region instead of gloo's TCP ring. Over loopback, gloo's
// device thread spins on a socket it cannot read while another of its threads holds the pair's
// lock; on 2 cores that spinner takes the core the lock holder needs until the kernel's next tick
// (4 ms), so a 1 MiB all-reduce of 2 processes took 0.7 ms or 3-4 ms from one calibration to the
// next, and data parallelism on 2 processes ran at 4,200 samples/s where threads ran at 6,450.
//
// Each round sums one chunk (up to kChunkBytes) of the tensor: every member copies its chunk into
// its own slot, all meet, each sums its shard of the chunk across the slots into its own slot,
// all meet, and each copies every shard back. Rounds alternate between two sets of slots, so a
// member that races ahead overwrites nothing another still reads. Members meet through a futex
// word shared by all: each raises its own phase and rings it. Every wait has the transport's
// deadline, ends when this worker's job is aborted or a member aborts the region, and names the
// members that did not arrive (or have exited).
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace pt::runtime {

class ShmAllreduce {
 public:
  static constexpr int64_t kChunkBytes = int64_t{4} << 20;

  // What must be equal for two workers to share memory: this boot of the kernel, and the network
  // and pid namespaces (the emulated testbed gives each worker a network of its own, whose links
  // its all-reduces must cross). Empty where it cannot be read.
  static std::string host_key();

  // Collective over `ranks` (sorted, containing `rank`), through `store` under keys starting with
  // `prefix`: a region shared by all of them, or null on every member alike where they are not on
  // one host, `enabled` is false on any of them, or the region cannot be made or mapped.
  static std::unique_ptr<ShmAllreduce> connect(c10d::Store& store, const std::string& prefix,
                                               const std::vector<int>& ranks, int rank, bool enabled);

  ~ShmAllreduce();
  ShmAllreduce(const ShmAllreduce&) = delete;
  ShmAllreduce& operator=(const ShmAllreduce&) = delete;

  // Whether sum() takes this tensor: a contiguous CPU float or double tensor.
  static bool takes(const torch::Tensor& t);
  // Sums `t` in place across the members. `check_aborted` throws where this worker's job was
  // aborted; TransportError (prefixed with `what`) at the deadline, or where a member aborted the
  // region or exited, naming them.
  void sum(torch::Tensor t, std::chrono::milliseconds timeout, const std::function<void()>& check_aborted,
           const std::string& what);
  // Ends every member's wait in this region (this worker failed).
  void abort();

  struct Header;  // the region's first cache line (shm_allreduce.cpp)

 private:
  ShmAllreduce(void* base, size_t bytes, int me, std::vector<int> ranks);
  Header& header() const;
  char* slot(int64_t round, int member) const;
  // Marks this member at `phase` and waits until every member is there.
  void meet(uint64_t phase, std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds timeout,
            const std::function<void()>& check_aborted, const std::string& what);

  void* base_;
  size_t bytes_;
  int me_;  // this worker's place among ranks_
  std::vector<int> ranks_;
  uint64_t phase_ = 0;  // phases this member has reached (two a round)
  int64_t round_ = 0;
};

}  // namespace pt::runtime
