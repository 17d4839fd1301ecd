#include "model/fused_step.h"

#include <cmath>
#include <cstdlib>
#include <string_view>

// Built with -fno-math-errno (sqrt vectorizes) and -ffp-contract=off (no multiply-add but the
// ones written as madd): model/CMakeLists.txt.
namespace pt::model {
namespace {

// ATen's add with a factor, a + alpha * b: fused where its vectorized kernels fuse it.
template <typename T, bool kFma>
inline T madd(T b, T alpha, T a) {
  if constexpr (kFma)
    return std::fma(b, alpha, a);
  else
    return b * alpha + a;
}

// Each operation as optimizer.h's formula takes it, in LibTorch's order and precision: the
// factors rounded to T, each result rounded.
template <typename T, bool kFma>
inline void sgd_range(T* w, T* d, T* m, int64_t from, int64_t to, bool decay, const SgdStepArgs& a) {
  const T scale = static_cast<T>(a.grad_scale), wd = static_cast<T>(a.weight_decay),
          mom = static_cast<T>(a.momentum), step = static_cast<T>(-a.lr);
  const bool scaled = a.grad_scale != 1;
  decay = decay && a.weight_decay != 0;
  for (int64_t i = from; i < to; ++i) {
    T g = d[i];
    if (scaled) g *= scale;
    if (decay) g = madd<T, kFma>(w[i], wd, g);
    if (m) {
      T b = m[i] * mom + g;  // an add with factor 1: exact either way
      m[i] = b;
      w[i] = madd<T, kFma>(b, step, w[i]);
    } else {
      w[i] = madd<T, kFma>(g, step, w[i]);
    }
    d[i] = 0;
  }
}

template <typename T, bool kFma>
inline void adam_range(T* w, T* d, T* m, T* v, int64_t from, int64_t to, bool decay, const AdamStepArgs& a) {
  const T scale = static_cast<T>(a.grad_scale), wd = static_cast<T>(a.weight_decay),
          shrink = static_cast<T>(1 - a.lr * a.weight_decay), b1 = static_cast<T>(a.beta1),
          b2 = static_cast<T>(a.beta2), rest1 = static_cast<T>(1 - a.beta1), rest2 = static_cast<T>(1 - a.beta2),
          c2 = static_cast<T>(a.correction2_sqrt), eps = static_cast<T>(a.eps),
          step = static_cast<T>(-a.lr / a.correction1);
  const bool scaled = a.grad_scale != 1, shrinks = decay && a.decoupled,
             l2 = decay && !a.decoupled && a.weight_decay != 0;
  for (int64_t i = from; i < to; ++i) {
    T g = d[i], x = w[i];
    if (scaled) g *= scale;
    if (shrinks) x *= shrink;
    if (l2) g = madd<T, kFma>(x, wd, g);
    T mi = madd<T, kFma>(g, rest1, m[i] * b1);
    T vi = madd<T, kFma>(rest2 * g, g, v[i] * b2);  // addcmul: self + value * t1 * t2
    m[i] = mi;
    v[i] = vi;
    T denom = std::sqrt(vi) / c2 + eps;
    w[i] = x + step * mi / denom;  // addcdiv: self + value * t1 / t2
    d[i] = 0;
  }
}

// A buffer in two ranges, its decayed parameters first (FlatParameters::leading); the FMA variants
// are compiled for AVX2 and FMA, picked at run time (cpu_fuses_multiply_add).
#if defined(__x86_64__) || defined(__i386__)
#define PT_AVX2_FMA __attribute__((target("avx2,fma")))
#else
#define PT_AVX2_FMA  // elsewhere the FMA variants are built plain and never picked
#endif

template <typename T>
PT_AVX2_FMA void sgd_fma(T* w, T* d, T* m, int64_t n, int64_t decayed, const SgdStepArgs& a) {
  sgd_range<T, true>(w, d, m, 0, decayed, true, a);
  sgd_range<T, true>(w, d, m, decayed, n, false, a);
}

template <typename T>
void sgd_plain(T* w, T* d, T* m, int64_t n, int64_t decayed, const SgdStepArgs& a) {
  sgd_range<T, false>(w, d, m, 0, decayed, true, a);
  sgd_range<T, false>(w, d, m, decayed, n, false, a);
}

template <typename T>
PT_AVX2_FMA void adam_fma(T* w, T* d, T* m, T* v, int64_t n, int64_t decayed, const AdamStepArgs& a) {
  adam_range<T, true>(w, d, m, v, 0, decayed, true, a);
  adam_range<T, true>(w, d, m, v, decayed, n, false, a);
}

template <typename T>
void adam_plain(T* w, T* d, T* m, T* v, int64_t n, int64_t decayed, const AdamStepArgs& a) {
  adam_range<T, false>(w, d, m, v, 0, decayed, true, a);
  adam_range<T, false>(w, d, m, v, decayed, n, false, a);
}

}  // namespace

bool cpu_fuses_multiply_add() {
  // ATen picks its AVX2 (or AVX-512) kernels on such a CPU, unless told to take its default ones.
  static const bool fuses = [] {
#if defined(__x86_64__) || defined(__i386__)
    const char* forced = std::getenv("ATEN_CPU_CAPABILITY");
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           std::string_view(forced ? forced : "") != "default";
#else
    return false;  // ATen's kernels on other CPUs are not matched here: the plain variant
#endif
  }();
  return fuses;
}

template <typename T>
void sgd_step(T* weights, T* grads, T* momentum_buffer, int64_t n, int64_t decayed, const SgdStepArgs& args) {
  if (cpu_fuses_multiply_add())
    sgd_fma(weights, grads, momentum_buffer, n, decayed, args);
  else
    sgd_plain(weights, grads, momentum_buffer, n, decayed, args);
}

template <typename T>
void adam_step(T* weights, T* grads, T* first_moment, T* second_moment, int64_t n, int64_t decayed,
               const AdamStepArgs& args) {
  if (cpu_fuses_multiply_add())
    adam_fma(weights, grads, first_moment, second_moment, n, decayed, args);
  else
    adam_plain(weights, grads, first_moment, second_moment, n, decayed, args);
}

template void sgd_step<float>(float*, float*, float*, int64_t, int64_t, const SgdStepArgs&);
template void sgd_step<double>(double*, double*, double*, int64_t, int64_t, const SgdStepArgs&);
template void adam_step<float>(float*, float*, float*, float*, int64_t, int64_t, const AdamStepArgs&);
template void adam_step<double>(double*, double*, double*, double*, int64_t, int64_t, const AdamStepArgs&);

}  // namespace pt::model
