#include "sim/weigh_schedule.h"

#include "sim/simulator.h"

namespace pt::sim {

schedule::ScheduleOptions weigh_schedule(const std::string& kind, const plan::Plan& plan,
                                         schedule::ScheduleOptions options, const profile::Profile& profile,
                                         const plan::Cluster& cluster) {
  schedule::weigh_by_profile(options, kind, plan, profile, cluster);
  if (options.action_times.empty()) return options;
  schedule::ScheduleOptions unit = options;
  unit.action_times = {};
  if (cluster.levels.empty()) return unit;
  auto ms = [&](const schedule::ScheduleOptions& o) {
    return simulate(schedule::make_unvalidated_schedule(kind, plan, o), profile, cluster).end_ms();
  };
  return ms(options) < ms(unit) ? options : unit;
}

}  // namespace pt::sim
