// The two asynchronous 1F1B schedules: no flush, so the pipeline never drains between
// minibatches, and weight stashing keeps the version a microbatch's forward used for its
// backward. Both cover `minibatches` minibatches explicitly (warm-up, steady state, drain).
//
// PipeDream (Narayanan et al., "PipeDream: Generalized Pipeline Parallelism for DNN Training",
// SOSP 2019, §3.2-3.3). The unit is the minibatch (microbatches = 1). Stage i admits
// NOAM = ceil(workers from stage i on / replicas of stage i) minibatches (for stage 0 that is
// the paper's ceil(#workers / #replicas of the input stage); a plan's stage `in_flight`, which
// the planner sets from the stages' times, replaces it), then alternates one backward and
// one forward (1F1B); each stage steps after each of its own backwards, so every minibatch in
// flight saw a different version (stage i keeps NOAM versions). Replicated stages take
// minibatches round-robin (1F1B-RR: minibatch k on replica k % r) and, as PipeDream's runtime
// wraps a replicated stage in DistributedDataParallel, all-reduce each round of r backwards
// (AllReduce id = k / r) before the Step. Straight 4-stage pipeline, F = B = one slot:
//
//   w0: 0F0 0F1 0F2 0F3  .   .   .  0B0 0F4 0B1 0F5 0B2 0F6 0B3 0F7 ...   (a Step after each B)
//   w1:  .  1F0 1F1 1F2  .   .  1B0 1F3 1B1 1F4 1B2 1F5 1B3 1F6 1B4 ...
//   w2:  .   .  2F0 2F1  .  2B0 2F2 2B1 2F3 2B2 2F4 2B3 2F5 2B4 2F6 ...
//   w3:  .   .   .  3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5 ...
//
// Deferred step (pipetrain's option, `deferred_step`): a replicated first stage's AllReduce and
// Step follow the forward after the backward instead of preceding it, so what the gradient
// buckets did not hide of the all-reduce overlaps that forward (VGG-16 15-1 on 4x4 in
// simulation: 25.2 -> 23.1 ms per minibatch, its compute bound); that forward runs on weights
// one update older. Only the first stage: its forwards wait for nothing but data, while a later
// stage's all-reduce would then wait for a forward from its predecessor, whose own all-reduce
// waits for this stage's later backwards (4-12-... plans deadlock).
//
// After the warm-up no worker idles: the steady-state bubble is 0. Vertical sync (§3.3) does
// not change the order, only which stashed version a stage uses, so it is a flag for the runtime.
//
// PipeDream-2BW (Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN Training", ICML 2021,
// §3.1): the same 1F1B order over the microbatches of consecutive minibatches (global index k,
// minibatch k / m), gradients accumulated over a minibatch's m microbatches and one Step per
// minibatch after its last backward; the update is applied with delay 1, so with m >= p two
// weight versions suffice (double buffering).
#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "core/error.h"
#include "schedule/generator_util.h"
#include "schedule/generators.h"

