#pragma once
// How workers talk (docs/design.md, "Runtime"): non-blocking point-to-point tensors and an
// all-reduce among a group. One interface, one implementation per backend: `threads`
// (thread_transport.h, in-memory) and `gloo` (gloo_transport.h, c10d over TCP).
//
// Every blocking wait has a deadline and every wait ends when the job is aborted, so a failed
// worker brings the job down instead of leaving the others waiting forever.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/error.h"

namespace pt::runtime {

// A transfer under way. wait() returns the received tensor (an undefined tensor for a send).
class PendingTransfer {
 public:
  virtual ~PendingTransfer() = default;
  virtual torch::Tensor wait() = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Starts sending `t` to worker `peer` under `tag`; the receiver learns the shape and dtype
  // from the transfer itself. `t` must not be modified until the transfer completes.
  virtual std::shared_ptr<PendingTransfer> isend(const torch::Tensor& t, int peer, int64_t tag) = 0;
  virtual std::shared_ptr<PendingTransfer> irecv(int peer, int64_t tag) = 0;
  // A transfer whose shape and dtype both sides know beforehand (a worker learns them from the
  // first segment's transfers on the same channel): it may travel without a header, and its
  // receive can be posted for the payload at once. Transports without headers keep the defaults.
  struct Known {
    std::vector<int64_t> sizes;
    c10::ScalarType dtype;
  };
  virtual std::shared_ptr<PendingTransfer> isend_known(const torch::Tensor& t, int peer, int64_t tag) {
    return isend(t, peer, tag);
  }
  virtual std::shared_ptr<PendingTransfer> irecv_known(int peer, int64_t tag, const Known&) { return irecv(peer, tag); }
  // Sums `tensors` in place over the workers of `group` (sorted worker ids, including rank()).
  virtual void allreduce_sum(std::vector<torch::Tensor>& tensors, const std::vector<int>& group) = 0;
  // Starts summing the contiguous tensor `t` in place over `group`; wait() returns when done.
  // A worker's all-reduces of one group complete in the order started, on every member alike,
  // while the worker goes on computing (gradient buckets overlap the backward this way).
  virtual std::shared_ptr<PendingTransfer> allreduce_start(torch::Tensor t, const std::vector<int>& group) = 0;
  // Makes every current and future wait of every worker throw JobAborted, with `why`.
  virtual void abort(const std::string& why) = 0;
  // Returns once every worker of the job has called it (or throws, as the waits do). The
  // transports meet in a one-float all-reduce of all workers, whose waits already have the
  // deadlines and the abort.
  void barrier() {
    std::vector<int> all(world_size());
    for (int r = 0; r < world_size(); ++r) all[r] = r;
    std::vector<torch::Tensor> token{torch::zeros({1})};
    allreduce_sum(token, all);
  }
  // A barrier after a pause that some workers spend working while the others wait (the
  // evaluation's chain of one replica of each stage): it fails only once --timeout passes
  // without any worker's progress(), however long the work takes. A data-parallel replica
  // waited in barrier() while worker 0 evaluated a language model's test set, and a healthy job
  // failed after training. The default, for transports without long waits, is barrier().
  virtual void pause_barrier() { barrier(); }
  // This worker is working through a pause (an evaluation's round): pause_barrier's waiting
  // workers start their deadline again.
  virtual void progress() {}
};

// Raised by waits when a deadline passed or a transfer failed.
struct TransportError : RuntimeFailure {
  using RuntimeFailure::RuntimeFailure;
};

// Raised by waits after another worker aborted the job: a consequence, not a root cause, so
// reports name the error that is not one of these.
struct JobAborted : TransportError {
  using TransportError::TransportError;
};

// Raised by a process given a rank another process of the job already holds: it is not one of
// the job's workers, so it leaves without telling them to stop.
struct RankTaken : TransportError {
  using TransportError::TransportError;
};

}  // namespace pt::runtime
