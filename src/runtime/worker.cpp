#include "runtime/worker.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <numeric>
#include <set>

#include "core/error.h"
#include "core/host_allocator.h"
#include "runtime/progress.h"
#include "runtime/trainer.h"

namespace pt::runtime {

using schedule::Action;
using schedule::ActionKind;

model::OptimizerOptions stage_optimizer(const schedule::Schedule& s, int stage, const WorkerOptions& options) {
  model::OptimizerOptions sgd = options.sgd;
  if ((s.kind == "pipedream" || s.kind == "2bw") && !s.flush) {
    // The stage's delay: its versions in flight less the newest; under vertical sync every stage
    // runs on the version stage 0 had, so stage 0's delay. The paper's 2bw runs every stage on
    // the weights the schedule's weight delay behind; predicting, a 2bw stage's minibatch lags
    // the steps between its forward and its step, as a pipedream stage's (none on the last
    // stage: bench/async_accuracy.sh).
    int64_t delay = s.weight_versions[s.vertical_sync ? 0 : stage] - 1;
    if (s.kind == "2bw" && options.weight_prediction && sgd.state_copies() > 0) {
      delay = 0;
      for (int w : s.stage_workers[stage])
        for (const auto& [key, steps] : s.steps_in_flight(w))
          if (key.first == stage) delay = std::max<int64_t>(delay, steps);
    } else if (s.kind == "2bw") {
      delay = s.weight_delay;
    }
    sgd.stale_warmup_steps = options.stale_warmup * delay;
  }
  return sgd;
}

Worker::Worker(int rank, std::shared_ptr<model::LayeredModel> model, const model::DataSplit& data,
               Transport& transport, const WorkerOptions& options)
    : rank_(rank), model_(std::move(model)), data_(data), transport_(transport), options_(options),
      sampler_(data.train.size(), options.batch_size, options.seed, options.shuffle, data.train.shard_sizes()) {}

int64_t Worker::tag(int direction, int stage, int64_t mb, int stages) {
  return (mb * stages + stage) * 2 + direction;
}

StageReplica* Worker::replica(int stage) {
  auto it = replicas_.find(stage);
  return it == replicas_.end() ? nullptr : it->second.get();
}

void Worker::setup(const schedule::Schedule& s) {
  if (!replicas_.empty()) return;
  // Before the replicas move the parameters into their flat buffers: ties are found by memory.
  std::vector<model::TieGroup> ties = model_->tie_groups();
  tied_ = std::make_unique<TiedGradients>(ties, *model_, s, rank_);
  for (int st = 0; st < s.num_stages; ++st) {
    const auto& ws = s.stage_workers[st];
    if (std::find(ws.begin(), ws.end(), rank_) == ws.end()) continue;
    const auto& layers = s.stage_layers[st];
    PT_CHECK(!layers.empty());
    int first = layers.front(), last = layers.back() + 1;
    if (last - first != static_cast<int>(layers.size()) || last > model_->num_layers())
      throw ConfigError(str("stage ", st, " holds layers ", first, "..", layers.back(), " which are not a contiguous run of the ",
                            model_->num_layers(), " layers of ", model_->name()));
    bool is_last = last == model_->num_layers();
    model::OptimizerOptions sgd = stage_optimizer(s, st, options_);
    std::vector<const StageReplica*> built;  // a tie group's copies here are one tensor, held by the first
    for (const auto& [other, r] : replicas_) built.push_back(r.get());
    replicas_[st] = std::make_unique<StageReplica>(model_, first, last, is_last, sgd,
                                                   options_.stash_weights && !s.flush, s.weight_versions[st],
                                                   s.recomputes(st), built);
    replicas_[st]->record_weight_sums(options_.record_weight_sums);
    batch_norms_[st] = model_->deferred_batch_norms(first, last);
    if (options_.deferred_batch_norm && s.flush && !batch_norms_[st].empty()) {
      int64_t forwards = 0;  // the forwards this replica runs of one minibatch
      for (const Action& a : s.actions[rank_])
        forwards += a.kind == ActionKind::kForward && a.stage == st && a.microbatch / s.microbatches == 0;
      if (forwards > 1 || ws.size() > 1) deferred_stages_.insert(st);
    }
    std::vector<int> group = ws;
    std::sort(group.begin(), group.end());
    if (group.size() > 1)
      buckets_[st] = std::make_unique<GradientBuckets>(
          replicas_[st]->flat(), options_.bucket_bytes > 0 ? options_.bucket_bytes : std::numeric_limits<int64_t>::max(),
          transport_, group);
    // 2bw's entry version is weight_delay behind the newest.
    if (s.weight_delay > 0 && options_.weight_prediction) replicas_[st]->predict_per_minibatch();
    if (s.weight_delay > 0 && !replicas_[st]->predicts_per_minibatch()) replicas_[st]->keep_history(s.weight_delay);
  }
  if (options_.sgd.clip_grad_norm > 0 && s.flush) {
    // Every all-reduce of this worker's stages before its first step: the norm is of the sums.
    bool stepped = false;
    for (const Action& a : s.actions[rank_]) {
      stepped |= a.kind == ActionKind::kStep;
      if (stepped && a.kind == ActionKind::kAllReduce)
        throw ConfigError(str("--clip-grad-norm: worker ", rank_, " of the ", s.kind, " schedule all-reduces stage ",
                              a.stage, " after its first step, so the whole model's norm is not known before it"));
    }
    auto first_replica = [&](int st) {
      const auto& ws = s.stage_workers[st];
      return *std::min_element(ws.begin(), ws.end()) == rank_;
    };
    auto stage_of = [&](int layer) {
      for (int st = 0; st < s.num_stages; ++st)
        if (std::count(s.stage_layers[st].begin(), s.stage_layers[st].end(), layer)) return st;
      return -1;
    };
    for (const auto& g : ties) {
      int first = s.num_stages;
      for (const auto& m : g.members) first = std::min(first, stage_of(m.layer));
      std::set<int> taken_out;  // a stage's copies are one tensor there
      for (const auto& m : g.members) {
        int st = stage_of(m.layer);
        StageReplica* rep = replica(st);
        if (st == first || !rep || !first_replica(st) || taken_out.count(st)) continue;
        if (!rep->holds(model_->layer_parameters(m.layer).at(m.param))) continue;  // borrowed: counted where held
        uncounted_.emplace_back(m.layer, m.param);
        taken_out.insert(st);
      }
    }
  }
  // The layers' own weights were copied into the flat buffers and freed: malloc would keep them.
  release_freed_host_memory();
}

double Worker::global_grad_norm(const schedule::Schedule& s) {
  torch::NoGradGuard no_grad;
  double squares = 0;
  for (auto& [st, rep] : replicas_) {
    const auto& ws = s.stage_workers[st];
    if (*std::min_element(ws.begin(), ws.end()) == rank_) squares += rep->flat().grad_squares();
  }
  for (const auto& [layer, param] : uncounted_) squares -= model::sum_of_squares(model_->layer_parameters(layer).at(param).grad());
  std::vector<int> everyone(s.num_workers());
  std::iota(everyone.begin(), everyone.end(), 0);
  std::vector<torch::Tensor> sum{torch::full({1}, squares, torch::kDouble)};
  transport_.allreduce_sum(sum, everyone);
  return std::sqrt(std::max(0.0, sum[0].item<double>()));
}

torch::Tensor Worker::batch_rows(bool targets, int64_t minibatch, int64_t micro, int microbatches) {
  if (minibatch != cached_minibatch_) {
    cached_indices_ = sampler_.batch(minibatch);
    cached_minibatch_ = minibatch;
    cached_kept_ = -1;
  }
  int64_t size = options_.batch_size / microbatches;
  std::vector<int64_t> rows(cached_indices_.begin() + micro * size, cached_indices_.begin() + (micro + 1) * size);
  return targets ? data_.train.gather_targets(rows) : data_.train.gather_inputs(rows);
}

double Worker::loss_share(const torch::Tensor& target, int microbatches) {
  if (!model_->skips_ignored_targets()) return 1.0 / microbatches;
  // Looked for once: counting each microbatch's targets cost mnist-cnn's 1F1B 3% of its time.
  if (padded_ < 0)
    padded_ = data_.train.on_disk ? data_.train.on_disk->may_pad()
                                  : data_.train.targets.eq(model::LayeredModel::kIgnoredTarget).any().item<bool>();
  if (!padded_) return 1.0 / microbatches;
  if (cached_kept_ < 0) cached_kept_ = model_->kept_targets(data_.train.gather_targets(cached_indices_));
  // A minibatch of padding alone adds no gradient (each loss is 0, LayeredModel::loss); its step
  // still applies momentum, weight decay and Adam's moments, as torch.optim's on zero gradients.
  return cached_kept_ > 0 ? static_cast<double>(model_->kept_targets(target)) / static_cast<double>(cached_kept_) : 0;
}

void Worker::run(const schedule::Schedule& s, int64_t first_minibatch) {
  setup(s);
  for (auto& [st, norms] : batch_norms_)
    for (auto& n : norms) n.set_deferred(deferred_stages_.count(st) > 0);
  // Every stage steps once per minibatch, so at a segment's start all versions are equal: the
  // versions a segment's minibatches run on count from there (a segment starts drained).
  base_version_ = replicas_.empty() ? 0 : replicas_.begin()->second->version();
  entry_version_ = s.vertical_sync_entries();
  // Each segment's lists say how far back its forwards reach (a short one's less).
  if (s.vertical_sync)
    for (auto& [st, r] : replicas_) r->keep_history(s.vertical_sync_history(st));
  int64_t offset = first_minibatch * s.microbatches;
  const auto& list = s.actions[rank_];
  predict_steps_.clear();
  if (options_.weight_prediction && s.predicts_weights()) predict_steps_ = s.steps_in_flight(rank_);
  completes_gradients_ = options_.bucket_bytes > 0 ? s.completes_gradients(rank_) : std::vector<bool>(list.size());
  // Receives are posted ahead of their place in the list, up to kReceivesAhead outstanding:
  // gloo holds a payload at its sender until the receive is posted, so a receive posted only
  // when reached (1F1B puts a gradient's receive after the next forward) delays a transfer that
  // was ready long before, and receives posted together make their senders share the links.
  size_t next_receive = 0;
  int outstanding = 0;
  auto post_ahead = [&] {
    for (; next_receive < list.size() && outstanding < kReceivesAhead; ++next_receive)
      if (is_recv(list[next_receive].kind)) {
        post_receive(s, list[next_receive], offset);
        ++outstanding;
      }
  };
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    post_ahead();
    if (is_recv(a.kind)) {
      PT_CHECK(next_receive > i, "receive ", schedule::to_string(a), " was not posted ahead");
      --outstanding;  // reached: its place in the window frees
    }
    current_ = schedule::to_string(a);
    input_ready_ms_ = 0;
    double t0 = wall_ms();
    if (completes_gradients_[i] && buckets_.count(a.stage)) buckets_[a.stage]->arm();
    if (i == tied_->exchange_before()) {
      if (tied_->active())
        tied_->exchange(transport_, *model_, [this](const torch::Tensor& p) {
          for (auto& [stage, rep] : replicas_)
            if (torch::Tensor flag = rep->reached_flag(p); flag.defined()) return flag;
          return torch::Tensor();
        });
      if (options_.sgd.clip_grad_norm > 0 && s.flush) {
        double norm = global_grad_norm(s);
        clip_scale_ = std::min(1.0, options_.sgd.clip_grad_norm / (norm + 1e-6));
        if (on_grad_norm_) on_grad_norm_(first_minibatch, norm);
      }
    }
    execute(s, a, offset, first_minibatch);
    schedule::TraceEvent e;
    e.action = a;
    // Numbered over the run, not the segment: a flush's steps and all-reduces by its minibatch, an
    // asynchronous schedule's from its segment's first (its minibatches', or pipedream's rounds'). Numbered
    // within each segment, the collectives of successive segments shared ids, and `trace` counted
    // one of them: pipedream with a replicated stage and an evaluation every 4 of 16 steps read
    // 2.5 MiB all-reduced where 10.0 were.
    e.action.microbatch = static_cast<int>(a.kind == ActionKind::kAllReduce || a.kind == ActionKind::kStep
                                               ? (s.flush ? first_minibatch : first_minibatch + a.microbatch)
                                               : a.microbatch + offset);
    // A compute starts when its input has arrived: the wait for it is the link's, not compute.
    // Stamped then, not as the action's start plus the wait: what ran before the wait (or a
    // preemption there, on a busy machine) put a stage's forward 0.01-0.03 ms before the forward
    // it takes its input from ended, and `trace` refused the run's own trace as two clocks'.
    e.start_ms = (input_ready_ms_ > 0 ? std::max(t0, input_ready_ms_) : t0) - origin_ms_;
    e.end_ms = wall_ms() - origin_ms_;
    if (a.kind == ActionKind::kForward) e.bytes = replica(a.stage)->activation_bytes(a.microbatch + offset);
    if (schedule::is_send(a.kind)) e.bytes = sent_bytes_;
    if (a.kind == ActionKind::kAllReduce)  // the stage's gradients, as the simulator counts them (it said 0)
      for (const auto& g : replica(a.stage)->flat().grads()) e.bytes += static_cast<int64_t>(g.nbytes());
    trace_.push_back(e);
  }
  for (auto& p : earlier_sends_) p->wait();
  earlier_sends_.clear();
  for (auto& [peer, p] : sends_) earlier_sends_.push_back(std::move(p));
  sends_.clear();
  for (auto& [t, p] : activation_sends_) earlier_sends_.push_back(std::move(p));  // none when drained
  activation_sends_.clear();
  current_.clear();
  known_.insert(learnt_.begin(), learnt_.end());
  learnt_.clear();
}