namespace pt::schedule {

int default_minibatches(const plan::Plan& plan) {
  int lcm = 1;
  for (const auto& st : plan.stages) lcm = std::lcm(lcm, st.replicas);
  // Replicas all-reduce once per round of their count, so the steady state is periodic in lcm
  // minibatches: at least six periods, so that the middle third (metrics.h) holds whole ones.
  // Warm-up and drain each span about as many minibatch ids as the plan has workers (stage 0's
  // replicas each keep ceil(downstream workers / replicas) in flight): the middle third must
  // clear both, or it measures completions spaced by backwards alone (VGG-16 4-4-4-4 at 24
  // minibatches: 58 ms per minibatch where stage 0's compute alone needs 87).
  int workers = 0;
  for (const auto& st : plan.stages) workers += st.replicas;
  // A plan that sets stage 0's in_flight above that holds more at once: 15 replicas x 5 span 75.
  if (!plan.stages.empty()) workers = std::max(workers, plan.stages[0].replicas * plan.stages[0].in_flight);
  // And at least 48: a replica with q in flight finishes them in bursts (a 1-1 pipeline with 2
  // in flight finishes minibatches 20 and 40 ms apart by turns), which a window of a few gaps
  // misreads (3 gaps: 26.7 ms where it runs at 30); 16 gaps keep that under 2%.
  int n = std::max({4 * plan.num_stages() + 4, 6 * lcm, 3 * (workers + lcm), 48});
  return (n + lcm - 1) / lcm * lcm;
}

Schedule pipedream(const plan::Plan& plan, int minibatches, bool vertical_sync, bool deferred_step) {
  Schedule s = detail::skeleton(plan, "pipedream", 1, minibatches);
  s.flush = false;
  s.vertical_sync = vertical_sync;
  for (int st = 0; st < s.num_stages; ++st)
    if (minibatches % s.replicas(st) != 0)
      throw ConfigError(str("pipedream: stage ", st, " has ", s.replicas(st), " replicas, which all-reduce ",
                            "every round of ", s.replicas(st), " minibatches, but ", minibatches,
                            " minibatches is not a multiple; use ", default_minibatches(plan)));
  std::vector<int> replicas;
  for (const auto& st : plan.stages) replicas.push_back(st.replicas);
  for (int st = 0; st + 1 < s.num_stages; ++st) {
    int least = plan::least_in_flight(replicas, st, plan::in_flight(plan, st + 1));
    if (plan::in_flight(plan, st) < least)
      throw ConfigError(str("pipedream: plan stage ", st, "'s in_flight ", plan::in_flight(plan, st), " is too few: ",
                            "stage ", st + 1, " admits ", plan::in_flight(plan, st + 1), " per replica, so stage ",
                            st, " needs at least ", least, " (plan.h, least_in_flight)"));
  }
  for (int st = 0; st < s.num_stages; ++st)
    for (int w : s.stage_workers[st]) {
      int r = s.replicas(st);
      detail::append_1f1b(s, w, st, detail::items_of(s, st, w, minibatches), plan::in_flight(plan, st),
                          [&](int k) {
                            if (r > 1) s.add(w, ActionKind::kAllReduce, st, k / r);
                            s.add(w, ActionKind::kStep, st, k);
                          },
                          deferred_step && st == 0 && r > 1);
    }
  // Each of the NOAM minibatches in flight saw a different version (§3.3); a deferred step
  // keeps the version of the forward it follows one step longer.
  for (int st = 0; st < s.num_stages; ++st)
    s.weight_versions[st] = plan::pipedream_weight_versions(plan, st, deferred_step);
  return s;
}

Schedule two_bw(const plan::Plan& plan, int microbatches, int minibatches) {
  Schedule s = detail::skeleton(plan, "2bw", microbatches, minibatches);
  s.flush = false;
  detail::require_work_per_replica(s, microbatches);
  int total = s.total_microbatches();
  for (int st = 0; st < s.num_stages; ++st)
    for (int w : s.stage_workers[st]) {
      auto items = detail::items_of(s, st, w, total);
      // The replica's last microbatch of each minibatch closes that minibatch's gradient.
      std::vector<bool> last(total, false);
      for (size_t i = 0; i < items.size(); ++i)
        if (i + 1 == items.size() || items[i + 1] / microbatches != items[i] / microbatches) last[items[i]] = true;
      detail::append_1f1b(s, w, st, items, detail::one_f_one_b_warmup(s, st), [&](int k) {
        if (!last[k]) return;
        if (s.replicas(st) > 1) s.add(w, ActionKind::kAllReduce, st, k / microbatches);
        s.add(w, ActionKind::kStep, st, k / microbatches);
      });
    }
  // The delay d: the most steps a replica's first forward of a minibatch j comes before its
  // j-th, so that the weights after j - d steps are there for all of minibatch j. Every stage
  // takes the largest (2BW's one delay for all stages: 1 where a minibatch's microbatches cover
  // the warm-up, m >= p - 1 on a straight pipeline; more where replicas split them, 2-2-2-2 with
  // m = 2: 3) and keeps d + 1 versions, the newest and the d before (2BW's double buffer).
  for (const auto& list : s.actions) s.weight_delay = std::max(s.weight_delay, least_weight_delay(list, microbatches));
  s.weight_versions.assign(s.num_stages, s.weight_delay + 1);
  return s;
}

}  // namespace pt::schedule
