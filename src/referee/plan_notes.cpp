// The notes on the referee's choice (plan_notes.h).
#include "referee/plan_notes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "plan/plan_table.h"
#include "referee/replay_ahead.h"

namespace pt::referee {
namespace {

std::string fixed2(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// The chosen plan's simulated time.
double chosen_ms(const Refereed& r) { return r.ranked.front().simulated.ms_per_minibatch; }

// The sizes whose floor ruled them out (BucketChoice::ruled_out), for the bucket's note.
std::string ruled_out_of(const BucketChoice& b) {
  if (b.ruled_out.empty()) return "";
  std::string sizes;
  for (const auto& [mb, floor] : b.ruled_out)
    sizes += str(sizes.empty() ? "" : ", ", mb, " MiB ", std::round(floor * 1000) / 1000);
  return str("; not simulated, their floors above the first's time: ", sizes);
}

}  // namespace

void note_unreplayed_data_parallel(plan::Plan& plan, const Refereed& r, const plan::Cluster& cluster) {
  for (const auto& p : r.unschedulable)
    if (r.data_parallel_ms == 0 && p.num_stages() == 1 && p.workers == cluster.workers() &&
        p.pipeline_ms_per_minibatch > 0) {
      plan.data_parallel_ms_per_minibatch = p.pipeline_ms_per_minibatch;
      plan.notes.push_back(str("data parallelism's ", std::round(p.pipeline_ms_per_minibatch * 1000) / 1000,
                               " ms per minibatch is the search's prediction, not simulated: its ", p.workers,
                               " replicas repeat only every ", p.workers, " minibatches, too long to replay"));
      return;
    }
}

void note_plan_bucket(plan::Plan& plan, const Refereed& r, double bucket_mb, bool bucket_given) {
  bool replicated = false;
  for (const auto& st : plan.stages) replicated = replicated || st.replicas > 1;
  if (!replicated) return;
  if (!r.buckets_chosen) {
    plan.bucket_mb = bucket_mb;
    if (!bucket_given)
      plan.notes.push_back(str("all-reduce bucket ", bucket_mb, " MiB: --time-limit left no time to simulate the "
                               "others"));
    return;
  }
  const BucketChoice& b = r.ranked.front().bucket;
  std::string tried;
  bool all_equal = true;  // e.g. replicas of layers without weights: nothing to all-reduce
  for (const auto& [mb, ms] : b.tried) {
    tried += str(tried.empty() ? "" : ", ", mb, " MiB ", std::round(ms * 1000) / 1000);
    all_equal = all_equal && std::abs(ms - b.ms_per_minibatch) <= 1e-9 * b.ms_per_minibatch;
  }
  if (b.at_limit)
    plan.notes.push_back(str("all-reduce bucket ", b.bucket_mb, " MiB: it runs the plan at its physical limit (",
                             std::round(b.ms_per_minibatch * 1000) / 1000, " ms per minibatch in simulation), "
                             "which no bucket size beats"));
  else if (all_equal && b.tried.size() > 1)
    plan.notes.push_back(str("all-reduce bucket ", b.bucket_mb, " MiB: every size tried simulates the same (",
                             std::round(b.ms_per_minibatch * 1000) / 1000, " ms per minibatch)", ruled_out_of(b)));
  else
    plan.notes.push_back(str("all-reduce bucket ", b.bucket_mb, " MiB, the fastest in simulation (ms per minibatch: ",
                             tried, ")", ruled_out_of(b), "; train --plan uses it unless --bucket-mb says"));
}

void note_unreplayed_faster(plan::Plan& plan, const Refereed& r) {
  for (const auto& p : r.unschedulable)
    if (p.pipeline_ms_per_minibatch > 0 && p.pipeline_ms_per_minibatch < chosen_ms(r)) {
      plan.notes.push_back(str("not simulated: ", p.shape(), " predicts ", std::round(p.pipeline_ms_per_minibatch * 1000) / 1000,
                               " ms per minibatch, faster than this plan, but its replica counts repeat only every ",
                               kMaxReplayPeriod, " or more minibatches, too long to replay; this plan is the fastest "
                               "simulated"));
      return;
    }
}

void note_time_limit(plan::Plan& plan, const Refereed& r, const plan::PlanOptions& options) {
  plan.notes.push_back(str("time limit: the simulator stopped refereeing at ", options.time_limit_s,
                           " s of planning (--time-limit), ", r.unreplayed,
                           " candidate plans and the rest of the local search not simulated; the plan is the best of "
                           "the ", r.ranked.size(), " that were",
                           r.choice_unrepeated ? "; its replay's window did not yet repeat, and simulate replays it "
                                                 "longer, to another figure"
                                               : ""));
}

void note_asynchronous(plan::Plan& plan) {
  bool deferred = plan.deferred_step && plan.stages[0].replicas > 1;
  plan.notes.push_back(str("pipedream is asynchronous: the first stage's gradients use weights up to ",
                           plan::in_flight(plan, 0) - 1 + (deferred ? 1 : 0),
                           " updates old (one per minibatch it keeps in flight after the first",
                           deferred ? ", and one for the deferred step" : "",
                           "), the last stage's none (weight stashing keeps each minibatch's forward and backward "
                           "consistent); 1f1b and gpipe run this plan synchronously"));
}

void note_replica_rounds(plan::Plan& plan) {
  if (plan.schedule != "pipedream") return;
  std::string note = plan::replica_rounds_note(plan, plan.batch_size, false);
  if (!note.empty()) plan.notes.push_back(note);
}

void note_few_batch_norm_samples(plan::Plan& plan, const profile::Profile& profile) {
  const int64_t batch = plan.batch_size > 0 ? plan.batch_size : profile.batch_size;
  const int64_t samples = batch / std::max(1, plan.microbatches);
  if (profile.batch_norms == 0 || plan.microbatches <= 1 || samples >= profile::kFewBatchNormSamples) return;
  plan.notes.push_back(str(profile.model, "'s ", profile.batch_norms, " BatchNorm", profile.batch_norms == 1 ? "" : "s",
                           " normalise each of the ", plan.microbatches, " microbatches over its own ", samples,
                           " sample", samples == 1 ? "" : "s", ", not the batch of ", batch,
                           ": statistics over so few train otherwise (noisy under ", profile::kFewBatchNormSamples,
                           "); `plan --microbatches N` pins fewer"));
}

void note_deferred_step(plan::Plan& plan, const Refereed& r) {
  double plain = 0;  // the same plan stepping before its next forward, if replayed
  auto same = [](const plan::Plan& a, const plan::Plan& b) {
    if (a.num_stages() != b.num_stages()) return false;
    for (int s = 0; s < a.num_stages(); ++s)
      if (a.stages[s].layers != b.stages[s].layers || a.stages[s].workers != b.stages[s].workers ||
          a.stages[s].in_flight != b.stages[s].in_flight)
        return false;
    return true;
  };
  for (const auto& c : r.ranked)
    if (!c.plan.deferred_step && same(c.plan, plan) && c.plan.bucket_mb == plan.bucket_mb)
      plain = plain > 0 ? std::min(plain, c.simulated.ms_per_minibatch) : c.simulated.ms_per_minibatch;
  plan.notes.push_back(str("deferred step: the replicated first stage steps after its next forward, which hides the "
                           "rest of its all-reduce",
                           plain > 0 ? str(" (", std::round(plain * 10) / 10, " -> ", std::round(chosen_ms(r) * 10) / 10,
                                           " ms per minibatch in simulation)")
                                     : std::string(),
                           "; its weights lag one update more; --no-deferred-step plans without it"));
}

void note_fewer_workers(plan::Plan& plan, const Refereed& r, const plan::Cluster& cluster) {
  double all = 0;  // the best plan on every worker, as replayed
  for (const auto& c : r.ranked)
    if (c.plan.workers == cluster.workers()) {
      all = c.simulated.ms_per_minibatch;
      break;
    }
  plan.notes.push_back(str("fewer workers: the plan uses ", plan.workers, " of the cluster's ", cluster.workers(),
                           cluster.host_cores > 0 && cluster.host_cores < cluster.workers()
                               ? str("; on these links and the host's ", cluster.host_cores,
                                     cluster.host_cores == 1 ? " core" : " cores", " no simulated plan on more is faster")
                               : std::string("; on these links no simulated plan on more is faster"),
                           all > 0 ? str(" (the best on all ", cluster.workers(), ": ", std::round(all * 10) / 10,
                                         " ms per minibatch in simulation)")
                                   : std::string(),
                           "; --all-workers plans on all of them"));
}

void note_hierarchical_data_parallel(plan::Plan& plan, const Refereed& r, const plan::PlanOutcome& searched) {
  const plan::Cluster& cluster = searched.cluster;
  if (cluster.allreduce != plan::Cluster::Allreduce::kRing || cluster.levels.size() < 2 ||
      !(plan.data_parallel_ms_per_minibatch > 0))
    return;
  plan::Cluster hier = cluster;
  hier.allreduce = plan::Cluster::Allreduce::kHierarchical;
  // At its own bucket, as data parallelism with the ring is weighed (Refereed::buckets_chosen).
  double dp = simulate_data_parallel(searched.profile, hier, searched.options, r.schedule);
  if (r.buckets_chosen) dp = data_parallel_at_its_bucket(searched.profile, hier, searched.options, r.schedule, dp);
  if (dp > 0 && dp < plan.data_parallel_ms_per_minibatch)
    plan.notes.push_back(str("data parallelism with --allreduce hierarchical (inside each server, then across servers "
                             "a shard each; train runs it with --cluster FILE --allreduce hierarchical) takes ",
                             std::round(dp * 1000) / 1000, " ms per minibatch in simulation, not ",
                             std::round(plan.data_parallel_ms_per_minibatch * 1000) / 1000, ": ",
                             dp < chosen_ms(r) ? str("it runs ", fixed2(chosen_ms(r) / dp), "x as fast as this plan")
                                               : str("this plan runs ", fixed2(dp / chosen_ms(r)), "x as fast as it"),
                             "; --allreduce hierarchical plans for it"));
}

std::string bucket_explained(const plan::Plan& plan, double bucket_mb) {
  if (!(plan.bucket_mb >= 0 && std::abs(plan.bucket_mb - bucket_mb) > 1e-9)) return "";
  return str("(the exact model's figures above are with the ", bucket_mb, " MiB bucket; the plan runs with its ",
             plan.bucket_mb, " MiB bucket: ", std::round(plan.simulated_ms_per_minibatch * 1000) / 1000,
             " ms per minibatch in simulation)\n");
}

}  // namespace pt::referee
