#pragma once
// What `pipetrain train` tells the user before it trains: samples an epoch leaves out, ties the
// plan splits over stages, a checkpoint resumed and how it was trained.
#include <string>

#include "job/job.h"
#include "model/layered_model.h"
#include "runtime/trainer.h"

namespace pt::app {

// Samples past the last whole minibatch of each epoch (PyTorch's DataLoader keeps a short last
// batch by default).
void note_samples_left_out(int64_t samples, const runtime::TrainOptions& t);
// Each tie the plan splits over stages: its stages' workers sum its gradient every step.
void note_split_ties(const model::LayeredModel& m, const schedule::Schedule& s);
// Where the job starts: a checkpoint resumed (its step, schedule, plan, and settings or model
// file that differ from this run's), or none found.
void note_resume(const job::Job& job, const model::LayeredModel& m);
// Workers that outnumber the host's cores: the core each is pinned to (job/core_pinning.h).
void note_pinned(const job::Job& job, int cores);
// A schedule that runs otherwise than its name promises (schedule/schedule_notes.h): 2bw's weights
// lagging more than PipeDream-2BW's one step, interleaved with one chunk a worker.
void note_schedule(const job::Job& job);
// --bucket-mb given where no stage is replicated: no gradient is all-reduced (it was taken without a word).
void note_unused_bucket(const job::Job& job, bool bucket_given);
// A --warmup-steps longer than the run: the rate never reaches --lr.
void note_long_warmup(const job::Job& job);

// pipedream and 2bw: a stale stage's warm-up (--stale-warmup N times its lag) that outlasts the
// run, or that a cosine multiplies, keeps that stage under --lr where the run's own schedule
// would not.
void note_stale_warmup(const job::Job& job);
// pipedream's replicated stages: each round of r minibatches is one step on r x the batch (its
// gradients' mean, or sum), and where every stage is replicated, what --schedule dp does instead.
void note_replica_rounds(const job::Job& job);
// BatchNorms that normalise microbatches of few samples (kFewBatchNormSamples): their statistics,
// over so few, train otherwise than the minibatch's.
void note_few_batch_norm_samples(const job::Job& job, const model::LayeredModel& m);
// A --cluster calibrated over another transport than this run's: its process_bytes, link rates
// and all-reduces are that transport's (a threads process's 180 MiB charged to each gloo rank put
// their modelled peak RSS 39% over the OS's).
void note_cluster_transport(const job::Job& job, const std::string& transport);

}  // namespace pt::app
