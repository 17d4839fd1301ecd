#include "runtime/gloo_transport.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <future>
#include <optional>
#include <thread>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "model/memory_meter.h"
#include "runtime/job_store.h"

namespace pt::runtime {

namespace {

constexpr int kMaxDims = 8;
constexpr int kHeaderSize = 2 + kMaxDims;  // [dtype, ndim, dims...]
// The largest tensor a peer may announce (far beyond any activation or gradient here).
constexpr int64_t kMaxMessageBytes = int64_t(1) << 34;

// The dtypes the runtime sends; anything else in a header is refused, not cast.
std::optional<c10::ScalarType> known_dtype(int64_t code) {
  for (auto t : {c10::ScalarType::Float, c10::ScalarType::Double, c10::ScalarType::Half, c10::ScalarType::BFloat16,
                 c10::ScalarType::Long, c10::ScalarType::Int, c10::ScalarType::Short, c10::ScalarType::Char,
                 c10::ScalarType::Byte, c10::ScalarType::Bool})
    if (static_cast<int64_t>(t) == code) return t;
  return std::nullopt;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int env_int(const char* name, const char* value, int min, int max) {
  char* end = nullptr;
  long v = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || v < min || v > max)
    throw ConfigError(str("gloo transport: ", name, "='", value, "' is not an integer in ", min, "..", max));
  return static_cast<int>(v);
}

// This host's address on the route to `master` (what a UDP socket connected there binds to). Gloo
// listens on the address its device is made for, and peers connect to it: with workers on several
// hosts (or network namespaces), that must be this worker's own address, not the master's.
// Falls back to `master` when the route cannot be found (the single-host case: 127.0.0.1).
std::string local_address_towards(const std::string& master, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_DGRAM;
  if (getaddrinfo(master.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) return master;
  std::string out = master;
  int fd = socket(res->ai_family, SOCK_DGRAM, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    char host[NI_MAXHOST];
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        getnameinfo(reinterpret_cast<sockaddr*>(&local), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) == 0)
      out = host;
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return out;
}

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

bool gloo_rank_in_env() { return env("RANK") || env("OMPI_COMM_WORLD_RANK"); }

int gloo_world_size_in_env() {
  const char* size = env("RANK") ? env("WORLD_SIZE") : env("OMPI_COMM_WORLD_SIZE");
  return size ? std::atoi(size) : 0;
}

GlooConfig gloo_config_from_env() {
  GlooConfig c;
  const char *rank_var = "RANK", *size_var = "WORLD_SIZE";
  if (!env("RANK") && env("OMPI_COMM_WORLD_RANK")) {
    rank_var = "OMPI_COMM_WORLD_RANK";
    size_var = "OMPI_COMM_WORLD_SIZE";
  }
  const char* rank = env(rank_var);
  const char* size = env(size_var);
  if (!rank) throw ConfigError("gloo transport: set RANK and WORLD_SIZE (or run under mpirun, which sets OMPI_COMM_WORLD_RANK)");
  if (!size) throw ConfigError(str("gloo transport: ", rank_var, " is set but ", size_var, " is not"));
  c.world_size = env_int(size_var, size, 1, 65536);
  c.rank = env_int(rank_var, rank, 0, 65535);
  if (c.rank >= c.world_size)
    throw ConfigError(str("gloo transport: ", rank_var, "=", c.rank, " must be below ", size_var, "=", c.world_size));
  if (const char* a = env("MASTER_ADDR")) c.master_addr = a;
  if (const char* p = env("MASTER_PORT")) c.master_port = env_int("MASTER_PORT", p, 1, 65535);
  // Resolved once here: an address that does not resolve fails now, not after the rendezvous
  // has retried it for its whole timeout.
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(c.master_addr.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res)
    throw ConfigError(str("gloo transport: MASTER_ADDR=", c.master_addr, " does not resolve (", gai_strerror(rc), ")"));
  freeaddrinfo(res);
  c.secret = job_secret_from_env();
  return c;
}

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

void GlooTransport::join_all() {
  auto key = [](int r) { return "pipetrain/joined/" + std::to_string(r); };
  store_->set(key(config_.rank), std::vector<uint8_t>{1});
  std::vector<std::string> all;
  for (int r = 0; r < config_.world_size; ++r) all.push_back(key(r));
  using Clock = std::chrono::steady_clock;
  auto start = Clock::now(), next_note = start + std::chrono::seconds(10);
  auto missing = [&] {
    std::string out;
    int n = 0;
    for (int r = 0; r < config_.world_size; ++r)
      if (!store_->check({key(r)})) out += str(n++ ? ", " : "", r);
    return str(n == 1 ? "worker " : "workers ", out, " of ", config_.world_size);
  };
  while (!store_->check(all)) {
    auto now = Clock::now();
    auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - start).count();
    if (now - start > rendezvous_timeout_)
      throw TransportError(str("worker ", config_.rank, ": ", missing(), " never joined the rendezvous at ",
                               config_.master_addr, ":", config_.master_port, " within ", waited,
                               " s; did they start, with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE?"));
    if (now >= next_note) {  // a worker that never started is named while the others wait
      print_line_to_stderr(str("pipetrain worker ", config_.rank, ": waiting for ", missing(), " to join the rendezvous at ",
                               config_.master_addr, ":", config_.master_port, " (", waited, " s of ",
                               std::chrono::duration_cast<std::chrono::seconds>(rendezvous_timeout_).count(), ")"));
      next_note += std::chrono::seconds(10);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void GlooTransport::check_agreement(const json& digest) {
  auto key = [](int r) { return "pipetrain/digest/" + std::to_string(r); };
  std::string mine = digest.dump();
  store_->set(key(config_.rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  std::vector<json> all(config_.world_size);
  for (int r = 0; r < config_.world_size; ++r) {
    std::vector<uint8_t> bytes = store_->get(key(r));
    all[r] = parse_json(std::string(bytes.begin(), bytes.end()), str("worker ", r, "'s job description"));
  }
  for (int r = 1; r < config_.world_size; ++r) {
    std::vector<JsonDifference> fields = json_differences(all[0], all[r]);
    if (fields.empty()) continue;
    std::string what;
    for (const auto& f : fields)
      what += str(what.empty() ? "" : "; ", "'", f.path, "': worker 0 has ", f.a, ", worker ", r, " has ", f.b);
    throw ConfigError(str("the workers disagree (", what, "); every worker of a job must be started with the same ",
                          "plan, flags and data"));
  }
}

c10::intrusive_ptr<c10d::ProcessGroupGloo> GlooTransport::make_group(const std::vector<int>& group) {
  std::string name = "group";
  for (int r : group) name += "_" + std::to_string(r);
  auto it = std::find(group.begin(), group.end(), config_.rank);
  PT_CHECK(it != group.end(), "worker ", config_.rank, " is not in ", name);
  auto options = c10d::ProcessGroupGloo::Options::create(rendezvous_timeout_);
  options->devices.push_back(
      c10d::ProcessGroupGloo::createDeviceForHostname(local_address_towards(config_.master_addr, config_.master_port)));
  options->threads = 1;  // one collective at a time per group; p2p runs on gloo's device thread
  auto store = c10::make_intrusive<c10d::PrefixStore>(name, store_);
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, static_cast<int>(it - group.begin()),
                                                     static_cast<int>(group.size()), options);
}

c10::intrusive_ptr<c10d::ProcessGroupGloo> GlooTransport::group_for_init() {
  std::vector<int> all(config_.world_size);
  for (int r = 0; r < config_.world_size; ++r) all[r] = r;
  return make_group(all);
}

GlooTransport::~GlooTransport() {
  if (!world_) return;  // abandoned
  abort("transport closed");
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

void GlooTransport::join_collective_threads() {
  std::map<std::vector<int>, std::unique_ptr<CommThread>> threads;
  {
    std::lock_guard<std::mutex> lock(collectives_mu_);
    threads.swap(collectives_);
  }
  threads.clear();
}

CommThread& GlooTransport::receiver_for(int peer) {
  std::lock_guard<std::mutex> lock(receivers_mu_);
  auto& r = receivers_[peer];
  if (!r) r = std::make_unique<CommThread>();
  return *r;
}

std::shared_ptr<PendingTransfer> GlooTransport::isend(const torch::Tensor& t, int peer, int64_t tag) {
  state_->check_aborted();
  PT_CHECK(t.dim() <= kMaxDims, "gloo transport sends tensors of at most ", kMaxDims, " dimensions, got ", t.dim());
  auto header = torch::zeros({kHeaderSize}, torch::kInt64);
  auto h = header.accessor<int64_t, 1>();
  h[0] = static_cast<int64_t>(t.scalar_type());
  h[1] = t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) h[2 + d] = t.size(d);
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
      auto h = header.accessor<int64_t, 1>();
      // A peer's header is checked before it sizes anything: a known dtype, at most kMaxDims
      // dimensions, and no more than kMaxMessageBytes in all.
      auto dtype = known_dtype(h[0]);
      if (!dtype) throw TransportError(str("bad header, dtype code ", h[0], " (", what, ")"));
      if (h[1] < 0 || h[1] > kMaxDims) throw TransportError(str("bad header, ", h[1], " dimensions (", what, ")"));
      std::vector<int64_t> dims(h.data() + 2, h.data() + 2 + h[1]);
      int64_t bytes = c10::elementSize(*dtype);
      for (int64_t d : dims) {
        if (d < 0 || (d > 0 && bytes > kMaxMessageBytes / d))
          throw TransportError(pt::str("bad header, shape ", c10::IntArrayRef(dims), " of more than ", kMaxMessageBytes,
                                   " bytes (", what, ")"));
        bytes *= d;
      }
      auto data = torch::empty(dims, torch::TensorOptions().dtype(*dtype));
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

c10d::ProcessGroupGloo& GlooTransport::group_for(const std::vector<int>& group) {
  std::lock_guard<std::mutex> lock(groups_mu_);  // the collective threads look groups up too
  auto it = groups_.find(group);
  if (it == groups_.end()) {
    try {
      it = groups_.emplace(group, group.size() == static_cast<size_t>(config_.world_size) ? world_ : make_group(group))
               .first;
    } catch (const c10::Error& e) {
      throw TransportError(str("worker ", config_.rank, ": creating the all-reduce group failed: ",
                               e.what_without_backtrace()));
    }
  }
  return *it->second;
}

void GlooTransport::prepare_groups(const std::vector<std::vector<int>>& groups) {
  auto mine = [&](const std::vector<int>& g) {
    return g.size() > 1 && std::find(g.begin(), g.end(), config_.rank) != g.end();
  };
  for (const auto& g : groups) {
    if (!mine(g)) continue;
    group_for(g);
    for (const auto& sub : subgroups(g))
      if (mine(sub)) group_for(sub);
  }
}

std::vector<std::vector<int>> GlooTransport::subgroups(const std::vector<int>& group) const {
  if (config_.cluster.levels.empty() || config_.cluster.workers() < config_.world_size) return {};
  auto units = config_.cluster.allreduce_units(group);
  if (units.empty()) return {};
  std::vector<std::vector<int>> out = units;
  for (size_t i = 0; i < units.front().size(); ++i) {
    out.emplace_back();
    for (const auto& u : units) out.back().push_back(u[i]);
  }
  return out;
}

void GlooTransport::State::wait_collective(const c10::intrusive_ptr<c10d::Work>& w, const std::string& what) {
  // A collective cannot be aborted in c10d 1.13: wait in slices so abort() and the deadline
  // still end it for this worker.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    try {
      w->wait(std::chrono::milliseconds(200));
      return;
    } catch (const std::exception&) {
      // The slice ran out ("Operation timed out!") or the collective failed. It may also have
      // completed, successfully, between the slice's end and this check: a second wait on a
      // completed work returns, or throws its own error.
      if (w->isCompleted()) {
        try {
          w->wait();
          return;
        } catch (const std::exception& e) {
          std::string msg = e.what();
          if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
          throw TransportError(str(what, ": ", msg));
        }
      }
    }
    check_aborted();
    if (std::chrono::steady_clock::now() > deadline)
      throw TransportError(str(what, " timed out after ", timeout.count() / 1000.0, " s"));
  }
}

namespace {
// An all-reduce under way on gloo's collective thread.
struct CollectiveTransfer : PendingTransfer {
  std::shared_ptr<GlooTransport::State> state;
  c10::intrusive_ptr<c10d::Work> work;
  std::string what;
  torch::Tensor wait() override {
    state->wait_collective(work, what);
    return {};
  }
};

// A hierarchical all-reduce under way on its group's collective thread.
struct ChainedTransfer : PendingTransfer {
  std::future<void> done;
  torch::Tensor wait() override {
    done.get();
    return {};
  }
};
}  // namespace

void GlooTransport::hierarchical_allreduce(torch::Tensor t, const std::vector<std::vector<int>>& units) {
  size_t u = 0, i = 0;  // this worker's unit and place in it
  for (; u < units.size(); ++u) {
    auto it = std::find(units[u].begin(), units[u].end(), config_.rank);
    if (it != units[u].end()) {
      i = static_cast<size_t>(it - units[u].begin());
      break;
    }
  }
  PT_CHECK(u < units.size(), "worker ", config_.rank, " is in no unit of its all-reduce");
  const auto& unit = units[u];
  std::vector<int> shard_group;
  for (const auto& v : units) shard_group.push_back(v[i]);
  auto run = [&](c10d::ProcessGroupGloo& pg, auto&& start, const std::string& what) {
    c10::intrusive_ptr<c10d::Work> w;
    try {
      w = start(pg);
    } catch (const c10::Error& e) {
      throw TransportError(str(what, ": ", e.what_without_backtrace()));
    }
    state_->wait_collective(w, what);
  };
  std::string who = str(" of workers ", unit.size() * units.size(), " by worker ", config_.rank);
  torch::Tensor flat = t.view(-1);
  int64_t k = static_cast<int64_t>(unit.size()), n = flat.numel(), shard = (n + k - 1) / k;
  auto part = [&](int64_t j) { return flat.narrow(0, std::min(n, j * shard), std::clamp(n - j * shard, int64_t{0}, shard)); };
  std::vector<at::Tensor> all{flat};
  run(group_for(unit), [&](auto& pg) { return pg.allreduce(all); }, "all-reduce inside the server" + who);
  std::vector<at::Tensor> mine{part(static_cast<int64_t>(i))};
  if (mine[0].numel() > 0)
    run(group_for(shard_group), [&](auto& pg) { return pg.allreduce(mine); }, "all-reduce across servers" + who);
  // Gloo gathers equal sizes: the last shard travels padded.
  std::vector<at::Tensor> in{torch::zeros({shard}, flat.options())};
  in[0].narrow(0, 0, mine[0].numel()).copy_(mine[0]);
  std::vector<std::vector<at::Tensor>> gathered(1);
  for (int64_t j = 0; j < k; ++j) gathered[0].push_back(torch::empty({shard}, flat.options()));
  run(group_for(unit), [&](auto& pg) { return pg.allgather(gathered, in); }, "all-gather inside the server" + who);
  for (int64_t j = 0; j < k; ++j) {
    torch::Tensor dst = part(j);
    if (j != static_cast<int64_t>(i) && dst.numel() > 0) dst.copy_(gathered[0][j].narrow(0, 0, dst.numel()));
  }
}

std::shared_ptr<PendingTransfer> GlooTransport::allreduce_start(torch::Tensor t, const std::vector<int>& group) {
  auto out = std::make_shared<CollectiveTransfer>();
  out->state = state_;
  if (group.size() <= 1) return out;
  PT_CHECK(t.is_contiguous(), "an all-reduce sums a contiguous tensor in place");
  state_->check_aborted();
  if (auto subs = subgroups(group); !subs.empty()) {
    auto units = config_.cluster.allreduce_units(group);
    auto chained = std::make_shared<ChainedTransfer>();
    auto promise = std::make_shared<std::promise<void>>();
    chained->done = promise->get_future();
    CommThread* thread;
    {
      std::lock_guard<std::mutex> lock(collectives_mu_);
      auto& slot = collectives_[group];
      if (!slot) slot = std::make_unique<CommThread>();
      thread = slot.get();
    }
    thread->post([this, t, units, promise] {
      try {
        hierarchical_allreduce(t, units);
        promise->set_value();
      } catch (...) {
        promise->set_exception(std::current_exception());
      }
    });
    return chained;
  }
  auto& pg = group_for(group);
  out->what = str("all-reduce of workers ", group.size(), " by worker ", config_.rank);
  std::vector<at::Tensor> one{t};
  try {
    out->work = pg.allreduce(one);
  } catch (const c10::Error& e) {
    throw TransportError(str(out->what, ": ", e.what_without_backtrace()));
  }
  return out;
}

void GlooTransport::allreduce_sum(std::vector<torch::Tensor>& tensors, const std::vector<int>& group) {
  if (group.size() <= 1 || tensors.empty()) return;
  // c10d's vector form means one tensor per device: several tensors travel as one flat one.
  if (tensors.size() == 1 && tensors[0].is_contiguous()) {
    allreduce_start(tensors[0], group)->wait();
    return;
  }
  std::vector<torch::Tensor> flat_parts;
  for (auto& t : tensors) flat_parts.push_back(t.detach().reshape(-1));
  torch::Tensor flat = torch::cat(flat_parts);
  allreduce_start(flat, group)->wait();
  int64_t offset = 0;
  for (auto& t : tensors) {
    t.copy_(flat.narrow(0, offset, t.numel()).view_as(t));
    offset += t.numel();
  }
}

void GlooTransport::abort(const std::string& why) {
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
