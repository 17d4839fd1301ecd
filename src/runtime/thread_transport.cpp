#include "runtime/thread_transport.h"

#include <algorithm>
#include <future>
#include <thread>

namespace pt::runtime {

namespace {

struct DoneTransfer : PendingTransfer {
  torch::Tensor wait() override { return {}; }
};

// The receive is matched when waited for: the sender has usually delivered by then.
struct MailboxReceive : PendingTransfer {
  MailboxReceive(std::shared_ptr<ThreadHub> hub, int src, int dst, int64_t tag)
      : hub(std::move(hub)), src(src), dst(dst), tag(tag) {}
  torch::Tensor wait() override { return hub->take(src, dst, tag); }
  std::shared_ptr<ThreadHub> hub;
  int src, dst;
  int64_t tag;
};

}  // namespace

ThreadHub::ThreadHub(int workers, double timeout_s, double latency_us)
    : workers_(workers), timeout_(timeout_s), cvs_(static_cast<size_t>(std::max(workers, 1))),
      latency_(latency_us * 1e-6) {}

void ThreadHub::notify_locked(const std::vector<int>& ranks) {
  for (int r : ranks) cvs_.at(static_cast<size_t>(r)).notify_all();
}

void ThreadHub::check_aborted_locked() const {
  if (!abort_reason_.empty()) throw JobAborted("job aborted: " + abort_reason_);
}

void ThreadHub::put(int src, int dst, int64_t tag, torch::Tensor t) {
  std::lock_guard<std::mutex> lock(mu_);
  mailboxes_[{src, dst, tag}].emplace_back(std::move(t),
                                           Clock::now() + std::chrono::duration_cast<Clock::duration>(latency_));
  notify_locked({dst});
}

torch::Tensor ThreadHub::take(int src, int dst, int64_t tag) {
  std::unique_lock<std::mutex> lock(mu_);
  auto key = std::make_tuple(src, dst, tag);
  bool ok = cvs_.at(static_cast<size_t>(dst)).wait_for(lock, timeout_, [&] {
    if (!abort_reason_.empty()) return true;
    auto it = mailboxes_.find(key);
    return it != mailboxes_.end() && !it->second.empty();
  });
  check_aborted_locked();
  if (!ok) throw TransportError(str("worker ", dst, " waited ", timeout_.count(), " s for tag ", tag, " from worker ", src));
  auto it = mailboxes_.find(key);
  auto [t, arrives] = std::move(it->second.front());
  it->second.erase(it->second.begin());
  if (it->second.empty()) mailboxes_.erase(it);
  lock.unlock();
  if (latency_.count() > 0) std::this_thread::sleep_until(arrives);
  return t;
}

void ThreadHub::allreduce_sum(int rank, std::vector<torch::Tensor>& tensors, const std::vector<int>& group) {
  if (group.size() <= 1) return;
  std::unique_lock<std::mutex> lock(mu_);
  check_aborted_locked();
  Reduction& r = reductions_[group];
  // Wait until the previous reduction of this group has been collected by all members.
  std::condition_variable& cv = cvs_.at(static_cast<size_t>(rank));
  bool ok = cv.wait_for(lock, timeout_, [&] { return !abort_reason_.empty() || !r.done; });
  check_aborted_locked();
  if (!ok) throw TransportError(str("worker ", rank, " timed out entering an all-reduce"));
  uint64_t gen = r.generation;
  if (r.arrived == 0) {
    r.sum.clear();
    for (auto& t : tensors) r.sum.push_back(t.detach().clone());
  } else {
    for (size_t i = 0; i < tensors.size(); ++i) r.sum[i].add_(tensors[i]);
  }
  if (++r.arrived == static_cast<int>(group.size())) {
    r.done = true;
    notify_locked(group);
  }
  ok = cv.wait_for(lock, timeout_, [&] { return !abort_reason_.empty() || (r.done && r.generation == gen); });
  check_aborted_locked();
  if (!ok) throw TransportError(str("worker ", rank, " timed out in an all-reduce of workers ", group.size()));
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(r.sum[i]);
  if (++r.collected == static_cast<int>(group.size())) {
    r.arrived = r.collected = 0;
    r.done = false;
    ++r.generation;
    notify_locked(group);
  }
}

void ThreadHub::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (abort_reason_.empty()) abort_reason_ = why;
  for (auto& cv : cvs_) cv.notify_all();
}

std::shared_ptr<PendingTransfer> ThreadTransport::isend(const torch::Tensor& t, int peer, int64_t tag) {
  hub_->put(rank_, peer, tag, t);
  return std::make_shared<DoneTransfer>();
}

std::shared_ptr<PendingTransfer> ThreadTransport::irecv(int peer, int64_t tag) {
  return std::make_shared<MailboxReceive>(hub_, peer, rank_, tag);
}

void ThreadTransport::allreduce_sum(std::vector<torch::Tensor>& tensors, const std::vector<int>& group) {
  hub_->allreduce_sum(rank_, tensors, group);
}

namespace {
struct FutureTransfer : PendingTransfer {
  std::shared_future<void> done;
  torch::Tensor wait() override {
    done.get();  // the hub's waits have the deadline and the abort
    return {};
  }
};
}  // namespace

std::shared_ptr<PendingTransfer> ThreadTransport::allreduce_start(torch::Tensor t, const std::vector<int>& group) {
  auto promise = std::make_shared<std::promise<void>>();
  auto out = std::make_shared<FutureTransfer>();
  out->done = promise->get_future().share();
  comm_.post([hub = hub_, rank = rank_, t, group, promise] {
    try {
      std::vector<torch::Tensor> one{t};
      hub->allreduce_sum(rank, one, group);
      promise->set_value();
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  });
  return out;
}

}  // namespace pt::runtime
