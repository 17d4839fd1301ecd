#include "job/options.h"

#include "core/error.h"

namespace pt::job {

void check_pipeline_options(const PipelineOptions& options, const plan::Plan& plan, const model::DataSplit& data) {
  runtime::check_train_options(options.train, data);
  if (options.microbatches < 1 || options.microbatches > schedule::kMaxMicrobatches)
    throw UsageError(str("--microbatches: must be in 1..", schedule::kMaxMicrobatches, ", got ", options.microbatches));
  // pipedream runs each minibatch whole: a --microbatches it never uses need not divide the batch.
  if (options.schedule != "pipedream" && options.train.batch_size % options.microbatches != 0)
    throw UsageError(str("--microbatches: ", options.microbatches, " does not divide --batch-size ", options.train.batch_size));
  if (options.chunks < 1 || options.chunks > schedule::kMaxChunks)
    throw UsageError(str("--chunks: must be in 1..", schedule::kMaxChunks, ", got ", options.chunks));
  if (!(options.timeout_s > 0 && options.timeout_s <= kMostTimeoutS))
    throw UsageError(str("--timeout: must be in (0, ", kMostTimeoutS, "] seconds, got ", options.timeout_s));
  // Unbounded, 1e10 overflowed its deadline and failed at once, blaming the network.
  if (!(options.rendezvous_timeout_s > 0 && options.rendezvous_timeout_s <= kMostTimeoutS))
    throw UsageError(str("--rendezvous-timeout: must be in (0, ", kMostTimeoutS, "] seconds, got ",
                         options.rendezvous_timeout_s));
  if (options.vertical_sync && options.schedule != "pipedream")
    throw UsageError(str("--vertical-sync: only the pipedream schedule keeps weight versions to sync, not ", options.schedule));
  // Versions count a stage's steps; a replicated stage steps once per round, so its versions
  // do not line up with the others' and the sync would ask for versions never stashed.
  for (int st = 0; options.vertical_sync && st < plan.num_stages(); ++st)
    if (plan.stages[st].replicas > 1)
      throw UsageError(str("--vertical-sync: needs one replica per stage, but stage ", st, " of plan ", plan.shape(),
                           " has ", plan.stages[st].replicas));
  // The asynchronous schedules' own settings change nothing under the others: refused, not
  // ignored, so that a run does not look tuned by a flag it never used.
  const bool stale = options.schedule == "pipedream" || options.schedule == "2bw";
  if (!stale && options.stale_warmup != runtime::WorkerOptions{}.stale_warmup)
    throw UsageError(str("--stale-warmup: only pipedream and 2bw have gradients that lag, not ", options.schedule,
                         " (got ", options.stale_warmup, ")"));
  if (!stale && !options.weight_prediction)
    throw UsageError(str("--no-weight-prediction: only pipedream and 2bw predict weights, not ", options.schedule));
  if (options.sum_replica_gradients && options.schedule != "pipedream")
    throw UsageError(str("--replica-gradients sum: only pipedream steps a replicated stage once per round of "
                         "minibatches; ", options.schedule, " all-reduces each minibatch's gradient"));
  if (options.schedule == "dp" && plan.num_stages() > 1)
    throw UsageError(str("--schedule dp: data parallelism runs one stage on every worker, but the plan has ",
                         plan.num_stages(), " stages (use a pipeline schedule, or no --plan)"));
}

schedule::Schedule generate_schedule(const plan::Plan& plan, const PipelineOptions& options, int minibatches) {
  if (options.schedule_file) return *options.schedule_file;  // one minibatch, repeated (it flushes)
  schedule::ScheduleOptions schedule_options;
  schedule_options.microbatches = options.microbatches;
  schedule_options.chunks = options.chunks;
  schedule_options.minibatches = minibatches;
  schedule_options.vertical_sync = options.vertical_sync;
  schedule_options.activation_budget = options.activation_budget;
  schedule_options.action_times = options.action_times;
  schedule_options.order = options.order;
  schedule_options.order_source = options.order_source;
  return schedule::make_schedule(options.schedule, plan, schedule_options);
}

}  // namespace pt::job
