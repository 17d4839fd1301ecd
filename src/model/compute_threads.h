#pragma once
// One compute thread per worker (docs/design.md): LibTorch's intra-op pool and OpenBLAS's own
// threads both limited to one, so that workers sharing the cores do not oversubscribe them.
namespace pt::model {

// Call once per thread that computes (LibTorch's setting is per thread for some backends).
// OpenBLAS's limit is set through its C API when the loaded libblas.so.3 is OpenBLAS; with
// another BLAS it is a no-op.
void use_one_compute_thread();

}  // namespace pt::model
