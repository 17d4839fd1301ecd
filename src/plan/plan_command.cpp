#include "plan/plan_command.h"

#include <chrono>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/units.h"
#include "plan/plan_table.h"
#include "plan/realised_cost.h"
#include "plan/planner.h"
#include "profile/pipedream_graph.h"

namespace pt::plan {

PlanOutcome run_plan_command(const PlanFlags& f) {
  if (f.profile.empty()) throw UsageError("--profile: a profile file is required");
  PlanOptions options;
  options.started = std::chrono::steady_clock::now();  // --time-limit counts the whole command
  if (f.cost_model == "pipetrain") options.cost_model = CostModel::kRealised;
  else if (f.cost_model == "pipedream") options.cost_model = CostModel::kPipedream;
  else throw UsageError(str("--cost-model: unknown cost model '", f.cost_model, "' (use pipetrain or pipedream)"));
  options.straight = f.straight;
  // PipeDream's model alone reads it (its optimizer's default leaves them out); the pipetrain model
  // replays every transfer, and the flag passed unread, exit 0.
  if (f.no_activation_transfer && options.cost_model != CostModel::kPipedream)
    throw UsageError("--no-activation-transfer: leaves activation transfers out of PipeDream's cost model "
                     "(--cost-model pipedream); the pipetrain model replays every transfer");
  options.activation_transfer = !f.no_activation_transfer;
  if (!f.memory.empty()) {
    options.memory_bytes = parse_bytes(f.memory, "--memory");
    if (options.memory_bytes <= 0) throw UsageError(str("--memory: must be > 0, got '", f.memory, "'"));
  }
  if (f.candidates < 1 || f.candidates > kMaxCandidates)
    throw UsageError(str("--candidates: must be in 1..", kMaxCandidates, ", got ", f.candidates));
  options.candidates = f.candidates;
  if (!(f.time_limit_s >= 0 && f.time_limit_s <= 1e9))
    throw UsageError(str("--time-limit: must be seconds in 0..1e9 (0: no limit), got ", f.time_limit_s));
  options.time_limit_s = f.time_limit_s;
  options.progress = f.progress;
  if (!(f.bucket_mb >= 0) || !std::isfinite(f.bucket_mb))
    throw UsageError(str("--bucket-mb: must be >= 0, got ", f.bucket_mb));
  options.bucket_bytes = static_cast<int64_t>(f.bucket_mb * (1 << 20));
  options.deferred_step = !f.no_deferred_step;
  options.fewer_workers = !f.all_workers;
  PlanOutcome out;
  out.options = options;
  out.cluster = cluster_from_flags(f.cluster);
  out.profile = profile::read_any_profile(f.profile);
  profile::require_timed(out.profile, f.profile);
  out.memory_cap = memory_limit(out.cluster, options);
  out.joint = f.joint || (out.memory_cap > 0 && options.cost_model == CostModel::kRealised);
  if (out.joint) out.options.memory_bytes = options.memory_bytes = std::numeric_limits<int64_t>::max();
  out.candidates = plan_candidates(out.profile, out.cluster, options);
  PT_CHECK(!out.candidates.empty(), "the planner returned no candidate");
  out.plan = out.candidates.front();
  out.table = format_plan_table(out.plan, out.profile, out.cluster);
  out.json = to_json(out.plan).dump(1) + "\n";
  return out;
}

}  // namespace pt::plan
