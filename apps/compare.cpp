// pipetrain compare: every schedule and data parallelism on one profile and cluster, side by
// side, on the simulator.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include "apps/command.h"
#include "apps/plan_referee.h"
#include "apps/planning_flags.h"
#include "core/error.h"
#include "core/units.h"
#include "metrics/metrics.h"
#include "plan/plan_command.h"
#include "plan/planner.h"
#include "schedule/generators.h"
#include "sim/simulator.h"

namespace pt::app {
namespace {

struct CompareFlags {
  std::string profile;
  plan::ClusterFlags cluster;
  schedule::ScheduleOptions options;
  bool json = false;
};

struct Row {
  std::string kind, plan;
  metrics::Metrics m;
  std::string scaling;  // data parallelism only: "weak" (the baseline) or "strong"
};

int run_compare(CompareFlags& f) {
  auto prof = profile::read_profile_json(f.profile);
  plan::Cluster cluster = plan::cluster_from_flags(f.cluster);
  int n = cluster.workers();
  schedule::check_schedule_options(f.options);
  // The plan `pipetrain plan` chooses where it finds one; an even split otherwise.
  plan::Plan planned;
  std::string plan_note;
  try {
    plan::PlanOptions po;
    po.candidates = plan::PlanFlags{}.candidates;
    planned = referee(plan::plan_candidates(prof, cluster, po), prof, cluster, po).ranked.front().plan;
    plan_note = str("planner (", planned.cost_model, ", refereed by the simulator), shape ", planned.shape());
  } catch (const std::exception& e) {
    planned = straight_plan(prof, n);
    plan_note = str("even split into ", planned.num_stages(), " stages (the planner failed: ", e.what(), ")");
  }
  plan::Plan straight = straight_plan(prof, n);
  std::vector<Row> rows;
  auto add = [&](const std::string& kind, const plan::Plan& plan, const std::string& label, schedule::ScheduleOptions o,
                 const profile::Profile& costs, const std::string& name) {
    o.chunks = kind == "interleaved" ? o.chunks : 1;
    try {
      auto s = schedule::make_schedule(kind, plan, o);
      rows.push_back({name, label, metrics::compute_metrics(sim::simulate(s, costs, cluster)), ""});
    } catch (const ConfigError& e) {
      std::cerr << "skipping " << name << ": " << e.what() << "\n";
    }
  };
  std::string planned_label = planned.shape();
  for (const char* kind : {"gpipe", "1f1b", "2bw", "pipedream", "mp"})
    add(kind, planned, planned_label, f.options, prof, kind);
  // zb-h1 and interleaved need single-replica stages: an even split.
  add("zb-h1", straight, straight.shape(), f.options, prof, "zb-h1");
  // Interleaving needs workers x chunks stages of at least one layer each.
  int v = f.options.chunks, p = std::min(n, prof.num_layers() / v);
  if (p >= 1) add("interleaved", straight_plan(prof, p * v), str(p, "x", v, " chunks"), f.options, prof, "interleaved");
  else std::cerr << "skipping interleaved: " << prof.num_layers() << " layers cannot make " << v << " chunks\n";
  // The baseline, as PipeDream measures it and users run it: every worker a minibatch of the
  // profile's batch (the global batch grows with the workers), simulated as one minibatch of
  // n x batch in n microbatches. Beside it, labelled, one minibatch split over the workers.
  plan::Plan everyone = plan::data_parallel_plan(prof.num_layers(), n);
  double dp_rate = 0;
  if (n <= schedule::kMaxMicrobatches) {
    schedule::ScheduleOptions weak = f.options;
    weak.microbatches = n;
    add("dp", everyone, str(n, " x batch ", prof.batch_size), weak, profile::with_batch_size(prof, prof.batch_size * n),
        "dp");
    if (rows.back().kind == "dp") dp_rate = rows.back().m.samples_per_s, rows.back().scaling = "weak";
  } else {
    std::cerr << "skipping dp: " << n << " workers are more than " << schedule::kMaxMicrobatches
              << " microbatches of one step\n";
  }
  schedule::ScheduleOptions strong = f.options;
  strong.microbatches = std::max(f.options.microbatches, n);
  if (strong.microbatches <= schedule::kMaxMicrobatches && prof.batch_size % strong.microbatches == 0) {
    add("dp", everyone, str("1 batch / ", n), strong, prof, "dp-split");
    if (rows.back().kind == "dp-split") rows.back().scaling = "strong";
  }
  if (f.json) {
    json out = json::array();
    for (const auto& r : rows) {
      json j = metrics::to_json(r.m);
      j["row"] = r.kind;
      j["plan"] = r.plan;
      if (!r.scaling.empty()) j["scaling"] = r.scaling;
      if (dp_rate > 0) j["speedup_over_dp"] = r.m.samples_per_s / dp_rate;
      out.push_back(j);
    }
    std::cout << json{{"format", format_tag("compare", 1)}, {"plan", plan_note}, {"rows", out}}.dump(1) << "\n";
    return 0;
  }
  std::cout << prof.model << " (batch " << prof.batch_size << ") on " << cluster.describe() << ", " << f.options.microbatches
            << " microbatches, simulated\nplan: " << plan_note << "\n\n";
  std::cout << std::left << std::setw(12) << "schedule" << std::setw(14) << "plan" << std::right << std::setw(12)
            << "ms/minibatch" << std::setw(12) << "samples/s" << std::setw(10) << "vs dp" << std::setw(9) << "bubble"
            << std::setw(13) << "peak memory" << "\n";
  std::cout << std::fixed;
  for (const auto& r : rows) {
    std::ostringstream speedup;
    speedup << std::fixed << std::setprecision(2) << (dp_rate > 0 ? r.m.samples_per_s / dp_rate : 0) << "x";
    std::cout << std::left << std::setw(12) << r.kind << std::setw(14) << r.plan << std::right << std::setw(12)
              << std::setprecision(2) << r.m.ms_per_minibatch << std::setw(12) << std::setprecision(1)
              << r.m.samples_per_s << std::setw(10) << speedup.str() << std::setw(9) << std::setprecision(3)
              << r.m.bubble_fraction << std::setw(13) << human_bytes(static_cast<double>(r.m.peak_memory_bytes()))
              << "\n";
  }
  std::cout << "\nasynchronous schedules (2bw, pipedream) are measured in the steady state; peak memory is stashed\n"
               "activations plus weights x versions on the fullest worker. dp is the baseline: every worker a minibatch\n"
               "of batch "
            << prof.batch_size << " (a step covers " << n << " of them); dp-split splits one minibatch over the workers.\n";
  return 0;
}

Register reg({"compare", "Simulate every schedule and data parallelism side by side on one profile and cluster",
              [](CLI::App& app) -> std::function<int()> {
  auto f = std::make_shared<CompareFlags>();
  f->options.microbatches = 8;
  f->options.chunks = 2;
  app.add_option("--profile", f->profile, "Profile file (pipetrain.profile/1)")->required();
  add_cluster_flags(app, f->cluster);
  add_schedule_options(app, f->options);
  app.add_flag("--json", f->json, "Print the table as JSON");
  return [f] { return run_compare(*f); };
}});

}  // namespace
}  // namespace pt::app
