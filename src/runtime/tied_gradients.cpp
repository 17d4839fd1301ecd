#include "runtime/tied_gradients.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "plan/split_ties.h"

namespace pt::runtime {

namespace {

// The stage holding each member's layer.
std::vector<int> member_stages(const model::TieGroup& g, const schedule::Schedule& s) {
  std::vector<int> out;
  for (const auto& m : g.members) {
    int found = -1;
    for (int st = 0; st < s.num_stages && found < 0; ++st)
      if (std::count(s.stage_layers[st].begin(), s.stage_layers[st].end(), m.layer)) found = st;
    PT_CHECK(found >= 0, "layer ", m.layer, " is in no stage");
    out.push_back(found);
  }
  return out;
}

std::string describe(const model::TieGroup& g, const model::LayeredModel& model, const std::vector<int>& stages) {
  std::string out;
  for (size_t i = 0; i < g.members.size(); ++i)
    out += str(i ? ", " : "", "layer ", g.members[i].layer, " ('", model.layer(g.members[i].layer).name, "') on stage ",
               stages[i]);
  return out;
}

}  // namespace

std::vector<std::vector<int>> TiedGradients::worker_groups(const std::vector<model::TieGroup>& ties,
                                                           const schedule::Schedule& s) {
  std::vector<std::vector<int>> layers, out;
  for (const auto& g : ties) layers.push_back(g.layers());
  for (const plan::SplitTie& t : plan::split_ties(layers, s.stage_layers, s.stage_workers))
    if (t.exchanges()) out.push_back(t.workers);  // one worker holding every copy: one tensor there
  return out;
}

TiedGradients::TiedGradients(const std::vector<model::TieGroup>& ties, const model::LayeredModel& model,
                             const schedule::Schedule& s, int rank) {
  const auto& list = s.actions.at(rank);
  first_step_ = list.size();
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i].kind == schedule::ActionKind::kStep) {
      first_step_ = i;
      break;
    }
  for (const auto& g : ties) {
    auto stages = member_stages(g, s);
    std::set<int> distinct(stages.begin(), stages.end());
    if (distinct.size() < 2) continue;
    // A frozen tie takes no step: its copies stay equal with nothing to exchange.
    if (!g.trains) continue;
    if (!s.flush || s.vertical_sync)
      throw ConfigError(str(model.name(), ": a parameter of ", g.bytes, " bytes is shared by ",
                            describe(g, model, stages), ", and the ", s.kind,
                            " schedule steps each stage at its own time on its own weight version, so the copies would "
                            "train apart. Use a synchronous schedule (1f1b, gpipe, interleaved, zb-h1, zb-v), whose stages "
                            "sum the copies' gradients, or a plan that keeps these layers in one stage"));
    std::set<int> workers;
    std::vector<int> here;  // the stages holding the group on this worker
    for (int st : distinct) {
      const auto& ws = s.stage_workers[st];
      workers.insert(ws.begin(), ws.end());
      if (std::count(ws.begin(), ws.end(), rank)) here.push_back(st);
    }
    if (here.empty()) continue;
    int replicas = s.replicas(here.front());
    if (here.size() > 1) {
      // Its copies here are one tensor, held by the first of these stages and borrowed by the
      // others (StageReplica), whose backwards add to its gradient: that stage steps it once,
      // so every backward here must come before this worker's first step, and no stage may
      // all-reduce it apart from the others.
      for (int st : here)
        if (s.replicas(st) > 1)
          throw ConfigError(str(model.name(), ": worker ", rank, " holds stages ", here.front(), " and ", here.back(),
                                ", which share a parameter (", describe(g, model, stages), "), and stage ", st, " has ",
                                s.replicas(st), " replicas, whose all-reduce would sum the copies apart: keep these ",
                                "layers in one stage or use one replica per stage"));
      for (size_t i = first_step_; i < list.size(); ++i)
        if (schedule::is_compute(list[i].kind) && std::count(here.begin(), here.end(), list[i].stage))
          throw ConfigError(str(model.name(), ": worker ", rank, " holds stages ", here.front(), " and ", here.back(),
                                ", which share a parameter (", describe(g, model, stages), "), and runs ",
                                schedule::to_string(list[i]), " after its first step: the shared copy steps once, ",
                                "after every backward on the worker"));
    }
    // The exchange runs before this worker's first step; a replicated stage's gradients are its
    // replicas' sum only after its all-reduce.
    if (replicas > 1) {
      bool reduced = false;
      for (size_t i = 0; i < first_step_; ++i)
        reduced |= list[i].kind == schedule::ActionKind::kAllReduce && list[i].stage == here.front();
      if (!reduced)
        throw ConfigError(str(model.name(), ": worker ", rank, " would step before stage ", here.front(),
                              "'s all-reduce, and that stage holds a tied parameter (", describe(g, model, stages),
                              "); keep these layers in one stage or use one replica per stage"));
    }
    if (workers.size() < 2) continue;  // every copy on this worker: one tensor, nothing to exchange
    size_t k = 0;
    while (stages[k] != here.front()) ++k;
    mine_.push_back({std::vector<int>(workers.begin(), workers.end()), g.members[k], replicas});
  }
}

void TiedGradients::exchange(Transport& transport, model::LayeredModel& model,
                             const std::function<torch::Tensor(const torch::Tensor&)>& reached_of) {
  torch::NoGradGuard no_grad;
  // Every worker runs its groups in tie-group order, so the collectives of groups that share
  // workers meet in the same order on each of them.
  for (auto& m : mine_) {
    torch::Tensor param = model.layer_parameters(m.member.layer).at(m.member.param);  // a copy: the list is a temporary
    torch::Tensor grad = param.mutable_grad();
    torch::Tensor reached = reached_of(param);
    PT_CHECK(grad.defined() && reached.defined(), "tied parameter of layer ", m.member.layer,
             " has no gradient buffer");
    // The flag rides at the end of the gradient: 0 or 1 from each copy, exact in any dtype.
    torch::Tensor share = m.replicas > 1 ? grad.reshape(-1) / m.replicas : grad.reshape(-1);
    std::vector<torch::Tensor> sum{torch::cat({share, reached.to(grad.scalar_type())})};
    transport.allreduce_sum(sum, m.workers);
    grad.copy_(sum[0].narrow(0, 0, grad.numel()).view(grad.sizes()));
    reached.copy_(sum[0].narrow(0, grad.numel(), 1));
  }
}

}  // namespace pt::runtime
