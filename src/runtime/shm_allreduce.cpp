#include "runtime/shm_allreduce.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "runtime/transport.h"

namespace pt::runtime {

namespace {

constexpr int64_t kRegionBudget = int64_t{16} << 20;  // all slots of a region together
constexpr int64_t kSmallestChunk = int64_t{64} << 10;
constexpr auto kSpin = std::chrono::microseconds(20);      // before sleeping on the bell
constexpr auto kSlice = std::chrono::milliseconds(50);     // between checks of abort, deadline, peers

struct alignas(64) Member {
  std::atomic<uint64_t> phase;
  int32_t pid;
};

int64_t chunk_bytes_for(size_t members) {
  int64_t c = kRegionBudget / (2 * static_cast<int64_t>(members));
  c = std::clamp(c, kSmallestChunk, ShmAllreduce::kChunkBytes);
  return c / 4096 * 4096;
}

size_t header_bytes(size_t members) { return (64 + members * sizeof(Member) + 4095) / 4096 * 4096; }

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

std::string link_of(const std::string& path) {
  char buf[256];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

std::string text(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

void futex_wake_all(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t seen, std::chrono::milliseconds slice) {
  struct timespec ts {
    static_cast<time_t>(slice.count() / 1000), static_cast<long>(slice.count() % 1000) * 1000000
  };
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

// Gone, or a zombie its parent has not reaped yet (kill(pid, 0) still succeeds on one).
bool exited(int32_t pid) {
  std::string stat = read_line("/proc/" + std::to_string(pid) + "/stat");
  auto paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z' || stat[paren + 2] == 'X';
}

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

}  // namespace

struct ShmAllreduce::Header {
  std::atomic<uint32_t> bell;        // rung by every member that reaches a phase
  std::atomic<int32_t> aborted_by;   // a member's rank + 1 once it aborted the region
  int32_t members;
  int64_t chunk_bytes;
};
static_assert(sizeof(ShmAllreduce::Header) <= 64, "the members follow the header's first cache line");

namespace {
// The members' states, one cache line each, after the header's.
Member& member_at(void* base, size_t i) { return reinterpret_cast<Member*>(static_cast<char*>(base) + 64)[i]; }
}  // namespace

std::string ShmAllreduce::host_key() {
  std::string boot = read_line("/proc/sys/kernel/random/boot_id");
  std::string net = link_of("/proc/self/ns/net"), pid = link_of("/proc/self/ns/pid");
  if (boot.empty() || net.empty() || pid.empty()) return "";
  return boot + " " + net + " " + pid;
}

bool ShmAllreduce::takes(const torch::Tensor& t) {
  return t.device().is_cpu() && t.is_contiguous() &&
         (t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kDouble);
}

std::unique_ptr<ShmAllreduce> ShmAllreduce::connect(c10d::Store& store, const std::string& prefix,
                                                    const std::vector<int>& ranks, int rank, bool enabled) {
  auto it = std::find(ranks.begin(), ranks.end(), rank);
  PT_CHECK(it != ranks.end() && ranks.size() > 1, "worker ", rank, " cannot share memory with workers ", ranks.size());
  const int me = static_cast<int>(it - ranks.begin());
  const size_t n = ranks.size();
  store.set(prefix + "/host/" + std::to_string(rank), bytes(enabled ? host_key() : ""));
  std::string mine = enabled ? host_key() : "";
  bool one_host = !mine.empty();
  for (int r : ranks) one_host = one_host && text(store.get(prefix + "/host/" + std::to_string(r))) == mine;
  if (!one_host) return nullptr;  // every member read the same keys, so every member returns here

  const int64_t chunk = chunk_bytes_for(n);
  const size_t size = header_bytes(n) + 2 * n * static_cast<size_t>(chunk);
  std::string name;
  int fd = -1;
  if (me == 0) {
    static std::atomic<int> made{0};
    name = str("/pipetrain-", ::getpid(), "-", made++, "-", std::chrono::steady_clock::now().time_since_epoch().count());
    fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    // Reserved now, so that a full /dev/shm refuses the region here, not with SIGBUS mid-training.
    if (fd >= 0 && (::ftruncate(fd, static_cast<off_t>(size)) != 0 || ::posix_fallocate(fd, 0, static_cast<off_t>(size)) != 0)) {
      ::close(fd);
      ::shm_unlink(name.c_str());
      fd = -1;
    }
    if (fd < 0) name.clear();
    store.set(prefix + "/name", bytes(name));
  } else {
    name = text(store.get(prefix + "/name"));
    if (!name.empty()) fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  }
  void* base = MAP_FAILED;
  if (fd >= 0) {
    struct stat st {};
    if (::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == size)
      base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
  }
  auto* h = base == MAP_FAILED ? nullptr : static_cast<Header*>(base);
  if (h) {
    if (me == 0) {
      h->members = static_cast<int32_t>(n);
      h->chunk_bytes = chunk;
    }
    member_at(base, static_cast<size_t>(me)).pid = static_cast<int32_t>(::getpid());
  }
  // Worker 0 of the group decides for all: the region is used only where every member mapped it.
  store.set(prefix + "/mapped/" + std::to_string(rank), bytes(h ? "1" : "0"));
  if (me == 0) {
    bool all = h != nullptr;
    for (int r : ranks) all = text(store.get(prefix + "/mapped/" + std::to_string(r))) == "1" && all;
    if (!name.empty()) ::shm_unlink(name.c_str());  // every member holds it mapped: no name is left behind
    store.set(prefix + "/use", bytes(all ? "1" : "0"));
  }
  bool use = text(store.get(prefix + "/use")) == "1";
  if (!use) {
    if (h) ::munmap(base, size);
    return nullptr;
  }
  return std::unique_ptr<ShmAllreduce>(new ShmAllreduce(base, size, me, ranks));
}

ShmAllreduce::ShmAllreduce(void* base, size_t bytes, int me, std::vector<int> ranks)
    : base_(base), bytes_(bytes), me_(me), ranks_(std::move(ranks)) {}

ShmAllreduce::~ShmAllreduce() { ::munmap(base_, bytes_); }

ShmAllreduce::Header& ShmAllreduce::header() const { return *static_cast<Header*>(base_); }

char* ShmAllreduce::slot(int64_t round, int member) const {
  size_t n = ranks_.size();
  size_t index = static_cast<size_t>(round % 2) * n + static_cast<size_t>(member);
  return static_cast<char*>(base_) + header_bytes(n) + index * static_cast<size_t>(header().chunk_bytes);
}

void ShmAllreduce::abort() {
  Header& h = header();
  int32_t none = 0;
  h.aborted_by.compare_exchange_strong(none, ranks_[me_] + 1);
  h.bell.fetch_add(1);
  futex_wake_all(&h.bell);
}

void ShmAllreduce::meet(uint64_t phase, std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds timeout,
                        const std::function<void()>& check_aborted, const std::string& what) {
  Header& h = header();
  const size_t n = ranks_.size();
  member_at(base_, static_cast<size_t>(me_)).phase.store(phase, std::memory_order_release);
  h.bell.fetch_add(1, std::memory_order_acq_rel);
  futex_wake_all(&h.bell);
  auto missing = [&] {
    std::vector<int> out;
    for (size_t i = 0; i < n; ++i)
      if (member_at(base_, i).phase.load(std::memory_order_acquire) < phase) out.push_back(ranks_[i]);
    return out;
  };
  auto spin_until = std::chrono::steady_clock::now() + kSpin;
  while (true) {
    uint32_t seen = h.bell.load(std::memory_order_acquire);
    std::vector<int> late = missing();
    if (late.empty()) return;
    if (int32_t by = h.aborted_by.load(); by != 0)
      throw TransportError(str(what, ": worker ", by - 1, " aborted the job"));
    auto now = std::chrono::steady_clock::now();
    if (now < spin_until) {
      std::this_thread::yield();
      continue;
    }
    futex_wait(&h.bell, seen, kSlice);
    check_aborted();
    for (int r : late) {
      int32_t pid = member_at(base_, static_cast<size_t>(std::find(ranks_.begin(), ranks_.end(), r) - ranks_.begin())).pid;
      if (pid > 0 && exited(pid))
        throw TransportError(str(what, ": worker ", r, " (process ", pid, ") has exited"));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::string who;
      for (int r : late) who += (who.empty() ? "" : ", ") + std::to_string(r);
      throw TransportError(str(what, ": worker", late.size() > 1 ? "s " : " ", who, " did not arrive within ",
                               std::chrono::duration<double>(timeout).count(), " s"));
    }
  }
}

void ShmAllreduce::sum(torch::Tensor t, std::chrono::milliseconds timeout, const std::function<void()>& check_aborted,
                       const std::string& what) {
  PT_CHECK(takes(t), "the shared-memory all-reduce sums contiguous CPU float or double tensors");
  const size_t n = ranks_.size();
  const int64_t esize = static_cast<int64_t>(t.element_size()), chunk = header().chunk_bytes / esize;
  const int64_t total = t.numel();
  char* data = static_cast<char*>(t.data_ptr());
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int64_t first = 0; first < total; first += chunk) {
    const int64_t len = std::min(chunk, total - first);
    // Shards of whole cache lines, one a member.
    int64_t shard = (len + static_cast<int64_t>(n) - 1) / static_cast<int64_t>(n);
    shard = (shard + 15) / 16 * 16;
    auto lo = [&](size_t i) { return std::min(len, static_cast<int64_t>(i) * shard); };
    std::memcpy(slot(round_, me_), data + first * esize, static_cast<size_t>(len * esize));
    meet(++phase_, deadline, timeout, check_aborted, what);
    std::vector<char*> slots;
    for (size_t i = 0; i < n; ++i) slots.push_back(slot(round_, static_cast<int>(i)));
    if (t.scalar_type() == torch::kFloat)
      sum_slots<float>(slots, slot(round_, me_), lo(me_), lo(me_ + 1));
    else
      sum_slots<double>(slots, slot(round_, me_), lo(me_), lo(me_ + 1));
    meet(++phase_, deadline, timeout, check_aborted, what);
    for (size_t i = 0; i < n; ++i)
      std::memcpy(data + (first + lo(i)) * esize, slot(round_, static_cast<int>(i)) + lo(i) * esize,
                  static_cast<size_t>((lo(i + 1) - lo(i)) * esize));
    ++round_;
  }
}

}  // namespace pt::runtime
