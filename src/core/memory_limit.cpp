#include "core/memory_limit.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace pt {

namespace {

// The number a limit file holds; -1 where it is missing, "max" or not a number.
int64_t read_limit(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text)) return -1;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0' || v <= 0) return -1;
  return v;
}

}  // namespace

int64_t memory_limit_bytes(const std::string& proc_self_cgroup, const std::string& cgroup_root, int64_t physical) {
  int64_t limit = physical;
  auto take = [&](const std::string& path) {
    int64_t v = read_limit(path);
    if (v > 0) limit = std::min(limit, v);
  };
  // The process's cgroup and every one above it up to the hierarchy's root: a limit set on a parent
  // (a Slurm job's, its tasks' below unlimited) binds as much as its own, and `profile` sized by the
  // child's alone built the whole model and was killed, saying nothing.
  auto up_from = [&](std::string path, const std::string& hierarchy, const std::string& file) {
    for (;;) {
      while (!path.empty() && path.back() == '/') path.pop_back();
      take(hierarchy + path + file);
      if (path.empty()) return;
      path.erase(path.rfind('/') == std::string::npos ? 0 : path.rfind('/'));
    }
  };
  std::istringstream lines(proc_self_cgroup);
  for (std::string line; std::getline(lines, line);) {
    // "hierarchy-id:controllers:path"; v2's single hierarchy is "0::path".
    size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    std::istringstream names(controllers);
    bool memory = false;
    for (std::string n; std::getline(names, n, ',');) memory = memory || n == "memory";
    if (memory)
      up_from(path, cgroup_root + "/memory", "/memory.limit_in_bytes");
    else if (controllers.empty() && line.compare(0, 2, "0:") == 0)
      up_from(path, cgroup_root, "/memory.max");
  }
  return limit;
}

int64_t usable_memory_bytes() {
  const int64_t physical = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
  std::ifstream in("/proc/self/cgroup");
  std::stringstream text;
  text << in.rdbuf();
  return memory_limit_bytes(text.str(), "/sys/fs/cgroup", physical);
}

}  // namespace pt
