#pragma once
// The all-reduce of gloo workers that share a host, through a region they map (shm_region.h)
// instead of gloo's TCP ring: a 1 MiB all-reduce of 2 processes took 0.7 ms or 3-4 ms from one
// calibration to the next over gloo (its spinner, shm_region.h), 0.22-0.66 ms so.
//
// Each round sums one chunk of the tensor: every member copies its chunk into its own slot, all
// meet, each sums its shard of the chunk across the slots into its own slot, all meet, and each
// copies every shard back. Rounds alternate between two sets of slots, so a member that races
// ahead overwrites nothing another still reads. Members meet through a futex word shared by all:
// each raises its own phase and rings it. Every wait has the transport's deadline, ends when this
// worker's job is aborted or a member aborts the region, and names the members that did not
// arrive (or have exited).
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "runtime/shm_region.h"

namespace pt::runtime {

class ShmAllreduce {
 public:
  static constexpr int64_t kChunkBytes = int64_t{4} << 20;

  // Collective over `ranks` (sorted, containing `rank`), through `store` under keys starting with
  // `prefix`: null on every member alike where they do not share a region (shm_region.h).
  static std::unique_ptr<ShmAllreduce> connect(c10d::Store& store, const std::string& prefix,
                                               const std::vector<int>& ranks, int rank, bool enabled);
  ~ShmAllreduce();

  // The region's bytes one of `members` maps resident once it has summed messages of up to
  // `message_bytes` over two rounds or more: its header, and of each set of slots its own slot's
  // chunk and, of every other member's, the shard it sums and the shard it copies back.
  static int64_t touched_bytes(int members, int64_t message_bytes);
  // The same, exactly, for steps that each sum `messages` in turn: a message runs a round per chunk,
  // and the rounds alternate between the two sets of slots, so a set may only ever see a short
  // remainder (a tied embedding of 4 MiB and its flag, 4 MiB and 4 bytes, filled one set: 8 MiB
  // where the bound above counts 16).
  static int64_t touched_bytes(int members, const std::vector<int64_t>& messages);
  // Whether sum() takes this tensor: a contiguous CPU float or double tensor.
  static bool takes(const torch::Tensor& t);
  // Sums `t` in place across the members. `check_aborted` throws where this worker's job was
  // aborted; TransportError (prefixed with `what`) at the deadline, or where a member aborted the
  // region or exited, naming them.
  void sum(torch::Tensor t, std::chrono::milliseconds timeout, const std::function<void()>& check_aborted,
           const std::string& what);
  // Ends every member's wait in this region (this worker failed).
  void abort();

 private:
  ShmAllreduce(std::unique_ptr<SharedRegion> region, int64_t chunk_bytes);
  char* slot(int64_t round, int member) const;
  // Marks this member at `phase` and waits until every member is there.
  void meet(uint64_t phase, std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds timeout,
            const std::function<void()>& check_aborted, const std::string& what);

  std::unique_ptr<SharedRegion> region_;
  int64_t chunk_bytes_;  // a slot's: the region's budget shared out among the members
  uint64_t phase_ = 0;   // phases this member has reached (two a round)
  int64_t round_ = 0;
};

}  // namespace pt::runtime
