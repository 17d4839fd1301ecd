#include "referee/replay_ahead.h"

#include <algorithm>
#include <atomic>
#include <future>
#include <thread>

#include "core/error.h"
#include "plan/physical_limit.h"
#include "schedule/generators.h"
#include "sim/simulator.h"

namespace pt::referee {

void estimate(Replay& r, const ReplayContext& c) {
  if (r.estimate || !r.error.empty()) return;
  try {
    plan::PlanEstimate e = plan::evaluate_plan(r.plan, c.profile, c.cluster, c.options);
    r.limit_ms = plan::physical_limit(r.plan, e, c.profile, c.cluster).ms();
    r.estimate = std::move(e);
  } catch (const ConfigError& e) {
    r.error = e.what();
  }
}

void simulate(Replay& r, const ReplayContext& c) {
  estimate(r, c);
  if (!r.estimate || r.simulated || !r.error.empty()) return;
  try {
    // Unvalidated, as every replay: the referee validates the schedule of the plan it chooses.
    schedule::Schedule s = schedule::make_unvalidated_schedule(c.kind, r.plan, {});
    r.simulated = metrics::compute_metrics(sim::simulate(s, c.profile, c.cluster, {c.options.bucket_bytes}),
                                           metrics::Detail::kTiming);
  } catch (const ConfigError& e) {
    r.error = e.what();
  }
}

void work_ahead(const std::vector<Replay*>& replays, const ReplayContext& c, double best_ms) {
  int threads = std::min<int>(static_cast<int>(std::thread::hardware_concurrency()), static_cast<int>(replays.size()));
  if (threads < 2) return;  // one at a time, in turn, is the same work
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < replays.size();) {
      estimate(*replays[i], c);
      if (replays[i]->estimate && replays[i]->limit_ms <= best_ms) simulate(*replays[i], c);
    }
  };
  std::vector<std::future<void>> others;
  for (int t = 1; t < threads; ++t) others.push_back(std::async(std::launch::async, work));
  work();
  for (auto& f : others) f.get();
}

}  // namespace pt::referee
