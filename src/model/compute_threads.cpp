#include "model/compute_threads.h"

#include <dlfcn.h>

#include <ATen/Parallel.h>

namespace pt::model {

void use_one_compute_thread() {
  at::set_num_threads(1);
  // Debian's LibTorch reaches OpenBLAS only through the generic libblas.so.3, so it never
  // calls openblas_set_num_threads itself; OpenBLAS would otherwise start one thread per core
  // inside every worker's matrix products.
  using SetThreads = void (*)(int);
  static auto set_threads = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (set_threads) set_threads(1);
}

}  // namespace pt::model
