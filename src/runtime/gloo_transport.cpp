#include "runtime/gloo_transport.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <future>
#include <optional>
#include <thread>

#include "model/memory_meter.h"
#include "runtime/job_store.h"
#include "runtime/tensor_header.h"

namespace pt::runtime {

namespace {

std::string peer_tag(int rank, int peer, int64_t tag) {
  return str("worker ", rank, " <-> worker ", peer, ", tag ", tag);
}

struct SendTransfer : PendingTransfer {
  std::shared_ptr<GlooTransport::State> state;
  c10::intrusive_ptr<c10d::Work> header, data;
  std::string what;
  torch::Tensor wait() override {
    if (header) state->wait_work(header, what);  // none for a known shape
    state->wait_work(data, what);
    return {};
  }
};

// A payload whose shape both sides knew (irecv_known): its gloo receive was posted at once.
struct KnownRecvTransfer : PendingTransfer {
  std::shared_ptr<GlooTransport::State> state;
  c10::intrusive_ptr<c10d::Work> data_work;
  torch::Tensor data;
  std::string what;
  torch::Tensor wait() override {
    state->wait_work(data_work, what);
    return data;
  }
};

// Completed by the peer's receiving thread (GlooTransport::irecv); waited for with a deadline.
struct RecvTransfer : PendingTransfer {
  std::shared_ptr<GlooTransport::State> state;
  std::shared_future<torch::Tensor> result;
  std::string what;
  torch::Tensor wait() override {
    // The receiving thread's gloo waits have the same deadline; the margin lets its own, more precise
    // error arrive first. Polling keeps abort() prompt.
    auto deadline = std::chrono::steady_clock::now() + state->timeout + std::chrono::seconds(2);
    while (result.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      state->check_aborted();
      if (std::chrono::steady_clock::now() > deadline)
        throw TransportError(str("receive timed out after ", state->timeout.count() / 1000.0, " s (", what, ")"));
    }
    return result.get();
  }
};

}  // namespace

int gloo_tag(int64_t tag, bool data) {
  // zigzag keeps negative (evaluation) tags apart from training ones; x2 + data separates the
  // header from its data, so they never depend on gloo's ordering within a tag.
  constexpr int64_t kLimit = (int64_t{1} << 29);
  if (tag >= kLimit || tag < -kLimit)
    throw TransportError(str("tag ", tag, " is outside the gloo transport's range (|tag| < 2^29)"));
  int64_t z = tag >= 0 ? 2 * tag : -2 * tag - 1;
  return static_cast<int>(2 * z + (data ? 1 : 0));
}

void GlooTransport::State::check_aborted() {
  std::lock_guard<std::mutex> lock(mu);
  if (!abort_reason.empty()) throw JobAborted("job aborted: " + abort_reason);
}

void GlooTransport::State::wait_work(const c10::intrusive_ptr<c10d::Work>& w, const std::string& what) {
  try {
    // Gloo's send/recv waits throw on their deadline and on a peer's closed connection; an
    // aborted one returns false.
    bool ok = w->wait(timeout);
    {
      std::lock_guard<std::mutex> lock(mu);
      in_flight.erase(w);
    }
    check_aborted();
    if (!ok) throw TransportError("transfer aborted (" + what + ")");
  } catch (const TransportError&) {
    throw;
  } catch (const std::exception& e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      in_flight.erase(w);
    }
    check_aborted();
    std::string msg = e.what();
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);  // drop c10's backtrace
    throw TransportError(str(what, ": ", msg));
  }
}

void GlooTransport::State::enter_gate(int64_t ticket, const std::string& what) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mu);
  while (serving != ticket) {
    if (!abort_reason.empty()) throw TransportError("transfer aborted (" + what + "): " + abort_reason);
    if (gate_cv.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(100))) ==
            std::cv_status::timeout &&
        std::chrono::steady_clock::now() > deadline)
      throw TransportError(str("receive timed out after ", timeout.count() / 1000.0, " s waiting for earlier ",
                               "transfers into this worker (", what, ")"));
  }
}

void GlooTransport::State::leave_gate() {
  {
    std::lock_guard<std::mutex> lock(mu);
    ++serving;
  }
  gate_cv.notify_all();
}

