// pipetrain plan: PipeDream's partitioner (stages, replicas, workers) over a profile and a
// cluster; prints a table, or the plan JSON with --json, and writes it with -o.
#include <iostream>

#include "apps/command.h"
#include "apps/planning_flags.h"
#include "core/json_doc.h"
#include "plan/plan_command.h"

namespace pt::app {
namespace {

struct Flags {
  plan::PlanFlags plan;
  std::string output;
  bool json = false;
};

int run_plan(const Flags& f) {
  plan::PlanOutcome out = plan::run_plan_command(f.plan);
  if (!f.output.empty()) {
    write_text_file_atomic(f.output, out.json);
    std::cerr << "wrote " << f.output << "\n";
  }
  if (f.json) {
    std::cout << out.json;
    std::cerr << out.table;
  } else {
    std::cout << out.table;
  }
  return 0;
}

Register reg({"plan", "Split a profiled model into replicated pipeline stages for a cluster (PipeDream's planner)",
              [](CLI::App& app) -> std::function<int()> {
  auto f = std::make_shared<Flags>();
  app.add_option("--profile", f->plan.profile, "Profile: pipetrain JSON, PipeDream JSON figures, or graph.txt")->required();
  add_cluster_flags(app, f->plan.cluster);
  app.add_option("--memory", f->plan.memory, "Memory per worker, e.g. 16GB (default: the cluster's, or unlimited)");
  app.add_option("--cost-model", f->plan.cost_model, "pipetrain (default) or pipedream (PipeDream's optimizer)")
      ->capture_default_str();
  app.add_flag("--straight", f->plan.straight, "One worker per stage, no replication");
  app.add_flag("--no-activation-transfer", f->plan.no_activation_transfer,
               "PipeDream model: leave activation transfers out (its optimizer's default)");
  app.add_option("-o,--output", f->output, "Write the plan JSON here");
  app.add_flag("--json", f->json, "Print the plan JSON on standard output (the table goes to standard error)");
  return [f] { return run_plan(*f); };
}});

}  // namespace
}  // namespace pt::app
