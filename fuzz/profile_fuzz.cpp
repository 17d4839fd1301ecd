// Fuzzes what `--profile FILE` reads: parse_any_profile over pipetrain JSON, PipeDream's JSON
// figures and PipeDream's graph.txt, detected by content. A profile that parses must also go
// out and back (to_json, text, profile_from_json) unchanged: the planner's output embeds it,
// so a parsed profile that cannot be written is a bug too.
#include "fuzz_target.h"
#include "profile/pipedream_graph.h"

namespace pt::fuzz {
namespace {

Outcome profile_input(const uint8_t* data, size_t size) {
  std::string text = as_text(data, size);
  profile::Profile p;
  Outcome o = check_contract("profile", [&] { p = profile::parse_any_profile(text, "fuzz-profile"); });
  if (o == Outcome::kRejected) return o;
  if (p.num_layers() < 1) violation("profile", "parsed a profile with no layers");
  for (int i = 0; i < p.num_layers(); ++i)
    for (int in : p.layers[i].inputs)
      if (in < 0 || in >= i) violation("profile", str("layer ", i, " reads layer ", in, ", not an earlier one"));
  p.total_compute_ms();
  p.total_parameter_bytes();
  std::string written;
  try {
    written = profile::to_json(p).dump(1);
  } catch (const std::exception& e) {
    violation("profile", str("a parsed profile cannot be written: ", e.what()));
  }
  must_succeed("profile", [&] {
    profile::Profile q = profile::profile_from_json(parse_json(written, "fuzz-roundtrip"), "fuzz-roundtrip");
    if (profile::to_json(q) != profile::to_json(p)) violation("profile", "round trip changed the profile");
  });
  return o;
}

}  // namespace
}  // namespace pt::fuzz

PT_FUZZ_TARGET(profile, pt::fuzz::profile_input)
