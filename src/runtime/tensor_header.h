#pragma once
// The header that announces a tensor to a peer whose shape it does not know: int64s [dtype, ndim,
// dims...]. The gloo transport sends it as a message of its own; a shared-memory channel before
// the tensor's bytes.
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace pt::runtime {

inline constexpr int kMaxDims = 8;
inline constexpr int kHeaderSize = 2 + kMaxDims;
// The largest tensor a peer may announce (far beyond any activation or gradient here).
inline constexpr int64_t kMaxMessageBytes = int64_t(1) << 34;

// `t`'s header into h[0..kHeaderSize); TransportError beyond kMaxDims dimensions.
void write_tensor_header(const torch::Tensor& t, int64_t* h);
// The dtype and shape a peer's header announces, checked before anything is sized by it: a dtype
// the runtime sends, at most kMaxDims dimensions, no more than kMaxMessageBytes in all
// (TransportError "bad header, ... (<what>)").
std::pair<c10::ScalarType, std::vector<int64_t>> read_tensor_header(const int64_t* h, const std::string& what);

}  // namespace pt::runtime
