#pragma once
// `pipetrain train`: the plan it runs (a file, an even split, data parallelism, a schedule file's
// stages) and how the plan says to run it.
#include <string>

#include "apps/torch/train_flags.h"
#include "model/dataset.h"
#include "model/layered_model.h"
#include "plan/plan.h"
#include "profile/profile.h"

namespace pt::app {

// The plan to run: --plan FILE, an even split into --stages N by the profile, (dp) one stage
// replicated over --workers, or a JSON --schedule-file's stages.
plan::Plan pick_plan(TrainFlags& f, model::LayeredModel& m, const model::DataSplit& data);

// The plan says how to run it (a planner's joint choice, or the user's): its schedule,
// microbatches, chunks and deferred step, unless the flags say otherwise; --recompute recomputes
// every stage.
void follow_plan(TrainFlags& f, plan::Plan& plan, const std::string& source);

// --schedule-file: the file's schedule on the plan, validated, in place of a generator's; the
// runtime runs its one minibatch again and again, so it must flush.
void use_schedule_file(TrainFlags& f, const plan::Plan& plan);

// A note on stderr where `profile` (read from `path`) was measured in another precision than the
// run's --precision (its times and the bytes between stages are that precision's), or timed
// another optimizer's step.
void note_profile_settings(const profile::Profile& profile, const std::string& path, const TrainFlags& f);

}  // namespace pt::app
