// Fuzzes the checkpoint layer-file reader (`--resume`, `checkpoint inspect` read every
// layer-<i>.tensors): parse_layer_file over parse_tensor_file, then the round trip. Whatever the
// bytes, it parses or throws a pt::Error; nothing it accepts holds more bytes than the file.
#include "fuzz_target.h"
#include "runtime/layer_file.h"

namespace pt::fuzz {
namespace {

Outcome layer_file_input(const uint8_t* data, size_t size) {
  runtime::LayerFile f;
  std::string bytes = as_text(data, size);
  Outcome o = check_contract("layer_file", [&] { f = runtime::parse_layer_file(bytes, "fuzz-layer"); });
  if (o == Outcome::kRejected) return o;
  size_t held = 0;
  for (const auto& p : f.params) held += p.data.size();
  for (const auto& m : f.momentum) held += m ? m->data.size() : 0;
  if (held > size) violation("layer_file", str("holds ", held, " bytes from a file of ", size));
  if (f.momentum.size() != f.params.size())
    violation("layer_file", str(f.momentum.size(), " momentum slots for ", f.params.size(), " parameters"));
  must_succeed("layer_file", [&] {
    std::string written = runtime::layer_file_bytes(f);
    if (runtime::layer_file_bytes(runtime::parse_layer_file(written, "fuzz-roundtrip")) != written)
      violation("layer_file", "round trip changed the file");
  });
  return o;
}

}  // namespace
}  // namespace pt::fuzz

PT_FUZZ_TARGET(layer_file, pt::fuzz::layer_file_input)
