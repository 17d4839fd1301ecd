// The planner's choice against the best plan found by enumeration under the simulator (issue 12):
// for every profile of data/profiles (or the models named as arguments) and the clusters 4x4 at
// 96/10, 96/25 and 96/1 Gbit/s, 2x8 at 96/10 and 96/25, 8x2 at 96/10 and 96/1, flat 8 at 10, 1
// and 25 Gbit/s, every 1- and 2-stage plan (every cut, every replica split) and a
// sample of 3- and 4-stage ones, each in three placements (stages on consecutive workers in
// stage order, in reverse order, and spread: consecutive replicas in different servers), all
// replayed under the pipedream schedule. Prints per case the chosen plan's simulated time, the
// best enumerated one's, the gap, and how far the search's estimate was from it.
// Builds without LibTorch (bench/CMakeLists.txt).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "referee/referee.h"
#include "core/error.h"
#include "metrics/metrics.h"
#include "plan/plan_command.h"
#include "plan/planner.h"
#include "pt_paths.h"
#include "schedule/generators.h"
#include "sim/simulator.h"

using namespace pt;

namespace {

constexpr int kSampled = 400;    // 3- and 4-stage plans drawn per stage count
constexpr int kMaxPeriod = 60;   // lcm of the replica counts: longer ones take long to replay

// Worker order for a placement: consecutive stages' replicas take consecutive entries.
std::vector<int> worker_order(const plan::Cluster& c, const std::string& placement) {
  int W = c.workers();
  std::vector<int> order(W);
  std::iota(order.begin(), order.end(), 0);
  if (placement == "reverse") std::reverse(order.begin(), order.end());
  if (placement == "spread" && c.levels.size() > 1) {
    int per = c.levels[0].fan_out, servers = W / per;
    for (int i = 0; i < W; ++i) order[i] = (i % servers) * per + i / servers;
  }
  return order;
}

plan::Plan make(const std::vector<int>& cuts, const std::vector<int>& reps, int layers, const std::vector<int>& order) {
  plan::Plan p;
  p.workers = static_cast<int>(order.size());
  int first = 0, next = 0;
  for (size_t s = 0; s < reps.size(); ++s) {
    plan::Stage st;
    int end = s + 1 < reps.size() ? cuts[s] : layers;
    for (int l = first; l < end; ++l) st.layers.push_back(l);
    first = end;
    st.replicas = reps[s];
    for (int r = 0; r < reps[s]; ++r) st.workers.push_back(order[next++]);
    std::sort(st.workers.begin(), st.workers.end());
    p.stages.push_back(st);
  }
  return p;
}

// As the planner's referee replays a plan (until its window settles); refused: infinity.
double simulate_ms(const plan::Plan& p, const profile::Profile& prof, const plan::Cluster& c) {
  double ms = referee::simulate_plan(p, prof, c, plan::PlanOptions{});
  return ms > 0 ? ms : INFINITY;
}

struct Best {
  double ms = INFINITY;
  std::string what;
  int tried = 0, skipped = 0;
};

void consider(Best& best, const std::vector<int>& cuts, const std::vector<int>& reps, const profile::Profile& prof,
              const plan::Cluster& c) {
  int period = 1;
  for (int r : reps) period = std::lcm(period, r);
  if (period > kMaxPeriod) {
    ++best.skipped;
    return;
  }
  for (const char* placement : {"in order", "reverse", "spread"}) {
    if (std::string(placement) == "spread" && c.levels.size() < 2) continue;
    plan::Plan p = make(cuts, reps, prof.num_layers(), worker_order(c, placement));
    double ms = simulate_ms(p, prof, c);
    ++best.tried;
    if (ms < best.ms) {
      best.ms = ms;
      std::string cut_names;
      for (size_t s = 1; s < p.stages.size(); ++s)
        cut_names += (s == 1 ? " @" : ",") + prof.layers[p.stages[s].layers.front()].name;
      best.what = p.shape() + cut_names + " " + placement;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  struct ClusterCase {
    std::string workers, gbps;
  };
  // Arguments (optional) pick models by name: all of data/profiles otherwise. --chosen-only
  // skips the enumeration (the planner's prediction against the simulation only);
  // --allreduce hierarchical plans and replays every cluster with it (flat ones are left out:
  // nothing changes there); --candidates N sets plan's --candidates (default its default).
  std::vector<std::string> models = {"vgg16", "resnet50", "gnmt16", "awd-lm", "gpt-2048"}, named;
  bool chosen_only = false;
  int candidates = plan::PlanFlags{}.candidates;
  auto allreduce = plan::Cluster::Allreduce::kRing;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--chosen-only") chosen_only = true;
    else if (a == "--candidates" && i + 1 < argc) candidates = std::stoi(argv[++i]);
    else if (a == "--allreduce" && i + 1 < argc) allreduce = plan::parse_allreduce(argv[++i], "--allreduce");
    else named.push_back(a);
  }
  if (!named.empty()) models = named;
  std::vector<ClusterCase> clusters = {{"4,4", "96,10"}, {"4,4", "96,25"}, {"4,4", "96,1"}, {"2,8", "96,10"},
                                       {"2,8", "96,25"},  {"8,2", "96,10"}, {"8,2", "96,1"},  {"8", "10"},
                                       {"8", "1"},        {"8", "25"}};
  std::mt19937 rng(7);
  std::printf("%-9s %-10s %-30s %10s %10s %-40s %8s %8s %7s\n", "model", "cluster", "chosen", "chosen_ms", "best_ms",
              "best enumerated", "gap", "est_err", "tried");
  for (const auto& model : models) {
    auto prof = profile::read_profile_json(std::string(PT_SOURCE_DIR) + "/data/profiles/" + model + ".json");
    int L = prof.num_layers();
    for (const auto& cc : clusters) {
      plan::Cluster c = plan::cluster_from_shorthand(cc.workers, cc.gbps);
      c.allreduce = allreduce;
      if (allreduce != plan::Cluster::Allreduce::kRing && c.levels.size() < 2) continue;
      int W = c.workers();
      plan::PlanOptions o;
      o.candidates = candidates;
      auto r = referee::choose(plan::plan_candidates(prof, c, o), prof, c, o);
      const auto& chosen = r.ranked.front();
      Best best;
      if (chosen_only) best.ms = chosen.simulated.ms_per_minibatch, best.what = "(not enumerated)";
      else consider(best, {}, {W}, prof, c);
      for (int cut = 1; cut < L && !chosen_only; ++cut)
        for (int n0 = 1; n0 < W; ++n0) consider(best, {cut}, {n0, W - n0}, prof, c);
      for (int stages : {3, 4}) {
        if (chosen_only) break;
        if (stages > L || stages > W) continue;
        for (int k = 0; k < kSampled; ++k) {
          std::vector<int> cuts(stages - 1), reps(stages);
          // Distinct sorted cuts in 1..L-1 and a composition of W into `stages` parts.
          std::vector<int> all(L - 1);
          std::iota(all.begin(), all.end(), 1);
          std::shuffle(all.begin(), all.end(), rng);
          std::copy_n(all.begin(), stages - 1, cuts.begin());
          std::sort(cuts.begin(), cuts.end());
          std::vector<int> bars(W - 1);
          std::iota(bars.begin(), bars.end(), 1);
          std::shuffle(bars.begin(), bars.end(), rng);
          std::vector<int> b(bars.begin(), bars.begin() + stages - 1);
          std::sort(b.begin(), b.end());
          int prev = 0;
          for (int s = 0; s < stages - 1; ++s) reps[s] = b[s] - prev, prev = b[s];
          reps[stages - 1] = W - prev;
          consider(best, cuts, reps, prof, c);
        }
      }
      std::string shape = chosen.plan.shape();
      for (int s = 1; s < chosen.plan.num_stages(); ++s)
        shape += (s == 1 ? " @" : ",") + prof.layers[chosen.plan.stages[s].layers.front()].name;
      if (shape.size() > 30) shape = shape.substr(0, 27) + "...";
      double chosen_ms = chosen.simulated.ms_per_minibatch;
      std::printf("%-9s %-10s %-30s %10.2f %10.2f %-40s %+7.1f%% %+7.1f%% %7d\n", model.c_str(),
                  (cc.workers + "@" + cc.gbps).c_str(), shape.c_str(), chosen_ms, best.ms, best.what.substr(0, 40).c_str(),
                  100 * (chosen_ms / best.ms - 1), 100 * (chosen_ms / chosen.estimate.pipeline_ms_per_minibatch - 1),
                  best.tried);
    }
  }
  std::printf("gap: the chosen plan's simulated time (its prediction) over the best enumerated one's; est_err:\n"
              "simulated over the search's closed-form estimate, which only proposes candidates. Plans whose replica\n"
              "counts' lcm exceeds %d are skipped.\n",
              kMaxPeriod);
  return 0;
}
