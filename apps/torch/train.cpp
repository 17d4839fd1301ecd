// pipetrain train: trains a model pipeline-parallel with a plan and a schedule (one worker: a
// one-stage pipeline), on threads in this process or one process per worker over gloo: parse,
// settle the request and make the job (job/), run it, report.
#include <sys/stat.h>

#include <iostream>

#include "apps/command.h"
#include "apps/torch/model_flags.h"
#include "apps/torch/train_flags.h"
#include "apps/torch/train_notes.h"
#include "apps/torch/train_report.h"
#include "core/error.h"
#include "core/files.h"
#include "core/host_allocator.h"
#include "job/core_pinning.h"
#include "job/job_digest.h"
#include "job/road.h"
#include "job/worker_data.h"
#include "model/compute_threads.h"
#include "profile/emulation.h"
#include "profile/profile_fits_model.h"
#include "runtime/gloo_transport.h"
#include "runtime/launcher.h"

namespace pt::app {
namespace {

// Emulated compute: the profile fixes the batch size (unless given), the synthetic data covers
// every step in one epoch (an epoch's end drains PipeDream's pipeline), and there is no accuracy
// to evaluate.
void prepare_emulation(TrainFlags& flags) {
  flags.model.profile_path = flags.request.profile_path;
  const profile::Profile& p = flags.model.emulated_profile();
  auto& t = flags.request.options.train;
  if (!flags.request.batch_size_given) t.batch_size = p.batch_size;
  flags.model.synthetic_samples = std::max(flags.model.synthetic_samples, std::max<int64_t>(t.steps, 1) * t.batch_size);
  // Emulated layers compute no values: no accuracy to test, and gradients of zeros with no norm to
  // clip by (the norm's pass over the gradients is in no profiled time).
  if (t.eval_every > 0)
    throw UsageError(str("--eval-every ", t.eval_every, ": emulated layers compute no outputs, so there is no "
                         "accuracy to test (train the model with --compute real)"));
  if (t.sgd.clip_grad_norm > 0)
    throw UsageError(str("--clip-grad-norm ", t.sgd.clip_grad_norm, ": emulated layers compute no gradients, so "
                         "there is no norm to clip by (train the model with --compute real)"));
  t.evaluate = false;
}

// Checks of the flags alone, before the data or the model is loaded.
void check_flags(TrainFlags& flags) {
  auto& o = flags.request.options;
  if (flags.steps_flag->count() > 0 && o.train.steps < 1)
    throw UsageError(str("--steps: must be >= 1, got ", o.train.steps));
  // Output paths before any training: a run must not end by failing to write its results.
  check_output_path(flags.trace_path, "--trace");
  // Each gloo worker writes its part beside the trace for the launcher to merge: beside
  // /dev/stdout that was /dev/stdout.worker0, refused to all but root after training.
  struct stat st;
  if (flags.transport == "gloo" && !flags.trace_path.empty() &&
      (output_descriptor(flags.trace_path) >= 0 ||
       (::stat(flags.trace_path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))))
    throw UsageError(str("--trace '", flags.trace_path, "': a gloo job's workers each write their part beside the trace (",
                         flags.trace_path, ".worker<r>) to be merged into it; give a file"));
  check_output_path(flags.prediction_trace_path, "--prediction-trace");
  check_output_path(o.train.metrics_path, "--metrics");
  std::vector<FlagPath> inputs = flags.model.input_paths();
  const job::Request& r = flags.request;
  inputs.insert(inputs.end(), {{"--plan", r.plan_path}, {"--profile", r.profile_path}, {"--cluster", r.cluster_path},
                               {"--schedule-file", r.schedule_file}, {"--checkpoint-dir", o.checkpoint.dir}});
  check_outputs_apart(inputs, {{"--metrics", o.train.metrics_path}, {"--trace", flags.trace_path},
                               {"--prediction-trace", flags.prediction_trace_path}});
  if (o.checkpoint.every < 0) throw UsageError(str("--checkpoint-every: must be >= 0, got ", o.checkpoint.every));
  if (!o.checkpoint.dir.empty() && o.checkpoint.every == 0 && !o.checkpoint.resume)
    std::cerr << "note: --checkpoint-dir without --checkpoint-every: one checkpoint at the end of training\n";
  if (o.checkpoint.dir.empty() && o.checkpoint.every > 0)
    std::cerr << "note: --checkpoint-every " << o.checkpoint.every << " without --checkpoint-dir: no checkpoint is "
              << "written (--checkpoint-dir D writes them)\n";
}

void print_training_line(const job::Job& job, const model::LayeredModel& m, const model::DataSplit& data,
                         const std::string& transport, const std::string& label) {
  const plan::Plan& plan = job.plan;
  int workers = job.workers(), microbatches = job.typical->microbatches;  // pipedream's: 1
  if (workers == 1 && plan.num_stages() == 1 && microbatches == 1) {  // what single-worker training computes
    std::cerr << "training " << m.name() << " (" << m.num_layers() << " layers) on " << data.name << ": "
              << data.train.size() << " training / " << data.test.size() << " test samples, 1 worker"
              << (transport == "threads" ? "" : ", transport " + transport) << (label.empty() ? "" : ", " + label) << "\n";
    return;
  }
  // Each stage's layers: a split measured here (--stages without --profile) varies with the
  // machine's timing from run to run, and an asynchronous schedule's weights with it.
  std::cerr << "training " << m.name() << " on " << data.name << " with " << job.options.schedule << ", plan "
            << plan.shape() << " (" << workers << (workers == 1 ? " worker, " : " workers, ") << plan.num_stages()
            << (plan.num_stages() == 1 ? " stage: layers " : " stages: layers ") << plan.split() << "), " << microbatches
            << (microbatches == 1 ? " microbatch" : " microbatches") << ", transport " << transport
            << (label.empty() ? "" : ", " + label) << "\n";
  note_split_ties(m, *job.typical);
}

// `running`: set as the job starts, past the checks a worker started apart fails before it joins.
int train(TrainFlags& flags, bool& running) {
  job::Request& r = flags.request;
  model::use_one_compute_thread();  // one compute thread per worker (docs/design.md)
  keep_freed_host_memory();
  std::string label;
  if (flags.model.emulated()) {
    prepare_emulation(flags);
    label = profile::emulation_label(flags.model.emulation);
    r.options.trace_source = "emulated";
    r.byte_scale = flags.model.emulation.byte_scale;
  }
  check_flags(flags);
  model::DataSplit data;
  // A description: names, graph and ties; each worker builds only its stages' layers.
  auto m = flags.model.build(&data);
  runtime::check_train_values(r.options.train);
  // Before a plan is picked: with --stages alone that profiles the model first, only to refuse the flag.
  if (r.options.deferred_batch_norm && m->deferrable_batch_norms() == 0)
    throw UsageError(str("--deferred-batch-norm: ", m->name(), " has no BatchNorm pipetrain can defer (`pipetrain "
                         "export` writes them in place of nn.BatchNorm; the zoo's models have none)"));
  r.options.train.seed = flags.model.seed;
  job::Road road = job::choose_road(r, flags.transport);
  bool leads = road != job::Road::kGlooWorker;  // it says the notes and the training line
  if (flags.model.emulated()) r.profile = flags.model.shared_emulated_profile();
  bool pin = !flags.model.emulated() && !flags.no_pin_cores;
  job::Job job = job::prepare_job(r, road, *m, data, pin, flags.print_job);
  note_samples_left_out(data.train.size(), job.options.train);  // with the batch settled
  if (flags.print_job) {  // what the workers compare at rendezvous, to compare by hand; nothing written
    std::cout << job::job_digest(job, *m, data).dump(1) << "\n";
    return 0;
  }
  if (leads)
    note_resume(job, *m), note_pinned(job, job::usable_cores()), note_schedule(job), note_long_warmup(job),
        note_stale_warmup(job), note_replica_rounds(job), note_unused_bucket(job, r.bucket_given),
        note_cluster_transport(job, flags.transport), note_few_batch_norm_samples(job, *m);
  ModelFlags model_flags = flags.model;
  // Each worker builds its stages' layers from the seed, as single-worker training builds them,
  // and holds them against the profile given (an emulated model is the profile's own).
  std::shared_ptr<const profile::Profile> given = flags.model.emulated() ? nullptr : r.profile;
  auto factory = [model_flags, given, path = r.profile_path](const model::LayerSet& held) {
    auto built = model_flags.build_model_only(held);
    if (given) profile::check_profile_fits_model(*given, "--profile " + path, *built);
    return built;
  };
  auto report = [&](const job::PipelineResult& result) {
    print_result(result.train, label, job);
    // Each process's own: a gloo worker released what its stages do not read (job/worker_data.h).
    const job::DataHeld held = job::data_held_per_worker(job, data, result.train.one_process);
    print_modelled_memory(job, flags, label, held, result.shared_memory);
    note_over_planned_memory(result.train, job, flags, label, held);
    print_throughput(result.train, result.trace, job, flags, label);
  };
  if (leads) print_training_line(job, *m, data, flags.transport, label);
  running = true;
  return job::run_job(job, road, factory, *m, data, flags.trace_path, report);
}

int run_train(TrainFlags& flags) {
  bool running = false;
  try {
    return train(flags, running);
  } catch (const std::exception& e) {
    if (running || !runtime::started_apart()) throw;
    // Said first: telling the rendezvous waits up to a minute for worker 0 to serve it (it may
    // still be loading its data).
    std::cerr << "pipetrain train: error: " << printable(e.what()) << "\n";
    runtime::tell_rendezvous_of_failure(e.what(), std::min(60.0, flags.request.options.rendezvous_timeout_s));
    return dynamic_cast<const UsageError*>(&e) ? 2 : 1;
  }
}

Register train_command({"train", kTrainDescription, [](CLI::App& app) -> std::function<int()> {
                auto flags = std::make_shared<TrainFlags>();
                add_train_flags(app, flags);
                return [flags, &app] {
                  finish_train_flags(app, *flags);
                  return run_train(*flags);
                };
              }});

}  // namespace
}  // namespace pt::app
