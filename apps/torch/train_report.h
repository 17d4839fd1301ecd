#pragma once
// `pipetrain train`'s report of a run: its result, its throughput beside the simulator's or the
// plan's prediction, and the memory model's figure beside the measured one.
#include <string>

#include "apps/torch/train_flags.h"
#include "job/job.h"
#include "job/worker_data.h"
#include "runtime/trainer.h"
#include "schedule/trace.h"

namespace pt::app {

// Every figure of an emulated run carries its label (docs/emulation.md). A run whose loss ended
// NaN or infinite trained nothing usable: it fails (after printing), not exit 0. A resumed run's
// line names the steps it trained (Job::first_step_trained, last_step_trained).
void print_result(const runtime::TrainResult& r, const std::string& label, const job::Job& job);

// Where the plan was made to fit a memory cap (its memory_cap_bytes), a warning naming each
// worker whose measured tensors are over the tensors' share of it, or, where the cap set some
// aside for the process, whose process (its own, over gloo) held more than the cap beside the
// data it holds (`data`, each worker's process's: job::data_held_per_worker).
void note_over_planned_memory(const runtime::TrainResult& r, const job::Job& job, const TrainFlags& flags,
                              const std::string& label, const job::DataHeld& data);

// The measured-vs-predicted line. With --profile (threads or gloo processes on this host), or with emulated
// compute: the simulator's figure for this very run on this machine or its --cluster
// (job/prediction.h). Otherwise the plan's own prediction, in ms per minibatch of the profile's
// batch size (emulated compute waits the profile's times x S), for the schedule and cluster it
// was made for. Where the run missed the simulation by more than kPredictionMissNoted and
// `run_trace` holds every worker's actions (threads; gloo on one host: job/trace_gather.h), a
// note says which worker set the pace and whether its computes or the time outside them made
// the gap (metrics::pace_summary).
inline constexpr double kPredictionMissNoted = 0.1;
void print_throughput(const runtime::TrainResult& r, const schedule::Trace& run_trace, const job::Job& job,
                      const TrainFlags& flags, const std::string& label);

// The memory model's figure for each worker (schedule/memory.h), beside the measured one, when a
// profile gives the bytes: emulated runs hold the profile's bytes x --byte-scale. With a
// calibrated --cluster (its process_bytes), also each process's peak RSS.
// `data`: the data each worker's process holds (job::data_held_per_worker); `shared_memory`: gloo
// workers mapped one host's shared memory for their transfers (PipelineResult::shared_memory),
// which each process holds too (job::shared_memory_per_worker).
void print_modelled_memory(const job::Job& job, const TrainFlags& flags, const std::string& label,
                           const job::DataHeld& data, bool shared_memory = false);

}  // namespace pt::app
