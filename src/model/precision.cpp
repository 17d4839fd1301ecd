#include "model/precision.h"

#include <ATen/autocast_mode.h>

#include "core/error.h"

namespace pt::model {

Precision parse_precision(const std::string& text, const std::string& flag) {
  if (text == "fp32") return Precision::kFloat32;
  if (text == "bf16") return Precision::kBFloat16;
  throw UsageError(str(flag, ": '", text, "' is not a precision; use fp32 or bf16"));
}

std::string to_string(Precision p) { return p == Precision::kBFloat16 ? "bf16" : "fp32"; }

ComputeScope::ComputeScope(Precision p) : on_(p == Precision::kBFloat16) {
  if (!on_) return;
  was_enabled_ = at::autocast::is_cpu_enabled();
  was_dtype_ = at::autocast::get_autocast_cpu_dtype();
  at::autocast::set_cpu_enabled(true);
  at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  at::autocast::increment_nesting();
}

ComputeScope::~ComputeScope() {
  if (!on_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_cpu_enabled(was_enabled_);
  at::autocast::set_autocast_cpu_dtype(was_dtype_);
}

namespace {
bool travels_in_bf16(const torch::Tensor& t, Precision p) {
  return p == Precision::kBFloat16 && t.defined() && t.is_floating_point();
}
}  // namespace

torch::Tensor to_wire(const torch::Tensor& t, Precision p) {
  return travels_in_bf16(t, p) ? t.to(torch::kBFloat16) : t;
}

torch::Tensor from_wire(const torch::Tensor& t, Precision p) {
  return travels_in_bf16(t, p) ? t.to(torch::kFloat32) : t;
}

int64_t wire_bytes(const torch::Tensor& t, Precision p) {
  return t.numel() * (travels_in_bf16(t, p) ? 2 : static_cast<int64_t>(t.element_size()));
}

}  // namespace pt::model
