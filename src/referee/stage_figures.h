#pragma once
// A joint-search configuration's per-stage figures from its replay (internal to src/referee).
#include "metrics/metrics.h"
#include "plan/cluster.h"
#include "plan/plan.h"
#include "schedule/trace.h"

namespace pt::referee::detail {

// Each stage's compute and communication per minibatch of the step, one replica's share, from its
// replay: the plan table's columns, as the planner gives them (plan/realised_cost.cpp): the
// sends of its busiest worker on its busiest level (links of two levels carry at once), and the
// all-reduce left exposed, over the steady window, by the worker's compute; its time the larger
// of compute and sends, plus that all-reduce. Every all-reduce counted whole, the warm-up's too,
// read 3.093 ms for an AlexNet stage `plan` put at 2.517 (its sends; the deferred step hides the
// rest). The even split's own figures are at the profile's batch, not the step's, and count no
// sends (comm 0.000 for a VGG-16 cut sending 102.8 MB a minibatch). The replicas' mean sends,
// every level's summed, gave VGG-16 15-1 on 4x4 0.281 and 4.217 ms where `plan` gives 0.343 and
// 4.110; the larger of the two columns as the time put GNMT-16's bottleneck on stage 2 (17.8 ms
// of compute) where stage 3 computes 14.3 and waits 8.2 for its all-reduce.
void stage_figures(const schedule::Trace& t, const metrics::Metrics& steady, const plan::Cluster& cluster,
                   plan::Plan& p);

}  // namespace pt::referee::detail