void Worker::execute(const schedule::Schedule& s, const Action& a, int64_t offset, int64_t first_minibatch) {
  int64_t mb = a.microbatch + offset;  // global microbatch
  int m = s.microbatches;
  int64_t minibatch = mb / m, micro = mb % m;
  StageReplica* rep = replica(a.stage);
  PT_CHECK(rep || schedule::is_p2p(a.kind), "worker ", rank_, " does not hold stage ", a.stage);
  auto key = std::make_pair(a.stage, mb);
  switch (a.kind) {
    case ActionKind::kForward: {
      torch::Tensor input;
      if (a.stage == 0) {
        input = batch_rows(false, minibatch, micro, m);
      } else if (s.worker_of(a.stage - 1, a.microbatch) == rank_) {
        // The stage before is this worker's too (a V's middle, interleaved on one worker): its
        // output is here, and no transfer was scheduled.
        auto it = outputs_.find({a.stage - 1, mb});
        PT_CHECK(it != outputs_.end(), "forward before its input on the same worker: ", schedule::to_string(a));
        input = it->second;
        outputs_.erase(it);
      } else {
        input = take_received(kActivation, a.stage, mb, a);
      }
      bool last = a.stage == s.num_stages - 1;
      torch::Tensor target = last ? batch_rows(true, minibatch, micro, m) : torch::Tensor();
      const double share = last ? loss_share(target, m) : 1.0 / m;
      int64_t version = s.vertical_sync ? base_version_ + entry_version_.at(a.microbatch)
                        : s.weight_delay > 0 && !rep->predicts_per_minibatch()
                            ? base_version_ + std::max(0, a.microbatch / s.microbatches - s.weight_delay)
                            : -1;
      auto ahead = predict_steps_.find({a.stage, a.microbatch});
      torch::Tensor out = rep->forward(mb, input, target, share, version,
                                       ahead == predict_steps_.end() ? 0 : ahead->second, minibatch);
      if (last) {
        // A minibatch of padding alone: no loss, where a 0 entered the run's mean.
        const bool keeps_none = padded_ == 1 && cached_kept_ == 0;
        if (on_loss_) on_loss_(minibatch, keeps_none ? kNoTargets : rep->last_loss() * share);
      } else {
        outputs_[key] = out;
      }
      break;
    }
    case ActionKind::kSendActivation: {
      auto it = outputs_.find(key);
      PT_CHECK(it != outputs_.end(), "send of an activation not computed: ", schedule::to_string(a));
      // Transfers are tagged by the receiving stage: SA(s) feeds RA(s + 1), SG(s) feeds RG(s - 1).
      send(it->second, kActivation, a.stage + 1, a.peer, tag(kActivation, a.stage + 1, mb, s.num_stages));
      outputs_.erase(it);
      break;
    }
    case ActionKind::kRecvActivation:
    case ActionKind::kRecvGradient:
      break;  // posted ahead (run)
    case ActionKind::kBackward: {
      torch::Tensor grad;
      if (a.stage != s.num_stages - 1 && s.worker_of(a.stage + 1, a.microbatch) == rank_) {
        auto it = input_grads_.find({a.stage + 1, mb});  // the stage after is this worker's too
        PT_CHECK(it != input_grads_.end(), "backward before its gradient on the same worker: ", schedule::to_string(a));
        grad = it->second;
        input_grads_.erase(it);
      } else if (a.stage != s.num_stages - 1) {
        grad = take_received(kGradient, a.stage, mb, a);
      }
      // Its gradient is here, so the activation it answers was received: that send is done.
      auto sent = activation_sends_.find(tag(kActivation, a.stage + 1, mb, s.num_stages));
      if (sent != activation_sends_.end()) {
        sent->second->wait();
        activation_sends_.erase(sent);
      }
      bool split = a.stage < static_cast<int>(s.split_backward.size()) && s.split_backward[a.stage];
      torch::Tensor ig = rep->backward(mb, grad, split);
      if (a.stage > 0) input_grads_[key] = ig;
      break;
    }
    case ActionKind::kSendGradient: {
      auto it = input_grads_.find(key);
      PT_CHECK(it != input_grads_.end(), "send of a gradient not computed: ", schedule::to_string(a));
      send(it->second, kGradient, a.stage - 1, a.peer, tag(kGradient, a.stage - 1, mb, s.num_stages));
      input_grads_.erase(it);
      break;
    }
    case ActionKind::kBackwardWeight:
      rep->backward_weight(mb);
      break;
    case ActionKind::kAllReduce: {
      auto it = buckets_.find(a.stage);
      if (it != buckets_.end()) it->second->finish();
      break;
    }
    case ActionKind::kStep: {
      // The all-reduce summed the replicas' gradients. Synchronous schedules scaled each
      // microbatch's loss by its share (loss_share), so the sum is the minibatch's; pipedream's replicas each close
      // a whole minibatch, and the round steps with their mean (WorkerOptions::sum_replica_gradients).
      // A Step's microbatch field is the minibatch it closes (within this schedule).
      const bool round = s.kind == "pipedream";
      const double mean = round && !options_.sum_replica_gradients ? 1.0 / s.replicas(a.stage) : 1.0;
      // --clip-grad-norm: a synchronous minibatch's scale was worked out before the first step;
      // an asynchronous stage steps on its own and clips by the norm of the gradient it steps with.
      if (options_.sgd.clip_grad_norm > 0 && !s.flush) {
        double norm = mean * std::sqrt(rep->flat().grad_squares());
        clip_scale_ = std::min(1.0, options_.sgd.clip_grad_norm / (norm + 1e-6));
      }
      if (deferred_stages_.count(a.stage)) fold_batch_norms(s, a.stage);
      // Every replica of a round steps at the rate of the round's first minibatch: pipedream's
      // replicas each close a minibatch of their own, and stepping at its own rate under a
      // warm-up or a cosine set them apart for good (1.5e-3 after 10 steps).
      rep->step(clip_scale_ * mean,
                first_minibatch + (round ? a.microbatch - a.microbatch % s.replicas(a.stage) : a.microbatch));
      if (on_step_ && a.stage == s.num_stages - 1) on_step_(first_minibatch + a.microbatch);
      break;
    }
  }
}

void Worker::fold_batch_norms(const schedule::Schedule& s, int stage) {
  auto& norms = batch_norms_.at(stage);
  std::vector<int> group = s.stage_workers[stage];
  std::sort(group.begin(), group.end());
  if (group.size() > 1) {  // every replica folds the whole minibatch's sums, so all keep one set of statistics
    std::vector<torch::Tensor> sums;
    for (const auto& n : norms)
      for (const auto& t : n.sums()) sums.push_back(t);
    transport_.allreduce_sum(sums, group);
  }
  for (auto& n : norms) n.fold();
}

}  // namespace pt::runtime
