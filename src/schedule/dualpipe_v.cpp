// DualPipeV: DeepSeek-AI, "DeepSeek-V3 Technical Report" (2024), §3.2.1 (DualPipe), in the V
// form of its public release (one copy of the model, 2p chunks on p workers as in ZB-V: worker w
// holds chunk w and chunk 2p - 1 - w). Its point is the pair: a forward of one chunk and a
// backward of the other, of different microbatches, run side by side so that one's
// communication hides under the other's compute. Here a pair is two actions the worker runs back
// to back (F then B), with nothing between them; the simulator and the runtime see that order.
//
// Worker r of p, m >= 2p microbatches, in eight phases (c0 = its first chunk, c1 = its second;
// B' splits off its W into a queue, W runs the oldest queued; B without the prime runs its W at
// once):
//   1. 2 (p - r - 1) x  F c0
//   2. (r + 1) x        F c0, F c1
//   3. (p - r - 1) x    B' c1, W, F c1
//   4. (m - 2p + r + 1) x  [F c0 + B c1], [F c1 + B c0]          (the pairs: the steady state)
//   5. (p - r - 1) x    B c1, [F c1 + B c0]
//   6. (r + 1) x        B c1, B c0 (B' from the middle on, so that W fills the drain)
//   7. (p - r - 1) x    W, B' c0
//   8. (r + 1) x        W
// Each chunk's forwards, and its backwards, take the microbatches in order.
//
// p = 2, m = 4 (stages 0, 3 on w0 and 1, 2 on w1):
//   w0: 0F0 0F1 0F2 3F0 3B0 3W0 3F1 0F3 3B1 3W1 3F2 0B0 0W0 ...
#include <deque>

#include "core/error.h"
#include "schedule/generator_util.h"
#include "schedule/generators.h"

namespace pt::schedule {

namespace {

// One worker's two chunks and the W's its split backwards left queued.
class VWorkerOrder {
 public:
  VWorkerOrder(Schedule& s, int worker) : s_(s), w_(worker) {
    stage_[0] = worker;
    stage_[1] = s.num_stages - 1 - worker;
  }
  void forward(int c) { s_.add(w_, ActionKind::kForward, stage_[c], next_f_[c]++); }
  // split: B now and its W queued (zero bubble's B'); otherwise its W right after.
  void backward(int c, bool split) {
    int k = next_b_[c]++;
    s_.add(w_, ActionKind::kBackward, stage_[c], k);
    if (split) queued_.emplace_back(stage_[c], k);
    else s_.add(w_, ActionKind::kBackwardWeight, stage_[c], k);
  }
  void weight() {
    PT_CHECK(!queued_.empty(), "dualpipev: a W with none queued");
    auto [st, k] = queued_.front();
    queued_.pop_front();
    s_.add(w_, ActionKind::kBackwardWeight, st, k);
  }
  bool done(int m) const { return next_f_[0] == m && next_f_[1] == m && next_b_[0] == m && next_b_[1] == m && queued_.empty(); }

 private:
  Schedule& s_;
  int w_;
  int stage_[2];
  int next_f_[2] = {0, 0}, next_b_[2] = {0, 0};
  std::deque<std::pair<int, int>> queued_;  // (stage, microbatch) whose W is still to run
};

}  // namespace

Schedule dualpipe_v(const plan::Plan& plan, int microbatches) {
  Schedule s = detail::v_skeleton(plan, "dualpipev", microbatches);
  const int p = s.num_stages / 2, m = microbatches;
  if (m < 2 * p)
    throw ConfigError(str("dualpipev: ", m, " microbatches on ", p, " workers; it needs at least 2 x workers = ", 2 * p,
                          " (its warm-up alone fills that many)"));
  for (int r = 0; r < p; ++r) {
    VWorkerOrder o(s, r);
    const int before = p - r - 1, after = r + 1;
    for (int i = 0; i < 2 * before; ++i) o.forward(0);                       // 1
    for (int i = 0; i < after; ++i) o.forward(0), o.forward(1);               // 2
    for (int i = 0; i < before; ++i) o.backward(1, true), o.weight(), o.forward(1);  // 3
    for (int i = 0; i < m - 2 * p + r + 1; ++i) {                             // 4
      o.forward(0), o.backward(1, false);
      o.forward(1), o.backward(0, false);
    }
    for (int i = 0; i < before; ++i) o.backward(1, false), o.forward(1), o.backward(0, false);  // 5
    bool split = false;                                                       // 6
    for (int i = 0; i < after; ++i) {
      if (i == after / 2 && r % 2 == 1) split = true;
      o.backward(1, split);
      if (i == after / 2 && r % 2 == 0) split = true;
      o.backward(0, split);
    }
    for (int i = 0; i < before; ++i) o.weight(), o.backward(0, true);        // 7
    for (int i = 0; i < after; ++i) o.weight();                               // 8
    PT_CHECK(o.done(m), "dualpipev: worker ", r, " did not run every action");
  }
  detail::append_flush(s, 0);
  return s;
}

}  // namespace pt::schedule
