#include "apps/torch/train_plan.h"

#include <algorithm>
#include <iostream>

#include "core/error.h"
#include "plan/planner.h"
#include "profile/pipedream_graph.h"
#include "profile/profiler.h"
#include "schedule/generators.h"
#include "schedule/schedule_file.h"

namespace pt::app {

plan::Plan pick_plan(TrainFlags& f, model::LayeredModel& m, const model::DataSplit& data) {
  if (!f.schedule_file.empty() && f.plan_path.empty() && f.stages == 0)
    return schedule::plan_of_schedule_file(schedule::read_schedule_file(f.schedule_file), f.schedule_file,
                                           "--plan P or --stages N");
  if (!f.plan_path.empty()) {
    return plan::read_plan(f.plan_path);
  }
  if (f.pipe.schedule == "dp" || (f.workers == 1 && f.stages == 0)) {
    return plan::data_parallel_plan(m.num_layers(), f.workers > 0 ? f.workers : 2);
  }
  int stages = f.stages > 0 ? f.stages : 2;
  if (schedule::is_interleaved(f.pipe.schedule)) {
    // Checked before it multiplies --stages, so that the error names --chunks.
    if (f.pipe.chunks < 1 || f.pipe.chunks > schedule::kMaxChunks)
      throw UsageError(str("--chunks: must be in 1..", schedule::kMaxChunks, ", got ", f.pipe.chunks));
    if (stages * f.pipe.chunks > m.num_layers())
      throw UsageError(str("--stages ", stages, " x --chunks ", f.pipe.chunks, " = ", stages * f.pipe.chunks,
                           " model chunks, but ", m.name(), " has ", m.num_layers(), " layers"));
    stages *= f.pipe.chunks;
  }
  if (schedule::is_v_schedule(f.pipe.schedule)) {  // two chunks per worker, in a V
    if (2 * stages > m.num_layers())
      throw UsageError(str("--stages ", stages, " with --schedule ", f.pipe.schedule, " = ", 2 * stages,
                           " model chunks (two per worker), but ", m.name(), " has ", m.num_layers(), " layers"));
    stages *= 2;
  }
  profile::Profile prof;
  if (!f.profile_path.empty()) {
    prof = profile::read_any_profile(f.profile_path);
    note_profile_settings(prof, f.profile_path, f);
  } else {  // measure one here: a few forward/backward passes per layer
    int64_t batch = f.pipe.train.batch_size;
    // Times at the batch alone: the split weighs whole minibatches.
    profile::ProfilerOptions options{1, 3, f.pipe.train.sgd.kind, {batch}};
    prof = profile::measure_profile(m, data.train.first_inputs(batch), options, data.train.first_targets(batch));
  }
  if (prof.num_layers() != m.num_layers())
    throw ConfigError(str("--profile: ", f.profile_path, " has ", prof.num_layers(), " layers but ", m.name(), " has ",
                          m.num_layers()));
  return plan::even_split(prof, stages);
}

void follow_plan(TrainFlags& f, plan::Plan& plan, const std::string& source) {
  if (!plan.schedule.empty()) {
    const auto& kinds = schedule::schedule_kinds();
    if (std::find(kinds.begin(), kinds.end(), plan.schedule) == kinds.end()) {
      std::string known;
      for (const auto& k : kinds) known += (known.empty() ? "" : ", ") + k;
      throw ConfigError(str(source, ": field 'schedule' is '", plan.schedule, "', not one of ", known));
    }
    if (f.schedule_flag->count() == 0 && f.schedule_file.empty()) f.pipe.schedule = plan.schedule;
  }
  if (plan.microbatches > 0 && f.microbatches_flag->count() == 0) f.pipe.microbatches = plan.microbatches;
  if (plan.chunks > 0 && f.chunks_flag->count() == 0) f.pipe.chunks = plan.chunks;
  if (f.recompute)
    for (auto& st : plan.stages) st.recompute = true;
  if (f.deferred_step >= 0) plan.deferred_step = f.deferred_step == 1;
  if (f.deferred_step == 1 && f.pipe.schedule != "pipedream")
    throw UsageError(str("--deferred-step: only the pipedream schedule defers a step, not ", f.pipe.schedule));
}

void use_schedule_file(TrainFlags& f, const plan::Plan& plan) {
  schedule::Schedule file = schedule::read_schedule_file(f.schedule_file, plan.num_stages());
  if (!file.flush)
    throw UsageError(str("--schedule-file ", f.schedule_file, ": its schedule (", file.kind, ") does not flush; train "
                         "runs synchronous schedules from a file (the asynchronous ones: --schedule pipedream or 2bw)"));
  auto s = std::make_shared<const schedule::Schedule>(schedule::bind_schedule(std::move(file), plan, f.schedule_file));
  f.pipe.microbatches = s->microbatches;
  f.pipe.chunks = s->chunks;
  f.pipe.schedule_file = s;
}

void note_profile_settings(const profile::Profile& profile, const std::string& path, const TrainFlags& f) {
  const std::string& precision = f.model.precision;
  if (profile.precision != precision)
    std::cerr << "note: " << path << " was measured in " << profile.precision << " and this run computes in "
              << precision << ": its times, and the bytes crossing between stages, are " << profile.precision
              << "'s (`pipetrain profile --precision " << precision << "` measures this run's)\n";
  const std::string& optimizer = f.pipe.train.sgd.kind;
  if (profile.optimizer != optimizer)
    std::cerr << "note: " << path << " timed " << profile.optimizer << "'s step and this run steps with " << optimizer
              << " (`pipetrain profile --optimizer " << optimizer << "` times it)\n";
}

}  // namespace pt::app
