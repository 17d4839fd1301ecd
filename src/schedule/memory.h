#pragma once
// The memory model (docs/design.md, "One cost model"): what each worker holds when it runs its list
// of actions as the runtime does, from a profile. The planner's joint search keeps plans under
// a memory cap with it; `compare`, `plan --top` and `train` print it; tests check it against the
// runtime's measured peak (model/memory_meter.h).
//
// Per worker, for each stage it holds (P = the stage's trainable parameter bytes):
//   weights      P x the weight versions alive at once along its list (StashTracker): 1 when
//                flushing, a stash per version in flight for PipeDream, 2 for 2BW; and once
//                what no step updates (profile::Layer::buffer_bytes: buffers, frozen parameters);
//   gradients    P (one flat gradient buffer; autograd accumulates into it);
//   optimizer    P per state copy: SGD's momentum, Adam's two moments (MemoryOptions);
//   activations  the peak, along the list, of
//                  - per microbatch in flight from its forward to its last backward (B, or W
//                    where split): the stage's stash (profile::stash_bytes of its layers) and
//                    its input (the bytes crossing into the stage; the first stage's, the data:
//                    profile::Profile::input_bytes), or its input and the output
//                    it sent (held by the send until the backward) with recomputation;
//                  - received tensors from when their receive is posted (the runtime posts up to
//                    receives_ahead ahead of their place; a received activation is the input
//                    above), a gradient until its backward ends (none between threads);
//                  - input gradients sent and not yet waited for (sends_ahead per peer, and a
//                    run's last sends until the next run's first receive);
//                  - while a forward or backward runs, the most one of its layers holds besides
//                    the stash of the layers before it (forward; still to do, backward): its
//                    workspace (profile Layer::workspace_bytes: scratch buffers, the gradients
//                    passing through; at least the input gradient a backward makes) and its
//                    weight gradient before it is added in (its parameter bytes, whatever the
//                    batch); in a backward with recomputation, the stash its forward rebuilds.
// A microbatch's bytes are the profile's x (microbatch size / the profile's batch size).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "profile/profile.h"
#include "schedule/generators.h"
#include "schedule/schedule.h"

