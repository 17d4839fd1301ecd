#include "model/memory_meter.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <new>

#include <c10/core/CPUAllocator.h>

namespace pt::model {

namespace {

// A "Name: N kB" line of /proc/self/status, in bytes; -1 where it is missing.
int64_t status_kib_field(const char* format) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long long kib = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, format, &kib) == 1) break;
  std::fclose(f);
  return kib < 0 ? -1 : static_cast<int64_t>(kib) * 1024;
}

}  // namespace

int64_t process_peak_rss_bytes() {
  int64_t hwm = status_kib_field("VmHWM: %lld kB");
  if (hwm >= 0) return hwm;
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

int64_t process_shared_memory_bytes() { return std::max<int64_t>(0, status_kib_field("RssShmem: %lld kB")); }

void MemoryAccount::add(int64_t bytes) {
  int64_t now = live_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t seen = peak_.load(std::memory_order_relaxed);
  while (now > seen && !peak_.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}

namespace {

thread_local std::shared_ptr<MemoryAccount> t_account;

// A charged block carries its charge in a header just before its data, so that freeing it looks
// nothing up: LibTorch's raw interface (raw_allocate) needs a DataPtr whose context is its data
// and one deleter for all. A table of charges by address, under a lock, cost each allocation a
// map node and a mutex: an exported LSTM's 2-stage run measured 0.86-0.90 of its simulation with
// it and 0.89-0.92 without the meter.
struct Charge {
  std::shared_ptr<MemoryAccount> account;  // null: uncharged
  int64_t bytes = 0;
};
// The data stays at the base allocator's alignment (c10's is 64 bytes).
constexpr size_t kHeaderBytes = 64;
static_assert(sizeof(Charge) <= kHeaderBytes);

c10::Allocator* g_base = nullptr;

void release(void* data) {
  if (!data) return;
  void* block = static_cast<char*>(data) - kHeaderBytes;
  auto* charge = static_cast<Charge*>(block);
  if (charge->account) charge->account->sub(charge->bytes);
  charge->~Charge();
  g_base->raw_deleter()(block);
}

class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) const override {
    if (n == 0) return {nullptr, nullptr, &release, c10::Device(c10::DeviceType::CPU)};
    void* block = g_base->raw_allocate(n + kHeaderBytes);
    auto* charge = new (block) Charge{t_account, static_cast<int64_t>(n)};
    if (charge->account) charge->account->add(charge->bytes);
    void* data = static_cast<char*>(block) + kHeaderBytes;
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
};

}  // namespace

void install_memory_meter() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_base = c10::GetCPUAllocator();
    if (!g_base->raw_deleter()) return;  // a CPU allocator without the raw interface: nothing is charged
    static CountingAllocator counting;
    c10::SetCPUAllocator(&counting, /*priority=*/1);
  });
}

ChargeTo::ChargeTo(std::shared_ptr<MemoryAccount> account) : previous_(std::move(t_account)) {
  t_account = std::move(account);
}

ChargeTo::~ChargeTo() { t_account = std::move(previous_); }

std::shared_ptr<MemoryAccount> charged_account() { return t_account; }

void move_charge(const c10::DataPtr& block, std::shared_ptr<MemoryAccount> account) {
  if (block.get_deleter() != &release || !block.get_context()) return;
  auto* charge = reinterpret_cast<Charge*>(static_cast<char*>(block.get_context()) - kHeaderBytes);
  if (charge->account == account) return;
  if (charge->account) charge->account->sub(charge->bytes);
  charge->account = std::move(account);
  if (charge->account) charge->account->add(charge->bytes);
}

}  // namespace pt::model
