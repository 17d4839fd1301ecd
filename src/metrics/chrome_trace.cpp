#include <string>

#include "metrics/timeline.h"

namespace pt::metrics {

json chrome_trace(const schedule::Trace& t) {
  json events = json::array();
  for (int w = 0; w < t.num_workers(); ++w) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", w}, {"args", {{"name", "worker " + std::to_string(w)}}}});
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", w}, {"tid", 0}, {"args", {{"name", "compute"}}}});
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", w}, {"tid", 1}, {"args", {{"name", "transfers"}}}});
    for (const auto& e : t.workers[w]) {
      const auto& a = e.action;
      json args = {{"stage", a.stage}, {"microbatch", a.microbatch}};
      if (a.chunk) args["chunk"] = a.chunk;
      if (a.peer >= 0) args["peer"] = a.peer;
      if (e.bytes) args["bytes"] = e.bytes;
      events.push_back({{"name", to_string(a)},
                        {"cat", kind_name(a.kind)},
                        {"ph", "X"},
                        {"ts", e.start_ms * 1e3},
                        {"dur", (e.end_ms - e.start_ms) * 1e3},
                        {"pid", w},
                        {"tid", is_p2p(a.kind) ? 1 : 0},
                        {"args", args}});
    }
  }
  // A measured run's pauses (evaluations, checkpoints), on a track of their own, named.
  if (!t.pauses.empty()) {
    int pid = t.num_workers();
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", "job"}}}});
    for (const auto& [from, to] : t.pauses)
      events.push_back({{"name", "paused: no worker trained (evaluation or checkpoint)"},
                        {"cat", "pause"},
                        {"ph", "X"},
                        {"ts", from * 1e3},
                        {"dur", (to - from) * 1e3},
                        {"pid", pid},
                        {"tid", 0}});
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"schedule", t.schedule}, {"source", t.source}}}};
}

}  // namespace pt::metrics
