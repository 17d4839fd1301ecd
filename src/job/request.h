#pragma once
// What a training request asks for before its plan is settled (`pipetrain train`'s flags, or a
// library caller's struct), and settle_request, which decides the plan it runs and how: a plan
// file, a gloo launcher's plan, an even split, data parallelism or a schedule file's stages; the
// plan's own schedule, microbatches, chunks, bucket and batch where the request gives none (and
// where neither names a schedule, pipedream, or 1f1b where the stages split a tie); the
// zero-bubble schedules' memory budget and the cluster. make_job (job.h) takes what it settles.
#include <memory>
#include <string>

#include "job/options.h"
#include "model/dataset.h"
#include "model/layered_model.h"
#include "plan/plan.h"
#include "profile/profile.h"

namespace pt::job {

struct Request {
  PipelineOptions options;      // options.schedule "none": the plan's, else pipedream
  std::string plan_path;        // --plan
  std::string launched_plan;    // the plan file a gloo launcher handed this worker (runtime/launcher.h)
  std::string profile_path;     // --profile: read once, into `profile`
  std::shared_ptr<const profile::Profile> profile;
  std::string schedule_file;    // --schedule-file
  std::string cluster_path, allreduce;  // --cluster, --allreduce
  int stages = 0, workers = 0;  // --stages (an even split), --workers (dp)
  bool recompute = false;       // every stage
  int deferred_step = -1;       // 1 or 0 given; -1: the plan's
  double bucket_mb = 25;        // PyTorch DDP's default bucket
  double byte_scale = 1;        // emulated compute moves its bytes x this: its buckets too
  std::string precision = "fp32";  // the run's (model/precision.h), to note a profile of another
  // The workers' transfers cross the cluster's links (gloo), which weigh the zero-bubble clock
  // (sim/weigh_schedule.h); on threads they are handed over in memory. prepare_job sets it.
  bool over_links = false;
  // Settings the caller gave, which override the plan's.
  bool schedule_given = false, microbatches_given = false, chunks_given = false;
  bool batch_size_given = false, bucket_given = false;
};

// How a request runs: a pipeline on threads in this process, or one process per worker over
// gloo, launched from here or joined as one of them. One worker alone is a one-stage pipeline.
enum class Road { kThreads, kGlooLauncher, kGlooWorker };

// The road for `request` on `transport` ("threads" or "gloo"). A request for no pipeline (no
// plan, stages, workers or schedule) runs as a one-stage pipeline of one microbatch on one
// worker, which computes what single-worker training does (tests/runtime/
// pipeline_equivalence_test.cpp); the request is changed to say so. A gloo worker takes the
// launcher's plan (request.launched_plan), so that every worker runs the same one even when it
// was measured rather than read. UsageError where the environment makes this process one
// worker of several (torchrun, mpirun) and the request would train alone, or could not agree
// with the others on its plan.
Road choose_road(Request& request, const std::string& transport);

struct Settled {
  plan::Plan plan;
  PipelineOptions options;      // the request's, the plan's choices filled in
};

// Settles `request` for `model` (a description: names, graph, ties) and its data; with no
// profile and --stages, measures one here. Notes on standard error what the user should know
// (a profile of another precision, a batch other than the plan's, ...). UsageError and
// ConfigError name the flag or file.
Settled settle_request(const Request& request, model::LayeredModel& model, const model::DataSplit& data);

// A note on stderr where `profile` (read from `path`) was measured in another precision than the
// run's, or timed another optimizer's step.
void note_profile_settings(const profile::Profile& profile, const std::string& path, const std::string& precision,
                           const std::string& optimizer);
// ConfigError naming `path` where `profile` is another model's, or was measured on inputs of
// another size than `data`'s (a sequence length, an image size: each layer's bytes and times are
// another run's).
void check_profile_fits_data(const profile::Profile& profile, const std::string& path, const model::LayeredModel& model,
                             const model::DataSplit& data);
// The same where a plan file was made from such a profile (its precision and optimizer fields).
void note_planned_settings(const plan::Plan& plan, const std::string& path, const std::string& precision,
                           const std::string& optimizer);

}  // namespace pt::job
