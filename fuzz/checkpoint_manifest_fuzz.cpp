// Fuzzes the checkpoint manifest parser (`--resume DIR`, `checkpoint inspect DIR` read
// <checkpoint>/manifest.json): manifest_from_json, then the round trip through JSON. The layer
// files it lists are verified by size and CRC-32 before they are read (layer_file_fuzz.cpp).
#include "fuzz_target.h"
#include "runtime/checkpoint_manifest.h"

namespace pt::fuzz {
namespace {

Outcome manifest_input(const uint8_t* data, size_t size) {
  runtime::CheckpointManifest m;
  Outcome o = check_contract("checkpoint_manifest", [&] { m = runtime::manifest_from_json(as_text(data, size), "fuzz-manifest"); });
  if (o == Outcome::kRejected) return o;
  if (static_cast<int>(m.files.size()) != m.layers)
    violation("checkpoint_manifest", str(m.layers, " layers but ", m.files.size(), " files"));
  for (size_t i = 0; i < m.files.size(); ++i) {
    const auto& f = m.files[i];
    if (f.layer != static_cast<int>(i) || f.name.empty() || f.name.find('/') != std::string::npos || f.name == "..")
      violation("checkpoint_manifest", str("file ", i, " '", f.name, "' of layer ", f.layer, " got through"));
  }
  must_succeed("checkpoint_manifest", [&] {
    std::string written = runtime::manifest_to_json(m);
    if (runtime::manifest_to_json(runtime::manifest_from_json(written, "fuzz-roundtrip")) != written)
      violation("checkpoint_manifest", "round trip changed the manifest");
  });
  return o;
}

}  // namespace
}  // namespace pt::fuzz

PT_FUZZ_TARGET(checkpoint_manifest, pt::fuzz::manifest_input)
