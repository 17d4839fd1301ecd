#pragma once
// The memory this process may use: the machine's, or less where a memory cgroup limits it (a
// container, or the testbed's --memory-limit, which stands a device's memory in for a worker).
#include <cstdint>
#include <string>

namespace pt {

// The least of the machine's physical memory and every limit the cgroups in `proc_self_cgroup`
// (the text of /proc/self/cgroup) set under `cgroup_root` (/sys/fs/cgroup): v1's
// memory/<path>/memory.limit_in_bytes, v2's <path>/memory.max, each also read at the hierarchy's
// root, as a container sees its own cgroup. Unreadable files and "max" set none.
int64_t memory_limit_bytes(const std::string& proc_self_cgroup, const std::string& cgroup_root, int64_t physical);

// memory_limit_bytes of this process.
int64_t usable_memory_bytes();

}  // namespace pt
