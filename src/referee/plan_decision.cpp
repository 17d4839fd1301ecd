// `plan`'s decision (plan_decision.h): the joint search's choice and its summary, PipeDream's plan
// simulated, and the referee's choice with the notes on it (plan_notes.cpp).
#include "referee/plan_decision.h"

#include <algorithm>
#include <limits>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/units.h"
#include "plan/split_ties.h"
#include "referee/joint_trials.h"
#include "referee/plan_notes.h"
#include "referee/referee.h"
#include "referee/replay_ahead.h"
#include "schedule/generators.h"
#include "schedule/given_order.h"
#include "schedule/memory.h"

namespace pt::referee {
namespace {

// Whether one worker at its leanest (a sample a microbatch) fits the cap: where it does not, the
// table does not advise it (VGG-16 under 2 GB would be told to train on one worker, which needs
// 15 GB).
bool one_worker_fits(const profile::Profile& profile, int64_t cap) {
  if (cap <= 0) return true;
  schedule::ScheduleOptions lean;
  lean.microbatches = static_cast<int>(std::min<int64_t>(profile.batch_size, schedule::kMaxMicrobatches));
  plan::Plan one = plan::data_parallel_plan(profile.num_layers(), 1);
  one.batch_size = profile.batch_size;
  return schedule::peak_memory(schedule::memory_per_worker(schedule::make_unvalidated_schedule("1f1b", one, lean),
                                                           profile)) <= cap;
}

// The joint search's choice in words, under the table.
std::string joint_summary(const Configuration& c, const JointOptions& joint, const plan::Cluster& cluster) {
  std::ostringstream summary;
  summary << "joint search (" << joint.objective << "): schedule " << c.plan.schedule;
  if (c.plan.microbatches > 0) summary << ", " << counted(c.plan.microbatches, "microbatch", "microbatches");
  if (c.plan.chunks > 0) summary << ", " << counted(c.plan.chunks, "chunk");
  int recomputed = 0;
  for (const auto& st : c.plan.stages) recomputed += st.recompute;
  summary << ", recomputation on " << recomputed << " of " << c.plan.num_stages() << " stages, batch "
          << c.plan.batch_size << " per step\n  simulated " << c.ms_per_sample << " ms per sample ("
          << fixed(1000.0 / c.ms_per_sample, 1) << " samples/s), peak memory per worker "
          << human_bytes(static_cast<double>(c.peak_memory));
  if (joint.memory_cap > 0 && cluster.process_bytes > 0)
    summary << " (the tensors' share of the " << human_bytes(static_cast<double>(joint.memory_cap + cluster.process_bytes))
            << " cap: " << human_bytes(static_cast<double>(joint.memory_cap)) << ")";
  else if (joint.memory_cap > 0)  // a typed cluster: the tensors alone (9 MiB planned, gloo workers of 108 MiB)
    summary << " (cap " << human_bytes(static_cast<double>(joint.memory_cap))
            << ", on the tensors: a worker process holds LibTorch, the data and buffers besides, which a cluster "
               "from `pipetrain calibrate` counts)";
  summary << "\n";
  if (c.staleness > 0)
    summary << "  asynchronous: a stage's weights lag up to " << counted(c.staleness, "update")
            << " (--objective time-to-accuracy weighs it)\n";
  // PipeDream-2BW's lag of one holds where a replica's microbatches of one minibatch cover its
  // warm-up (schedule::two_bw): VGG-16 2-2-2 with 2 microbatches lags 2, and the paper's form
  // keeps 3 versions. The runtime predicts by default (the memory model counts its copies).
  if (c.plan.schedule == "2bw" && c.staleness > 1)
    summary << "  2bw's weights lag " << c.staleness << " updates here, not PipeDream-2BW's 1: a replica's "
            << "microbatches of one minibatch do not cover its warm-up (more microbatches per minibatch, or fewer "
               "replicas a stage, bring it to 1); train runs each minibatch on weights predicted that far ahead, "
               "or with --no-weight-prediction on the version that far behind, keeping "
            << c.staleness + 1 << " on a stage\n";
  return summary.str();
}

// The all-reduce a plan's replicas were timed with, for `simulate --plan` and `train --plan` to
// follow: the joint search's plans left it out, and one made with --allreduce hierarchical was
// simulated with rings from its own file (ResNet-50 1f1b on 4x4: 356.3 ms, predicted 297.6).
void record_allreduce(plan::Plan& p, const plan::Cluster& cluster) {
  for (const auto& st : p.stages)
    if (st.replicas > 1) p.allreduce = plan::allreduce_name(cluster.allreduce);
}

PlanDecision decide_joint(const plan::PlanOutcome& out, const PlanRequest& request) {
  JointOptions joint = request.joint_options;
  joint.memory = request.memory;
  JointResult r = joint_search(out.profile, out.cluster, out.options, joint);
  const Configuration& c = chosen(r, joint, out.profile, out.cluster);
  PlanDecision d;
  d.plan = c.plan;
  record_allreduce(d.plan, out.cluster);
  schedule::Schedule s = schedule::make_unvalidated_schedule(c.plan.schedule, c.plan, c.run);
  // as the schedule places the stages (a V puts two on a worker)
  for (const auto& note : plan::split_tie_notes(out.profile, s.stage_layers, s.stage_workers, out.cluster))
    d.plan.notes.push_back(note);
  std::string budget_note = schedule::activation_budget_note(c.plan.schedule, c.run.activation_budget);
  if (!budget_note.empty()) d.plan.notes.push_back(budget_note);
  // The order timed and held to the cap, for train and simulate to run wherever they run.
  if (schedule::order_is_weighed(c.plan.schedule)) d.plan.order = schedule::compute_order(s);
  note_few_batch_norm_samples(d.plan, out.profile);
  if (r.faster_on_few_batch_norm_samples > 0)
    d.plan.notes.push_back(str(counted(r.faster_on_few_batch_norm_samples, "faster configuration"), " split the batch ",
                               "into microbatches of fewer than ", profile::kFewBatchNormSamples, " samples, which ",
                               out.profile.model, "'s ", counted(out.profile.batch_norms, "BatchNorm"),
                               " would normalise over; ranked after this one (`plan --microbatches N` pins a split, "
                               "--top K lists them)"));
  if (r.climb_timed_out)
    d.plan.notes.push_back(str("time limit: the search stopped moving the splits' boundaries at ",
                               out.options.time_limit_s, " s of planning (--time-limit), ", r.considered,
                               " configurations built; the plan is the best of those that fit"));
  d.shown = as_run(d.plan);
  // The --top best as plan files (plan --save-top): each configuration's plan with the order timed
  // where its kind weighs one, placed as it runs.
  for (size_t k = 0; k < r.ranked.size() && k < static_cast<size_t>(request.top); ++k) {
    plan::Plan q = k == 0 ? d.plan : r.ranked[k].plan;
    record_allreduce(q, out.cluster);
    if (k > 0 && schedule::order_is_weighed(q.schedule))
      q.order = schedule::compute_order(schedule::make_unvalidated_schedule(q.schedule, q, r.ranked[k].run));
    d.top.push_back(as_run(q));
  }
  d.one_worker_fits = one_worker_fits(out.profile, joint.memory_cap);
  d.summary = joint_summary(c, joint, out.cluster);
  if (request.top > 0) d.reports += "\n" + format_configurations(r, request.top);
  if (request.explain) {
    // As separate processes or devices, whose receives hold their own buffers: train's model on
    // threads, where a received tensor is the sender's, held less (mnist-cnn's w0 496 KiB, 717 here).
    d.reports += str("\nmemory per worker (modelled, ", schedule::kSeparateProcessesMemory, "):\n");
    for (size_t w = 0; w < c.memory.size(); ++w)
      d.reports += str("  w", w, ": ", schedule::describe(c.memory[w]), "\n");
  }
  return d;
}

// PipeDream's optimizer keeps its own prediction; the simulator says what the plan runs at.
// Its plans are for PipeDream's schedule (1F1B-RR): `simulate --plan` and `train --plan` run
// that, as `plan` simulated it (1f1b, their default otherwise, cannot run a stage of more
// replicas than its 4 microbatches: VGG-16's 7-1 on 8 workers).
PlanDecision decide_pipedream(const plan::PlanOutcome& out, const schedule::MemoryOptions& memory) {
  PlanDecision d;
  d.plan = out.plan;
  d.plan.schedule = "pipedream";
  record_allreduce(d.plan, out.cluster);
  double simulated = simulate_plan(d.plan, out.profile, out.cluster, out.options);
  if (simulated > 0) {
    d.plan.simulated_ms_per_minibatch = simulated;
    d.plan.simulated_schedule = "pipedream";
  }
  // PipeDream's cap is its formula's; where the memory model (what train checks) puts the plan
  // over it, the plan says so (VGG-16 on 8 workers at 10 Gbit/s under 8 GB: its 4-3-1 at 24.2 GiB).
  if (out.memory_cap > 0) {
    int64_t peak = schedule::peak_memory(schedule::memory_over_long_run("pipedream", d.plan, {}, out.profile, memory));
    if (peak > out.memory_cap)
      d.plan.notes.push_back(str("memory: PipeDream's optimizer keeps the ", human_bytes(static_cast<double>(out.memory_cap)),
                                 " cap by its own formula (a stage's minibatches in flight x its activations and "
                                 "weights",
                                 // Its ceil((M - m) / m) copies are none for one stage over all M workers.
                                 d.plan.num_stages() == 1 ? ", none for one stage on every worker: data parallelism "
                                                            "passes any cap"
                                                          : "",
                                 "); the memory model, which train checks, puts this plan at ",
                                 human_bytes(static_cast<double>(peak)),
                                 " per worker (weights, gradients, optimizer state, stashed versions and activations), over "
                                 "the cap; --cost-model pipetrain plans under the cap by the memory model"));
  }
  d.shown = d.plan;
  return d;
}

// No candidate can be replayed (hundreds of workers: replica counts whose rounds run to
// thousands of minibatches): the search's best by its prediction, and a note that says so.
PlanDecision unsimulated(const plan::PlanOutcome& out, const Refereed& r) {
  PlanDecision d;
  d.plan = out.candidates.front();
  d.plan.notes.push_back(str("not simulated: the replica counts of all ", r.unschedulable.size(),
                             " candidates repeat only every ", kMaxReplayPeriod, " or more minibatches, too long to "
                             "replay; this plan is the search's best by its prediction alone"));
  d.shown = d.plan;
  return d;
}

PlanDecision decide_refereed(const plan::PlanOutcome& out, const PlanRequest& request) {
  // Without a memory cap the uniform plans too (the search's candidates keep it; these do not).
  plan::PlanOptions options = out.options;
  options.shown = std::max(1, request.top);  // each row's figure the one simulate gives its file
  Refereed r = detail::choose_pipedream(out.candidates, out.profile, out.cluster, options,
                                        /*own_buckets=*/!request.bucket_given, /*with_uniform=*/out.memory_cap <= 0);
  if (r.ranked.empty()) return unsimulated(out, r);
  const Candidate& chosen = r.ranked.front();
  PlanDecision d;
  d.plan = chosen.plan;
  plan::Plan& p = d.plan;
  // A uniform plan refereed (its layers perhaps moved by the climbs) is the simulator's choice, as
  // the joint search labels it: the plan header said "cost model even" under the default model.
  if (p.cost_model == "even") p.cost_model = "pipetrain";
  // The plan's predicted time is its simulated steady state, the quantity it was ranked by.
  p.pipeline_ms_per_minibatch = chosen.simulated.ms_per_minibatch;
  p.data_parallel_ms_per_minibatch = r.data_parallel_ms;
  note_unreplayed_data_parallel(p, r, out.cluster);
  p.simulated_ms_per_minibatch = chosen.simulated.ms_per_minibatch;
  p.simulated_schedule = r.schedule;
  // (One worker alone is no data parallelism to explain.)
  if (steady_state_in_closed_form(p, r.schedule, out.cluster) && p.workers > 1)
    p.notes.push_back(str("data parallelism on ", p.workers, " workers: its steady state is the cost engine's closed "
                          "form, which for data parallelism is the simulator's figure exactly (its replicas are "
                          "alike), so it is not replayed"));
  p.schedule = r.schedule;  // what `train --plan` runs
  note_plan_bucket(p, r, request.bucket_mb, request.bucket_given);
  if (p.bucket_mb >= 0) p.allreduce = plan::allreduce_name(out.cluster.allreduce);  // timed with it
  note_unreplayed_faster(p, r);
  if (r.timed_out) note_time_limit(p, r, out.options);
  if (p.num_stages() > 1) note_asynchronous(p);
  note_replica_rounds(p);
  if (p.deferred_step) note_deferred_step(p, r);
  if (p.workers < out.cluster.workers()) note_fewer_workers(p, r, out.cluster);
  note_hierarchical_data_parallel(p, r, out);
  if (p.num_stages() > 1 && p.schedule == "pipedream") {
    // The figures behind --objective time-to-accuracy (joint_search.h), measured with replicas that
    // step on their round's mean, as train does by default; not a run that sums the round.
    std::string measured;
    for (const auto& [lag, steps] : kMeasuredStalenessSteps)
      if (lag > 0)
        measured += measured.empty() ? str(fixed(steps, 2), "x one worker's steps where its weights lagged ", lag,
                                           lag == 1 ? " update" : " updates")
                                     : str(", ", fixed(steps, 2), "x where ", lag);
    p.notes.push_back(str("staleness costs steps to an accuracy: mnist-cnn needed ", measured,
                          " (bench/staleness.sh; `plan --objective time-to-accuracy` weighs it); 1f1b on this plan "
                          "computes one worker's gradients"));
  }
  d.shown = p;
  if (request.top > 0) d.reports += "\n" + format_top(r, out.profile, request.top, request.memory);
  for (size_t k = 0; k < r.ranked.size() && k < static_cast<size_t>(request.top); ++k) {
    plan::Plan q = k == 0 ? d.plan : r.ranked[k].plan;
    if (k > 0) {
      q.schedule = q.simulated_schedule = r.schedule;
      q.pipeline_ms_per_minibatch = q.simulated_ms_per_minibatch = r.ranked[k].simulated.ms_per_minibatch;
      q.data_parallel_ms_per_minibatch = r.data_parallel_ms;
      bool replicated = false;
      for (const auto& st : q.stages) replicated = replicated || st.replicas > 1;
      if (replicated)
        q.bucket_mb = r.ranked[k].bucket.tried.empty() ? static_cast<double>(out.options.bucket_bytes) / (1 << 20)
                                                       : r.ranked[k].bucket.bucket_mb;
      record_allreduce(q, out.cluster);
    }
    d.top.push_back(std::move(q));
  }
  if (request.explain)
    d.reports += "\n" + format_explain(chosen, out.profile, out.cluster, request.memory) + bucket_explained(p, request.bucket_mb);
  return d;
}

}  // namespace

plan::Plan as_run(const plan::Plan& p) {
  if (!schedule::is_interleaved(p.schedule) && !schedule::is_v_schedule(p.schedule)) return p;
  schedule::ScheduleOptions schedule_options;
  schedule_options.microbatches = std::max(1, p.microbatches);
  schedule_options.chunks = std::max(1, p.chunks);
  schedule::Schedule s = schedule::make_unvalidated_schedule(p.schedule, p, schedule_options);
  plan::Plan shown = p;
  std::set<int> used;
  for (int st = 0; st < p.num_stages(); ++st) {
    shown.stages[st].workers = s.stage_workers[st];
    used.insert(s.stage_workers[st].begin(), s.stage_workers[st].end());
  }
  shown.workers = static_cast<int>(used.size());
  return shown;
}

PlanDecision decide_plan(const plan::PlanOutcome& searched, const PlanRequest& request) {
  PlanDecision d = request.joint ? decide_joint(searched, request)
                   : searched.options.cost_model == plan::CostModel::kRealised
                       ? decide_refereed(searched, request)
                       : decide_pipedream(searched, request.memory);
  for (plan::Plan* p : {&d.plan, &d.shown}) p->precision = searched.profile.precision, p->optimizer = searched.profile.optimizer;
  for (plan::Plan& p : d.top) p.precision = searched.profile.precision, p.optimizer = searched.profile.optimizer;
  // The cap whole, the process's share with the tensors', as a worker's peak RSS is measured.
  if (searched.memory_cap > 0 && searched.memory_cap != std::numeric_limits<int64_t>::max()) {
    d.plan.memory_cap_bytes = d.shown.memory_cap_bytes = searched.memory_cap + searched.cluster.process_bytes;
    d.plan.memory_cap_process_bytes = d.shown.memory_cap_process_bytes = searched.cluster.process_bytes;
    for (plan::Plan& p : d.top)  // each was held to it
      p.memory_cap_bytes = d.plan.memory_cap_bytes, p.memory_cap_process_bytes = d.plan.memory_cap_process_bytes;
  }
  return d;
}

}  // namespace pt::referee
