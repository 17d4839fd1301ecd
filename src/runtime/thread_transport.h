#pragma once
// The `threads` transport: every worker a thread of one process; tensors are handed over in
// memory (no copy: a sender never modifies a tensor after sending it).
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <tuple>

#include "runtime/comm_thread.h"
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
  void allreduce_sum(int rank, std::vector<torch::Tensor>& tensors, const std::vector<int>& group);
  void abort(const std::string& why);
  int workers() const { return workers_; }

 private:
  void check_aborted_locked() const;
  int workers_;
  std::chrono::duration<double> timeout_;
  void notify_locked(const std::vector<int>& ranks);
  std::mutex mu_;
  // One per worker: a message or an all-reduce wakes only the workers it concerns. One for all
  // woke every waiting worker (and its communication thread) at every message, which on shared
  // cores took the cores from those computing.
  std::vector<std::condition_variable> cvs_;
  std::chrono::duration<double> latency_;
  using Clock = std::chrono::steady_clock;
  std::map<std::tuple<int, int, int64_t>, std::vector<std::pair<torch::Tensor, Clock::time_point>>> mailboxes_;
  // One all-reduce in progress per group: contributions, then the result for each member.
  struct Reduction {
    std::vector<torch::Tensor> sum;
    int arrived = 0, collected = 0;
    uint64_t generation = 0;
    bool done = false;
  };
  std::map<std::vector<int>, Reduction> reductions_;
  std::string abort_reason_;
};

class ThreadTransport : public Transport {
 public:
  ThreadTransport(std::shared_ptr<ThreadHub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return hub_->workers(); }
  std::shared_ptr<PendingTransfer> isend(const torch::Tensor& t, int peer, int64_t tag) override;
  std::shared_ptr<PendingTransfer> irecv(int peer, int64_t tag) override;
  void allreduce_sum(std::vector<torch::Tensor>& tensors, const std::vector<int>& group) override;
  // Runs on this worker's communication thread.
  std::shared_ptr<PendingTransfer> allreduce_start(torch::Tensor t, const std::vector<int>& group) override;
  void abort(const std::string& why) override { hub_->abort(why); }

 private:
  std::shared_ptr<ThreadHub> hub_;
  int rank_;
  CommThread comm_;
};

}  // namespace pt::runtime
