// A plan's time in the simulator's steady state (simulate_plan, simulate_data_parallel) and the
// all-reduce bucket it runs fastest with (choose_bucket), referee.h.
#include <cmath>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "plan/realised_cost.h"
#include "referee/referee.h"
#include "referee/replay_ahead.h"
#include "referee/replay_floor.h"
#include "referee/steady_replay.h"
#include "schedule/generators.h"

namespace pt::referee {

std::string bucket_choices_text() {
  std::string text;
  const size_t n = std::size(kBucketChoicesMb);
  for (size_t i = 0; i < n; ++i) text += str(i == 0 ? "" : i + 1 == n ? " and " : ", ", kBucketChoicesMb[i]);
  return text;
}

double simulate_plan(const plan::Plan& plan, const profile::Profile& profile, const plan::Cluster& cluster,
                     const plan::PlanOptions& options, const std::string& kind) {
  if (replay_period(plan) == 0 && !steady_state_in_closed_form(plan, kind, cluster)) return 0;
  try {
    if (steady_state_in_closed_form(plan, kind, cluster)) return plan::evaluate_plan(plan, profile, cluster, options).pipeline_ms_per_minibatch;
    SteadyReplayOptions how;
    how.sim = timing_only(options.bucket_bytes);
    how.detail = metrics::Detail::kTiming;
    return steady_replay(kind, plan, {}, profile, cluster, how).metrics.ms_per_minibatch;
  } catch (const ConfigError&) {
    return 0;
  }
}

double simulate_data_parallel(const profile::Profile& profile, const plan::Cluster& cluster,
                              const plan::PlanOptions& options, const std::string& kind) {
  plan::Plan dp = plan::data_parallel_plan(profile.num_layers(), cluster.workers());
  try {
    if (!plan::evaluate_plan(dp, profile, cluster, options).fits_memory) return 0;
  } catch (const ConfigError&) {
    return 0;
  }
  return simulate_plan(dp, profile, cluster, options, kind);
}

double data_parallel_at_its_bucket(const profile::Profile& profile, const plan::Cluster& cluster,
                                   const plan::PlanOptions& options, const std::string& kind, double at_options_ms) {
  if (!(at_options_ms > 0)) return at_options_ms;
  return choose_bucket(plan::data_parallel_plan(profile.num_layers(), cluster.workers()), profile, cluster, options, kind,
                       at_options_ms)
      .ms_per_minibatch;
}

BucketChoice choose_bucket(const plan::Plan& plan, const profile::Profile& profile, const plan::Cluster& cluster,
                           const plan::PlanOptions& options, const std::string& kind, double own_ms,
                           double limit_ms, const schedule::ScheduleOptions& schedule_options) {
  if (own_ms > 0 && own_ms <= limit_ms * (1 + 1e-9)) {
    BucketChoice at{static_cast<double>(options.bucket_bytes) / (1 << 20), own_ms, {}, true, {}};
    at.tried.push_back({at.bucket_mb, own_ms});
    return at;
  }
  schedule::Schedule s = schedule::make_unvalidated_schedule(kind, plan, schedule_options);
  std::vector<double> sizes{static_cast<double>(options.bucket_bytes) / (1 << 20)};
  for (double mb : kBucketChoicesMb)
    if (std::abs(mb - sizes.front()) > 1e-9) sizes.push_back(mb);
  std::vector<double> ms(sizes.size(), own_ms), floor(sizes.size(), 0);
  auto bytes_of = [&](size_t i) { return static_cast<int64_t>(sizes[i] * (1 << 20)); };
  // A size whose floor is above the options' bucket's time cannot win: not simulated (ResNet-101
  // 12-4 on 4x4 at 100/10: 0 and 100 MiB, floors 29.6 ms per minibatch against 28.3).
  std::vector<size_t> simulated;
  for (size_t i = own_ms > 0 ? 1 : 0; i < sizes.size(); ++i) {
    if (!steady_state_in_closed_form(plan, kind, cluster)) floor[i] = replay_floor_ms(plan, profile, cluster, kind, bytes_of(i), &s);
    if (own_ms > 0 && floor[i] > own_ms * (1 + 1e-9)) ms[i] = -1;
    else simulated.push_back(i);
  }
  auto simulate_size = [&](size_t i) {
    auto bytes = bytes_of(i);
    if (steady_state_in_closed_form(plan, kind, cluster)) {
      plan::PlanOptions at_size = options;
      at_size.bucket_bytes = bytes;
      ms[i] = plan::evaluate_plan(plan, profile, cluster, at_size).pipeline_ms_per_minibatch;
      return;
    }
    SteadyReplayOptions how;
    how.sim = timing_only(bytes);
    how.detail = metrics::Detail::kTiming;
    how.lengthen = schedule_options.minibatches == 0;
    how.floor_ms = floor[i];
    ms[i] = steady_replay(kind, plan, schedule_options, profile, cluster, how, &s).metrics.ms_per_minibatch;
  };
  side_by_side(simulated.size(), [&](size_t k) { simulate_size(simulated[k]); });
  BucketChoice choice;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (ms[i] < 0) {
      choice.ruled_out.push_back({sizes[i], floor[i]});
      continue;
    }
    choice.tried.push_back({sizes[i], ms[i]});
    if (i == 0 || ms[i] < choice.ms_per_minibatch * (1 - 1e-9)) choice.bucket_mb = sizes[i], choice.ms_per_minibatch = ms[i];
  }
  return choice;
}

}  // namespace pt::referee
