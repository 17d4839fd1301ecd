#include "plan/split_ties.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "core/error.h"
#include "core/units.h"
#include "plan/cluster.h"
#include "plan/plan.h"

namespace pt::plan {

std::vector<SplitTie> split_ties(const std::vector<std::vector<int>>& ties,
                                 const std::vector<std::vector<int>>& stage_layers,
                                 const std::vector<std::vector<int>>& stage_workers) {
  std::vector<SplitTie> out;
  for (size_t g = 0; g < ties.size(); ++g) {
    std::set<int> stages, workers;
    for (int l : ties[g])
      for (size_t st = 0; st < stage_layers.size(); ++st)
        if (std::count(stage_layers[st].begin(), stage_layers[st].end(), l)) stages.insert(static_cast<int>(st));
    if (stages.size() < 2) continue;
    for (int st : stages) workers.insert(stage_workers.at(st).begin(), stage_workers.at(st).end());
    out.push_back({g, std::vector<int>(stages.begin(), stages.end()), std::vector<int>(workers.begin(), workers.end())});
  }
  return out;
}

std::vector<SplitTie> split_ties(const Plan& plan, const profile::Profile& profile) {
  std::vector<std::vector<int>> ties, layers, workers;
  for (const auto& t : profile.ties) ties.push_back(t.layers);
  for (const auto& st : plan.stages) {
    layers.push_back(st.layers);
    workers.push_back(st.workers);
  }
  return split_ties(ties, layers, workers);
}

std::vector<double> tie_exchange_ms_by_stage(const Plan& plan, const profile::Profile& profile, const Cluster& cluster) {
  std::vector<double> out(plan.stages.size(), 0);
  for (const SplitTie& t : split_ties(plan, profile)) {
    double ms = tie_exchange_ms(t, profile.ties[t.group].bytes, cluster);
    for (int st : t.stages) out[st] += ms;
  }
  return out;
}

double tie_exchange_ms(const SplitTie& t, int64_t bytes, const Cluster& cluster) {
  if (!t.exchanges() || bytes <= 0) return 0;
  return cluster.allreduce_ms(t.workers, static_cast<double>(bytes));
}

std::string describe_split_tie(const SplitTie& t, const std::vector<int>& layers,
                               const std::vector<std::string>& layer_names) {
  std::string out = layers.size() == 1 ? "layer " : "layers ";
  for (size_t i = 0; i < layers.size(); ++i) {
    int l = layers[i];
    out += str(i == 0 ? "" : i + 1 == layers.size() ? " and " : ", ", l);
    if (l >= 0 && static_cast<size_t>(l) < layer_names.size() && !layer_names[l].empty())
      out += str(" ('", layer_names[l], "')");
  }
  out += " on stages ";
  for (size_t i = 0; i < t.stages.size(); ++i)
    out += str(i == 0 ? "" : i + 1 == t.stages.size() ? " and " : ", ", t.stages[i]);
  return out;
}

namespace {
std::string fixed_ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", ms);
  return buf;
}
}  // namespace

std::string split_tie_note(const SplitTie& t, const std::vector<int>& layers, int64_t bytes,
                           const std::vector<std::string>& layer_names, double ms) {
  std::string where = describe_split_tie(t, layers, layer_names);
  size_t on = where.find(" on stages ");
  std::string out = str(where.substr(0, on), " share a parameter of ", human_bytes(static_cast<double>(bytes)),
                        " and lie", where.substr(on));
  if (!t.exchanges())
    return out + str(", all on worker ", t.workers.front(), ": one tensor there, stepped once, nothing to exchange");
  std::string who;
  for (size_t i = 0; i < t.workers.size(); ++i)
    who += str(i == 0 ? "" : i + 1 == t.workers.size() ? " and " : ", ", t.workers[i]);
  return out + str(": workers ", who, " sum its gradient before each step (an all-reduce of ",
                   human_bytes(static_cast<double>(bytes)), ms >= 0 ? str(", ", fixed_ms(ms), " ms per minibatch modelled") : "",
                   ")");
}

std::vector<std::string> split_tie_notes(const profile::Profile& profile, const std::vector<std::vector<int>>& stage_layers,
                                         const std::vector<std::vector<int>>& stage_workers, const Cluster& cluster) {
  std::vector<std::vector<int>> ties;
  for (const auto& t : profile.ties) ties.push_back(t.layers);
  std::vector<std::string> names, out;
  for (const auto& l : profile.layers) names.push_back(l.name);
  for (const SplitTie& t : split_ties(ties, stage_layers, stage_workers)) {
    const profile::Tie& tie = profile.ties[t.group];
    out.push_back(split_tie_note(t, tie.layers, tie.bytes, names, tie_exchange_ms(t, tie.bytes, cluster)));
  }
  return out;
}

}  // namespace pt::plan