GlooTransport::GlooTransport(const GlooConfig& config) : config_(config), state_(std::make_shared<State>()) {
  rendezvous_timeout_ = std::chrono::milliseconds(
      static_cast<int64_t>(std::max(config.timeout_s, config.rendezvous_timeout_s) * 1000));
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(config.timeout_s * 1000));
  // Gloo's own deadline covers connecting to every peer, which waits for the slowest worker to
  // start; the transfers and all-reduces enforce the shorter `timeout` themselves.
  auto rendezvous = rendezvous_timeout_;
  state_->timeout = timeout;
  state_->rank = config.rank;
  try {
    // Worker 0 serves the rendezvous on the job's address; everyone proves the job's secret.
    store_ = c10::make_intrusive<JobStore>(config.master_addr, config.master_port, config.rank == 0, config.secret,
                                           rendezvous);
    join_all();
    world_ = group_for_init();
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    throw TransportError(str("worker ", config.rank, " of ", config.world_size, ": rendezvous at ", config.master_addr,
                             ":", config.master_port, " failed: ", msg));
  }
}

GlooTransport::~GlooTransport() {
  if (!world_) return;  // abandoned
  abort_here("transport closed");
  join_receivers();
  join_collective_threads();
}

void GlooTransport::abandon(const std::string& why) {
  abort(why);
  join_receivers();
  join_collective_threads();
  for (auto& [group, pg] : groups_) (void)pg.release();
  (void)world_.release();
  (void)store_.release();
  groups_.clear();
}

void GlooTransport::join_receivers() {
  std::map<int, std::unique_ptr<CommThread>> receivers;
  {
    std::lock_guard<std::mutex> lock(receivers_mu_);
    receivers.swap(receivers_);
  }
  receivers.clear();  // each runs what is queued (failing at once: aborted) and joins
}

CommThread& GlooTransport::receiver_for(int peer) {
  std::lock_guard<std::mutex> lock(receivers_mu_);
  auto& r = receivers_[peer];
  if (!r) r = std::make_unique<CommThread>();
  return *r;
}

std::shared_ptr<PendingTransfer> GlooTransport::isend(const torch::Tensor& t, int peer, int64_t tag) {
  state_->check_aborted();
  if (ShmChannel* c = channel_to(peer)) return c->send(t, tag, peer_tag(config_.rank, peer, tag));
  auto header = torch::zeros({kHeaderSize}, torch::kInt64);
  write_tensor_header(t, header.data_ptr<int64_t>());
  auto out = std::make_shared<SendTransfer>();
  out->state = state_;
  out->what = peer_tag(config_.rank, peer, tag);
  std::vector<at::Tensor> hv{header}, dv{t.detach().contiguous()};
  try {
    out->header = world_->send(hv, peer, gloo_tag(tag, false));
    out->data = world_->send(dv, peer, gloo_tag(tag, true));
  } catch (const c10::Error& e) {
    throw TransportError(str("send failed (", out->what, "): ", e.what_without_backtrace()));
  } catch (const std::exception& e) {  // gloo's own IoException when the peer is gone
    throw TransportError(str("send failed (", out->what, "): ", e.what()));
  }
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->in_flight.insert(out->header);
  state_->in_flight.insert(out->data);
  return out;
}

