#include "runtime/thread_transport.h"

#include <algorithm>
#include <thread>

#include "model/memory_meter.h"

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

uint64_t ThreadHub::allreduce_add(int rank, const std::vector<torch::Tensor>& tensors, const std::vector<int>& group,
                                  bool values) {
  std::lock_guard<std::mutex> lock(mu_);
  check_aborted_locked();
  uint64_t k = added_[{group, rank}]++;
  Reduction& r = reductions_[{group, k}];
  if (values) {
    size_t place = static_cast<size_t>(std::find(group.begin(), group.end(), rank) - group.begin());
    r.parked[place] = tensors;
    for (auto next = r.parked.find(r.summed); next != r.parked.end(); next = r.parked.find(r.summed)) {
      if (r.summed == 0) {
        // The hub's memory, not the first member's: a device's all-reduce keeps no second copy
        // of the bucket (gloo's workers reduce in place).
        model::ChargeTo hub_memory(nullptr);
        for (const auto& t : next->second) r.sum.push_back(t.detach().clone());
      } else {
        for (size_t i = 0; i < next->second.size(); ++i) r.sum[i].add_(next->second[i]);
      }
      r.parked.erase(next);
      ++r.summed;
    }
  }
  if (++r.arrived == static_cast<int>(group.size())) notify_locked(group);
  return k;
}

void ThreadHub::allreduce_take(int rank, std::vector<torch::Tensor>& tensors, const std::vector<int>& group,
                               uint64_t k) {
  std::unique_lock<std::mutex> lock(mu_);
  auto key = std::make_pair(group, k);
  Reduction& r = reductions_.at(key);  // a map's elements stay where they are as others come and go
  bool ok = cvs_.at(static_cast<size_t>(rank)).wait_for(lock, timeout_, [&] {
    return !abort_reason_.empty() || r.arrived == static_cast<int>(group.size());
  });
  check_aborted_locked();
  if (!ok)
    throw TransportError(str("worker ", rank, " waited ", timeout_.count(), " s in an all-reduce of ", group.size(),
                             " workers"));
  for (size_t i = 0; i < r.sum.size(); ++i) tensors[i].copy_(r.sum[i]);  // none where nothing was summed
  if (++r.collected == static_cast<int>(group.size())) reductions_.erase(key);
}

void ThreadHub::pause_barrier(int rank) {
  std::unique_lock<std::mutex> lock(mu_);
  check_aborted_locked();
  const int64_t pause = pauses_[rank]++;
  if (++pause_arrived_[pause] == workers_)
    for (auto& cv : cvs_) cv.notify_all();
  uint64_t seen = progress_;
  auto last = Clock::now();
  while (pause_arrived_[pause] < workers_) {
    // Woken by the last to arrive or an abort; between, it looks for progress a quarter of the
    // deadline apart (a second at most).
    cvs_.at(static_cast<size_t>(rank))
        .wait_for(lock, std::min<std::chrono::duration<double>>(std::chrono::seconds(1), timeout_ / 4));
    check_aborted_locked();
    if (progress_ != seen) {
      seen = progress_;
      last = Clock::now();
    } else if (pause_arrived_[pause] < workers_ && Clock::now() - last > timeout_) {
      throw TransportError(str("worker ", rank, " waited ", timeout_.count(), " s at the end of a pause for ",
                               workers_ - pause_arrived_[pause], " of ", workers_,
                               " workers, none of which progressed meanwhile"));
    }
  }
  if (++pause_left_[pause] == workers_) pause_arrived_.erase(pause), pause_left_.erase(pause);
}

void ThreadHub::progress() {
  std::lock_guard<std::mutex> lock(mu_);
  ++progress_;
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
struct HubReduction : PendingTransfer {
  std::shared_ptr<ThreadHub> hub;
  int rank;
  std::vector<torch::Tensor> tensors;
  std::vector<int> group;
  uint64_t k = 0;
  bool taken = false;
  torch::Tensor wait() override {
    if (!taken) hub->allreduce_take(rank, tensors, group, k);  // the hub's wait has the deadline and the abort
    taken = true;
    return {};
  }
};
}  // namespace

std::shared_ptr<PendingTransfer> ThreadTransport::allreduce_start(torch::Tensor t, const std::vector<int>& group) {
  auto out = std::make_shared<HubReduction>();
  out->hub = hub_;
  out->rank = rank_;
  out->tensors = {std::move(t)};
  out->group = group;
  out->taken = group.size() <= 1;
  if (!out->taken) out->k = hub_->allreduce_add(rank_, out->tensors, group, gradient_values_);
  return out;
}

}  // namespace pt::runtime
