// pipetrain trace TRACE: metrics and pictures of a trace that `train --trace` (measured or
// emulated) or `simulate --save-trace` wrote; --merge N first joins the per-worker files that
// workers started outside the launcher (testbed, mpirun) leave as TRACE.worker<r>. --against
// OTHER says where TRACE and OTHER part, action kind by kind (a run's --trace against its
// --prediction-trace: metrics/trace_gap.h).
#include <filesystem>
#include <iostream>
#include <optional>

#include "apps/command.h"
#include "core/error.h"
#include "core/files.h"
#include "core/units.h"
#include "metrics/metrics.h"
#include "metrics/timeline.h"
#include "metrics/trace_gap.h"
#include "schedule/trace.h"

namespace pt::app {
namespace {

struct TraceFlags {
  std::string path, svg, chrome, title, against;
  int merge = 0;
  bool json = false;
};

int run_trace(const TraceFlags& flags) {
  if (flags.merge < 0 || flags.merge > 100000) throw UsageError(str("--merge: must be in 0..100000, got ", flags.merge));
  // `--chrome` given the trace's own path replaced it, exit 0, and the next `trace` of it failed.
  const std::vector<FlagPath> outputs = {{"--svg", flags.svg}, {"--chrome", flags.chrome}};
  for (const auto& [flag, path] : outputs) check_output_path(path, flag);
  check_outputs_apart({{"TRACE", flags.path}, {"--against", flags.against}}, outputs);
  if (flags.merge > 0) {
    for (int r = 0; r < flags.merge; ++r)
      if (!std::filesystem::exists(flags.path + ".worker" + std::to_string(r)))
        throw ConfigError(str(flags.path, ".worker", r, ": missing (--merge ", flags.merge, " joins ", flags.path, ".worker0..",
                              flags.merge - 1, ")"));
    schedule::merge_worker_traces(flags.merge, flags.path);
  }
  schedule::Trace t = schedule::read_trace(flags.path);
  schedule::check_complete(t, flags.path);
  std::string title = flags.title.empty() ? str(t.schedule, ": ", counted(t.num_stages, "stage"), ", ",
                                            counted(static_cast<int64_t>(t.workers.size()), "worker"), " (",
                                            t.source, ")")
                                      : flags.title;
  // The comparison first: one refused leaves no picture behind.
  std::optional<metrics::TraceGap> gap;
  schedule::Trace other;
  if (!flags.against.empty()) {
    other = schedule::read_trace(flags.against);
    schedule::check_complete(other, flags.against);
    gap = metrics::trace_gap(t, flags.path, other, flags.against);
  }
  // TRACE's pictures, with --against too (they were left unwritten there, exit 0).
  if (!flags.svg.empty()) write_text_file_atomic(flags.svg, metrics::timeline_svg(t, title));
  if (!flags.chrome.empty()) write_text_file_atomic(flags.chrome, metrics::chrome_trace(t).dump() + "\n");
  if (gap) {
    if (flags.json) {
      std::cout << metrics::to_json(*gap).dump(1) << "\n";
      return 0;
    }
    std::cout << t.schedule << ", " << counted(t.num_stages, "stage") << ", " << counted(t.microbatches, "microbatch", "microbatches")
              << ", " << counted(static_cast<int64_t>(t.workers.size()), "worker") << ": " << flags.path << " (" << t.source << ") against " << flags.against
              << " (" << other.source << ")\n"
              << metrics::format_trace_gap(*gap);
    return 0;
  }
  metrics::Metrics m = metrics::compute_metrics(t);
  if (flags.json) {
    std::cout << metrics::to_json(m).dump(1) << "\n";
    return 0;
  }
  std::cout << title << "\n" << metrics::format_metrics(m);
  return 0;
}

Register trace_command({"trace", "Metrics and pictures of a trace (train --trace, simulate --save-trace)",
              [](CLI::App& app) -> std::function<int()> {
  auto flags = std::make_shared<TraceFlags>();
  app.add_option("trace", flags->path, "Trace file (pipetrain.trace/1)")->required();
  app.add_option("--merge", flags->merge, "First join TRACE.worker0 .. TRACE.worker<N-1> into TRACE (testbed, mpirun)");
  app.add_option("--svg", flags->svg, "Write TRACE's timeline as SVG (with --against too)");
  app.add_option("--chrome", flags->chrome, "Write TRACE as Chrome trace JSON (chrome://tracing, ui.perfetto.dev; with --against too)");
  app.add_option("--title", flags->title, "Title of the picture");
  app.add_option("--against", flags->against,
                 "Where TRACE and this trace of the same run part: each worker's computes and steps, kind by kind, and "
                 "the time outside them, per minibatch (a run's --trace against its --prediction-trace)");
  app.add_flag("--json", flags->json, "Print the metrics (with --against: the comparison) as JSON");
  return [flags] { return run_trace(*flags); };
}});

}  // namespace
}  // namespace pt::app
