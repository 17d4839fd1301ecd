#include "apps/torch/train_notes.h"

#include <algorithm>
#include <iostream>

#include "core/error.h"
#include "model/optimizer.h"
#include "plan/plan_table.h"
#include "profile/profile.h"
#include "plan/split_ties.h"
#include "runtime/worker.h"
#include "schedule/schedule_notes.h"

namespace pt::app {

namespace {

// A checkpoint resumed under other optimizer settings than it was trained with: the steps after
// it follow this run's, so the result is not one uninterrupted run's; said with both values (a
// cosine schedule laid over another step count jumps where it resumes).
void note_resumed_settings(const runtime::CheckpointManifest& cm, const std::string& from,
                           const model::OptimizerOptions& now, int64_t total) {
  std::string changed, rates;
  auto differ = [&](const std::string& what, const std::string& was, const std::string& is, std::string* into = nullptr) {
    std::string& list = into ? *into : changed;
    if (was != is) list += str(list.empty() ? "" : "; ", what, " ", was, " -> ", is);
  };
  auto number = [](double v) { return str(v); };
  differ("lr", number(cm.lr), number(now.lr), &rates);
  differ("momentum", number(cm.momentum), number(now.momentum));
  differ("weight decay", number(cm.weight_decay), number(now.weight_decay));
  differ("weight decay on", cm.weight_decay_on, now.weight_decay_on);
  if (!cm.zero_grad.empty()) differ("--zero-grad", cm.zero_grad, now.zero_grad);
  if (cm.eps >= 0) {  // older checkpoints do not say
    if (now.adam() && cm.optimizer != "sgd") {
      differ("betas", str(number(cm.beta1), ",", number(cm.beta2)), str(number(now.beta1), ",", number(now.beta2)));
      differ("eps", number(cm.eps), number(now.eps));
    }
    differ("clip grad norm", cm.clip_grad_norm > 0 ? number(cm.clip_grad_norm) : "off",
           now.clip_grad_norm > 0 ? number(now.clip_grad_norm) : "off");
  }
  if (!cm.lr_schedule.empty()) {  // older checkpoints do not say
    differ("lr schedule", runtime::lr_course(cm.lr_schedule, cm.schedule_steps, cm.min_lr),
           runtime::lr_course(now.lr_schedule, total, now.min_lr), &rates);
    differ("warm-up steps", str(cm.warmup_steps), str(now.warmup_steps), &rates);
  }
  // The rates differ only where the steps trained took others than this run's would have: a
  // cosine over 3 steps resumed over 18, all 3 inside a warm-up of 6, was said to differ where
  // every weight equalled an uninterrupted run's.
  if (!rates.empty()) {
    model::OptimizerOptions was = now, is = now;
    was.lr = cm.lr, was.warmup_steps = cm.warmup_steps, was.total_steps = cm.schedule_steps;
    if (!cm.lr_schedule.empty()) was.lr_schedule = cm.lr_schedule, was.min_lr = cm.min_lr;
    is.total_steps = total;
    bool same = true;
    for (int64_t k = 0; k < cm.step && same; ++k) same = model::learning_rate(was, k) == model::learning_rate(is, k);
    if (!same) changed += str(changed.empty() ? "" : "; ", rates);
  }
  if (changed.empty()) return;
  std::cerr << "note: " << from << " was trained with other optimizer settings (" << changed << "): steps "
            << cm.step + 1 << " on follow this run's, so the result differs from an uninterrupted run\n";
}

}  // namespace

// Every step takes a whole minibatch (model/batch_sampler.h), so the samples past the last
// whole one are left out of each epoch: say how many, and that --no-shuffle leaves out the same
// ones every time (PyTorch's DataLoader keeps a short last batch by default).
void note_samples_left_out(int64_t samples, const runtime::TrainOptions& t) {
  if (t.batch_size < 1 || samples <= t.batch_size) return;  // refused or one minibatch: check_train_options says
  int64_t left = samples % t.batch_size;
  if (left == 0) return;
  std::cerr << "note: " << samples << " training samples make " << samples / t.batch_size << " minibatches of "
            << t.batch_size << " an epoch; " << left << (left == 1 ? " is" : " are") << " left out of each epoch"
            << (t.shuffle ? " (different ones each time: the order is shuffled)\n"
                          : str(", the same every time with --no-shuffle: sample", left == 1 ? " " : "s ",
                                samples - left, left == 1 ? "" : str("-", samples - 1), " never trained on\n"));
}

// Each tie the plan splits over stages: its stages' workers sum its gradient every step
// (runtime/tied_gradients.h), which only export mentioned.
void note_split_ties(const model::LayeredModel& m, const schedule::Schedule& s) {
  std::vector<model::TieGroup> groups = m.tie_groups();
  std::vector<std::vector<int>> layers;
  for (const auto& g : groups) layers.push_back(g.layers());
  std::vector<std::string> names;
  for (int l = 0; l < m.num_layers(); ++l) names.push_back(m.layer(l).name);
  for (const plan::SplitTie& t : plan::split_ties(layers, s.stage_layers, s.stage_workers))
    if (groups[t.group].trains)
      std::cerr << "note: " << plan::split_tie_note(t, layers[t.group], groups[t.group].bytes, names) << "\n";
}

void note_unused_bucket(const job::Job& job, bool bucket_given) {
  for (const auto& st : job.plan.stages)
    if (st.replicas > 1) return;
  if (bucket_given)
    std::cerr << "note: --bucket-mb changes nothing here: no stage is replicated, so no gradient is all-reduced\n";
}

void note_schedule(const job::Job& job) {
  for (const std::string& note : {schedule::weight_delay_note(*job.typical, job.worker.weight_prediction),
                                  schedule::one_chunk_note(*job.typical)})
    if (!note.empty()) std::cerr << "note: " << note << "\n";
}

void note_few_batch_norm_samples(const job::Job& job, const model::LayeredModel& m) {
  const int microbatches = job.typical->microbatches;
  const int64_t batch = job.options.train.batch_size, samples = batch / std::max(1, microbatches);
  if (microbatches <= 1 || samples >= profile::kFewBatchNormSamples) return;
  // The zoo's models hold none, and counting builds every layer a process does not hold: the
  // gloo launcher, which holds none, built an 8-layer MLP's 1.6 GB one layer at a time, its peak
  // RSS then over its ranks'.
  if (m.file_sha256().empty()) return;
  const int64_t norms = m.deferrable_batch_norms();
  if (norms == 0) return;
  std::cerr << "note: " << m.name() << "'s " << norms << (norms == 1 ? " BatchNorm normalises" : " BatchNorms normalise")
            << " each microbatch over its own " << samples << " sample" << (samples == 1 ? "" : "s")
            << ", not the minibatch's " << batch << " (as PyTorch normalises a batch of " << samples
            << "): statistics over so few train otherwise (ResNet-50's ImageNet error rises steeply under 8 images a "
               "batch, Wu and He, Group Normalization); fewer --microbatches keep more samples in each"
            << (job.options.deferred_batch_norm ? "" : " (--deferred-batch-norm keeps the running statistics of the "
                                                       "minibatch, not what training normalises by)")
            << "\n";
}

void note_cluster_transport(const job::Job& job, const std::string& transport) {
  std::string measured = job.options.cluster.calibrated_over();
  if (measured.empty() || measured == transport) return;
  std::cerr << "note: " << job.options.cluster_source << " was calibrated over " << measured << ", this run is over "
            << transport << ": its figures (what a process holds besides its tensors, the hand-over, the "
            << "all-reduces) were measured over " << measured << "; calibrate with --transport " << transport
            << " for this run's\n";
}

void note_long_warmup(const job::Job& job) {
  const model::OptimizerOptions& sgd = job.worker.sgd;
  if (sgd.warmup_steps <= sgd.total_steps) return;
  std::cerr << "note: --warmup-steps " << sgd.warmup_steps << " is more than this run's " << sgd.total_steps
            << " steps: the rate rises to " << sgd.total_steps << "/" << sgd.warmup_steps
            << " of --lr and never reaches it"
            << (model::lr_decays(sgd.lr_schedule) ? str(", and the ", sgd.lr_schedule, " decay never starts") : "")
            << "\n";
}

void note_stale_warmup(const job::Job& job) {
  const schedule::Schedule& s = *job.typical;
  const model::OptimizerOptions& sgd = job.worker.sgd;
  int64_t longest = 0;
  int stage = 0;
  for (int st = 0; st < s.num_stages; ++st) {
    int64_t steps = runtime::stage_optimizer(s, st, job.worker).stale_warmup_steps;
    if (steps > longest) longest = steps, stage = st;
  }
  bool decays = model::lr_decays(sgd.lr_schedule);
  if (longest <= sgd.warmup_steps || (longest <= sgd.total_steps && !decays)) return;
  std::cerr << "note: " << s.kind << "'s stale stages warm their rate up over as many as " << longest
            << " minibatches (stage " << stage << ": --stale-warmup " << job.worker.stale_warmup << " times its lag)";
  if (longest > sgd.total_steps) std::cerr << ", more than this run's " << sgd.total_steps << " steps: they never reach --lr";
  if (decays)
    std::cerr << (longest > sgd.total_steps ? ";" : ",") << " the " << sgd.lr_schedule
              << " decay, which starts after --warmup-steps (" << sgd.warmup_steps << "), takes their ramp down";
  std::cerr << " (--stale-warmup 0 turns the warm-up off)\n";
}

void note_replica_rounds(const job::Job& job) {
  if (job.typical->kind != "pipedream") return;
  std::string note = plan::replica_rounds_note(job.plan, job.options.train.batch_size, job.worker.sum_replica_gradients);
  if (!note.empty()) std::cerr << "note: " << note << "\n";
}

void note_pinned(const job::Job& job, int cores) {
  if (job.cores_of_workers.empty()) return;
  std::cerr << "note: the " << job.workers() << " workers outnumber this host's " << cores
            << " cores: each is pinned to one, the busiest first, by their work per minibatch (";
  for (int core = 0; core < cores; ++core) {
    std::vector<int> on;
    for (int w = 0; w < job.workers(); ++w)
      if (job.cores_of_workers[w] == core) on.push_back(w);
    std::cerr << (core ? "; " : "") << "core " << core << ": " << (on.size() == 1 ? "worker " : "workers ")
              << plan::format_id_ranges(on);
  }
  std::cerr << ")\n";
}

void note_resume(const job::Job& job, const model::LayeredModel& m) {
  const runtime::CheckpointOptions& ck = job.options.checkpoint;
  if (ck.dir.empty()) return;
  const auto& cm = job.resume_manifest;
  if (ck.resume && job.resume_from.empty()) std::cerr << "no checkpoint in " << ck.dir << ": starting from step 0\n";
  if (job.resume_from.empty()) return;
  std::cerr << "resuming from " << job.resume_from << " (step " << cm.step << ", written by " << cm.schedule
            << " on plan " << cm.plan << ")\n";
  note_resumed_settings(cm, job.resume_from, job.options.train.sgd, job.optimizer().total_steps);
  if (!cm.precision.empty() && cm.precision != model::to_string(m.precision()))
    std::cerr << "note: " << job.resume_from << " was trained in " << cm.precision << " and this run computes in "
              << model::to_string(m.precision()) << ": steps " << cm.step + 1
              << " on differ from an uninterrupted run's\n";
  if (cm.label_smoothing >= 0 && cm.label_smoothing != m.label_smoothing())
    std::cerr << "note: " << job.resume_from << " was trained with --label-smoothing " << cm.label_smoothing
              << " and this run smooths by " << m.label_smoothing() << ": steps " << cm.step + 1
              << " on differ from an uninterrupted run's\n";
  // A model's BatchNorms follow the microbatches and whether their statistics are deferred: where
  // either changed, its statistics differ from an uninterrupted run's (it was not said).
  std::string batches;
  if (cm.microbatches > 0 && cm.microbatches != job.typical->microbatches)
    batches = str("microbatches a minibatch ", cm.microbatches, " -> ", job.typical->microbatches);
  if (cm.deferred_batch_norm >= 0 && (cm.deferred_batch_norm == 1) != job.options.deferred_batch_norm)
    batches += str(batches.empty() ? "" : "; ", "--deferred-batch-norm ",
                   cm.deferred_batch_norm == 1 ? "on -> off" : "off -> on");
  if (!batches.empty() && m.deferrable_batch_norms() > 0)
    std::cerr << "note: " << job.resume_from << " was trained with other batches for its BatchNorms (" << batches
              << "): steps " << cm.step + 1 << " on differ from an uninterrupted run's\n";
  // Dropout's masks are drawn by microbatch (LayeredModel::set_draw_key): resumed with other
  // microbatches, a model's masks, and so its steps, are another run's (it was not said).
  if (cm.microbatches > 0 && cm.microbatches != job.typical->microbatches && m.any_layer_draws())
    std::cerr << "note: " << job.resume_from << " was trained with " << cm.microbatches << " microbatches a minibatch and "
              << "this run takes " << job.typical->microbatches << ": dropout's masks are drawn by microbatch, so steps "
              << cm.step + 1 << " on differ from an uninterrupted run's\n";
  if (cm.data.train_samples >= 0 && cm.data.name != job.data.name)  // the same samples (check_resume_fits)
    std::cerr << "note: " << job.resume_from << " was trained on " << cm.data.name << ", and this run reads "
              << job.data.describe() << ": the same samples\n";
  // An asynchronous run's weights lag by its split, replicas and flags: resumed under others
  // (--stale-warmup 0, or a split --stages measured again), it moved 6.5e-4 off the run it
  // continued, unsaid; a synchronous run's lag none (its split changes no weight), and one resumed
  // under pipedream moved 0.074 off it, unsaid. An asynchronous checkpoint before 2026-12-06
  // records no lag.
  const std::string lag = job::weight_lag(job);
  // One worker lags nothing and records no lag, as a synchronous run (job::weight_lag).
  const bool lag_recorded =
      !cm.weight_lag.empty() || (cm.schedule != "pipedream" && cm.schedule != "2bw") || cm.workers == 1;
  auto lag_of = [](const std::string& l, const std::string& kind) { return l.empty() ? kind + ": none" : l; };
  // Checkpoints before 2026-12-07: a 2bw one records no stale warm-up (the rest is compared), and
  // a pipedream one recorded a deferred step on where its plan's first stage, of one replica,
  // deferred none.
  std::string recorded = cm.weight_lag;
  const std::string on = "; deferred step on";
  if (recorded.rfind("pipedream on plan 1-", 0) == 0 || recorded.rfind("pipedream on plan 1:", 0) == 0)
    if (size_t at = recorded.find(on); at != std::string::npos) recorded.replace(at, on.size(), "; deferred step off");
  const bool same = recorded == lag || (cm.schedule == "2bw" && recorded.find("stale warm-up") == std::string::npos &&
                                        lag.rfind(recorded + "; stale warm-up ", 0) == 0);
  if (lag_recorded && !same)
    std::cerr << "note: " << job.resume_from << " was trained with other settings of its weights' lag ("
              << lag_of(cm.weight_lag, cm.schedule) << " -> " << lag_of(lag, job.options.schedule) << "): steps "
              << cm.step + 1 << " on differ from an uninterrupted run's\n";
  if (!cm.model_sha256.empty() && cm.model_sha256 != m.file_sha256())
    std::cerr << "note: " << job.resume_from << " was trained by the model file of sha256 " << cm.model_sha256
              << ", not this one (" << m.file_sha256() << "): its weights load if the layers' shapes match, but "
              << "the code that computes with them has changed\n";
}

}  // namespace pt::app
