#include "schedule/generator_util.h"

#include <algorithm>

#include "core/error.h"
#include "schedule/validate.h"

namespace pt::schedule::detail {

Schedule skeleton(const plan::Plan& plan, const std::string& kind, int microbatches, int minibatches) {
  if (microbatches < 1) throw UsageError(str("--microbatches: must be >= 1, got ", microbatches));
  if (plan.num_stages() < 1) throw ConfigError("the plan has no stages");
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
