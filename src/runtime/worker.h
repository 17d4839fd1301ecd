#pragma once
// A worker executes its action list from the schedule IR (schedule/action.h): forward,
// backward (full, or input-only + weight for zero-bubble), send/receive, all-reduce, step.
// It holds one StageReplica per stage the schedule places on it and contains no
// schedule-specific control flow beyond what the actions say.
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "model/batch_sampler.h"
#include "model/dataset.h"
#include "plan/cluster.h"
#include "runtime/gradient_buckets.h"
#include "runtime/stage_replica.h"
#include "runtime/trainer.h"
#include "runtime/tied_gradients.h"
#include "runtime/transport.h"
#include "schedule/schedule.h"
#include "schedule/trace.h"

namespace pt::runtime {

struct WorkerOptions {
  int64_t batch_size = 64;
  model::OptimizerOptions sgd;
  uint64_t seed = 0;
  bool stash_weights = true;
  // pipedream and 2bw: each minibatch's forward and backward run on weights predicted as far
  // ahead as its gradient's step (StageReplica::forward, predict_steps; 2bw's microbatches of one
  // minibatch share one copy); false: the paper's (pipedream the newest, 2bw its delayed version).
  bool weight_prediction = true;
  // pipedream and 2bw: a stage whose gradients lag s steps warms its learning rate up linearly
  // over stale_warmup * s minibatches (unless the run's own warm-up is longer); 0: off. Early
  // training, where the gradients change fastest, is where stale ones hurt most (PipeMare,
  // Yang et al. 2021, reschedules the rate by delay for that reason).
  int64_t stale_warmup = 100;
  // pipedream: a replicated stage's r replicas each take a whole minibatch, and the round steps
  // once with the mean of their r gradients, as PipeDream (DistributedDataParallel) and DDP do:
  // a step on r minibatches at the run's rate. true: with their sum, r times the rate, which
  // tracks an unreplicated stage's r steps to first order but diverges where r x the rate is
  // past what the model takes (mnist-cnn on 8 replicas at 0.02: 10% accuracy, chance).
  bool sum_replica_gradients = false;
  // BatchNorm's running statistics over the whole minibatch, every replica's (model/deferred_batch_norm.h).
  bool deferred_batch_norm = false;
  bool record_weight_sums = false;  // tests of weight stashing
  bool shuffle = true;              // TrainOptions::shuffle
  // All-reduce bucket size (gradient_buckets.h); 0: one bucket, reduced after the backward.
  int64_t bucket_bytes = plan::Cluster::kDefaultBucketBytes;
};

// The optimizer settings stage `stage` of `s` steps with: the run's, and an asynchronous
// schedule's stale warm-up for the steps its gradients lag (WorkerOptions::stale_warmup).
model::OptimizerOptions stage_optimizer(const schedule::Schedule& s, int stage, const WorkerOptions& options);

class Worker {
 public:
  // Called on a last-stage worker after the forward of each microbatch: (minibatch, the
  // microbatch's share of the minibatch's loss), or kNoTargets for a minibatch that keeps no
  // target (padding alone: its mean over none is no figure).
  using LossCallback = std::function<void(int64_t minibatch, double loss)>;
  static constexpr double kNoTargets = -std::numeric_limits<double>::infinity();
  // Called on a last-stage worker after each step of it, with the (global) minibatch it closes.
  using StepCallback = std::function<void(int64_t minibatch)>;

  Worker(int rank, std::shared_ptr<model::LayeredModel> model, const model::DataSplit& data,
         Transport& transport, const WorkerOptions& options);

