// The joint search's result told (joint_search.h): the choice, or why none fits; `plan --top`'s table.
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/units.h"
#include "referee/joint_search.h"

namespace pt::referee {
namespace {

std::string recompute_text(const plan::Plan& p) {
  int n = 0;
  for (const auto& st : p.stages) n += st.recompute;
  if (n == 0) return "none";
  if (n == p.num_stages()) return "all";
  std::string s;
  for (int i = 0; i < p.num_stages(); ++i)
    if (p.stages[i].recompute) s += (s.empty() ? "" : ",") + std::to_string(i);
  return "stages " + s;
}

}  // namespace

const Configuration& chosen(const JointResult& r, const JointOptions& joint, const profile::Profile& profile,
                           const plan::Cluster& cluster) {
  if (r.considered == 0) {
    std::string kinds;
    for (const auto& k : joint.schedules) kinds += (kinds.empty() ? "" : ", ") + k;
    throw ConfigError(str("no configuration of ", kinds.empty() ? "any schedule" : kinds, " runs ",
                          counted(profile.num_layers(), "layer"), " on ", counted(cluster.workers(), "worker"),
                          joint.microbatches > 0 ? str(" with ", joint.microbatches, " microbatches") : "",
                          r.not_straight > 0 ? str(" with one worker a stage (--straight left out ", r.not_straight,
                                                   " that replicate a stage)")
                                             : "",
                          r.async_split_tie > 0 ? str(" (", r.async_split_tie, " would split layers sharing a parameter ",
                                                      "under an asynchronous schedule, which cannot keep it one)")
                                                : "",
                          // It blamed the layers where the batch was too small to split (a batch-1 profile).
                          r.ungrouped > 0 ? str(" (interleaved runs its microbatches in groups of its workers, as ",
                                                "Megatron's: ", joint.microbatches > 0
                                                    ? str("--microbatches ", joint.microbatches, " is no multiple of them")
                                                : profile.batch_size == 1
                                                    ? std::string("a batch of 1 splits into no such group; profile a larger batch")
                                                    : str("no count tried (the powers of 2 that divide the batch of ",
                                                          profile.batch_size, ") is a multiple of them; give --microbatches "
                                                          "a multiple of the workers that divides the batch"),
                                                ")")
                                          : "",
                          // It read as if the model were at fault (simulate runs a one-stage 1f1b).
                          cluster.workers() < 2 ? ": a pipeline is planned on 2 workers or more (on one, train "
                                                  "without --plan)"
                                                : ""));
  }
  if (r.ranked.empty())
    throw ConfigError(str("no configuration fits ", human_bytes(static_cast<double>(joint.memory_cap)),
                          " per worker",
                          // The user gave the whole cap: name it and what calibrate took off it.
                          cluster.process_bytes > 0
                              ? str(" (the tensors' share of the ",
                                    human_bytes(static_cast<double>(joint.memory_cap + cluster.process_bytes)),
                                    " cap, less the process's ", human_bytes(static_cast<double>(cluster.process_bytes)),
                                    " as calibrate measured it)")
                              : std::string(),
                          ": the smallest of ", r.considered, " needs ",
                          human_bytes(static_cast<double>(r.smallest_peak)),
                          " (recomputing where that helps): a larger ", joint.memory_cap_named, ", or more workers"));
  return r.ranked.front();
}

std::string format_configurations(const JointResult& r, int k) {
  std::ostringstream os;
  os << "configurations (" << r.considered << " built, " << r.climbed << " of them by moving a split's boundaries, "
     << r.over_cap << " over the memory cap";
  if (r.invalid > 0) os << ", " << r.invalid << " rejected by the schedule validator";
  os << "):\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-3s %-12s %-22s %6s %-10s %10s %12s %11s  %s\n", "#", "schedule",
                "plan @ first layers", "micro", "recompute", "ms/sample", "samples/s", "peak mem", "why not");
  os << line;
  bool marked = false;
  for (int i = 0; i < std::min<int>(k, static_cast<int>(r.ranked.size())); ++i) {
    const Configuration& c = r.ranked[i];
    // Placements and a deferred step told apart: two rows read "1f1b 2-2" at 0.96 and 1.22 ms a
    // sample, one stage-major and one pipeline-major.
    bool pipeline_major = false;
    for (const auto& st : c.plan.stages)
      pipeline_major = pipeline_major || (st.workers.size() > 1 && st.workers[1] != st.workers[0] + 1);
    std::string shape = c.plan.shape() + (c.plan.chunks > 1 ? str(" x", c.plan.chunks) : "") +
                        (pipeline_major ? " pm" : "") + (c.plan.deferred_step ? " ds" : "");
    // Where each later stage starts: one shape splits the layers several ways (GNMT-16's
    // 4-4-4-4 at 0.3513 and 0.3959 ms a sample read alike).
    for (int s = 1; s < c.plan.num_stages(); ++s) shape += str(s == 1 ? " @" : ",", c.plan.stages[s].layers.front());
    if (shape.size() > 22) shape = shape.substr(0, 19) + "...";
    marked = marked || pipeline_major || c.plan.deferred_step;
    std::snprintf(line, sizeof line, "%-3d %-12s %-22s %6d %-10s %10.4f %12.1f %11s  %s\n", i + 1,
                  c.plan.schedule.c_str(),
                  shape.c_str(), c.plan.microbatches, recompute_text(c.plan).c_str(), c.ms_per_sample,
                  1000.0 / c.ms_per_sample, human_bytes(static_cast<double>(c.peak_memory)).c_str(),
                  i == 0 ? "chosen" : c.why_not.c_str());
    os << line;
  }
  if (marked) os << "pm: each copy's stages side by side (pipeline-major placement); ds: a deferred step\n";
  return os.str();
}

}  // namespace pt::referee
