// Fuzzes how a cluster comes in: a `--cluster FILE` (cluster_from_json) or, when the input is
// not JSON, the command-line shorthand `--workers A,B --bandwidth-gbps X,Y [--memory M]` as
// three lines. A cluster that parses must answer the planner's questions (bandwidth between
// any two workers) and go through JSON and back unchanged.
#include "core/units.h"
#include "fuzz_target.h"
#include "plan/cluster.h"

namespace pt::fuzz {
namespace {

Outcome cluster_input(const uint8_t* data, size_t size) {
  std::string text = as_text(data, size);
  plan::Cluster c;
  Outcome o;
  if (!text.empty() && text[0] == '{') {
    o = check_contract("cluster", [&] { c = plan::cluster_from_json(parse_json(text, "fuzz-cluster"), "fuzz-cluster"); });
  } else {
    std::string lines[3];
    size_t at = 0;
    for (auto& line : lines) {
      size_t end = std::min(text.find('\n', at), text.size());
      if (at <= text.size()) line = text.substr(at, end - at);
      at = end + 1;
    }
    o = check_contract("cluster", [&] {
      int64_t memory = lines[2].empty() ? 0 : parse_bytes(lines[2], "--memory");
      if (memory < 0) throw UsageError("--memory: negative");  // what plan_command.cpp rejects
      c = plan::cluster_from_shorthand(lines[0], lines[1], memory);
    });
  }
  if (o == Outcome::kRejected) return o;
  int n = c.workers();
  if (n < 1 || n > plan::kMaxWorkers) violation("cluster", str("parsed a cluster of ", n, " workers"));
  c.describe();
  if (n > 1) {
    for (int b : {1, n / 2, n - 1})
      if (b != 0 && !(c.bandwidth_bytes_per_s(0, b) > 0)) violation("cluster", str("no bandwidth between 0 and ", b));
  }
  must_succeed("cluster", [&] {
    plan::Cluster d = plan::cluster_from_json(parse_json(plan::to_json(c).dump(), "fuzz-roundtrip"), "fuzz-roundtrip");
    if (plan::to_json(d) != plan::to_json(c)) violation("cluster", "round trip changed the cluster");
  });
  return o;
}

}  // namespace
}  // namespace pt::fuzz

PT_FUZZ_TARGET(cluster, pt::fuzz::cluster_input)
