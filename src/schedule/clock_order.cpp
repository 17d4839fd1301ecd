#include "schedule/clock_order.h"

#include <map>

#include "core/error.h"

namespace pt::schedule::detail {

void clock_order(Schedule& s, const std::vector<WorkerQueues>& queues) {
  const int n = static_cast<int>(queues.size());
  // Slot after which F / B of (stage, mb) is done.
  std::map<std::pair<int, int>, int> done_f, done_b;
  std::vector<size_t> next_f(n, 0), next_b(n, 0);
  std::vector<int> in_flight(n, 0);
  size_t remaining = 0;
  for (const auto& q : queues) remaining += q.forwards.size() + q.backwards.size();
  auto done_by = [](const std::map<std::pair<int, int>, int>& m, int stage, int mb, int t) {
    auto it = m.find({stage, mb});
    return it != m.end() && it->second <= t;
  };
  const int bound = 8 * static_cast<int>(remaining) + 8;
  for (int t = 0; remaining > 0; ++t) {
    PT_CHECK(t < bound, s.kind, ": the unit clock found no order (", remaining, " actions left)");
    for (int w = 0; w < n; ++w) {
      const auto& q = queues[w];
      if (next_b[w] < q.backwards.size()) {
        auto [st, k] = q.backwards[next_b[w]];
        if (done_by(done_f, st, k, t) && (st + 1 == s.num_stages || done_by(done_b, st + 1, k, t))) {
          s.add(w, ActionKind::kBackward, st, k);
          done_b[{st, k}] = t + 1;
          ++next_b[w];
          --remaining;
          --in_flight[w];
          continue;
        }
      }
      if (next_f[w] < q.forwards.size() && in_flight[w] < q.limit) {
        auto [st, k] = q.forwards[next_f[w]];
        if (st == 0 || done_by(done_f, st - 1, k, t)) {
          s.add(w, ActionKind::kForward, st, k);
          done_f[{st, k}] = t + 1;
          ++next_f[w];
          ++in_flight[w];
          --remaining;
        }
      }
    }
  }
}

}  // namespace pt::schedule::detail
