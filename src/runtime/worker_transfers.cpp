// A worker's transfers: receives posted ahead and taken at their action, sends kept until their
// tensors may be freed (worker.h).
#include "core/error.h"
#include "runtime/progress.h"
#include "runtime/worker.h"

namespace pt::runtime {

using schedule::Action;
using schedule::ActionKind;

void Worker::finish_sends() {
  for (auto& p : earlier_sends_) p->wait();
  earlier_sends_.clear();
}

void Worker::post_receive(const schedule::Schedule& s, const Action& a, int64_t offset) {
  int64_t mb = a.microbatch + offset;
  int direction = a.kind == ActionKind::kRecvActivation ? kActivation : kGradient;
  Channel channel{direction, a.stage, a.peer};
  int64_t t = tag(direction, a.stage, mb, s.num_stages);
  auto k = known_.find(channel);
  receives_[{direction, a.stage, mb}] = {k != known_.end() ? transport_.irecv_known(a.peer, t, k->second)
                                                           : transport_.irecv(a.peer, t),
                                         channel};
}

torch::Tensor Worker::take_received(int direction, int stage, int64_t mb, const Action& a) {
  auto it = receives_.find({direction, stage, mb});
  PT_CHECK(it != receives_.end(), "no receive posted for ", schedule::to_string(a));
  torch::Tensor t = it->second.transfer->wait();
  // A peer sends in this run only once the previous run is over on every worker (a run ends
  // drained), so the previous run's sends are done: waiting frees their tensors now rather
  // than at the end of this run.
  for (auto& p : earlier_sends_) p->wait();
  earlier_sends_.clear();
  input_ready_ms_ = wall_ms();
  if (!known_.count(it->second.channel)) learnt_[it->second.channel] = {t.sizes().vec(), t.scalar_type()};
  receives_.erase(it);
  return t;
}

void Worker::send(const torch::Tensor& t, int direction, int to_stage, int peer, int64_t tag) {
  sent_bytes_ = static_cast<int64_t>(t.nbytes());
  Channel channel{direction, to_stage, peer};
  auto k = known_.find(channel);
  std::shared_ptr<PendingTransfer> transfer;
  if (k == known_.end()) {
    learnt_[channel] = {t.sizes().vec(), t.scalar_type()};
    transfer = transport_.isend(t, peer, tag);
  } else {
    PT_CHECK(t.sizes().vec() == k->second.sizes && t.scalar_type() == k->second.dtype, "worker ", rank_,
             " sends a tensor of shape ", t.sizes(), " where this channel's earlier runs sent ",
             c10::IntArrayRef(k->second.sizes));
    transfer = transport_.isend_known(t, peer, tag);
  }
  // A send holds its tensor until waited for. An activation's is waited for at its backward
  // (its gradient has come back, so it was received). Beyond kSendsAhead other sends to one
  // peer, the oldest is waited for: the peer posts its receives in order, kReceivesAhead ahead,
  // so it has long been received. Without this a run's sent tensors all lived to the end of the
  // next run.
  if (direction == kActivation) {
    activation_sends_[tag] = std::move(transfer);
    return;
  }
  sends_.push_back({peer, std::move(transfer)});
  int to_peer = 0;
  for (const auto& [p, _] : sends_) to_peer += p == peer;
  if (to_peer > kSendsAhead)
    for (auto it = sends_.begin(); it != sends_.end(); ++it)
      if (it->first == peer) {
        it->second->wait();
        sends_.erase(it);
        break;
      }
}

}  // namespace pt::runtime
