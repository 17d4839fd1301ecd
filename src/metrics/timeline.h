#pragma once
// Pictures of a Trace: an SVG timeline, Chrome trace JSON (chrome://tracing, Perfetto), and an
// ASCII grid on the time axis.
#include <string>

#include "core/json_doc.h"
#include "schedule/trace.h"

namespace pt::metrics {

// One row per worker with its compute (F, B, W, AllReduce; Steps as ticks), a thin lane under
// it for its transfers (sends above, receives below); one colour per action kind, odd model
// chunks lighter, microbatch numbers in the boxes that are
// wide enough, a legend and a time axis in ms. `title` goes on top.
std::string timeline_svg(const schedule::Trace& t, const std::string& title);

// Chrome's trace event format: one process per worker, thread 0 its compute, thread 1 its
// transfers; times in microseconds.
json chrome_trace(const schedule::Trace& t);

// One column per slot of the shortest compute event (at most `max_columns`), a compute action's
// text in its first slot and '=' in the rest, '.' where the worker computes nothing.
std::string time_grid(const schedule::Trace& t, int max_columns = 160);

}  // namespace pt::metrics
