// Fuzzes the plan parser (`--plan FILE`): parse_json + plan_from_json, then what every plan
// meets next, check_plan_fits against a small DAG profile, and the round trip through JSON.
#include "fuzz_target.h"
#include "plan/plan.h"

namespace pt::fuzz {
namespace {

// Six layers, layer 4 reading layers 1 and 3 (a skip connection), so that plans can break
// the "inputs come from the same or an earlier stage" rule.
profile::Profile dag_profile() {
  profile::Profile p;
  p.model = "fuzz-dag";
  for (int i = 0; i < 6; ++i) {
    profile::Layer l;
    l.name = str("l", i);
    if (i > 0) l.inputs = {i - 1};
    p.layers.push_back(l);
  }
  p.layers[4].inputs = {1, 3};
  return p;
}

Outcome plan_input(const uint8_t* data, size_t size) {
  static const profile::Profile kProfile = dag_profile();
  plan::Plan p;
  Outcome o = check_contract("plan", [&] { p = plan::plan_from_json(parse_json(as_text(data, size), "fuzz-plan"), "fuzz-plan"); });
  if (o == Outcome::kRejected) return o;
  int replicas = 0;
  for (const auto& st : p.stages) {
    if (st.replicas < 1 || static_cast<int>(st.workers.size()) != st.replicas)
      violation("plan", str("stage with ", st.replicas, " replicas and ", st.workers.size(), " worker ids"));
    replicas += st.replicas;
  }
  if (replicas != p.workers) violation("plan", str(p.workers, " workers but ", replicas, " replicas"));
  for (int w = 0; w < p.workers; ++w)
    if (p.stage_of_worker(w) < 0) violation("plan", str("worker ", w, " holds no stage"));
  check_contract("plan", [&] { plan::check_plan_fits(p, kProfile, "fuzz-plan"); });
  must_succeed("plan", [&] {
    std::string written = plan::to_json(p).dump(1);
    plan::Plan q = plan::plan_from_json(parse_json(written, "fuzz-roundtrip"), "fuzz-roundtrip");
    if (plan::to_json(q) != plan::to_json(p)) violation("plan", "round trip changed the plan");
  });
  return o;
}

}  // namespace
}  // namespace pt::fuzz

PT_FUZZ_TARGET(plan, pt::fuzz::plan_input)
