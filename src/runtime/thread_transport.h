#pragma once
// The `threads` transport: every worker a thread of one process; tensors are handed over in
// memory (no copy: a sender never modifies a tensor after sending it).
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <tuple>

#include "runtime/transport.h"

namespace pt::runtime {

// State shared by the workers of one job.
class ThreadHub {
 public:
  // latency_us: every message waits that long after it is sent before it can be taken, a
  // network's latency per message on threads. It tests calibrate's fit against a latency it did
  // not see (tc's netem, which would set one on the testbed, is not in this machine's kernel).
  ThreadHub(int workers, double timeout_s, double latency_us = 0);

  void put(int src, int dst, int64_t tag, torch::Tensor t);
  torch::Tensor take(int src, int dst, int64_t tag);  // blocks until there, aborted or timed out
  // An all-reduce in two halves, so that no thread of its own carries it: a member adds its
  // tensors to the group's next sum and goes on; it takes the sum when it needs it, waiting
  // only for members yet to add. The last to add completes it in its own thread. Each member
  // adds to a group's sums in the order every member does (Transport's rule), so a member's
  // k-th add and take are the group's k-th sum. add returns that k.
  // `values` false: the reduction synchronises its members and sums nothing (ThreadTransport's
  // emulated gradients).
  uint64_t allreduce_add(int rank, const std::vector<torch::Tensor>& tensors, const std::vector<int>& group,
                         bool values = true);
  void allreduce_take(int rank, std::vector<torch::Tensor>& tensors, const std::vector<int>& group, uint64_t k);
  void allreduce_sum(int rank, std::vector<torch::Tensor>& tensors, const std::vector<int>& group) {
    if (group.size() > 1) allreduce_take(rank, tensors, group, allreduce_add(rank, tensors, group));
  }
  void abort(const std::string& why);
  int workers() const { return workers_; }
  // Transport::pause_barrier and progress, for worker `rank`.
  void pause_barrier(int rank);
  void progress();

 private:
  void check_aborted_locked() const;
  int workers_;
  std::chrono::duration<double> timeout_;
  void notify_locked(const std::vector<int>& ranks);
  std::mutex mu_;
  // One per worker: a message or an all-reduce wakes only the workers it concerns. One for all
  // woke every waiting worker at every message, which on shared
  // cores took the cores from those computing.
  std::vector<std::condition_variable> cvs_;
  std::chrono::duration<double> latency_;
  using Clock = std::chrono::steady_clock;
  std::map<std::tuple<int, int, int64_t>, std::vector<std::pair<torch::Tensor, Clock::time_point>>> mailboxes_;
  // A group's sums under way, by their number: the members' contributions, then the result
  // until every member has taken it. Several may be under way (a stage's buckets). The sum adds
  // the members in the group's order whatever order they arrive in, as a gloo ring's does: in
  // arrival order three replicas' sums differed run to run (float addition does not associate),
  // and so did the weights of a run repeated. A member ahead of its turn leaves its tensors
  // parked (the transport's contract keeps them untouched until its wait), not a copy.
  struct Reduction {
    std::vector<torch::Tensor> sum;
    std::map<size_t, std::vector<torch::Tensor>> parked;  // by place in the group
    size_t summed = 0;                                     // the first `summed` places are in `sum`
    int arrived = 0, collected = 0;
  };
  std::map<std::pair<std::vector<int>, uint64_t>, Reduction> reductions_;
  std::map<std::pair<std::vector<int>, int>, uint64_t> added_;  // (group, member) -> its sums begun
  std::string abort_reason_;
  std::map<int, int64_t> pauses_;          // worker -> the pauses it entered
  std::map<int64_t, int> pause_arrived_;   // pause -> its workers arrived (erased once all left)
  std::map<int64_t, int> pause_left_;
  uint64_t progress_ = 0;                  // progress() calls, all workers'
};

class ThreadTransport : public Transport {
 public:
  ThreadTransport(std::shared_ptr<ThreadHub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return hub_->workers(); }
  std::shared_ptr<PendingTransfer> isend(const torch::Tensor& t, int peer, int64_t tag) override;
  std::shared_ptr<PendingTransfer> irecv(int peer, int64_t tag) override;
  void allreduce_sum(std::vector<torch::Tensor>& tensors, const std::vector<int>& group) override;
  // Adds t to the sum now; the transfer's wait takes the sum into t.
  std::shared_ptr<PendingTransfer> allreduce_start(torch::Tensor t, const std::vector<int>& group) override;
  void abort(const std::string& why) override { hub_->abort(why); }
  void pause_barrier() override { hub_->pause_barrier(rank_); }
  void progress() override { hub_->progress(); }
  // An emulated model's gradients are zeros, and on threads the simulator charges their
  // all-reduce no time: allreduce_start then only synchronises. Summed, vgg16's 553 MB of
  // gradients on 4 data-parallel workers took the run to 0.06 of its simulated throughput.
  void sum_no_gradients() { gradient_values_ = false; }

 private:
  std::shared_ptr<ThreadHub> hub_;
  int rank_;
  bool gradient_values_ = true;
};

}  // namespace pt::runtime
