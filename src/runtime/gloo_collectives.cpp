// The gloo transport's collectives: the process groups of each stage's replicas (and of a
// hierarchical all-reduce's units and shards), made once, and the all-reduces over them, each
// group's on a collective thread of its own, waited for in slices so that an abort or the
// deadline still ends them.
#include <algorithm>
#include <chrono>
#include <future>
#include <set>
#include <thread>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "runtime/gloo_transport.h"

namespace pt::runtime {

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

void GlooTransport::join_collective_threads() {
  std::map<std::vector<int>, std::unique_ptr<CommThread>> threads;
  {
    std::lock_guard<std::mutex> lock(collectives_mu_);
    threads.swap(collectives_);
  }
  threads.clear();
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

ShmAllreduce* GlooTransport::shared_memory_for(const std::vector<int>& group) {
  if (!subgroups(group).empty()) return nullptr;  // hierarchical: across the cluster's links
  group_for(group);  // first, on every member: the groups are made in one order everywhere
  {
    std::lock_guard<std::mutex> lock(shared_mu_);
    if (auto it = shared_.find(group); it != shared_.end()) return it->second.get();
  }
  // Joined without the lock (it waits for the other members); only this worker's thread that
  // starts all-reduces joins regions.
  std::string name = "pipetrain_shm/group";
  for (int r : group) name += "_" + std::to_string(r);
  auto region = ShmAllreduce::connect(*store_, name, group, config_.rank, config_.shared_memory);
  std::lock_guard<std::mutex> lock(shared_mu_);
  return shared_.emplace(group, std::move(region)).first->second.get();
}

CommThread& GlooTransport::collective_thread(const std::vector<int>& group) {
  std::lock_guard<std::mutex> lock(collectives_mu_);
  auto& slot = collectives_[group];
  if (!slot) slot = std::make_unique<CommThread>();
  return *slot;
}

void GlooTransport::prepare_groups(const std::vector<std::vector<int>>& groups) {
  auto mine = [&](const std::vector<int>& g) {
    return g.size() > 1 && std::find(g.begin(), g.end(), config_.rank) != g.end();
  };
  for (const auto& g : groups) {
    if (!mine(g)) continue;
    shared_memory_for(g);
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
    collective_thread(group).post([this, t, units, promise] {
      try {
        hierarchical_allreduce(t, units);
        promise->set_value();
      } catch (...) {
        promise->set_exception(std::current_exception());
      }
    });
    return chained;
  }
  // The group's ids, not its size: "all-reduce of workers 3" named a worker a 3-worker job lacks.
  std::string ids;
  for (int r : group) ids += (ids.empty() ? "" : ",") + std::to_string(r);
  out->what = str("all-reduce of workers ", ids, " by worker ", config_.rank);
  if (ShmAllreduce* shared = ShmAllreduce::takes(t) ? shared_memory_for(group) : nullptr) {
    auto chained = std::make_shared<ChainedTransfer>();
    auto promise = std::make_shared<std::promise<void>>();
    chained->done = promise->get_future();
    collective_thread(group).post([shared, t, promise, state = state_, what = out->what] {
      try {
        shared->sum(t, state->timeout, [&] { state->check_aborted(); }, what);
        promise->set_value();
      } catch (...) {
        promise->set_exception(std::current_exception());
      }
    });
    return chained;
  }
  auto& pg = group_for(group);
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

}  // namespace pt::runtime
