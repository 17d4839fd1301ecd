// The kind-name registry and the generate -> insert_comm -> validate pipeline.
#include <algorithm>
#include <atomic>
#include <sstream>

#include "core/error.h"
#include "schedule/comm_pass.h"
#include "schedule/generators.h"
#include "schedule/given_order.h"
#include "schedule/validate.h"

namespace pt::schedule {

const std::vector<std::string>& schedule_kinds() {
  static const std::vector<std::string> kinds = {"gpipe", "1f1b", "pipedream", "2bw", "interleaved", "interleaved-zb", "zb-h1", "zb-v", "v-half", "v-min", "dualpipev", "dp", "mp"};
  return kinds;
}

void follow_plan(const plan::Plan& plan, const std::string& source, const GivenSettings& given, std::string& kind,
                 int& microbatches, int& chunks) {
  if (!plan.schedule.empty()) {
    const auto& kinds = schedule_kinds();
    if (std::find(kinds.begin(), kinds.end(), plan.schedule) == kinds.end()) {
      std::string known;
      for (const auto& k : kinds) known += (known.empty() ? "" : ", ") + k;
      throw ConfigError(str(source, ": field 'schedule' is '", printable(plan.schedule), "', not one of ", known));
    }
    if (!given.kind) kind = plan.schedule;
  }
  if (plan.microbatches > 0 && !given.microbatches) microbatches = plan.microbatches;
  // Chunks are the interleaved kinds' alone: another --schedule on an interleaved plan was refused
  // for a "--chunks 2" the user never gave.
  if (plan.chunks > 0 && !given.chunks && is_interleaved(kind)) chunks = plan.chunks;
}

bool schedule_flushes(const std::string& kind) { return kind != "pipedream" && kind != "2bw"; }

void check_schedule_options(const ScheduleOptions& schedule_options) {
  if (schedule_options.microbatches < 1 || schedule_options.microbatches > kMaxMicrobatches)
    throw UsageError(str("--microbatches: must be in 1..", kMaxMicrobatches, ", got ", schedule_options.microbatches));
  if (schedule_options.chunks < 1 || schedule_options.chunks > kMaxChunks) throw UsageError(str("--chunks: must be in 1..", kMaxChunks, ", got ", schedule_options.chunks));
  if (schedule_options.minibatches < 0 || schedule_options.minibatches > kMaxMinibatches)
    throw UsageError(str("--minibatches: must be in 0..", kMaxMinibatches, " (0: the default), got ", schedule_options.minibatches));
}

void check_microbatches_divide(int microbatches, const std::string& given, int64_t batch, const std::string& batch_from) {
  if (microbatches > 0 && batch % microbatches != 0)
    throw ConfigError(str(microbatches, " microbatches (", given, ") do not divide the batch of ", batch, " (",
                          batch_from, "): train refuses it"));
}

namespace {

Schedule generate_kind(const std::string& kind, const plan::Plan& plan, const ScheduleOptions& schedule_options) {
  int minibatches = schedule_options.minibatches > 0 ? schedule_options.minibatches : default_minibatches(plan);
  if (!is_interleaved(kind) && schedule_options.chunks != 1)
    throw UsageError(str("--chunks ", schedule_options.chunks, " applies to --schedule interleaved and interleaved-zb only, not '",
                         kind, "'"));
  if (kind == "gpipe") return gpipe(plan, schedule_options.microbatches);
  if (kind == "1f1b") return one_f_one_b(plan, schedule_options.microbatches);
  if (kind == "pipedream") return pipedream(plan, minibatches, schedule_options.vertical_sync, schedule_options.deferred_step || plan.deferred_step);
  if (kind == "2bw") return two_bw(plan, schedule_options.microbatches, minibatches);
  if (kind == "interleaved") return interleaved(plan, schedule_options.microbatches, schedule_options.chunks);
  if (kind == "interleaved-zb") return interleaved_zero_bubble(plan, schedule_options.microbatches, schedule_options.chunks,
                                                                       schedule_options.action_times);
  if (kind == "zb-h1") return zb_h1(plan, schedule_options.microbatches, schedule_options.activation_budget);
  if (kind == "dualpipev") return dualpipe_v(plan, schedule_options.microbatches);
  if (is_v_schedule(kind)) return zb_v(plan, schedule_options.microbatches, kind, schedule_options.activation_budget,
                                               schedule_options.action_times);
  if (kind == "dp") return data_parallel(plan, schedule_options.microbatches);
  if (kind == "mp") return model_parallel(plan, schedule_options.microbatches);
  std::ostringstream known;
  for (const auto& k : schedule_kinds()) known << (known.tellp() ? ", " : "") << k;
  throw UsageError(str("--schedule: unknown kind '", kind, "' (known: ", known.str(), ")"));
}

std::atomic<int64_t> made{0};

}  // namespace

Schedule generate(const std::string& kind, const plan::Plan& plan, const ScheduleOptions& schedule_options) {
  check_schedule_options(schedule_options);
  Schedule s = generate_kind(kind, plan, schedule_options);
  if (!schedule_options.order.empty()) follow_order(s, schedule_options.order, schedule_options.order_source);
  return s;
}

Schedule make_schedule(const std::string& kind, const plan::Plan& plan, const ScheduleOptions& options) {
  Schedule s = make_unvalidated_schedule(kind, plan, options);
  validate(s);
  ++made;
  return s;
}

int64_t schedules_made() { return made; }

Schedule make_unvalidated_schedule(const std::string& kind, const plan::Plan& plan, const ScheduleOptions& options) {
  return insert_comm(generate(kind, plan, options));
}

}  // namespace pt::schedule