std::shared_ptr<PendingTransfer> GlooTransport::isend_known(const torch::Tensor& t, int peer, int64_t tag) {
  state_->check_aborted();
  if (ShmChannel* c = channel_to(peer)) return c->send(t, tag, peer_tag(config_.rank, peer, tag));
  auto out = std::make_shared<SendTransfer>();
  out->state = state_;
  out->what = peer_tag(config_.rank, peer, tag);
  std::vector<at::Tensor> dv{t.detach().contiguous()};
  try {
    out->data = world_->send(dv, peer, gloo_tag(tag, true));
  } catch (const c10::Error& e) {
    throw TransportError(str("send failed (", out->what, "): ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw TransportError(str("send failed (", out->what, "): ", e.what()));
  }
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->in_flight.insert(out->data);
  return out;
}

std::shared_ptr<PendingTransfer> GlooTransport::irecv_known(int peer, int64_t tag, const Known& k) {
  state_->check_aborted();
  if (ShmChannel* c = channel_to(peer)) return c->recv(tag, peer_tag(config_.rank, peer, tag), model::charged_account());
  auto out = std::make_shared<KnownRecvTransfer>();
  out->state = state_;
  out->what = peer_tag(config_.rank, peer, tag);
  out->data = torch::empty(k.sizes, torch::TensorOptions().dtype(k.dtype));
  std::vector<at::Tensor> dv{out->data};
  try {
    out->data_work = world_->recv(dv, peer, gloo_tag(tag, true));
  } catch (const c10::Error& e) {
    throw TransportError(str("receive failed (", out->what, "): ", e.what_without_backtrace()));
  }
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->in_flight.insert(out->data_work);
  return out;
}

std::shared_ptr<PendingTransfer> GlooTransport::irecv(int peer, int64_t tag) {
  state_->check_aborted();
  if (ShmChannel* c = channel_to(peer)) return c->recv(tag, peer_tag(config_.rank, peer, tag), model::charged_account());
  auto out = std::make_shared<RecvTransfer>();
  out->state = state_;
  out->what = peer_tag(config_.rank, peer, tag);
  auto promise = std::make_shared<std::promise<torch::Tensor>>();
  out->result = promise->get_future().share();
  // Posted here, before returning, so the header can arrive while the worker computes.
  auto header = torch::zeros({kHeaderSize}, torch::kInt64);
  std::vector<at::Tensor> hv{header};
  c10::intrusive_ptr<c10d::Work> hw;
  try {
    hw = world_->recv(hv, peer, gloo_tag(tag, false));
  } catch (const c10::Error& e) {
    throw TransportError(str("receive failed (", out->what, "): ", e.what_without_backtrace()));
  }
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->in_flight.insert(hw);
  }
  auto state = state_;
  auto world = world_;
  std::string what = out->what;
  auto account = model::charged_account();  // the tensor it makes is the posting worker's
  receiver_for(peer).post([=] {
    model::ChargeTo charge(account);
    try {
      state->wait_work(hw, what);
      auto [dtype, dims] = read_tensor_header(header.data_ptr<int64_t>(), what);
      auto data = torch::empty(dims, torch::TensorOptions().dtype(dtype));
      std::vector<at::Tensor> dv{data};
      int64_t ticket;
      {
        std::lock_guard<std::mutex> lock(state->mu);
        ticket = state->next_ticket++;
      }
      // Once in, the turn is given up whatever happens, so that later transfers are not held
      // (a failed wait for the turn brings the worker down; abort() wakes the others).
      state->enter_gate(ticket, what);
      struct Turn {
        State& s;
        ~Turn() { s.leave_gate(); }
      } turn{*state};
      auto dw = world->recv(dv, peer, gloo_tag(tag, true));
      {
        std::lock_guard<std::mutex> lock(state->mu);
        state->in_flight.insert(dw);
      }
      state->wait_work(dw, what);
      promise->set_value(data);
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  });
  return out;
}

void GlooTransport::abort(const std::string& why) {
  abort_here(why);
  tell_store_of_abort(why);
  // A failure: the other members' shared-memory waits end now, not at their deadline.
  {
    std::lock_guard<std::mutex> lock(shared_mu_);
    for (auto& [group, region] : shared_)
      if (region) region->abort();
  }
  std::lock_guard<std::mutex> lock(channels_mu_);
  for (auto& [peer, channel] : channels_) channel->abort();
}

void GlooTransport::prepare_channels(const std::vector<std::pair<int, int>>& pairs) {
  std::set<std::pair<int, int>> mine;  // each pair once, in one order on every worker
  for (auto [a, b] : pairs)
    if (a != b && (a == config_.rank || b == config_.rank)) mine.insert({std::min(a, b), std::max(a, b)});
  for (auto [a, b] : mine) {
    int peer = a == config_.rank ? b : a;
    if (has_channel(peer)) continue;  // made by an earlier call: its keys are taken
    auto channel = ShmChannel::connect(*store_, str("pipetrain_shm/pair_", a, "_", b), std::min(a, b), std::max(a, b),
                                       config_.rank, config_.shared_memory, state_->timeout,
                                       [state = state_] { state->check_aborted(); });
    if (!channel) continue;
    std::lock_guard<std::mutex> lock(channels_mu_);
    channels_.emplace(peer, std::move(channel));
  }
}

bool GlooTransport::has_channel(int peer) const { return channel_to(peer) != nullptr; }

ShmChannel* GlooTransport::channel_to(int peer) const {
  std::lock_guard<std::mutex> lock(channels_mu_);
  auto it = channels_.find(peer);
  return it == channels_.end() ? nullptr : it->second.get();
}

void GlooTransport::abort_here(const std::string& why) {
  std::set<c10::intrusive_ptr<c10d::Work>> works;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->abort_reason.empty()) state_->abort_reason = why;
    works.swap(state_->in_flight);
  }
  state_->gate_cv.notify_all();
  // Ends the gloo waits of in-flight sends and receives (the receiving threads' jobs then finish).
  for (auto& w : works) {
    try {
      w->abort();
    } catch (...) {
    }
  }
}

}  // namespace pt::runtime
