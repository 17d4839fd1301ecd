#include "runtime/shm_region.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <fstream>

#include "core/error.h"
#include "runtime/transport.h"

namespace pt::runtime {

namespace {

constexpr size_t kPageBytes = 4096;
constexpr size_t kMostMembers = (kPageBytes - 64) / sizeof(int32_t);

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
std::vector<uint8_t> bytes_of(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

// Gone, or a zombie its parent has not reaped yet (kill(pid, 0) still succeeds on one).
bool exited(int32_t pid) {
  std::string stat = read_line("/proc/" + std::to_string(pid) + "/stat");
  auto paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z' || stat[paren + 2] == 'X';
}

}  // namespace

struct SharedRegion::Page {
  std::atomic<int32_t> aborted_by;  // a member's rank + 1 once it aborted the region
  int32_t pad[15];
  int32_t pid[kMostMembers];
};
static_assert(sizeof(SharedRegion::Page) <= kPageBytes, "the region's own page");

void futex_wake_all(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t seen, std::chrono::milliseconds slice) {
  struct timespec ts {
    static_cast<time_t>(slice.count() / 1000), static_cast<long>(slice.count() % 1000) * 1000000
  };
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

std::string SharedRegion::boot_id() { return read_line("/proc/sys/kernel/random/boot_id"); }

std::string SharedRegion::host_key() {
  std::string boot = boot_id();
  std::string net = link_of("/proc/self/ns/net"), pid = link_of("/proc/self/ns/pid");
  if (boot.empty() || net.empty() || pid.empty()) return "";
  return boot + " " + net + " " + pid;
}

std::unique_ptr<SharedRegion> SharedRegion::connect(c10d::Store& store, const std::string& prefix,
                                                    const std::vector<int>& ranks, int rank, bool enabled,
                                                    size_t bytes) {
  auto it = std::find(ranks.begin(), ranks.end(), rank);
  PT_CHECK(it != ranks.end() && ranks.size() > 1 && ranks.size() <= kMostMembers, "worker ", rank,
           " cannot share memory with ", ranks.size(), " workers");
  const int me = static_cast<int>(it - ranks.begin());
  std::string mine = enabled ? host_key() : "";
  store.set(prefix + "/host/" + std::to_string(rank), bytes_of(mine));
  bool one_host = !mine.empty();
  for (int r : ranks) one_host = text(store.get(prefix + "/host/" + std::to_string(r))) == mine && one_host;
  if (!one_host) return nullptr;  // every member read the same keys, so every member returns here

  const size_t size = kPageBytes + (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  std::string name;
  int fd = -1;
  if (me == 0) {
    static std::atomic<int> made{0};
    name = str("/pipetrain-", ::getpid(), "-", made++, "-", std::chrono::steady_clock::now().time_since_epoch().count());
    fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0 && (::ftruncate(fd, static_cast<off_t>(size)) != 0 || ::posix_fallocate(fd, 0, static_cast<off_t>(size)) != 0)) {
      ::close(fd);
      ::shm_unlink(name.c_str());
      fd = -1;
    }
    if (fd < 0) name.clear();
    store.set(prefix + "/name", bytes_of(name));
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
  if (base != MAP_FAILED) static_cast<Page*>(base)->pid[me] = static_cast<int32_t>(::getpid());
  // Worker 0 of the group decides for all: the region is used only where every member mapped it.
  store.set(prefix + "/mapped/" + std::to_string(rank), bytes_of(base != MAP_FAILED ? "1" : "0"));
  if (me == 0) {
    bool all = base != MAP_FAILED;
    for (int r : ranks) all = text(store.get(prefix + "/mapped/" + std::to_string(r))) == "1" && all;
    if (!name.empty()) ::shm_unlink(name.c_str());  // every member holds it mapped: no name is left behind
    store.set(prefix + "/use", bytes_of(all ? "1" : "0"));
  }
  if (text(store.get(prefix + "/use")) != "1") {
    if (base != MAP_FAILED) ::munmap(base, size);
    return nullptr;
  }
  return std::unique_ptr<SharedRegion>(new SharedRegion(base, size, me, ranks));
}

SharedRegion::SharedRegion(void* base, size_t bytes, int me, std::vector<int> ranks)
    : base_(base), bytes_(bytes), me_(me), ranks_(std::move(ranks)) {}

SharedRegion::~SharedRegion() { ::munmap(base_, bytes_); }

SharedRegion::Page& SharedRegion::page() const { return *static_cast<Page*>(base_); }

char* SharedRegion::data() const { return static_cast<char*>(base_) + kPageBytes; }

void SharedRegion::abort() {
  int32_t none = 0;
  page().aborted_by.compare_exchange_strong(none, ranks_[me_] + 1);
}

int SharedRegion::aborted_by() const { return page().aborted_by.load() - 1; }

void SharedRegion::check_members(const std::vector<int>& members, const std::string& what) const {
  // A consequence, not the root cause (the worker that aborted names that): a checkpoint's save
  // told a larger --timeout to the workers whose peer had found its disk full.
  if (int by = aborted_by(); by >= 0) throw JobAborted(str(what, ": worker ", by, " aborted the job"));
  for (int m : members) {
    int32_t pid = page().pid[m];
    if (pid > 0 && exited(pid))
      throw TransportError(str(what, ": worker ", ranks_[m], " (process ", pid, ") has exited"));
  }
}

}  // namespace pt::runtime
