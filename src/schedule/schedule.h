#pragma once
// Schedule: per worker the ordered list of Actions it runs (docs/design.md, "Schedules as data").
//
// Synchronous schedules (flush = true: gpipe, 1f1b, interleaved, zb-h1, dp, mp) describe one
// minibatch of `microbatches` microbatches, ending with the all-reduces and Steps; the runtime
// repeats the lists once per minibatch. Asynchronous schedules (flush = false: pipedream, 2bw)
// cover `minibatches` minibatches explicitly: warm-up, steady state and drain.
//
// Placement: stage s runs on stage_workers[s]; with r replicas, microbatch k of stage s runs on
// stage_workers[s][k % r] (round-robin, PipeDream's 1F1B-RR). The runtime follows this placement,
// not the plan's: interleaved puts stage s of a p*v-stage plan on worker s % p.
//
// Microbatch compute time = profile time x (microbatch size / profile batch size): a microbatch
// holds batch_size / microbatches samples (linear scaling; the simulator's assumption).
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/json_doc.h"
#include "schedule/action.h"

namespace pt::schedule {

struct Schedule {
  std::string kind;            // a generator's (schedule_kinds(), generators.h), or a file's
  int num_stages = 1;
  int microbatches = 1;        // per minibatch (m); pipedream uses 1: its unit is the minibatch
  int minibatches = 1;         // covered by the lists (1 for synchronous schedules)
  int chunks = 1;              // model chunks per worker (v, interleaved)
  bool flush = true;           // synchronous: all microbatches of a minibatch use one weight version
  bool vertical_sync = false;  // pipedream: a minibatch uses, on every stage, the weight version
                               // stage 0 had when it entered (PipeDream §3.3)
  // Under vertical sync (PipeDream §3.3), the version each microbatch runs on, on every stage:
  // the Steps of stage 0 its worker took before the microbatch's Forward there (empty without).
  std::map<int, int64_t> vertical_sync_entries() const;
  // Under vertical sync, the weight versions stage `st` keeps besides its newest, whether a
  // microbatch in flight uses them or not (a later forward may ask for one): the most its lists
  // need, at a Forward its microbatch's entry version and at a Step those of the microbatches in
  // flight, and at least 1 (0 without vertical sync). It was 2W + 2 on every stage: a 3-stage mlp
  // kept 9 versions where 3 serve, 95.1 / 52.0 / 51.5 MiB of tensors measured, now 47.3 / 28.0 / 27.2.
  int vertical_sync_history(int st) const;
  // 2bw: minibatch j's forwards and backwards, on every stage, use the weights after its first
  // max(0, j - weight_delay) steps (j and the steps the list's own, from 0): PipeDream-2BW's
  // W(t+1) = W(t) - lr grad f(W(t-1)) with 1, the same delay on every stage and one version for
  // all of a minibatch's microbatches. 0: each forward takes the newest weights.
  int weight_delay = 0;
  std::vector<std::vector<int>> stage_workers;  // [stage] -> worker ids of the replicas
  std::vector<std::vector<int>> stage_layers;   // [stage] -> profile layer indices
  // [stage] -> weight versions a replica may keep at once, the stash budget its generator
  // declares from the schedule's structure (1 when flushing; PipeDream's NOAM; 2BW's double
  // buffer): the validator checks that the lists stay within it, the runtime that its stash does.
  std::vector<int> weight_versions;
  std::vector<bool> split_backward;             // [stage] -> B is input-gradient only, W follows
  // [stage] -> activation recomputation (the plan stage's `recompute`): a forward keeps only its
  // input, and the backward (B where split) runs the forward again first.
  std::vector<bool> recompute;
  std::vector<std::vector<Action>> actions;     // [worker] -> ordered program

  int num_workers() const { return static_cast<int>(actions.size()); }
  int replicas(int stage) const { return static_cast<int>(stage_workers[stage].size()); }
  bool recomputes(int stage) const { return stage < static_cast<int>(recompute.size()) && recompute[stage]; }
  // The worker that runs microbatch `mb` of `stage` (round-robin over the replicas).
  int worker_of(int stage, int mb) const;
  // Position of `stage` among the stages its workers hold (0 unless interleaved).
  int chunk_of(int stage) const;
  // The layers of every stage `worker` holds a replica of, in order: all it builds.
  std::vector<int> worker_layers(int worker) const;
  // Microbatches over the whole schedule (microbatches x minibatches).
  int total_microbatches() const { return microbatches * minibatches; }
  // Appends an action to its worker's list, filling `worker` and `chunk`.
  void add(int worker, ActionKind kind, int stage, int mb, int peer = -1);
  // [i] -> whether worker's action i makes its stage's gradients final until the next AllReduce:
  // the last full Backward or BackwardWeight before each AllReduce. Its gradient buckets may
  // all-reduce while it runs (the runtime's gradient_buckets.h; the simulator models it).
  std::vector<bool> completes_gradients(int worker) const;
  // (stage, microbatch) -> how many Steps of its stage the worker takes between the microbatch's
  // Forward and its Backward: how many updates its gradient is applied after its forward ran
  // (what weight prediction predicts across; the runtime and the memory model both read it).
  std::map<std::pair<int, int>, int> steps_in_flight(int worker) const;
  // Whether the runtime predicts weights for this schedule (Worker's weight_prediction on):
  // pipedream without vertical sync, per microbatch; 2bw, per minibatch (StageReplica's
  // predict_per_minibatch).
  bool predicts_weights() const { return !flush && ((kind == "pipedream" && !vertical_sync) || kind == "2bw"); }
  // Whether stage st copies its weights once a minibatch (the profile's stash_copy_ms): a stash at
  // its step, or the weights predicted for a forward, where later forwards run before its step (an
  // asynchronous stage of more than one weight version; vertical sync keeps every stage's history).
  // runtime::StageReplica::step makes none elsewhere: pipedream's last stage stepped in 0.178 ms on
  // mnist-cnn where its optimizer_ms summed 0.294 with the copy, 0.182 without. No versions
  // declared: every step of an asynchronous schedule copies.
  bool copies_weights(int st) const {
    if (flush) return false;
    size_t at = vertical_sync ? 0 : static_cast<size_t>(st);
    return at >= weight_versions.size() || weight_versions[at] > 1;
  }
};

// Schedule::steps_in_flight over one worker's actions in the order it ran them (a trace's too).
std::map<std::pair<int, int>, int> steps_in_flight(const std::vector<Action>& list);
// The fewest steps one worker's forwards may lag (Schedule::weight_delay): over its actions in the
// order it ran them, the most a minibatch j's first forward of a stage comes before that stage's
// j-th step.
int least_weight_delay(const std::vector<Action>& list, int microbatches);

inline constexpr int kScheduleVersion = 1;

// One line per worker: "w0: 0F0 0SA0>1 0F1 ...". `compute_only` leaves out sends/receives.
std::string to_text(const Schedule& s, bool compute_only = false);

json to_json(const Schedule& s);
// Checks the format tag, fields and every action's text; fills chunk from the placement.
Schedule schedule_from_json(const json& doc, const std::string& source);

}  // namespace pt::schedule
