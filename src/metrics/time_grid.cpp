#include <algorithm>
#include <cmath>
#include <sstream>

#include "metrics/timeline.h"

namespace pt::metrics {

std::string time_grid(const schedule::Trace& t, int max_columns) {
  double slot = 0;
  size_t width = 1;
  for (const auto& list : t.workers)
    for (const auto& e : list)
      if (is_compute(e.action.kind) && e.end_ms > e.start_ms) {
        double d = e.end_ms - e.start_ms;
        slot = slot == 0 ? d : std::min(slot, d);
        width = std::max(width, to_string(e.action).size());
      }
  if (slot == 0) return "(no compute events)\n";
  const double t0 = t.start_ms();
  int columns = static_cast<int>(std::ceil((t.end_ms() - t0) / slot - 1e-9));
  bool cut = columns > max_columns;
  columns = std::min(columns, max_columns);
  std::ostringstream os;
  for (int w = 0; w < t.num_workers(); ++w) {
    std::vector<std::string> cells(columns, ".");
    for (const auto& e : t.workers[w]) {
      if (!is_compute(e.action.kind) && e.action.kind != schedule::ActionKind::kAllReduce) continue;
      // Slots whose middle falls inside the event.
      int first = static_cast<int>(std::ceil((e.start_ms - t0) / slot - 0.5 - 1e-9));
      int last = static_cast<int>(std::ceil((e.end_ms - t0) / slot - 0.5 - 1e-9));
      for (int c = std::max(first, 0); c < std::min(last, columns); ++c)
        cells[c] = c == first ? to_string(e.action) : std::string(width, '=');
    }
    std::string label = "w" + std::to_string(w) + ":";
    os << label << std::string(label.size() < 5 ? 5 - label.size() : 0, ' ');
    for (const auto& c : cells) os << " " << std::string(width - std::min(width, c.size()), ' ') << c;
    os << (cut ? " ..." : "") << "\n";
  }
  os << "(one column = " << slot << " ms)\n";
  return os.str();
}

}  // namespace pt::metrics
