#pragma once
// Point-to-point transfers between two gloo workers on one host, through a region they share
// (shm_region.h) instead of gloo's TCP pair: over loopback gloo hands a message over in several
// wake-ups of its threads, and each may wait a timer tick for a core the computing workers hold.
//
// The region holds a ring of bytes each way. A sender's thread writes each message (a header:
// tag, byte count, tensor header; then the tensor's bytes) into its ring as space frees, in the
// order sent, so isend returns at once; the receiver's thread reads every message as it comes
// into a tensor of its own and files it by tag, where a receive takes it. The tensor is charged
// to the account of the receive posted last, then to that of the receive that takes it (an
// evaluation's, uncharged, is not training's). A message larger than the ring streams through
// it. Waits have the transport's deadline where a transfer is awaited, end when the job is
// aborted, when the region is aborted or its other worker has exited, and name the peer and tag.
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "model/memory_meter.h"
#include "runtime/comm_thread.h"
#include "runtime/shm_region.h"
#include "runtime/transport.h"

namespace pt::runtime {

class ShmChannel {
 public:
  static constexpr size_t kRingBytes = size_t{4} << 20;

  // Collective for the pair {a, b} (a < b, one of them `rank`), through `store` under keys starting
  // with `prefix`: null on both alike where they do not share a region. `check_aborted` throws
  // where this worker's job was aborted; a transfer awaited longer than `timeout` fails.
  static std::unique_ptr<ShmChannel> connect(c10d::Store& store, const std::string& prefix, int a, int b, int rank,
                                             bool enabled, std::chrono::milliseconds timeout,
                                             std::function<void()> check_aborted);
  ~ShmChannel();  // stops its threads: unsent messages are dropped, waits end

  // `what` names the transfer in errors ("worker 0 <-> worker 1, tag 5").
  std::shared_ptr<PendingTransfer> send(const torch::Tensor& t, int64_t tag, const std::string& what);
  // The tensor the peer sent with `tag`, in the order sent where a tag repeats; once taken, the
  // allocation is charged to `account` (the receiving worker's, memory_meter.h; null: none).
  std::shared_ptr<PendingTransfer> recv(int64_t tag, const std::string& what, std::shared_ptr<model::MemoryAccount> account);
  // Ends the peer's waits in this region (this worker failed).
  void abort();

  struct Ring;     // one direction's bytes and counters (shm_channel.cpp)
  struct Mailbox;  // what has arrived, by tag

 private:
  ShmChannel(std::unique_ptr<SharedRegion> region, std::chrono::milliseconds timeout, std::function<void()> check_aborted);
  Ring& ring(int from) const;
  // Writes or reads `n` bytes through `r`, waiting for space or data; false when stopped.
  bool write(Ring& r, const char* src, size_t n, std::chrono::steady_clock::time_point deadline, const std::string& what);
  bool read(Ring& r, char* dst, size_t n);
  void receive_loop();

  std::unique_ptr<SharedRegion> region_;
  std::chrono::milliseconds timeout_;
  std::function<void()> check_aborted_;
  std::atomic<bool> stopping_{false};
  std::shared_ptr<Mailbox> mailbox_;
  std::unique_ptr<CommThread> sender_;
  std::thread receiver_;
};

}  // namespace pt::runtime
