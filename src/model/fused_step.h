#pragma once
// The optimizers' update (optimizer.h) as one pass over each element's weight, gradient and state,
// where whole-buffer tensor operations make one pass per operation: sgd with momentum and weight
// decay read and wrote its buffers 12 times a step, adam 23 times; fused, each once (1 to 256 MiB
// of float weights, one thread: sgd 2.1-2.6x, adam and adamw 2.3-4.0x torch::optim's speed,
// bench/optimizer_step.cpp). Plain C++ on pointers, no LibTorch: every operation rounds as
// LibTorch 1.13's CPU kernels round it (its add with a factor, and addcmul, are fused
// multiply-adds where the CPU has them, as ATen's vectorized kernels make them), so a pipeline's
// weights stay one worker's, bit for bit.
#include <cstdint>

namespace pt::model {

struct SgdStepArgs {
  double grad_scale = 1;  // the gradient is multiplied by it first (1: not)
  double lr = 0;
  double weight_decay = 0;
  double momentum = 0;  // 0: no momentum buffer (`momentum_buffer` null)
};

struct AdamStepArgs {
  double grad_scale = 1;
  double lr = 0;
  double weight_decay = 0;
  bool decoupled = false;  // adamw: w *= 1 - lr * wd first; adam: g += wd * w
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double correction1 = 1, correction2_sqrt = 1;  // 1 - b1^t and sqrt(1 - b2^t)
};

// Steps `n` elements in place and zeroes their gradients; the first `decayed` take weight decay.
// T is float or double.
template <typename T>
void sgd_step(T* weights, T* grads, T* momentum_buffer, int64_t n, int64_t decayed, const SgdStepArgs& args);
template <typename T>
void adam_step(T* weights, T* grads, T* first_moment, T* second_moment, int64_t n, int64_t decayed,
               const AdamStepArgs& args);

// Whether the CPU has fused multiply-add (and AVX2), which LibTorch's kernels then use.
bool cpu_fuses_multiply_add();

}  // namespace pt::model
