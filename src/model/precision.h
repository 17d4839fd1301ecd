#pragma once
// The precision a model computes in (--precision; docs/runtime.md, "Precision"). bf16 is what
// torch.autocast("cpu", dtype=torch.bfloat16) computes: the operations autocast lists (matmul,
// linear, convolution, ...) run in bf16 on bf16 casts of their inputs and weights, the others as
// they are. The weights themselves, their gradients and the optimizer's state stay fp32 (the
// master copy), and a tensor crossing from one stage to the next travels in bf16: half the bytes
// on every link, which the profile measures and the planner and simulator count.
#include <string>

#include <torch/torch.h>

namespace pt::model {

enum class Precision { kFloat32, kBFloat16 };

// "fp32" or "bf16"; anything else is a UsageError naming `flag` and the value.
Precision parse_precision(const std::string& text, const std::string& flag);
std::string to_string(Precision p);

// Autocast on this thread for its lifetime under bf16 (nothing under fp32), as Python's
// `with torch.autocast(...)`: the outermost scope clears autocast's cache of weight casts on
// leaving, so a step, a stashed version or a prediction swapped into the weights is cast afresh.
class ComputeScope {
 public:
  explicit ComputeScope(Precision p);
  ~ComputeScope();
  ComputeScope(const ComputeScope&) = delete;
  ComputeScope& operator=(const ComputeScope&) = delete;

 private:
  bool on_;
  bool was_enabled_ = false;
  c10::ScalarType was_dtype_ = c10::ScalarType::BFloat16;
};

// A tensor crossing a stage boundary (an activation forward, its gradient back) travels in bf16
// under bf16 and arrives as fp32 (the residual stream of a transformer, fp32 in one worker: a bf16
// one made PyTorch 1.13's CPU LayerNorm fail on its fp32 weight). Where the layer before left bf16
// (a Linear), one worker's next layer had it in bf16 (docs/runtime.md, Precision). Only floating
// tensors change; fp32 changes nothing.
torch::Tensor to_wire(const torch::Tensor& t, Precision p);
torch::Tensor from_wire(const torch::Tensor& t, Precision p);
// The bytes `t` takes on the wire (the profile's activation_bytes).
int64_t wire_bytes(const torch::Tensor& t, Precision p);

}  // namespace pt::model
