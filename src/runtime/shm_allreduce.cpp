#include "runtime/shm_allreduce.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "runtime/transport.h"

namespace pt::runtime {

namespace {

constexpr int64_t kRegionBudget = int64_t{16} << 20;  // all slots of a region together
constexpr int64_t kSmallestChunk = int64_t{64} << 10;
constexpr auto kSpin = std::chrono::microseconds(20);      // before sleeping on the bell

struct alignas(64) Bell {
  std::atomic<uint32_t> rung;  // by every member that reaches a phase
};

struct alignas(64) Member {
  std::atomic<uint64_t> phase;
};

int64_t chunk_bytes_for(size_t members) {
  int64_t c = kRegionBudget / (2 * static_cast<int64_t>(members));
  c = std::clamp(c, kSmallestChunk, ShmAllreduce::kChunkBytes);
  return c / 4096 * 4096;
}

size_t header_bytes(size_t members) { return (sizeof(Bell) + members * sizeof(Member) + 4095) / 4096 * 4096; }

}  // namespace

int64_t ShmAllreduce::touched_bytes(int members, int64_t message_bytes) {
  if (members < 2 || message_bytes <= 0) return 0;
  const int64_t len = std::min(message_bytes, chunk_bytes_for(static_cast<size_t>(members)));
  const int64_t shards = 2 * (members - 1) * ((len + members - 1) / members);
  return static_cast<int64_t>(header_bytes(static_cast<size_t>(members))) + 2 * (len + shards);
}

int64_t ShmAllreduce::touched_bytes(int members, const std::vector<int64_t>& messages) {
  if (members < 2) return 0;
  const int64_t chunk = chunk_bytes_for(static_cast<size_t>(members));
  int64_t longest[2] = {0, 0}, round = 0;  // per set of slots, its longest round
  for (int step = 0; step < 2; ++step)      // two steps: every round's parity comes round
    for (int64_t message : messages)
      for (int64_t first = 0; first < message; first += chunk, ++round)
        longest[round % 2] = std::max(longest[round % 2], std::min(chunk, message - first));
  int64_t bytes = static_cast<int64_t>(header_bytes(static_cast<size_t>(members)));
  for (int64_t len : longest) bytes += len + 2 * (members - 1) * ((len + members - 1) / members);
  return round == 0 ? 0 : bytes;
}

namespace {

template <typename T>
void sum_slots(const std::vector<char*>& slots, char* into, int64_t lo, int64_t hi) {
  T* out = reinterpret_cast<T*>(into);
  std::vector<const T*> in;
  for (char* s : slots) in.push_back(reinterpret_cast<const T*>(s));
  for (int64_t j = lo; j < hi; ++j) {
    T acc = in[0][j];
    for (size_t i = 1; i < in.size(); ++i) acc += in[i][j];
    out[j] = acc;
  }
}

Bell& bell_of(const SharedRegion& r) { return *reinterpret_cast<Bell*>(r.data()); }
Member& member_at(const SharedRegion& r, size_t i) { return reinterpret_cast<Member*>(r.data() + sizeof(Bell))[i]; }
}  // namespace

bool ShmAllreduce::takes(const torch::Tensor& t) {
  return t.device().is_cpu() && t.is_contiguous() &&
         (t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kDouble);
}

std::unique_ptr<ShmAllreduce> ShmAllreduce::connect(c10d::Store& store, const std::string& prefix,
                                                    const std::vector<int>& ranks, int rank, bool enabled) {
  const size_t n = ranks.size();
  const int64_t chunk = chunk_bytes_for(n);
  auto region = SharedRegion::connect(store, prefix, ranks, rank, enabled, header_bytes(n) + 2 * n * static_cast<size_t>(chunk));
  if (!region) return nullptr;
  return std::unique_ptr<ShmAllreduce>(new ShmAllreduce(std::move(region), chunk));
}

ShmAllreduce::ShmAllreduce(std::unique_ptr<SharedRegion> region, int64_t chunk_bytes)
    : region_(std::move(region)), chunk_bytes_(chunk_bytes) {}

ShmAllreduce::~ShmAllreduce() = default;

char* ShmAllreduce::slot(int64_t round, int member) const {
  size_t n = region_->ranks().size();
  size_t index = static_cast<size_t>(round % 2) * n + static_cast<size_t>(member);
  return region_->data() + header_bytes(n) + index * static_cast<size_t>(chunk_bytes_);
}

void ShmAllreduce::abort() {
  region_->abort();
  bell_of(*region_).rung.fetch_add(1);
  futex_wake_all(&bell_of(*region_).rung);
}

void ShmAllreduce::meet(uint64_t phase, std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds timeout,
                        const std::function<void()>& check_aborted, const std::string& what) {
  const SharedRegion& r = *region_;
  std::atomic<uint32_t>& bell = bell_of(r).rung;
  const size_t n = r.ranks().size();
  member_at(r, static_cast<size_t>(r.me())).phase.store(phase, std::memory_order_release);
  bell.fetch_add(1, std::memory_order_acq_rel);
  futex_wake_all(&bell);
  auto late = [&] {
    std::vector<int> out;  // places among the members
    for (size_t i = 0; i < n; ++i)
      if (member_at(r, i).phase.load(std::memory_order_acquire) < phase) out.push_back(static_cast<int>(i));
    return out;
  };
  auto spin_until = std::chrono::steady_clock::now() + kSpin;
  while (true) {
    uint32_t seen = bell.load(std::memory_order_acquire);
    std::vector<int> missing = late();
    if (missing.empty()) return;
    if (std::chrono::steady_clock::now() < spin_until) {
      std::this_thread::yield();
      continue;
    }
    r.check_members({}, what);  // aborted by a member
    futex_wait(&bell, seen, kFutexSlice);
    check_aborted();
    r.check_members(missing, what);
    if (std::chrono::steady_clock::now() > deadline) {
      std::string who;
      for (int m : missing) who += (who.empty() ? "" : ", ") + std::to_string(r.ranks()[m]);
      // Of several missing, some may only wait on another (a later stage on the stalled worker's sends).
      throw TransportError(str(what, ": worker", missing.size() > 1 ? "s " : " ", who, " did not arrive within ",
                               std::chrono::duration<double>(timeout).count(), " s",
                               missing.size() > 1 ? " (stalled, or waiting on a worker that is)" : ""));
    }
  }
}

void ShmAllreduce::sum(torch::Tensor t, std::chrono::milliseconds timeout, const std::function<void()>& check_aborted,
                       const std::string& what) {
  PT_CHECK(takes(t), "the shared-memory all-reduce sums contiguous CPU float or double tensors");
  const size_t n = region_->ranks().size();
  const int me = region_->me();
  const int64_t esize = static_cast<int64_t>(t.element_size()), chunk = chunk_bytes_ / esize;
  const int64_t total = t.numel();
  char* data = static_cast<char*>(t.data_ptr());
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int64_t first = 0; first < total; first += chunk) {
    const int64_t len = std::min(chunk, total - first);
    // Shards of whole cache lines, one a member.
    int64_t shard = (len + static_cast<int64_t>(n) - 1) / static_cast<int64_t>(n);
    shard = (shard + 15) / 16 * 16;
    auto lo = [&](size_t i) { return std::min(len, static_cast<int64_t>(i) * shard); };
    std::memcpy(slot(round_, me), data + first * esize, static_cast<size_t>(len * esize));
    meet(++phase_, deadline, timeout, check_aborted, what);
    std::vector<char*> slots;
    for (size_t i = 0; i < n; ++i) slots.push_back(slot(round_, static_cast<int>(i)));
    if (t.scalar_type() == torch::kFloat)
      sum_slots<float>(slots, slot(round_, me), lo(static_cast<size_t>(me)), lo(static_cast<size_t>(me) + 1));
    else
      sum_slots<double>(slots, slot(round_, me), lo(static_cast<size_t>(me)), lo(static_cast<size_t>(me) + 1));
    meet(++phase_, deadline, timeout, check_aborted, what);
    for (size_t i = 0; i < n; ++i)
      std::memcpy(data + (first + lo(i)) * esize, slot(round_, static_cast<int>(i)) + lo(i) * esize,
                  static_cast<size_t>((lo(i + 1) - lo(i)) * esize));
    ++round_;
  }
}

}  // namespace pt::runtime
