#pragma once
// The notes `plan` writes on the referee's choice (plan_decision.h): each says what the figures
// beside it do not, where it applies (Plan::notes; the table prints them, the plan file keeps them).
#include <string>

#include "plan/cluster.h"
#include "plan/plan.h"
#include "plan/plan_command.h"
#include "profile/profile.h"
#include "referee/referee.h"

namespace pt::referee {

// Data parallelism on hundreds of workers repeats too rarely to replay: its prediction, said so
// (else the table would say "does not fit" where no memory cap was given).
void note_unreplayed_data_parallel(plan::Plan& plan, const Refereed& r, const plan::Cluster& cluster);
// Where the plan's replicas all-reduce, the bucket it runs fastest with (the referee's choice
// between it and data parallelism, each at its own bucket, unless --bucket-mb says or it ran out
// of --time-limit), and the other buckets' times. `bucket_mb`: --bucket-mb's value.
void note_plan_bucket(plan::Plan& plan, const Refereed& r, double bucket_mb, bool bucket_given);
// A candidate the simulator could not replay is not chosen; where it predicts faster than the
// choice, the plan says so rather than hide it.
void note_unreplayed_faster(plan::Plan& plan, const Refereed& r);
// --time-limit stopped the referee (Refereed::timed_out).
void note_time_limit(plan::Plan& plan, const Refereed& r, const plan::PlanOptions& options);
// Statistical efficiency (issue 12): what the pipedream schedule trades for speed.
void note_asynchronous(plan::Plan& plan);
// pipedream's replicated stages: a round of r minibatches is one step on r x the batch (their
// gradients' mean, runtime/worker.h); with every stage replicated, what --schedule dp does instead.
void note_replica_rounds(plan::Plan& plan);
// A BatchNorm model (Profile::batch_norms) split into microbatches of fewer than
// kFewBatchNormSamples samples: they train otherwise than the batch (the joint search weighs time
// and memory alone).
void note_few_batch_norm_samples(plan::Plan& plan, const profile::Profile& profile);
// The deferred step (plan.h), with the same plan's time without it where it was replayed.
void note_deferred_step(plan::Plan& plan, const Refereed& r);
// A plan on fewer workers than the cluster's, with the best replayed on all of them.
void note_fewer_workers(plan::Plan& plan, const Refereed& r, const plan::Cluster& cluster);
// A baseline a user can have: data parallelism all-reducing inside servers first, then across
// (on one level there are no servers to go inside), where it is faster than with the ring.
void note_hierarchical_data_parallel(plan::Plan& plan, const Refereed& r, const plan::PlanOutcome& searched);
// --explain's last line where the plan runs with another bucket than the exact model's figures
// above it (the options' bucket, --bucket-mb); "" where the same.
std::string bucket_explained(const plan::Plan& plan, double bucket_mb);

}  // namespace pt::referee
