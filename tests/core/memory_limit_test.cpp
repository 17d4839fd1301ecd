// The memory a process may use is the least of the machine's and its cgroups' limits: `profile`
// sized its whole-model timing by the machine's memory alone, which a worker given a device's
// memory by a cgroup (the testbed's --memory-limit) does not have.
#include "core/memory_limit.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace pt {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

TEST(MemoryLimit, TheLeastOfTheMachineAndItsCgroups) {
  fs::path root = fs::path(::testing::TempDir()) / ("cgroups_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const int64_t physical = int64_t{24} << 30;
  const std::string v1 = "4:memory:/testbed/w1\n3:cpuset:/\n0::/\n";
  EXPECT_EQ(memory_limit_bytes(v1, root.string(), physical), physical);  // no file: no limit
  write(root / "memory/testbed/w1/memory.limit_in_bytes", "1073741824\n");
  EXPECT_EQ(memory_limit_bytes(v1, root.string(), physical), int64_t{1} << 30);
  // A container sees its own cgroup at the hierarchy's root; v1's "no limit" is a huge number.
  write(root / "memory/testbed/w1/memory.limit_in_bytes", "9223372036854771712\n");
  write(root / "memory/memory.limit_in_bytes", "2147483648\n");
  EXPECT_EQ(memory_limit_bytes(v1, root.string(), physical), int64_t{2} << 30);
  // A parent's limit binds its children, whose own say none (a Slurm job's cgroup above its tasks').
  write(root / "memory/testbed/memory.limit_in_bytes", "1610612736\n");
  EXPECT_EQ(memory_limit_bytes(v1, root.string(), physical), int64_t{3} << 29);
  // v2: memory.max, "max" for none.
  const std::string v2 = "0::/jobs/a\n";
  write(root / "jobs/a/memory.max", "max\n");
  EXPECT_EQ(memory_limit_bytes(v2, root.string(), physical), physical);
  write(root / "jobs/a/memory.max", "536870912\n");
  EXPECT_EQ(memory_limit_bytes(v2, root.string(), physical), int64_t{512} << 20);
  write(root / "jobs/a/memory.max", "max\n");
  write(root / "jobs/memory.max", "805306368\n");
  EXPECT_EQ(memory_limit_bytes(v2, root.string(), physical), int64_t{768} << 20);
  EXPECT_EQ(memory_limit_bytes("0::/jobs/a/\n", root.string(), physical), int64_t{768} << 20);
  EXPECT_EQ(memory_limit_bytes("garbage\n\n", root.string(), physical), physical);
  EXPECT_GT(usable_memory_bytes(), 0);
  fs::remove_all(root);
}

}  // namespace
}  // namespace pt
