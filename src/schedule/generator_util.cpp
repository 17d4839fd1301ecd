#include "schedule/generator_util.h"

#include <algorithm>

#include "core/error.h"
#include "schedule/validate.h"

namespace pt::schedule::detail {

namespace {
// The file's placement of a plan whose stages share workers (plan::Plan::shared_workers) against
// the schedule's own, where the schedule is the plan's (another kind places its stages itself).
// `placed` is the plan as the schedule places it, whose copy of the file's placement is dropped.
void check_shared_workers(const plan::Plan& plan, plan::Plan& placed, const std::string& kind, const std::string& rule) {
  const bool given = !plan.shared_workers.empty() && kind == plan.schedule;
  for (int st = 0; given && st < plan.num_stages(); ++st)
    if (plan.shared_workers[st] != placed.stages[st].workers)
      throw ConfigError(str(plan.shared_workers_source, ": stage ", st, " is listed on worker ",
                            plan.shared_workers[st].front(), " but ", kind, " runs it on worker ",
                            placed.stages[st].workers.front(), " (", rule, ")"));
  placed.shared_workers.clear();
}
}  // namespace

Schedule skeleton(const plan::Plan& plan, const std::string& kind, int microbatches, int minibatches) {
  if (microbatches < 1) throw UsageError(str("--microbatches: must be >= 1, got ", microbatches));
  if (plan.num_stages() < 1) throw ConfigError("the plan has no stages");
  if (!plan.shared_workers.empty() && kind == plan.schedule)
    throw ConfigError(str(plan.shared_workers_source, ": its stages share workers, which the ", kind,
                          " schedule does not place (a worker a stage's replica; interleaved, interleaved-zb and the "
                          "V schedules share them)"));
  Schedule s;
  s.kind = kind;
  s.num_stages = plan.num_stages();
  s.microbatches = microbatches;
  s.minibatches = minibatches;
  for (const auto& st : plan.stages) {
    PT_CHECK(!st.workers.empty(), "plan stage without workers");
    s.stage_workers.push_back(st.workers);
    s.stage_layers.push_back(st.layers);
    s.recompute.push_back(st.recompute);
  }
  s.weight_versions.assign(s.num_stages, 1);
  s.split_backward.assign(s.num_stages, false);
  s.actions.resize(plan.workers);
  return s;
}

Schedule v_skeleton(const plan::Plan& plan, const std::string& kind, int microbatches) {
  int stages = plan.num_stages();
  if (stages < 2 || stages % 2 != 0)
    throw ConfigError(str(kind, ": the plan has ", stages, " stages; ", kind, " needs two per worker (2 x workers "
                          "stages, placed in a V)"));
  for (int st = 0; st < stages; ++st)
    if (plan.stages[st].replicas != 1)
      throw ConfigError(str(kind, ": stage ", st, " has ", plan.stages[st].replicas, " replicas; ", kind,
                            " needs single-replica stages"));
  plan::Plan placed = plan;
  placed.workers = stages / 2;
  for (int st = 0; st < stages; ++st) placed.stages[st].workers = {std::min(st, stages - 1 - st)};
  check_shared_workers(plan, placed, kind, str("stage s on worker min(s, ", stages - 1, " - s), a V"));
  Schedule s = skeleton(placed, kind, microbatches, 1);
  s.chunks = 2;
  s.split_backward.assign(stages, true);
  return s;
}

Schedule looped_skeleton(const plan::Plan& plan, const std::string& kind, int microbatches, int chunks) {
  if (chunks < 1) throw UsageError(str("--chunks: must be >= 1, got ", chunks));
  int stages = plan.num_stages();
  if (stages % chunks != 0)
    throw ConfigError(str(kind, ": the plan has ", stages, " stages, not a multiple of --chunks ", chunks,
                          " (it needs workers x chunks stages)"));
  for (int st = 0; st < stages; ++st)
    if (plan.stages[st].replicas != 1)
      throw ConfigError(str(kind, ": stage ", st, " has ", plan.stages[st].replicas,
                            " replicas; interleaving needs single-replica stages"));
  int p = stages / chunks;
  plan::Plan placed = plan;
  placed.workers = p;
  for (int st = 0; st < stages; ++st) placed.stages[st].workers = {st % p};
  if (plan.chunks == 0 || plan.chunks == chunks)  // the file placed its own chunks
    check_shared_workers(plan, placed, kind, str("stage s on worker s mod ", p, " with ", chunks, " chunks"));
  placed.shared_workers.clear();
  Schedule s = skeleton(placed, kind, microbatches, 1);
  s.chunks = chunks;
  return s;
}

void require_work_per_replica(const Schedule& s, int items) {
  for (int st = 0; st < s.num_stages; ++st)
    if (s.replicas(st) > items)
      throw ConfigError(str(s.kind, ": stage ", st, " has ", s.replicas(st), " replicas but only ", items,
                            items == 1 ? " microbatch" : " microbatches", " to share; use --microbatches >= ",
                            s.replicas(st)));
}

std::vector<int> items_of(const Schedule& s, int stage, int worker, int items) {
  std::vector<int> out;
  for (int k = 0; k < items; ++k)
    if (s.worker_of(stage, k) == worker) out.push_back(k);
  return out;
}

int one_f_one_b_warmup(const Schedule& s, int stage) {
  std::vector<int> replicas;
  for (int st = 0; st < s.num_stages; ++st) replicas.push_back(s.replicas(st));
  return plan::paper_in_flight(replicas, stage);
}

void append_flush(Schedule& s, int id) {
  for (int st = 0; st < s.num_stages; ++st)
    for (int w : s.stage_workers[st]) {
      if (s.replicas(st) > 1) s.add(w, ActionKind::kAllReduce, st, id);
      s.add(w, ActionKind::kStep, st, id);
    }
}

}  // namespace pt::schedule::detail
