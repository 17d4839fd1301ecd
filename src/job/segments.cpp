#include "job/segments.h"

#include <algorithm>
#include <numeric>

namespace pt::job {

int64_t replica_round(const schedule::Schedule& typical, const plan::Plan& plan) {
  int64_t unit = 1;
  if (typical.kind == "pipedream")
    for (const auto& st : plan.stages) unit = std::lcm(unit, static_cast<int64_t>(st.replicas));
  return unit;
}

std::vector<Segment> plan_segments(const schedule::Schedule& typical, const plan::Plan& plan, int64_t per_epoch,
                                   int64_t total_steps, int64_t first_step, int64_t checkpoint_every,
                                   int64_t eval_every) {
  const bool flush = typical.flush;
  int64_t unit = replica_round(typical, plan);
  auto round_up = [&](int64_t every) { return every > 0 ? (every + unit - 1) / unit * unit : 0; };
  // Asynchronous: minibatches left until the next cut of each kind, counted across epochs; an
  // epoch's end cuts an evaluation besides.
  int64_t ck_piece = round_up(checkpoint_every), ev_piece = round_up(eval_every);
  int64_t to_ck = ck_piece, to_ev = ev_piece;
  std::vector<Segment> out;
  // Asynchronous counts run from step 0, so a resumed run cuts where the uninterrupted one does:
  // the steps before first_step are counted, not kept (it counted from the resume step, and
  // --eval-every 15 resumed at 140 evaluated at 155, not 150).
  for (int64_t start = flush ? first_step : 0; start < total_steps;) {
    int64_t epoch = start / per_epoch;
    int64_t epoch_end = std::min(total_steps, (epoch + 1) * per_epoch);
    int64_t n = flush ? 1 : (epoch_end - start) / unit * unit;
    if (n == 0) {  // fewer than `unit` minibatches left in the epoch: they are skipped
      start = epoch_end;
      if (!out.empty()) out.back().ends_epoch = out.back().evaluate = true;
      continue;
    }
    if (!flush && ck_piece > 0) n = std::min(n, to_ck);
    if (!flush && ev_piece > 0) n = std::min(n, to_ev);
    const bool before = start < first_step;
    if (before) n = std::min(n, first_step - start);
    Segment seg{start, static_cast<int>(n), false, epoch};
    start += n;
    seg.ends_epoch = start == epoch_end || (!flush && epoch_end - start < unit);
    if (seg.ends_epoch) start = epoch_end;
    if (flush) {
      seg.checkpoint = checkpoint_every > 0 && (start >= total_steps || start % checkpoint_every == 0);
      seg.evaluate = seg.ends_epoch || (eval_every > 0 && start % eval_every == 0);
    } else {
      to_ck -= n;
      to_ev -= n;
      // Counted across epochs, as a synchronous run's are: an epoch's end drains the pipeline for
      // its evaluation but is no checkpoint of its own (it restarted the count: 6, 12, 16, 22 for
      // every 6 in epochs of 16).
      seg.checkpoint = ck_piece > 0 && (to_ck == 0 || start >= total_steps);
      // Evaluations too: each epoch's end evaluates besides (the count restarted there, so
      // --eval-every 10 in epochs of 15 evaluated at 10, 15, 25, 30, where 1f1b does at 10, 15, 20, 30).
      seg.evaluate = seg.ends_epoch || (ev_piece > 0 && to_ev == 0);
      if (seg.checkpoint) to_ck = ck_piece;
      if (ev_piece > 0 && to_ev == 0) to_ev = ev_piece;
    }
    if (!before) out.push_back(seg);
  }
  return out;
}

}  // namespace pt::job
