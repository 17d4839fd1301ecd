#include "core/host_allocator.h"

#include <malloc.h>

namespace pt {

namespace {
constexpr int kMmapThreshold = 32 << 20;
constexpr int kTrimThreshold = 256 << 20;
}  // namespace

void keep_freed_host_memory() {
  static const bool done = (mallopt(M_MMAP_THRESHOLD, kMmapThreshold), mallopt(M_TRIM_THRESHOLD, kTrimThreshold), true);
  (void)done;
}

void release_freed_host_memory() { malloc_trim(0); }

}  // namespace pt