  // Runs `schedule` (placement and stages must be those of every call) for minibatches
  // [first_minibatch, first_minibatch + schedule.minibatches); the schedule's microbatch k is
  // the global microbatch first_minibatch * microbatches + k.
  void run(const schedule::Schedule& schedule, int64_t first_minibatch);
  // Waits for every send started so far: before an evaluation, a checkpoint, the job's end.
  void finish_sends();
  // Test accuracy through the pipeline (replica 0 of every stage); every worker calls it.
  // Returns the accuracy on the worker that holds the last stage's replica 0, -1 elsewhere.
  // `batch` samples a forward: the training's minibatch (trainer.h's evaluate says why).
  Evaluation evaluate(const schedule::Schedule& schedule, const model::Dataset& test, int64_t batch);
  // The evaluation's rounds a stage sends ahead of its next stage taking them (evaluate says why).
  static constexpr int kEvaluationAhead = 2;

  // Creates the replicas of the stages `schedule` places here (run() does it on first use);
  // a resumed job calls it to load a checkpoint before running.
  void prepare(const schedule::Schedule& schedule) { setup(schedule); }
  model::LayeredModel& model() { return *model_; }

  void set_loss_callback(LossCallback cb) { on_loss_ = std::move(cb); }
  void set_step_callback(StepCallback cb) { on_step_ = std::move(cb); }
  // Called with each minibatch's whole-model gradient norm where clipping computes it.
  using GradNormCallback = std::function<void(int64_t minibatch, double norm)>;
  void set_grad_norm_callback(GradNormCallback cb) { on_grad_norm_ = std::move(cb); }
  void set_trace_origin(double origin_ms) { origin_ms_ = origin_ms; }
  std::vector<schedule::TraceEvent>& trace() { return trace_; }
  // A pause in training (an evaluation, a checkpoint) from start_wall_ms (wall_ms()) to now, on
  // the trace's clock (schedule::Trace::pauses).
  void mark_pause(double start_wall_ms, double end_wall_ms) {
    pauses_.emplace_back(start_wall_ms - origin_ms_, end_wall_ms - origin_ms_);
  }
  const std::vector<std::pair<double, double>>& pauses() const { return pauses_; }
  StageReplica* replica(int stage);
  int rank() const { return rank_; }
  std::string current_action() const { return current_; }

 private:
  void setup(const schedule::Schedule& s);
  void execute(const schedule::Schedule& s, const schedule::Action& a, int64_t offset, int64_t first_minibatch);
  void post_receive(const schedule::Schedule& s, const schedule::Action& a, int64_t offset);
  // Waits for the posted receive (direction, stage, mb), learning its channel's shape.
  torch::Tensor take_received(int direction, int stage, int64_t mb, const schedule::Action& a);
  void send(const torch::Tensor& t, int direction, int to_stage, int peer, int64_t tag);
  static constexpr int kActivation = 0, kGradient = 1;  // a transfer's direction (tag)
  static constexpr int kReceivesAhead = 8;  // receives posted ahead of their place in the list
  static constexpr int kSendsAhead = 8;     // sends to one peer not yet waited for
  // Inputs (targets false) or targets of microbatch `micro` of `minibatch`.
  torch::Tensor batch_rows(bool targets, int64_t minibatch, int64_t micro, int microbatches);
  // The share of its minibatch's loss a microbatch of `target` carries: 1/m, or where the loss
  // skips padding, its kept targets over the minibatch's, so that the microbatches' losses sum
  // to the minibatch's mean over its kept targets (1/m each had weighed a padded one's tokens
  // up). After batch_rows of that minibatch.
  double loss_share(const torch::Tensor& target, int microbatches);
  static int64_t tag(int direction, int stage, int64_t mb, int stages);
  // --clip-grad-norm under a synchronous schedule: the whole model's gradient norm, summed over
  // every worker, and the scale every step of this minibatch takes (1 where under the cap).
  double global_grad_norm(const schedule::Schedule& s);