namespace pt::schedule {

struct MemoryOptions {
  // The optimizer's state per parameter, in copies of it: SGD's momentum buffer (1; 0 without
  // momentum), Adam's two moments (2) (model::OptimizerOptions::state_copies). < 0: the
  // profile's optimizer's (Profile::optimizer: adam and adamw 2, sgd with momentum 1), as plan,
  // simulate and compare weigh it; they counted 1 under Adam, and a plan held to a cap of 21 MiB
  // trained at 26.1.
  int optimizer_copies = -1;
  // Receives the runtime posts ahead of their place (Worker::kReceivesAhead), each holding its
  // buffer from then on: a transport between processes (gloo, or devices). 0: a transport within
  // one process (threads), where a received tensor is the sender's and costs the receiver nothing.
  int receives_ahead = 8;
  // Sends to one peer the runtime has not yet waited for (Worker::kSendsAhead), each holding its
  // tensor (between processes; within one process, kThreadsSendsAhead).
  int sends_ahead = 8;
  // The runtime's weight prediction (Worker's weight_prediction): pipedream gives each
  // microbatch whose gradient is applied after later steps a weight copy of its own; 2bw each
  // such minibatch, in place of its delayed version.
  bool weight_prediction = true;
  // What each process holds besides its tensors (plan::Cluster::process_bytes): added to every
  // worker, each a process of its own (gloo, devices); 0 within one process (threads), whose
  // one fixed cost the caller adds once.
  int64_t process_bytes = 0;
};

// Whether the runtime predicts `s`'s weights under `o`: where the optimizer has a velocity to follow
// (a state to keep), a predicted copy per minibatch in flight in place of stashed versions.
inline bool predicts_copies(const Schedule& s, const MemoryOptions& o) {
  return o.weight_prediction && o.optimizer_copies > 0 && s.predicts_weights();
}

// Within one process (the threads transport) a send completes at once, but the gradient sent
// stays the sender's until the receiver's backward has used it: about one per peer in a steady
// 1F1B. Measured with the last layer alone on the last stage (MeasuredMemory's models, every
// schedule but GPipe): within 10% with one, 12-31% under with none; GPipe's backwards, one
// after another, leave more (17-22% under with one).
inline constexpr int kThreadsSendsAhead = 1;

// gloo workers on one host hand tensors over through shared memory (runtime/shm_channel.h), whose
// reader copies each message into a tensor of the receiver's as it arrives, not when its receive
// is posted: in a steady state shortly before the receiver reaches it, as a receive posted one
// ahead is held. mnist-cnn over such channels, 7 runs (1f1b, gpipe, 2bw, pipedream 2 and 4
// stages, interleaved, zb-h1): the model within -5%..+3% of each worker's measured tensors (one
// worker of 0.5 MiB +9%), where 8 posted ahead (over TCP, or a device's) read up to 37% over.
inline constexpr int kSharedMemoryReceivesAhead = 1;

// What the default MemoryOptions model, said beside their figures (plan, simulate, compare):
// simulate printed "what train checks" for a figure train on threads models a third lower.
inline constexpr const char* kSeparateProcessesMemory =
    "each worker a process or device of its own; on threads, where a received tensor is the sender's, `train "
    "--profile` models and holds less";

struct WorkerMemory {
  int64_t weights = 0, gradients = 0, optimizer = 0, activations = 0;
  int64_t process = 0;     // the process's own (MemoryOptions::process_bytes)
  int peak_in_flight = 0;  // microbatches stashed at the activation peak
  int64_t tensors() const { return weights + gradients + optimizer + activations; }
  int64_t total() const { return tensors() + process; }
};

// [layer] -> the stage holding it. Throws ConfigError when the schedule's layers do not fit the
// profile (an index out of range, a layer in no stage).
std::vector<int> stage_of_layers(const Schedule& s, const profile::Profile& p);

std::vector<WorkerMemory> memory_per_worker(const Schedule& s, const profile::Profile& p,
                                            const MemoryOptions& options = {});
// One worker's alone (the joint search weighs a stage at a time: planner.h's StageFits), with
// `kept` its weight_versions_kept where given: they depend on the lists alone, not the layers.
WorkerMemory memory_of_worker(const Schedule& s, int worker, const profile::Profile& p, const MemoryOptions& options = {},
                              const std::vector<int>* kept = nullptr);
// [stage] -> the weight versions worker w keeps of it along its list (0: a stage it does not
// hold): a stash per version in flight, vertical sync's history, 2BW's double buffer.
std::vector<int> weight_versions_kept(const Schedule& s, int w, const profile::Profile& p, const MemoryOptions& options = {});
// An asynchronous schedule's lists are one run of its minibatches, and near a list's end a
// worker has fewer receives left than it would post ahead in a longer run: VGG-16 15-1 on 4x4
// over its default 105 minibatches gives each first-stage replica 7, and the model holds one
// 98 MiB gradient buffer less than over 210 (27.4 GiB against 27.5). The minibatches after which
// every replica still has its receives_ahead to post past a warm-up of as many items as the
// schedule has workers: s's own where they suffice (and for a synchronous schedule, one
// minibatch repeated).
int memory_minibatches(const Schedule& s, const MemoryOptions& options = {});
// The memory of a long run of `s`: over `longer(n)`, the same schedule over
// n = memory_minibatches(s) minibatches, where s covers fewer.
std::vector<WorkerMemory> memory_per_worker(const Schedule& s, const std::function<Schedule(int minibatches)>& longer,
                                            const profile::Profile& p, const MemoryOptions& options = {});
// The memory of a long run of `kind` on `plan` under `options`, as every command reports it: over
// the schedule the options give (`built`, where the caller has it), or where that covers fewer
// than memory_minibatches, over the same schedule of that many (made here, unvalidated: a longer
// run of a schedule already checked).
std::vector<WorkerMemory> memory_over_long_run(const std::string& kind, const plan::Plan& plan,
                                               const ScheduleOptions& options, const profile::Profile& p,
                                               const MemoryOptions& memory = {}, const Schedule* built = nullptr);
// MemoryOptions::optimizer_copies where it is < 0: the profile's optimizer's.
int optimizer_copies(const profile::Profile& p);
// The largest total over the workers.
int64_t peak_memory(const std::vector<WorkerMemory>& workers);
// "weights 1.2 GiB + gradients ... = total" for reports.
std::string describe(const WorkerMemory& m);

}  // namespace pt::schedule
