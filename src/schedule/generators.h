#pragma once
// Schedule generators: pure functions of (plan, microbatches, options) that return compute-only
// schedules (F, B, W, AllReduce, Step); insert_comm (comm_pass.h) adds the sends and receives and
// validate (validate.h) checks the result. make_schedule does all three. Each generator's .cpp
// draws its timeline and cites its paper; docs/schedules.md has the analytic bubbles.
//
// Replicated stages (plan stage replicas r > 1) take microbatches round-robin: microbatch k of
// stage s runs on replica k % r, and the replicas all-reduce their gradients before each Step.
// Synchronous schedules need microbatches >= replicas so that every replica has work.
#include <string>
#include <vector>

#include "plan/cluster.h"
#include "plan/plan.h"
#include "profile/profile.h"
#include "schedule/schedule.h"

namespace pt::schedule {

// The zero-bubble schedules' activation budget (zb-h1 and the budgeted V schedules), in any
// unit: what each stage stashes per microbatch from its F to its W, and what a worker may hold at
// once. Empty: every stage holds 1 and the kind's own count applies (zb-h1: p microbatches per
// stage; the V schedules: v_schedule_limit chunk-microbatches).
struct ActivationBudget {
  std::vector<double> stage_held;  // [stage]
  double per_worker = 0;
};

// What the zero-bubble clock (zero_bubble_clock.h) orders the clock schedules by, where a profile
// gives it: one microbatch's F, B (its input's gradient) and W of each stage, the host's time per
// action included; the bytes of one microbatch's activation stage st sends stage st + 1 (its
// gradient comes back as many); and the cluster whose links carry them. Empty: every action one
// slot and hand-overs free, the papers' unit clock.
struct ActionTimes {
  std::vector<double> forward_ms, input_grad_ms, weight_grad_ms, send_bytes;  // [stage]
  plan::Cluster cluster;  // no levels: hand-overs free
  bool empty() const { return forward_ms.empty(); }
};

struct ScheduleOptions {
  int microbatches = 4;        // per minibatch (ignored by pipedream, whose unit is the minibatch)
  int chunks = 1;              // interleaved: model chunks per worker (the plan has p * chunks stages)
  int minibatches = 0;         // pipedream / 2bw: minibatches covered; 0 = default_minibatches
  bool vertical_sync = false;  // pipedream
  bool deferred_step = false;  // pipedream: as the plan's deferred_step (plan.h), whichever says so
  ActivationBudget activation_budget{};  // zb-h1, zb-v, v-half, v-min (takes_activation_budget)
  ActionTimes action_times{};            // interleaved-zb, zb-v, v-half, v-min (takes_action_times)
  // Each worker's computes in this order in place of the generator's (given_order.h: the plan's,
  // as plan_order gives it); `order_source` names it in errors. Empty: the generator's.
  std::vector<std::string> order{};
  std::string order_source{};
};

// Bounds shared by every entry point (train, simulate, compare): beyond them a schedule has
// millions of actions and takes minutes to build and validate, or an int overflows.
inline constexpr int kMaxMicrobatches = plan::kMaxMicrobatches;
inline constexpr int kMaxChunks = plan::kMaxChunks;
inline constexpr int kMaxMinibatches = 4096;
// Throws UsageError naming the flag (--microbatches, --chunks, --minibatches) and the value.
void check_schedule_options(const ScheduleOptions& schedule_options);
// Throws ConfigError where `microbatches` (from `given`: a flag, a file's field) do not divide
// `batch` (from `batch_from`), as train refuses them; plan, simulate and compare say it alike.
void check_microbatches_divide(int microbatches, const std::string& given, int64_t batch, const std::string& batch_from);

// GPipe (Huang et al., NeurIPS 2019): all forwards, then all backwards, flush.
Schedule gpipe(const plan::Plan& plan, int microbatches);
// PipeDream-Flush / DAPPLE (Narayanan et al., ICML 2021; Fan et al., PPoPP 2021).
Schedule one_f_one_b(const plan::Plan& plan, int microbatches);
// PipeDream (Narayanan et al., SOSP 2019): asynchronous 1F1B-RR with weight stashing.
Schedule pipedream(const plan::Plan& plan, int minibatches, bool vertical_sync, bool deferred_step = false);
// PipeDream-2BW (Narayanan et al., ICML 2021): 1F1B without flush, double-buffered weights.
Schedule two_bw(const plan::Plan& plan, int microbatches, int minibatches);
// Interleaved 1F1B (Narayanan et al., SC 2021): plan of p * chunks stages on p workers.
Schedule interleaved(const plan::Plan& plan, int microbatches, int chunks);
// Interleaved zero bubble (interleaved 1F1B's placement, B and W split as in zero bubble): a plan
// of p * chunks stages on p workers, at most interleaved_zero_bubble_limit chunk-microbatches
// between F and W on a worker.
Schedule interleaved_zero_bubble(const plan::Plan& plan, int microbatches, int chunks, const ActionTimes& times = {});
int interleaved_zero_bubble_limit(int workers, int chunks);
// Whether `kind` loops p * chunks stages over p workers (--chunks).
inline bool is_interleaved(const std::string& kind) { return kind == "interleaved" || kind == "interleaved-zb"; }
// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024).
// Under a budget, stage i defers its W's by fewer than i backwards where its bytes would exceed it.
Schedule zb_h1(const plan::Plan& plan, int microbatches, const ActivationBudget& budget = {});
// The V schedules, a plan of 2p single-replica stages on p workers in a V: "zb-v" (Qi et al.,
// ICLR 2024, §6), "v-half" and "v-min" (Qi et al., NeurIPS 2024), by the chunk-microbatches a
// worker may hold between F and W (v_schedule_limit).
Schedule zb_v(const plan::Plan& plan, int microbatches, const std::string& kind = "zb-v",
              const ActivationBudget& budget = {}, const ActionTimes& times = {});
int v_schedule_limit(const std::string& kind, int workers);
// The papers' share of 1F1B's busiest worker's activations a V schedule keeps: zb-v 1, v-half
// (p + 2) / 2p, v-min (p + 4) / 3p, exact (v_schedule_limit counts whole chunk-microbatches,
// v-min's rounded down: rounded up, it is v-half's at p = 3 and 4).
double v_schedule_share(const std::string& kind, int workers);
// The budget in bytes from a profile: each stage's stash (profile::stash_bytes of its layers) and,
// per worker, what 1F1B's busiest worker stashes on the profile's even split into the schedule's
// workers (p; a V's 2p stages sit on p), times the kind's share (v_schedule_share for the V
// schedules; zb-h1 1F1B's peak). Stages of unequal bytes then hold 1F1B's peak, where counting
// microbatches would not. (The rounded count over 2p as the V share would run v-min on
// gpt-2048 at 4 workers as v-half: 10.4 GiB stashed where (p + 4) / 3p of 1F1B's 13.9 is 9.3.)
ActivationBudget activation_budget_from_profile(const std::string& kind, const plan::Plan& plan,
                                                const profile::Profile& profile);
// What worker w of a V (its chunks w and 2p - 1 - w) may hold under a budget in bytes: the budget,
// a microbatch through both chunks, and beside one microbatch of its later chunk as many whole
// microbatches of its first as if the later stashed like the first (within the papers' count, 2p x the kind's share
// chunk-microbatches). A heavy later chunk (gnmt16's classifier, 0.98x 1F1B's peak a microbatch,
// on worker 0 beside the first chunk) left room for one microbatch at a time: zb-v ran 231.5 ms
// per minibatch on 8 workers where 1F1B runs 85.6; it now runs 80.8, holding 1.23x 1F1B's peak.
std::vector<double> v_worker_limits(const std::string& kind, const ActivationBudget& budget);
// Where v_worker_limits raises a worker over the budget, a note that says which and by how much
// ("": none, or not a V schedule under a budget in bytes).
std::string activation_budget_note(const std::string& kind, const ActivationBudget& budget);
// Whether a kind's order is the zero-bubble clock's, which ActionTimes time.
inline bool takes_action_times(const std::string& kind) {
  return kind == "interleaved-zb" || kind == "zb-v" || kind == "v-half" || kind == "v-min";
}
// One microbatch's times of the plan's stages at `microbatches` per minibatch of the profile's
// batch (profile::compute_forward_ms, as the simulator charges them; a recomputing stage's B with
// its forward again), the cluster's host time per action on top, and the bytes crossing each
// stage boundary (profile::cut_bytes).
ActionTimes action_times_from_profile(const plan::Plan& plan, const profile::Profile& profile,
                                      const plan::Cluster& cluster, int microbatches);
// The budget and the times `kind` follows, from the profile: plan, simulate and train weigh a
// schedule alike, so that the order trained is the order predicted.
void weigh_by_profile(ScheduleOptions& options, const std::string& kind, const plan::Plan& plan,
                      const profile::Profile& profile, const plan::Cluster& cluster);
// DualPipeV (DeepSeek-V3 report, §3.2.1; the V form of DualPipe): the V placement, pairs of a
// forward and a backward of the two chunks in its steady state; microbatches >= 2 x workers.
Schedule dualpipe_v(const plan::Plan& plan, int microbatches);
// Whether `kind` places two chunks per worker in a V (a plan of 2 x workers stages).
inline bool is_v_schedule(const std::string& kind) {
  return kind == "zb-v" || kind == "v-half" || kind == "v-min" || kind == "dualpipev";
}
// Whether a kind's order follows an ActivationBudget (dualpipev's phases fix its own).
inline bool takes_activation_budget(const std::string& kind) {
  return kind == "zb-h1" || (is_v_schedule(kind) && kind != "dualpipev");
}
// Data parallelism: every one of plan.workers workers holds all the layers.
Schedule data_parallel(const plan::Plan& plan, int microbatches);
// Plain model parallelism: the plan's stages, one microbatch in flight.
Schedule model_parallel(const plan::Plan& plan, int microbatches);

// "gpipe", "1f1b", "pipedream", "2bw", "interleaved", "interleaved-zb", "zb-h1", "zb-v",
// "v-half", "v-min", "dualpipev", "dp", "mp".
const std::vector<std::string>& schedule_kinds();
// What a plan file says of how it runs, applied where the caller did not say it: its schedule
// (which must be one of schedule_kinds(): ConfigError naming `source` and the field otherwise),
// its microbatches and its chunks (where the kind run is interleaved). `kind` is left as it is
// where `kind_given`; the others where theirs are. `train --plan` and `simulate --plan` both follow it, so that they run the plan's run.
struct GivenSettings {
  bool kind = false, microbatches = false, chunks = false;
};
void follow_plan(const plan::Plan& plan, const std::string& source, const GivenSettings& given, std::string& kind,
                 int& microbatches, int& chunks);
// Whether a kind ends every minibatch with a flush (Schedule::flush); pipedream and 2bw do not.
bool schedule_flushes(const std::string& kind);
// Minibatches an asynchronous schedule covers by default: enough for a steady state between
// warm-up and drain (4 x stages + 4, and 48; at least six rounds of the replica counts' least common
// multiple, the period of the steady state; three times the plan's workers plus one period, as
// warm-up and drain each span about as many ids as workers), a multiple of every stage's replica
// count.
int default_minibatches(const plan::Plan& plan);

// The compute-only schedule of `kind`. Throws UsageError for an unknown kind, ConfigError when
// the plan does not suit the kind (e.g. replicated stages for interleaved).
Schedule generate(const std::string& kind, const plan::Plan& plan, const ScheduleOptions& options);
// generate + insert_comm + validate: what the simulator and the runtime take.
Schedule make_schedule(const std::string& kind, const plan::Plan& plan, const ScheduleOptions& options);
// How many schedules make_schedule has generated and validated in this process: a job makes each
// of its schedules once (tests/runtime count it).
int64_t schedules_made();
// generate + insert_comm, not validated: for the planner, which replays hundreds of plans (on
// GNMT, validating them took a fifth of its time) and validates the one it chooses. The tests
// validate every generator on every shape they take.
Schedule make_unvalidated_schedule(const std::string& kind, const plan::Plan& plan, const ScheduleOptions& options);

}  // namespace pt::schedule