  int rank_;
  std::shared_ptr<model::LayeredModel> model_;
  const model::DataSplit& data_;
  Transport& transport_;
  WorkerOptions options_;
  model::BatchSampler sampler_;
  std::map<int, std::unique_ptr<StageReplica>> replicas_;  // stage -> replica
  // Replicated stages' all-reduces (declared after replicas_: destroyed before the buffers).
  std::map<int, std::unique_ptr<GradientBuckets>> buckets_;  // stage -> buckets
  std::unique_ptr<TiedGradients> tied_;  // parameters shared with other stages' layers
  // Each held stage's deferrable BatchNorms, and whether they defer (--deferred-batch-norm under
  // a synchronous schedule, where a minibatch reaches a stage as several forwards: on one replica
  // or over several). Deferred ones fold at the stage's step, their sums added over its replicas.
  std::map<int, std::vector<model::DeferredBatchNorm>> batch_norms_;
  std::set<int> deferred_stages_;
  void fold_batch_norms(const schedule::Schedule& s, int stage);
  // The whole model's gradient norm counts each parameter once: a replicated stage's by its first
  // replica (after the all-reduce every replica holds the sum), a tie split over stages by the
  // stage holding its first copy (after the exchange every copy holds the sum). Its other copies
  // this worker steps, as (layer, parameter index): their squares are taken back out.
  std::vector<std::pair<int, int>> uncounted_;
  double clip_scale_ = 1;  // this minibatch's, from global_grad_norm()
  // The actions (indices into this worker's list) after which a stage's gradients are final
  // until its all-reduce: the last full Backward or BackwardWeight before each AllReduce.
  std::vector<bool> completes_gradients_;
  std::map<std::pair<int, int64_t>, torch::Tensor> outputs_;          // (stage, mb) -> activation to send
  std::map<std::pair<int, int64_t>, torch::Tensor> input_grads_;      // (stage, mb) -> gradient to send
  // A channel: (direction, the receiving stage, the peer). Transfers of the first run a channel
  // is used in carry a header; from the next run on both ends know its shape (known_), so the
  // payload travels alone (Transport::isend_known). Every minibatch has the batch's size, so a
  // channel's shape does not change between runs (checked on sending).
  using Channel = std::tuple<int, int, int>;
  struct Posted {
    std::shared_ptr<PendingTransfer> transfer;
    Channel channel;
  };
  std::map<std::tuple<int, int, int64_t>, Posted> receives_;  // (dir, stage, mb)
  std::map<Channel, Transport::Known> known_, learnt_;      // learnt_: this run's, known_ from the next
  std::vector<std::pair<int, std::shared_ptr<PendingTransfer>>> sends_;  // (peer, send) in order
  std::map<int64_t, std::shared_ptr<PendingTransfer>> activation_sends_;  // by tag, until its backward
  // The previous run's sends: waited at the end of the next run, not of their own, so a worker
  // posts the next minibatch's receives while its last send is still being taken (gloo hands a
  // payload over only once the peer posts its receive).
  std::vector<std::shared_ptr<PendingTransfer>> earlier_sends_;
  // When the current action's wait for its received input ended (wall_ms; 0: it received none):
  // its trace time starts there, the wait being the link's, not compute.
  double input_ready_ms_ = 0;
  int64_t sent_bytes_ = 0;  // the bytes of the last send (its trace event's)
  std::vector<int64_t> cached_indices_;
  int64_t cached_minibatch_ = -1;
  int64_t cached_kept_ = -1;  // the targets its loss keeps (-1: not counted yet)
  int padded_ = -1;           // whether the training targets hold padding (-1: not looked yet)
  LossCallback on_loss_;
  StepCallback on_step_;
  GradNormCallback on_grad_norm_;
  double origin_ms_ = 0;
  std::vector<schedule::TraceEvent> trace_;
  std::vector<std::pair<double, double>> pauses_;
  std::string current_;
  // Vertical sync: the weight version stage 0 had when each microbatch of the running
  // schedule entered (the count of stage-0 Steps before its forward), plus the base version.
  std::map<int, int64_t> entry_version_;
  // Weight prediction: (stage, microbatch of the running schedule) -> the stage's steps between
  // its forward and its backward, read from this worker's list.
  std::map<std::pair<int, int>, int> predict_steps_;
  int64_t base_version_ = 0;
};

}  // namespace pt::runtime
