#include "runtime/tensor_header.h"

#include <optional>

#include "core/error.h"
#include "runtime/transport.h"

namespace pt::runtime {

namespace {
// The dtypes the runtime sends; anything else in a header is refused, not cast.
std::optional<c10::ScalarType> known_dtype(int64_t code) {
  for (auto t : {c10::ScalarType::Float, c10::ScalarType::Double, c10::ScalarType::Half, c10::ScalarType::BFloat16,
                 c10::ScalarType::Long, c10::ScalarType::Int, c10::ScalarType::Short, c10::ScalarType::Char,
                 c10::ScalarType::Byte, c10::ScalarType::Bool})
    if (static_cast<int64_t>(t) == code) return t;
  return std::nullopt;
}
}  // namespace

void write_tensor_header(const torch::Tensor& t, int64_t* h) {
  if (t.dim() > kMaxDims)
    throw TransportError(str("a transfer carries tensors of at most ", kMaxDims, " dimensions, got ", t.dim()));
  std::fill(h, h + kHeaderSize, 0);
  h[0] = static_cast<int64_t>(t.scalar_type());
  h[1] = t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) h[2 + d] = t.size(d);
}

std::pair<c10::ScalarType, std::vector<int64_t>> read_tensor_header(const int64_t* h, const std::string& what) {
  auto dtype = known_dtype(h[0]);
  if (!dtype) throw TransportError(str("bad header, dtype code ", h[0], " (", what, ")"));
  if (h[1] < 0 || h[1] > kMaxDims) throw TransportError(str("bad header, ", h[1], " dimensions (", what, ")"));
  std::vector<int64_t> dims(h + 2, h + 2 + h[1]);
  int64_t bytes = c10::elementSize(*dtype);
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && bytes > kMaxMessageBytes / d))
      throw TransportError(pt::str("bad header, shape ", c10::IntArrayRef(dims), " of more than ", kMaxMessageBytes,
                               " bytes (", what, ")"));
    bytes *= d;
  }
  return {*dtype, dims};
}

}  // namespace pt::runtime
