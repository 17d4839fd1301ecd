#pragma once
// One step of one worker's program: the unit of the schedule IR (docs/design.md, "Schedules as data").
//
// What each kind means for a runtime (worker w executes its list in order, one at a time):
//   F   Forward(stage, mb): run the stage's layers forward on microbatch `mb`; keep what the
//       backward pass needs (the stash) until the matching B (or W, see below) has run.
//   B   Backward(stage, mb): gradient of the loss through the stage for `mb`. When the
//       schedule's split_backward[stage] is true, B computes only the input gradient (what the
//       previous stage needs) and the weight gradient is left to W; otherwise B is the full
//       backward and accumulates the weight gradient.
//   W   BackwardWeight(stage, mb): the weight gradient of `mb` (only where split_backward);
//       the stash of `mb` is released after it.
//   SA  SendActivation(stage, mb, peer): hand the output of F(stage, mb) to worker `peer`,
//       which runs stage + 1. Asynchronous: returns at once, the transfer overlaps what follows.
//   RA  RecvActivation(stage, mb, peer): the input of F(stage, mb) comes from worker `peer`
//       (which runs stage - 1). The runtime may post it early; F(stage, mb) waits for the data.
//   SG  SendGradient(stage, mb, peer): hand the input gradient from B(stage, mb) to `peer`
//       (stage - 1). RG RecvGradient(stage, mb, peer): the output gradient B(stage, mb) needs,
//       from `peer` (stage + 1).
//   AR  AllReduce(stage, id): ring all-reduce (sum) of the stage's accumulated weight gradients
//       over all of stage_workers[stage]; a collective, every replica has the same (stage, id).
//       `id` = microbatch field: the minibatch for synchronous schedules and 2bw, the round of
//       `replicas` minibatches for pipedream (see generators.h).
//   ST  Step(stage, minibatch): optimizer step on the stage's weights with the accumulated
//       gradients, then zero them. The weights after it are the next version.
//
// `microbatch` is global over the minibatches a schedule covers: microbatch k belongs to
// minibatch k / Schedule::microbatches. Activations always go from stage s to stage s + 1
// (tensors that skip stages ride through the stages between, as in PipeDream).
//
// Text form (worker is implied by the row): <stage><kind><microbatch>[>peer | <peer]
//   2F0  2B0  2W0  2SA0>5 (send to worker 5)  3RA0<4 (receive from worker 4)  2SG0>1  1RG0<2
//   2AR0  2ST0
// `chunk` is not in the text: it is the position of `stage` among the stages its worker holds
// (interleaved), which the Schedule's placement determines (Schedule::chunk_of).
#include <string>

namespace pt::schedule {

enum class ActionKind {
  kForward,
  kBackward,
  kBackwardWeight,
  kSendActivation,
  kRecvActivation,
  kSendGradient,
  kRecvGradient,
  kAllReduce,
  kStep,
};
inline constexpr int kNumActionKinds = 9;

struct Action {
  int worker = 0;
  ActionKind kind = ActionKind::kForward;
  int stage = 0;
  int microbatch = 0;
  int chunk = 0;   // worker-local model chunk holding `stage` (0 unless interleaved)
  int peer = -1;   // the other worker of a send/recv; -1 otherwise

  bool operator==(const Action& o) const {
    return worker == o.worker && kind == o.kind && stage == o.stage && microbatch == o.microbatch &&
           chunk == o.chunk && peer == o.peer;
  }
  bool operator!=(const Action& o) const { return !(*this == o); }
};

// "F", "B", "W", "SA", "RA", "SG", "RG", "AR", "ST".
const char* kind_code(ActionKind k);
// "forward", "backward", "backward_weight", "send_activation", ... (Chrome trace, SVG legend).
const char* kind_name(ActionKind k);
// Inline: the simulator, the metrics and the schedule passes ask them of every action.
inline bool is_compute(ActionKind k) {  // F, B, W
  return k == ActionKind::kForward || k == ActionKind::kBackward || k == ActionKind::kBackwardWeight;
}
inline bool is_send(ActionKind k) { return k == ActionKind::kSendActivation || k == ActionKind::kSendGradient; }
inline bool is_recv(ActionKind k) { return k == ActionKind::kRecvActivation || k == ActionKind::kRecvGradient; }
inline bool is_p2p(ActionKind k) { return is_send(k) || is_recv(k); }  // SA, RA, SG, RG

std::string to_string(const Action& a);
// Parses the text form for worker `worker` (chunk 0). Throws FormatError naming `text`.
Action parse_action(const std::string& text, int worker);

}  // namespace pt::schedule
