#include "model/memory_meter.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <unordered_map>

#include <c10/core/CPUAllocator.h>

namespace pt::model {

int64_t process_peak_rss_bytes() {
  struct rusage u;
  if (getrusage(RUSAGE_SELF, &u) != 0) return -1;
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // Linux: KiB
}

int64_t process_rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  long long size = 0, resident = 0;
  int read = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  return read == 2 ? resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE)) : -1;
}

void MemoryAccount::add(int64_t bytes) {
  int64_t now = live_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t seen = peak_.load(std::memory_order_relaxed);
  while (now > seen && !peak_.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}

namespace {

thread_local std::shared_ptr<MemoryAccount> t_account;

// Charged allocations by address. LibTorch's raw interface (raw_allocate) needs a DataPtr whose
// context is its data and one deleter for all, so the charge is looked up by address when
// freed. Sharded: workers allocate at once.
class Charges {
 public:
  void add(void* p, std::shared_ptr<MemoryAccount> account, int64_t bytes) {
    account->add(bytes);
    Shard& s = shard(p);
    std::lock_guard<std::mutex> lock(s.mutex);
    s.charges[p] = {std::move(account), bytes};
  }
  void remove(void* p) {
    Shard& s = shard(p);
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.charges.find(p);
    if (it == s.charges.end()) return;
    it->second.first->sub(it->second.second);
    s.charges.erase(it);
  }

 private:
  struct Shard {
    std::mutex mutex;
    std::unordered_map<void*, std::pair<std::shared_ptr<MemoryAccount>, int64_t>> charges;
  };
  Shard& shard(void* p) { return shards_[(reinterpret_cast<uintptr_t>(p) >> 6) % kShards]; }
  static constexpr size_t kShards = 16;
  Shard shards_[kShards];
};

Charges* g_charges = nullptr;
c10::Allocator* g_base = nullptr;

void release(void* p) {
  g_charges->remove(p);
  g_base->raw_deleter()(p);
}

class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) const override {
    void* p = g_base->raw_allocate(n);
    if (t_account && n > 0) g_charges->add(p, t_account, static_cast<int64_t>(n));
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
};

}  // namespace

void install_memory_meter() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_base = c10::GetCPUAllocator();
    if (!g_base->raw_deleter()) return;  // a CPU allocator without the raw interface: nothing is charged
    g_charges = new Charges;  // never freed: tensors outlive static destructors
    static CountingAllocator counting;
    c10::SetCPUAllocator(&counting, /*priority=*/1);
  });
}

ChargeTo::ChargeTo(std::shared_ptr<MemoryAccount> account) : previous_(std::move(t_account)) {
  t_account = std::move(account);
}

ChargeTo::~ChargeTo() { t_account = std::move(previous_); }

std::shared_ptr<MemoryAccount> charged_account() { return t_account; }

}  // namespace pt::model
