#include <algorithm>
#include <sstream>

#include "schedule/validate.h"

namespace pt::schedule {

std::string format_grid(const Schedule& s, const std::vector<std::pair<int, int>>& marks, bool compute_only) {
  constexpr int kWindow = 24;
  std::vector<std::vector<std::string>> cells(s.num_workers());
  size_t width = 1, steps = 0;
  for (int w = 0; w < s.num_workers(); ++w) {
    for (size_t i = 0; i < s.actions[w].size(); ++i) {
      const Action& a = s.actions[w][i];
      if (compute_only && is_p2p(a.kind)) continue;
      bool marked = std::find(marks.begin(), marks.end(), std::make_pair(w, static_cast<int>(i))) != marks.end();
      cells[w].push_back(marked ? "[" + to_string(a) + "]" : to_string(a));
      width = std::max(width, cells[w].back().size());
    }
    steps = std::max(steps, cells[w].size());
  }
  size_t first = 0, last = steps;
  if (!marks.empty() && steps > kWindow && !compute_only) {
    size_t at = static_cast<size_t>(marks.front().second);
    first = at > kWindow / 2 ? at - kWindow / 2 : 0;
    last = std::min(steps, first + kWindow);
  }
  std::ostringstream os;
  os << "step ";
  if (first > 0) os << " ...";
  for (size_t i = first; i < last; ++i) {
    std::string n = std::to_string(i);
    os << " " << std::string(width - std::min(width, n.size()), ' ') << n;
  }
  os << "\n";
  for (int w = 0; w < s.num_workers(); ++w) {
    std::string label = "w" + std::to_string(w);
    os << label << std::string(label.size() < 5 ? 5 - label.size() : 0, ' ');
    if (first > 0) os << " ...";
    for (size_t i = first; i < last; ++i) {
      std::string c = i < cells[w].size() ? cells[w][i] : ".";
      os << " " << std::string(width - c.size(), ' ') << c;
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace pt::schedule
