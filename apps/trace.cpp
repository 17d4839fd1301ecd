// pipetrain trace TRACE: metrics and pictures of a trace that `train --trace` (measured or
// emulated) or `simulate --save-trace` wrote; --merge N first joins the per-worker files that
// workers started outside the launcher (testbed, mpirun) leave as TRACE.worker<r>.
#include <filesystem>
#include <iostream>

#include "apps/command.h"
#include "core/error.h"
#include "metrics/metrics.h"
#include "metrics/timeline.h"
#include "schedule/trace.h"

namespace pt::app {
namespace {

struct TraceFlags {
  std::string path, svg, chrome, title;
  int merge = 0;
  bool json = false;
};

int run_trace(const TraceFlags& f) {
  if (f.merge < 0 || f.merge > 100000) throw UsageError(str("--merge: must be in 0..100000, got ", f.merge));
  if (f.merge > 0) {
    for (int r = 0; r < f.merge; ++r)
      if (!std::filesystem::exists(f.path + ".worker" + std::to_string(r)))
        throw ConfigError(str(f.path, ".worker", r, ": missing (--merge ", f.merge, " joins ", f.path, ".worker0..",
                              f.merge - 1, ")"));
    schedule::merge_worker_traces(f.merge, f.path);
  }
  schedule::Trace t = schedule::read_trace(f.path);
  metrics::Metrics m = metrics::compute_metrics(t);
  std::string title = f.title.empty() ? str(t.schedule, ": ", t.num_stages, " stages, ", t.workers.size(), " workers (",
                                            t.source, ")")
                                      : f.title;
  if (!f.svg.empty()) write_text_file_atomic(f.svg, metrics::timeline_svg(t, title));
  if (!f.chrome.empty()) write_text_file_atomic(f.chrome, metrics::chrome_trace(t).dump() + "\n");
  if (f.json) {
    std::cout << metrics::to_json(m).dump(1) << "\n";
    return 0;
  }
  std::cout << title << "\n" << metrics::format_metrics(m);
  return 0;
}

Register reg({"trace", "Metrics and pictures of a trace (train --trace, simulate --save-trace)",
              [](CLI::App& app) -> std::function<int()> {
  auto f = std::make_shared<TraceFlags>();
  app.add_option("trace", f->path, "Trace file (pipetrain.trace/1)")->required();
  app.add_option("--merge", f->merge, "First join TRACE.worker0 .. TRACE.worker<N-1> into TRACE (testbed, mpirun)");
  app.add_option("--svg", f->svg, "Write the timeline as SVG");
  app.add_option("--chrome", f->chrome, "Write Chrome trace JSON (chrome://tracing, ui.perfetto.dev)");
  app.add_option("--title", f->title, "Title of the picture");
  app.add_flag("--json", f->json, "Print the metrics as JSON");
  return [f] { return run_trace(*f); };
}});

}  // namespace
}  // namespace pt::app
