// A configuration's per-stage figures from its replay (stage_figures.h).
#include "referee/stage_figures.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "schedule/action.h"

namespace pt::referee::detail {

void stage_figures(const schedule::Trace& t, const metrics::Metrics& steady, const plan::Cluster& cluster,
                   plan::Plan& p) {
  std::vector<double> compute(p.num_stages(), 0.0), exposed(p.num_stages(), 0.0);
  // The minibatches the trace holds, its own count: the count a lengthened replay was asked for
  // is not a synchronous one's, which covers its own (dualpipev at 32 microbatches printed each
  // stage's compute at 1/8: 1.878 ms for a layer of 15.02).
  std::set<int> minibatches;
  std::vector<std::map<std::pair<int, int>, double>> sends(p.num_stages());  // (worker, level) -> ms
  // The optimizer's steps too, as the planner's compute counts them (forward, backward, step):
  // without them a `--schedule auto` plan's table put VGG-16's second stage at 33.986 ms where
  // `plan` put the same stage at 39.563.
  auto computes = [](schedule::ActionKind k) { return schedule::is_compute(k) || k == schedule::ActionKind::kStep; };
  const double from = steady.window_start_ms, to = steady.window_end_ms;
  for (const auto& list : t.workers)
    for (const auto& e : list) {
      int st = e.action.stage;
      if (st < 0 || st >= p.num_stages()) continue;
      double d = e.end_ms - e.start_ms;
      if (computes(e.action.kind)) compute[st] += d;
      if (e.action.kind == schedule::ActionKind::kForward) minibatches.insert(e.action.microbatch / std::max(1, t.microbatches));
      if (schedule::is_send(e.action.kind) && e.action.peer >= 0 && e.action.peer != e.action.worker)
        sends[st][{e.action.worker, cluster.level_between(e.action.worker, e.action.peer)}] += d;
      if (e.action.kind != schedule::ActionKind::kAllReduce) continue;
      double a = std::max(e.start_ms, from), b = std::min(e.end_ms, to), hidden = 0;
      if (b <= a) continue;
      for (const auto& c : list)  // one compute at a time on a worker: the overlaps add up
        if (computes(c.action.kind)) hidden += std::max(0.0, std::min(b, c.end_ms) - std::max(a, c.start_ms));
      exposed[st] += b - a - hidden;
    }
  // The steady window's minibatches: its length at the steady pace.
  double in_window = steady.ms_per_minibatch > 0 ? (to - from) / steady.ms_per_minibatch : 0;
  for (int st = 0; st < p.num_stages(); ++st) {
    const double m = std::max<double>(1, static_cast<double>(minibatches.size())), r = p.stages[st].replicas;
    double link = 0;
    for (const auto& [where, ms] : sends[st]) link = std::max(link, ms / m);
    const double allreduce = in_window > 0 ? exposed[st] / (in_window * r) : 0;
    plan::Stage& stage = p.stages[st];
    stage.compute_ms = compute[st] / (m * r);
    stage.comm_ms = link + allreduce;
    stage.time_ms = std::max(stage.compute_ms, link) + allreduce;
  }
}

}  // namespace pt::referee::detail
