// A schedule replayed until its window settles (steady_replay.h).
#include "referee/steady_replay.h"

#include <algorithm>
#include <utility>

#include "referee/replay_floor.h"

namespace pt::referee {

metrics::Metrics settled_replay(const std::function<metrics::Metrics(int minibatches)>& replay_over, bool periodic,
                                const metrics::Metrics* from, int default_minibatches, double floor_ms) {
  metrics::Metrics m = from ? *from : replay_over(0);
  int n = m.minibatches, longest = (from ? default_minibatches : n) << kSettleDoublings;
  auto done = [&] {
    return m.settled && (m.periodic || !periodic) && m.ms_per_minibatch >= floor_ms * (1 - 1e-9);
  };
  while (!done() && 2 * n <= std::min(longest, schedule::kMaxMinibatches)) m = replay_over(n *= 2);
  return m;
}

SteadyReplay steady_replay(const std::string& kind, const plan::Plan& plan, const schedule::ScheduleOptions& options,
                           const profile::Profile& profile, const plan::Cluster& cluster, const SteadyReplayOptions& how,
                           const schedule::Schedule* first) {
  std::optional<schedule::Schedule> made;
  if (!first) first = &made.emplace(schedule::make_unvalidated_schedule(kind, plan, options));
  SteadyReplay r;
  r.trace = sim::simulate(*first, profile, cluster, how.sim);
  r.metrics = metrics::compute_metrics(r.trace, how.detail);
  r.minibatches = first->minibatches;
  if (!how.lengthen) return r;
  double floor = how.floor_ms ? *how.floor_ms
                              : replay_floor_ms(plan, profile, cluster, kind, how.sim.bucket_bytes, first);
  // From the options' own count where they set one (the joint search's 2BW runs a few dozen).
  const metrics::Metrics replayed = r.metrics;
  int from = options.minibatches > 0 ? options.minibatches : replayed.minibatches;
  r.metrics = settled_replay(
      [&](int minibatches) {
        r.trace = {}, r.lengthened.reset();  // one replay's schedule and trace held at a time
        schedule::ScheduleOptions longer = options;
        longer.minibatches = r.minibatches = minibatches;
        r.lengthened = schedule::make_unvalidated_schedule(kind, plan, longer);
        r.trace = sim::simulate(*r.lengthened, profile, cluster, how.sim);
        return metrics::compute_metrics(r.trace, how.detail);
      },
      true, &replayed, from, floor);
  return r;
}

}  // namespace pt::referee
