#pragma once
// pipetrain's version: `--version`, and part of what the workers of one job must agree on.
namespace pt {
inline constexpr const char* kPipetrainVersion = "0.2";
}  // namespace pt
