#pragma once
// A gloo job's traces, gathered: each worker records its own actions, and the reporting worker
// needs every worker's to say why the run missed its simulation (the pace-setting worker's gap,
// apps/torch/train_report.cpp), which a threads run's single trace always allowed.
#include "runtime/transport.h"
#include "schedule/trace.h"

namespace pt::job {

// Collective over every worker: each sends its events and pauses (of `trace.workers[rank]` and
// `trace.pauses`) to `reporting`, which puts each into its `trace` (the pauses those of every
// worker: common_pauses) where the sender's steady clock is its own (one boot of one kernel);
// a worker on another host is left out (empty), its times not comparable. Returns the workers
// whose events `reporting` now holds (on the others: 1, their own).
int gather_traces(runtime::Transport& transport, int reporting, schedule::Trace& trace);

}  // namespace pt::job
