#include "schedule/given_order.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "schedule/generators.h"

namespace pt::schedule {

namespace {

using Key = std::tuple<int, int, int>;  // (kind, stage, microbatch)
Key key(const Action& a) { return {static_cast<int>(a.kind), a.stage, a.microbatch}; }

}  // namespace

bool order_is_weighed(const std::string& kind) { return takes_action_times(kind) || takes_activation_budget(kind); }

std::vector<std::string> compute_order(const Schedule& s) {
  std::vector<std::string> out;
  for (const auto& list : s.actions) {
    std::string line;
    for (const Action& a : list)
      if (is_compute(a.kind)) line += (line.empty() ? "" : " ") + to_string(a);
    out.push_back(line);
  }
  return out;
}

std::vector<std::string> plan_order(const plan::Plan& plan, const std::string& source, const std::string& kind,
                                    int microbatches, int chunks) {
  if (plan.order.empty()) return {};
  if (!order_is_weighed(plan.schedule))
    throw ConfigError(str(source, ": field 'order' is for the schedules whose order the planner weighs (zb-h1, "
                          "interleaved-zb, zb-v, v-half, v-min), not '", printable(plan.schedule), "'"));
  bool planned = kind == plan.schedule && microbatches == plan.microbatches && chunks == std::max(1, plan.chunks);
  return planned ? plan.order : std::vector<std::string>{};
}

void follow_order(Schedule& s, const std::vector<std::string>& order, const std::string& source) {
  if (static_cast<int>(order.size()) != s.num_workers())
    throw ConfigError(str(source, ": lists ", order.size(), " workers' orders, the ", s.kind, " schedule of this plan runs ",
                          s.num_workers()));
  for (int w = 0; w < s.num_workers(); ++w) {
    std::vector<Action>& list = s.actions[w];
    auto tail = std::find_if(list.begin(), list.end(), [](const Action& a) { return !is_compute(a.kind); });
    if (std::any_of(tail, list.end(), [](const Action& a) { return is_compute(a.kind); }))
      throw InternalError(str(s.kind, ": worker ", w, " computes after its flush; a given order cannot replace it"));
    std::map<Key, Action> owed;  // a synchronous schedule's computes: each once on its worker
    for (auto it = list.begin(); it != tail; ++it) owed.emplace(key(*it), *it);
    std::vector<Action> given;
    std::set<Key> done;
    std::istringstream words(order[w]);
    for (std::string word; words >> word;) {
      auto bad = [&](const std::string& why) {
        throw ConfigError(str(source, ": worker ", w, "'s action ", given.size(), " '", printable(word), "' ", why));
      };
      Action a;
      try {
        a = parse_action(word, w);
      } catch (const FormatError& e) {
        bad(str("is not an action: ", e.what()));
      }
      if (!is_compute(a.kind)) bad("is not a compute (F, B or W)");
      auto it = owed.find(key(a));
      if (it == owed.end())
        bad(str("is not one of the worker's computes under ", s.kind, done.count(key(a)) ? " (it runs once)" : ""));
      a = it->second;
      owed.erase(it);
      ActionKind before = a.kind == ActionKind::kBackward ? ActionKind::kForward : ActionKind::kBackward;
      if (a.kind != ActionKind::kForward && !done.count({static_cast<int>(before), a.stage, a.microbatch}))
        bad(str("runs before ", a.stage, kind_code(before), a.microbatch, " on its worker"));
      done.insert(key(a));
      given.push_back(a);
    }
    if (!owed.empty()) {
      auto [k, st, mb] = owed.begin()->first;
      throw ConfigError(str(source, ": worker ", w, "'s order lacks ", st, kind_code(static_cast<ActionKind>(k)), mb,
                            " (", owed.size(), " of its computes under ", s.kind, " missing)"));
    }
    given.insert(given.end(), tail, list.end());
    list = std::move(given);
  }
}

}  // namespace pt::schedule
