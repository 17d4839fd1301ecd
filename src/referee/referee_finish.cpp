// The referee's ranking finished (referee_internal.h): the plans ahead of a final figure replayed
// until their windows repeat, the choice and data parallelism given their own buckets, and why
// each other plan lost.
#include <algorithm>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "core/units.h"
#include "plan/physical_limit.h"
#include "referee/referee_internal.h"
#include "referee/replay_ahead.h"

namespace pt::referee::detail {
namespace {

constexpr int kMostLengthened = 64;  // periodic_first
// How far a candidate may simulate over the search's estimate before `plan --top` says where the
// simulated time went (the estimate only proposes candidates; the simulation ranks them).
constexpr double kBeyondEstimate = 0.05;

// Where a candidate simulates well over the search's estimate, the closed form's bottleneck does
// not say why it lost (VGG-16 15-1 @conv5_3 on 4x4: "compute 22.50 ms" for a plan simulated at
// 28.9): say how much of the steady state that stage's workers sat idle in the simulation.
std::string beyond_estimate(const Candidate& c) {
  double over = c.simulated.ms_per_minibatch / c.estimate.pipeline_ms_per_minibatch - 1;
  if (!(over > kBeyondEstimate)) return "";
  int b = c.estimate.bottleneck;
  double idle = 0;
  int n = 0;
  for (int w : c.plan.stages[b].workers)
    if (w >= 0 && w < static_cast<int>(c.simulated.workers.size())) idle += c.simulated.workers[w].bubble_fraction, ++n;
  if (n == 0) return "";
  return str("; simulated ", fixed(100 * over, 1), "% over the search's estimate: stage ", b, "'s workers idle ",
             fixed(100 * idle / n, 0), "% of the steady state, waiting for data or an all-reduce");
}

}  // namespace

// The ranking's replays are settled; the choice's is periodic too (metrics::Metrics::periodic),
// the figure `simulate` prints for it: the plans ranked ahead of the first whose figure is final
// (periodic, or replayed as long as settled_replay goes) are replayed longer, side by side, and
// ranked again, until the first is final (at most kMostLengthened plans); where the options show
// more (PlanOptions::shown, plan --top), until that many are. On the 52
// default-model cases, 44 choices repeat at once; GNMT-Large on 16 workers lengthens 14 plans,
// GNMT on 4x4 14, five others 1 or 2.
void Referee::periodic_first() {
  std::set<std::string> lengthened;
  const size_t at_once = std::max(1u, std::thread::hardware_concurrency());
  while (static_cast<int>(lengthened.size()) < kMostLengthened) {
    if (out_of_time()) {
      const Candidate& first = r_.ranked.front();
      r_.choice_unrepeated = !first.simulated.periodic && !lengthened.count(identity(first.plan));
      return;
    }
    std::vector<Candidate*> ahead;
    int final_ones = 0;
    for (Candidate& c : r_.ranked) {
      if (c.simulated.periodic || lengthened.count(identity(c.plan))) {
        if (++final_ones >= std::max(1, options().shown)) break;
        continue;
      }
      if (ahead.size() == at_once) break;
      ahead.push_back(&c);
    }
    if (ahead.empty()) return;
    side_by_side(ahead.size(), [&](size_t i) { ahead[i]->simulated = periodic_replay(ahead[i]->plan, ahead[i]->simulated, context_); });
    for (Candidate* c : ahead) {
      lengthened.insert(identity(c->plan));
      c->plan.pipeline_ms_per_minibatch = c->plan.simulated_ms_per_minibatch = c->simulated.ms_per_minibatch;
    }
    std::stable_sort(r_.ranked.begin(), r_.ranked.end(), ranks_before);
  }
}

// The ranking's replays all used the options' bucket, and another bucket can reverse it
// (ResNet-18 on 4x4 at 100/10: 15-1 runs at 17.28 ms per minibatch, which no bucket changes, and
// data parallelism at 18.61 with 25 MiB buckets but 16.28 with 1 MiB: ranked at the options'
// bucket alone, the plan would be chosen as 1.08x faster than it). The first gets its own bucket
// (choose_bucket), and so does data parallelism, the baseline the plan is weighed against (under
// the pipedream schedule its closed form: no replay); then they are ranked again. Giving every
// plan whose physical limit (the same at every bucket) is under the best its own bucket too
// costs 2.6x the planning time over the 52 default cases (GNMT-Large on 16 workers: 1 s) for one
// plan more 0.3% faster (AlexNet on 4x4), and the next two of them 9% for none.
void Referee::own_buckets() {
  const plan::Cluster& cluster = context_.cluster;
  bool dp_ranked = false;
  for (size_t i = 0; i < r_.ranked.size(); ++i) {
    Candidate& c = r_.ranked[i];
    bool dp = c.plan.num_stages() == 1 && c.plan.workers == cluster.workers();
    if (i > 0 && !dp) continue;
    bool replicated = false;
    for (const auto& st : c.plan.stages) replicated = replicated || st.replicas > 1;
    if (replicated) {
      // The ranking's replay is the options' bucket's figure where it repeats (periodic_first).
      c.bucket = choose_bucket(c.plan, context_.profile, cluster, options(), context_.kind,
                               c.simulated.periodic ? c.simulated.ms_per_minibatch : 0,
                               plan::physical_limit(c.plan, c.estimate, context_.profile, cluster).ms());
      c.simulated.ms_per_minibatch = c.bucket.ms_per_minibatch;
      if (c.simulated.ms_per_minibatch > 0)
        c.simulated.samples_per_s = static_cast<double>(context_.profile.batch_size) / c.simulated.ms_per_minibatch * 1e3;
      c.plan.bucket_mb = c.bucket.bucket_mb;
      c.plan.pipeline_ms_per_minibatch = c.plan.simulated_ms_per_minibatch = c.simulated.ms_per_minibatch;
    }
    if (dp) r_.data_parallel_ms = c.simulated.ms_per_minibatch, dp_ranked = true;
  }
  // A search without replicas (--straight) ranks no data parallelism: its baseline gets its own
  // bucket here, as the first plan did (at 25 MiB, a straight plan printed 0.72x over data
  // parallelism where it is 0.49x).
  if (!dp_ranked)
    r_.data_parallel_ms = data_parallel_at_its_bucket(context_.profile, cluster, options(), context_.kind,
                                                      r_.data_parallel_ms);
  r_.buckets_chosen = true;
  std::stable_sort(r_.ranked.begin(), r_.ranked.end(), ranks_before);
}

// Why each plan but the first lost.
void Referee::explain_losers() {
  double best = r_.ranked.front().simulated.ms_per_minibatch;
  for (size_t i = 1; i < r_.ranked.size(); ++i) {
    Candidate& c = r_.ranked[i];
    double slower = c.simulated.ms_per_minibatch / best - 1;
    if (slower * 1e9 >= 1) {
      c.why_not = str(fixed(100 * slower, 1), "% slower in simulation; ", limit_of(c.estimate, context_.cluster)) +
                  beyond_estimate(c);
    } else {
      const plan::Plan& first = r_.ranked.front().plan;
      c.why_not = c.plan.workers > first.workers ? "as fast, on more workers"
                  : c.plan.deferred_step && !first.deferred_step ? "as fast, with a deferred step"
                                                                  : "as fast; an equal plan was found first";
    }
  }
}

}  // namespace pt::referee::detail
