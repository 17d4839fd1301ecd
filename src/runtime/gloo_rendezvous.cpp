// A gloo job's rendezvous: every worker joins (naming the missing ones while it waits), then
// the workers compare what they were given to run (gloo_transport.h); and the barrier after a
// pause, through the same store.
#include <chrono>
#include <thread>

#include "runtime/gloo_transport.h"
#include "runtime/job_store.h"
#include "runtime/launcher.h"
#include "runtime/shm_region.h"

namespace pt::runtime {

namespace {
// What a worker that failed before joining said (tell_rendezvous_of_failure), and that each
// other worker has read it.
constexpr const char* kFailedKey = "pipetrain/failed_before_joining";
// Why a worker aborted the job (GlooTransport::abort), for the others' pause_barrier.
constexpr const char* kAbortedKey = "pipetrain/aborted";
std::string failure_read_key(int rank) { return "pipetrain/failure_read/" + std::to_string(rank); }
}  // namespace

void tell_rendezvous_of_failure(const std::string& what, double wait_s) {
  if (!started_apart()) return;
  try {
    GlooConfig c = gloo_config_from_env();
    bool serve = c.rank == 0;
    auto wait = std::chrono::milliseconds(static_cast<int64_t>(1000 * std::max(1.0, wait_s)));
    JobStore store(c.master_addr, c.master_port, serve, c.secret, serve ? std::chrono::milliseconds(2000) : wait);
    std::string said = str("worker ", c.rank, ": ", what);
    store.set(kFailedKey, std::vector<uint8_t>(said.begin(), said.end()));
    if (!serve) return;
    std::vector<std::string> read;
    for (int r = 1; r < c.world_size; ++r) read.push_back(failure_read_key(r));
    store.wait(read, std::chrono::milliseconds(10000));
  } catch (const std::exception&) {  // no rendezvous to tell, or not all read it: they time out as before
  }
}

void GlooTransport::join_all() {
  auto key = [](int r) { return "pipetrain/joined/" + std::to_string(r); };
  // Counted, not set: a second process given a rank already taken is told so at once (it failed
  // on gloo's "Connection refused", or said nothing for 76 s when the job was running).
  if (int64_t joined = store_->add(key(config_.rank), 1); joined > 1)
    throw RankTaken(str("worker ", config_.rank, ": another process has joined the rendezvous at ",
                             config_.master_addr, ":", config_.master_port, " as worker ", config_.rank,
                             " (RANK must differ for each worker of a job)"));
  // --rendezvous-timeout itself: the wait for the others to start (it waited the larger of it and
  // --timeout, which gloo's groups need for their collectives).
  auto limit = std::chrono::milliseconds(static_cast<int64_t>(config_.rendezvous_timeout_s * 1000));
  await_every_worker(key, "join the rendezvous", limit, [&] {
    if (!store_->check({kFailedKey})) return;
    std::vector<uint8_t> said = store_->get(kFailedKey);
    store_->set(failure_read_key(config_.rank), {1});
    throw TransportError(str("worker ", config_.rank, ": the job stops: ", std::string(said.begin(), said.end()),
                             " (before it joined the rendezvous at ", config_.master_addr, ":", config_.master_port,
                             ")"));
  });
}

void GlooTransport::await_every_worker(const std::function<std::string(int)>& key, const std::string& what,
                                       std::chrono::milliseconds limit, const std::function<void()>& each_look) {
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
    each_look();
    auto now = Clock::now();
    auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - start).count();
    if (now - start > limit)
      throw TransportError(str("worker ", config_.rank, ": ", missing(), " did not ", what, " at ", config_.master_addr,
                               ":", config_.master_port, " within ", waited,
                               " s; did they start, with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE, and are "
                               "they running (not stopped)?"));
    if (now >= next_note) {  // a worker that never started, or stopped, is named while the others wait
      print_line_to_stderr(str("pipetrain worker ", config_.rank, ": waiting for ", missing(), " to ", what, " at ",
                               config_.master_addr, ":", config_.master_port, " (", waited, " s of ",
                               std::chrono::duration_cast<std::chrono::seconds>(limit).count(), ")"));
      next_note += std::chrono::seconds(10);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void GlooTransport::check_agreement(const json& digest) {
  auto key = [](int r) { return "pipetrain/digest/" + std::to_string(r); };
  auto host = [](int r) { return "pipetrain/host/" + std::to_string(r); };
  std::string here = SharedRegion::host_key(), mine = digest.dump();
  store_->set(host(config_.rank), std::vector<uint8_t>(here.begin(), here.end()));  // before the digest, which is awaited
  store_->set(key(config_.rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  // Named while it waits: a worker stopped after joining held the others silently (store's get).
  await_every_worker(key, "describe its job (after it joined)", rendezvous_timeout_, [] {});
  one_host_ = !here.empty();
  for (int r = 0; r < config_.world_size; ++r) {
    std::vector<uint8_t> theirs = store_->get(host(r));
    one_host_ = one_host_ && std::string(theirs.begin(), theirs.end()) == here;
  }
  std::vector<json> all(config_.world_size);
  for (int r = 0; r < config_.world_size; ++r) {
    std::vector<uint8_t> bytes = store_->get(key(r));
    all[r] = parse_json(std::string(bytes.begin(), bytes.end()), str("worker ", r, "'s job description"));
  }
  // Worker 0 hosts the store: where it is about to stop on a disagreement, it first waits (a few
  // seconds at most) until every worker has read the descriptions, so that each names the
  // disagreement rather than a rendezvous gone (which it did only while worker 0's exit was slow).
  auto read = [](int r) { return "pipetrain/digest/read/" + std::to_string(r); };
  store_->set(read(config_.rank), {1});
  if (config_.rank == 0 && std::any_of(all.begin() + 1, all.end(), [&](const json& d) { return d != all[0]; })) {
    std::vector<std::string> everyone;
    for (int r = 0; r < config_.world_size; ++r) everyone.push_back(read(r));
    try {
      store_->wait(everyone, std::min(rendezvous_timeout_, std::chrono::milliseconds(10000)));
    } catch (const std::exception&) {  // a worker that never reads them is not waited for longer
    }
  }
  for (int r = 1; r < config_.world_size; ++r) {
    std::vector<JsonDifference> fields = json_differences(all[0], all[r]);
    if (fields.empty()) continue;
    std::string what;
    bool resumed = false;
    for (const auto& f : fields) {
      what += str(what.empty() ? "" : "; ", "'", f.path, "': worker 0 has ", f.a, ", worker ", r, " has ", f.b);
      resumed |= f.path.rfind("resumed", 0) == 0;
    }
    throw ConfigError(str("the workers disagree (", what, "); every worker of a job must be started with the same ",
                          "plan, flags and data",
                          resumed ? ", and resumes from the newest checkpoint it sees in --checkpoint-dir, which "
                                    "they must see alike"
                                  : ""));
  }
}

void GlooTransport::pause_barrier() {
  using Clock = std::chrono::steady_clock;
  const int64_t pause = ++pauses_;
  auto key = [](int64_t p) { return "pipetrain/pause/" + std::to_string(p); };
  const std::string progress_key = "pipetrain/progress";
  // Every worker left pause p - 2 before any entered p: its key goes, and the store stays small.
  if (config_.rank == 0 && pause > 2) store_->deleteKey(key(pause - 2));
  int64_t arrived = store_->add(key(pause), 1), seen = store_->add(progress_key, 0);
  auto last = Clock::now();
  // A round that ends within progress()'s interval of the last report is not reported: allowed.
  const auto allowed = state_->timeout + progress_interval();
  while (arrived < config_.world_size) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    state_->check_aborted();
    // A worker started apart that failed meanwhile says so here (pipetrain's launcher stops the
    // others itself): waiting out the deadline blamed a timeout for a full disk.
    if (store_->check({kAbortedKey})) {
      std::vector<uint8_t> why = store_->get(kAbortedKey);
      throw JobAborted(str("worker ", config_.rank, " at the end of a pause: ", std::string(why.begin(), why.end())));
    }
    arrived = store_->add(key(pause), 0);
    if (int64_t now = store_->add(progress_key, 0); now != seen) {
      seen = now;
      last = Clock::now();
    } else if (arrived < config_.world_size && Clock::now() - last > allowed) {
      throw TransportError(str("worker ", config_.rank, " waited ", state_->timeout.count() / 1000.0,
                               " s at the end of a pause for ", config_.world_size - arrived, " of ",
                               config_.world_size, " workers, none of which progressed meanwhile"));
    }
  }
}

std::chrono::steady_clock::duration GlooTransport::progress_interval() const {
  // Often enough for the waiting workers' deadline: a quarter of it, and at least once a second.
  return std::min<std::chrono::steady_clock::duration>(std::chrono::seconds(1), state_->timeout / 4);
}

void GlooTransport::progress() {
  auto now = std::chrono::steady_clock::now();
  if (now - last_progress_ < progress_interval()) return;
  last_progress_ = now;
  store_->add("pipetrain/progress", 1);
}

void GlooTransport::tell_store_of_abort(const std::string& why) {
  // pipetrain's launcher stops the others itself. Through a connection of its own with a short
  // deadline: worker 0, which serves the store, may be stopped, and the job's connection would
  // hold this worker's exit for the rendezvous timeout.
  if (!store_ || !started_apart()) return;
  try {
    std::unique_ptr<JobStore> own;
    c10d::Store* store = store_.get();
    if (config_.rank != 0) {
      own = std::make_unique<JobStore>(config_.master_addr, config_.master_port, false, config_.secret,
                                       std::chrono::milliseconds(2000));
      store = own.get();
    }
    if (!store->check({kAbortedKey})) store->set(kAbortedKey, std::vector<uint8_t>(why.begin(), why.end()));
  } catch (const std::exception&) {  // worker 0 is gone or does not answer: the others find that out
  }
}

}  // namespace pt::runtime
