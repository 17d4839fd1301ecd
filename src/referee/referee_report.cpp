// `plan --top` and `plan --explain`: the refereed candidates side by side, and the choice's
// stages, links and memory (referee.h).
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/units.h"
#include "plan/plan_table.h"
#include "referee/referee.h"
#include "referee/referee_internal.h"
#include "schedule/memory.h"

namespace pt::referee {
namespace detail {

std::string limit_of(const plan::PlanEstimate& e, const plan::Cluster& cluster) {
  const plan::StageEstimate& s = e.stages[e.bottleneck];
  double busy = std::max(s.compute_ms, s.link_ms) + s.allreduce_ms;
  std::string what;
  if (s.in_flight_ms > busy * (1 + 1e-9) && s.in_flight_ms >= s.time_ms * (1 - 1e-9)) {
    what = str("the round trip from its forward to its backward over the minibatches it keeps in flight, ",
               fixed(s.in_flight_ms, 2), " ms a minibatch");
  } else if (s.round_ms > 0 && busy < s.time_ms * (1 - 1e-9)) {
    what = str("its replicas' round ", fixed(s.round_ms, 2), " ms (all-reduce and the previous stage's spacing), ",
               fixed(s.time_ms, 2), " ms a minibatch");
  } else {
    if (s.link_ms > s.compute_ms)
      what = str("link of worker ", s.busiest_worker, " at level ", cluster.levels[s.busiest_level].name, " ",
                 fixed(s.link_ms, 2), " ms");
    else
      what = str("compute ", fixed(s.compute_ms, 2), " ms");
    if (s.allreduce_ms > 0) what += str(" + all-reduce ", fixed(s.allreduce_ms, 2), " ms");
  }
  return str("stage ", e.bottleneck, ": ", what);
}

}  // namespace detail

namespace {

using detail::limit_of;

// What tells apart candidates of one shape and split in `--top`: "ds" a deferred step, "f"
// the minibatches each stage keeps in flight where the plan sets them, "p" replicas placed
// other than stage by stage in worker order ("-": none of these).
std::string variant(const plan::Plan& p) {
  std::string out;
  if (p.deferred_step) out += "ds";
  std::string flight;
  bool any = false, in_order = true;
  int next = 0;
  for (const auto& st : p.stages) {
    flight += str(flight.empty() ? "" : "/", st.in_flight > 0 ? std::to_string(st.in_flight) : std::string("*"));
    any = any || st.in_flight > 0;
    for (int w : st.workers) in_order = in_order && w == next++;
  }
  if (any) out += str(out.empty() ? "" : " ", "f", flight);
  if (!in_order) out += str(out.empty() ? "" : " ", "p");
  return out.empty() ? "-" : out;
}

// Each worker's memory under `kind` by the memory model (schedule/memory.h): what train checks
// and prints, compare ranks by and the joint search caps, so `plan` shows the same figure.
// Over the run replayed for its figure (`replayed` minibatches; 0: the default) where that is
// longer than memory_over_long_run's own, as `simulate` weighs it: ResNet-50 13-3 on 4x4 held
// 11.74 GiB over 351 minibatches, 12.02 over the 468 its time took to repeat.
std::vector<schedule::WorkerMemory> modelled_memory(const plan::Plan& p, const profile::Profile& profile,
                                                    const std::string& kind, const schedule::MemoryOptions& memory,
                                                    int replayed = 0) {
  schedule::ScheduleOptions over;
  over.minibatches = replayed;
  return schedule::memory_over_long_run(kind, p, over, profile, memory);
}

}  // namespace

std::string format_top(const Refereed& r, const profile::Profile& profile, int k, const schedule::MemoryOptions& memory) {
  std::ostringstream os;
  os << (r.uniform ? "the uniform plans (d stages of r replicas), faster than the search's candidates here, and their "
                     "neighbours: "
                   : "the search's best ")
     << r.ranked.size() << " candidates, replayed under the " << r.schedule
     << " schedule (fastest simulated first; at equal time, fewer workers and no deferred step first; simulated "
        "with the options' all-reduce bucket, the first and data parallelism with their own (variant bN: N MiB); "
        "peak memory per worker by the memory model, as train checks it)"
     << (k < static_cast<int>(r.ranked.size()) ? str("; the fastest ", k, ":\n") : std::string(":\n"));
  char line[512];
  std::snprintf(line, sizeof line, "%4s  %-30s  %-14s  %12s  %12s  %11s  %s\n", "rank", "shape @ first layers", "variant",
                "estimate_ms", "simulated_ms", "peak_memory", "why not chosen");
  os << line;
  for (int i = 0; i < std::min<int>(k, static_cast<int>(r.ranked.size())); ++i) {
    const Candidate& c = r.ranked[i];
    // The shape and where each later stage starts: shapes alone repeat.
    std::string shape = c.plan.shape();
    for (int s = 1; s < c.plan.num_stages(); ++s)
      shape += (s == 1 ? " @" : ",") + profile.layers[c.plan.stages[s].layers.front()].name;
    if (shape.size() > 30) shape = shape.substr(0, 27) + "...";
    std::snprintf(line, sizeof line, "%4d  %-30s  %-14s  %12s  %12s  %11s  %s\n", i + 1, shape.c_str(),
                  (variant(c.plan) + (c.bucket.tried.empty() ? "" : str(" b", c.bucket.bucket_mb))).c_str(),
                  fixed(c.estimate.pipeline_ms_per_minibatch, 3).c_str(),
                  fixed(c.simulated.ms_per_minibatch, 3).c_str(),
                  human_bytes(static_cast<double>(schedule::peak_memory(modelled_memory(c.plan, profile, r.schedule, memory, c.simulated.minibatches))))
                      .c_str(),
                  i == 0 ? "chosen" : c.why_not.c_str());
    os << line;
  }
  return os.str();
}

std::string format_explain(const Candidate& c, const profile::Profile& profile, const plan::Cluster& cluster,
                           const schedule::MemoryOptions& memory_options) {
  std::ostringstream os;
  const plan::PlanEstimate& e = c.estimate;
  os << "per stage, per minibatch of " << profile.batch_size << " (exact cost model; replicas take minibatches "
     << "round-robin; memory: its busiest worker's, by the memory model, as train checks it):\n";
  auto memory = modelled_memory(c.plan, profile, c.simulated.schedule, memory_options, c.simulated.minibatches);
  char line[512];
  std::snprintf(line, sizeof line, "%5s  %8s  %-12s  %10s  %10s  %12s  %10s  %12s\n", "stage", "replicas", "workers",
                "compute_ms", "link_ms", "allreduce_ms", "time_ms", "memory");
  os << line;
  for (int s = 0; s < c.plan.num_stages(); ++s) {
    const auto& st = e.stages[s];
    int64_t worker_memory = 0;
    for (int w : c.plan.stages[s].workers)
      if (w >= 0 && w < static_cast<int>(memory.size())) worker_memory = std::max(worker_memory, memory[w].total());
    std::string ids = plan::format_id_ranges(c.plan.stages[s].workers);
    if (ids.size() > 12) ids = ids.substr(0, 9) + "...";
    std::snprintf(line, sizeof line, "%5d  %8d  %-12s  %10s  %10s  %12s  %10s  %12s\n", s,
                  c.plan.stages[s].replicas, ids.c_str(), fixed(st.compute_ms, 3).c_str(), fixed(st.link_ms, 3).c_str(),
                  fixed(st.allreduce_ms, 3).c_str(), fixed(st.time_ms, 3).c_str(),
                  human_bytes(static_cast<double>(worker_memory)).c_str());
    os << line;
  }
  os << "bottleneck: " << limit_of(e, cluster) << "\n";
  if (!e.links.empty()) {
    os << "links (each worker has a full-duplex link per level), per minibatch:\n";
    std::snprintf(line, sizeof line, "%6s  %-10s  %12s  %12s  %9s\n", "worker", "level", "out", "in", "busy_ms");
    os << line;
    for (const auto& l : e.links) {
      std::snprintf(line, sizeof line, "%6d  %-10s  %12s  %12s  %9s\n", l.worker, cluster.levels[l.level].name.c_str(),
                    human_bytes(l.egress_bytes).c_str(), human_bytes(l.ingress_bytes).c_str(),
                    fixed(l.busy_ms, 3).c_str());
      os << line;
    }
  }
  if (c.simulated.minibatches == 0)  // steady_state_in_closed_form: data parallelism, not replayed
    os << "steady state (" << c.simulated.schedule << ", data parallelism's closed form, the simulator's figure exactly): ";
  else
    os << "simulated (" << c.simulated.schedule << ", " << c.simulated.minibatches << " minibatches, steady state): ";
  os << fixed(c.simulated.ms_per_minibatch, 3) << " ms per minibatch, predicted " << fixed(e.pipeline_ms_per_minibatch, 3)
     << " ms (" << fixed(100 * (c.simulated.ms_per_minibatch / e.pipeline_ms_per_minibatch - 1), 1) << "%)\n";
  return os.str();
}

}  // namespace pt::referee
