#include "core/host_allocator.h"

#include <dlfcn.h>
#include <malloc.h>

namespace pt {

namespace {
constexpr int kMmapThreshold = 32 << 20;
constexpr int kTrimThreshold = 256 << 20;

// tcmalloc's C entry point, where the process links it (found at run time: the torch-free
// front end and the tests do not).
using ReleaseFreeMemory = void (*)();
ReleaseFreeMemory tcmalloc_release() {
  static const auto release =
      reinterpret_cast<ReleaseFreeMemory>(::dlsym(RTLD_DEFAULT, "MallocExtension_ReleaseFreeMemory"));
  return release;
}
}  // namespace

void keep_freed_host_memory() {
  static const bool done = (mallopt(M_MMAP_THRESHOLD, kMmapThreshold), mallopt(M_TRIM_THRESHOLD, kTrimThreshold), true);
  (void)done;
}

void release_freed_host_memory() {
  if (auto release = tcmalloc_release())
    release();
  else
    malloc_trim(0);
}

}  // namespace pt
