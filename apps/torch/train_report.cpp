#include "apps/torch/train_report.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <sstream>

#include "core/error.h"
#include "core/units.h"
#include "job/core_pinning.h"
#include "job/gloo_job.h"
#include "job/prediction.h"
#include "job/threads_job.h"
#include "metrics/trace_gap.h"
#include "schedule/memory.h"

namespace pt::app {

namespace {

// Memory as the OS counts it (each process's peak RSS) beside the allocator's account of each
// worker's tensors, and what lies between them. `timed_layers`: the process timed each layer for
// the split before training (324 MiB of a 1.07 GiB peak on threads went unsaid: a helper's audit).
void print_measured_memory(const runtime::TrainResult& r, const std::string& label, bool timed_layers) {
  std::string prefix = label.empty() ? "" : "[" + label + "] ";
  auto bytes = [](int64_t b) { return human_bytes(static_cast<double>(b)); };
  const auto& rss = r.peak_rss_bytes;
  const auto& tensors = r.peak_memory_bytes;
  if (!rss.empty()) {
    if (r.one_process || rss.size() == 1) {
      // One gloo worker's figure is its process's, not the launcher's (which prints its own).
      std::cout << prefix << "peak RSS (measured, as the OS counts it): " << bytes(rss[0])
                << (r.one_process ? " for this process" : " for the worker process")
                << (tensors.size() > 1 ? str(" and its ", tensors.size(), " workers") : std::string())
                << (r.one_process && timed_layers ? ", which timed each layer for the split first (--stages without "
                                                    "--profile)"
                                                  : "")
                << "\n";
    } else {
      std::cout << prefix << "peak RSS per worker process (measured, as the OS counts it):";
      for (size_t w = 0; w < rss.size(); ++w) std::cout << (w ? ", " : " ") << "w" << w << " " << bytes(rss[w]);
      const auto& shared = r.shared_memory_bytes;
      if (std::any_of(shared.begin(), shared.end(), [](int64_t b) { return b > 0; })) {
        std::cout << "; of it, the shared memory their transfers mapped:";
        for (size_t w = 0; w < shared.size(); ++w) std::cout << (w ? ", " : " ") << "w" << w << " " << bytes(shared[w]);
      }
      std::cout << "\n";
    }
  }
  if (tensors.empty()) return;
  std::cout << prefix << "peak tensor memory per worker (measured, the allocator's account of its weights, gradients, "
            << "optimizer state, stashes and activations):";
  int64_t sum = 0;
  for (size_t w = 0; w < tensors.size(); ++w) {
    std::cout << (w ? ", " : " ") << "w" << w << " " << bytes(tensors[w]);
    sum += tensors[w];
  }
  std::cout << "\n";
  if (rss.empty()) return;
  // Emulated layers allocate the stashes and a stage input's gradient a device would hold but
  // write none of it, so the OS counts less than the account: the difference said -36 GiB.
  if (!label.empty()) {
    std::cout << prefix << "  (emulated layers allocate what a device would hold but write little of it, so the "
              << "OS counts less: its figure is the host's, the account's stands for the device's)\n";
    return;
  }
  // Each worker's peak is its own moment; their sum bounds what they held at once, so the rest of
  // the process is at least the difference. A gloo process's is at least its peak less its
  // worker's (the largest of them read "up to", a bound the other way).
  if (r.one_process) {
    std::cout << prefix << "  the process's peak less the workers' peaks (" << bytes(sum)
              << " in all, each at its own moment): at least " << bytes(std::max<int64_t>(0, rss[0] - sum));
  } else {
    std::cout << prefix << "  each process's peak less its worker's tensors, at least what it held besides them:";
    for (size_t w = 0; w < tensors.size() && w < rss.size(); ++w)
      std::cout << (w ? ", " : " ") << "w" << w << " " << bytes(std::max<int64_t>(0, rss[w] - tensors[w]));
  }
  std::cout << " (" << (r.one_process && timed_layers ? "timing each layer for the split, " : "")
            << "LibTorch, the data, the runtime's buffers, and freed blocks malloc keeps for reuse)\n";
}

// "X", or "X to Y" where the figures differ (each worker's).
std::string bytes_span(const std::vector<int64_t>& bytes) {
  if (bytes.empty()) return human_bytes(0);
  double least = static_cast<double>(*std::min_element(bytes.begin(), bytes.end()));
  double most = static_cast<double>(*std::max_element(bytes.begin(), bytes.end()));
  // As printed: 16.0 MiB apart by a page of a header read "16.0 MiB to 16.0 MiB".
  return human_bytes(least) == human_bytes(most) ? human_bytes(most) : human_bytes(least) + " to " + human_bytes(most);
}

std::string process_kind(const std::string& transport) {
  return transport == "threads" ? "a threads run's process (every worker in it)" : "a gloo worker's process";
}

// Why a run missed its simulation, where its trace holds every worker's actions (gloo workers
// on other hosts keep their own): the pace-setting worker's gap, in its computes or outside them, and what
// to measure again. The demo read 1.24 after its profile and calibrate both ran in a slow spell
// of this machine (the model's layers 17% over the runs before and after): the computes' part.
void note_prediction_miss(const schedule::Trace& run, const schedule::Trace& simulated, const std::string& prefix,
                          const metrics::MissContext& context) {
  if (run.workers.empty()) return;
  for (const auto& w : run.workers)
    if (w.empty()) return;
  metrics::TraceGap g;
  try {
    g = metrics::trace_gap(run, "the run", simulated, "its simulation");
  } catch (const ConfigError& e) {
    std::cerr << prefix << "note: the run's trace and its simulation do not compare: " << e.what() << "\n";
    return;
  }
  // The ratio is over the whole run (its start, and an asynchronous run's fills and drains); the
  // traces' gap is over their steady states, which the note splits.
  std::cerr << prefix << "note: " << metrics::prediction_miss_note(g, kPredictionMissNoted, context) << "\n";
}

// "1f1b, 4 microbatches", "interleaved, 8 microbatches, 2 chunks", "pipedream" (microbatches: 0 or 1 unsaid).
std::string schedule_setting(const std::string& schedule, int microbatches, int chunks) {
  return str(schedule, microbatches > 1 ? str(", ", microbatches, " microbatches") : std::string(),
             chunks > 1 ? str(", ", chunks, " chunks") : std::string());
}

// The schedule a plan's prediction is for: the one its planner simulated, else the one it names.
const std::string& planned_schedule(const plan::Plan& plan) {
  return plan.simulated_schedule.empty() ? plan.schedule : plan.simulated_schedule;
}

// Whether the run's schedule, microbatches or chunks differ from those the plan's prediction is
// for (--schedule, --microbatches or --chunks given over the plan's).
bool ran_other_than_planned(const plan::Plan& plan, const job::Job& job) {
  return planned_schedule(plan) != job.options.schedule ||
         (plan.microbatches > 0 && plan.microbatches != job.typical->microbatches) ||
         (plan.chunks > 0 && plan.chunks != job.typical->chunks);
}

}  // namespace

void print_result(const runtime::TrainResult& r, const std::string& label, const job::Job& job) {
  if (!label.empty()) std::cout << "[" << label << "] ";
  // A resumed run's steps, time and rate are its own (the --metrics file's are the whole training's).
  std::cout << "steps " << r.steps
            << (job.first_step > 0
                    ? str(" (", job.first_step_trained(), "..", job.last_step_trained(), ", resumed)")
                    : std::string())
            << ", " << r.seconds << " s, " << std::llround(r.samples_per_s) << " samples/s, "
            << (r.loss_known ? str("final loss ", r.final_loss, " (mean of the last ", std::min(runtime::kFinalLossSteps, r.steps),
                                   " steps)")
                             : std::string("no loss (emulated layers compute none)"))
            << "\n";
  if (r.test_accuracy >= 0) std::cout << "test accuracy " << fixed(100 * r.test_accuracy, 2) << "%\n";  // as progress
  // A language model's per-token loss, and its perplexity (e^loss): what LM runs compare.
  if (r.test_loss)
    std::cout << "test loss " << *r.test_loss
              << (r.language_model ? str(" (perplexity ", std::exp(*r.test_loss), ")") : std::string()) << "\n";
  print_measured_memory(r, label, job.options.timed_layers);
  runtime::check_not_diverged(r);
  std::istringstream notes(runtime::unlearned_note(r));
  for (std::string note; std::getline(notes, note);) std::cerr << (label.empty() ? "" : "[" + label + "] ") << note << "\n";
}

void note_over_planned_memory(const runtime::TrainResult& r, const job::Job& job, const TrainFlags& flags,
                              const std::string& label, const job::DataHeld& data) {
  const plan::Plan& plan = job.plan;
  if (plan.memory_cap_bytes <= 0) return;
  // The tensors were planned under the cap less what it set aside for the process; where it set
  // some aside (a calibrated cluster), a worker process's peak RSS less the data it holds and the
  // shared memory of its transfers (the planner sees neither, docs/planner.md; calibrate's
  // process_bytes leave the latter out) is held against the whole cap too. Emulated tensors
  // stand for the device's at --byte-scale, and their process is the host's.
  const double tensors_cap = static_cast<double>(plan.memory_cap_bytes - plan.memory_cap_process_bytes);
  const bool whole = plan.memory_cap_process_bytes > 0 && !r.one_process && !flags.model.emulated();
  const double scale = flags.model.emulated() ? flags.model.emulation.byte_scale : 1.0;
  std::string over;
  bool processes = false;
  for (size_t w = 0; w < r.peak_memory_bytes.size(); ++w) {
    double tensors = static_cast<double>(r.peak_memory_bytes[w]) / scale;
    const int64_t shared = w < r.shared_memory_bytes.size() ? r.shared_memory_bytes[w] : 0;
    double process =
        whole && w < r.peak_rss_bytes.size() ? static_cast<double>(r.peak_rss_bytes[w] - data.peak_share(w) - shared) : 0;
    if (tensors > tensors_cap) {
      over += str(over.empty() ? "" : ", ", "w", w, "'s tensors ", human_bytes(tensors));
    } else if (process > static_cast<double>(plan.memory_cap_bytes)) {
      over += str(over.empty() ? "" : ", ", "w", w, "'s process ", human_bytes(process));
      processes = true;
    }
  }
  if (over.empty()) return;
  if (processes) {
    std::vector<int64_t> shares;
    for (size_t w = 0; w < data.training.size(); ++w) shares.push_back(data.peak_share(w));
    over += str(" (a process: its peak RSS less the data's ", bytes_span(shares),
                r.shared_memory_bytes.empty() ? "" : " and its transfers' shared memory", ")");
  }
  std::cerr << (label.empty() ? "" : "[" + label + "] ") << "warning: " << job.options.plan_source
            << " was planned to fit " << human_bytes(static_cast<double>(plan.memory_cap_bytes))
            << " a worker (its field 'memory_cap_bytes'"
            << (plan.memory_cap_process_bytes > 0
                    ? str(", of which its tensors ", human_bytes(tensors_cap), ", the process the rest")
                    : std::string(", its tensors'"))
            << "), and measured, over it: " << over << "\n";
}

void print_throughput(const runtime::TrainResult& r, const schedule::Trace& run_trace, const job::Job& job,
                      const TrainFlags& flags, const std::string& label) {
  if (r.steps <= 0) return;
  const plan::Plan& plan = job.plan;
  const job::PipelineOptions& job_options = job.options;
  std::string prefix = label.empty() ? "" : "[" + label + "] ";
  auto rate = [&](double ms) { return std::llround(job_options.train.batch_size * 1000.0 / ms); };
  if (flags.request.profile) {
    const profile::Profile& prof = *flags.request.profile;
    int cores = r.one_host ? job::usable_cores() : 0;  // workers on several hosts: a core each
    job::RunPrediction p = flags.model.emulated()
                               ? job::predict_emulated_run(job, prof, flags.model.emulation, flags.transport)
                               : job::predict_host_run(job, prof, cores, flags.transport);
    p.transport = flags.transport;
    const double ratio = r.samples_per_s / (job_options.train.batch_size * 1000.0 / p.ms());
    std::cout << prefix << "throughput: measured " << std::llround(r.samples_per_s) << " samples/s, simulated "
              << rate(p.ms()) << " samples/s for this run (" << p.describe(job) << "; ratio " << fixed(ratio, 3);
    if (prof.timed_busy())
      std::cout << "; the profile's timed rounds spread " << fixed(100 * prof.timing_spread, 0)
                << "%, a busy machine's: its prediction is as uncertain";
    std::cout << ")\n";
    if (std::abs(ratio - 1) > kPredictionMissNoted) {
      metrics::MissContext context;
      context.calibrated = job_options.cluster.calibrated_over() == flags.transport;
      context.core_figures = p.core_figures;
      note_prediction_miss(run_trace, p.trace, prefix, context);
    }
    // After the figure it is written for: failing first, a full disk lost the throughput line.
    if (!flags.prediction_trace_path.empty()) {
      try {
        schedule::write_trace(p.trace, flags.prediction_trace_path);
      } catch (const Error& e) {
        throw RuntimeFailure(str("--prediction-trace: ", e.what()));
      }
    }
    return;
  }
  // A plan of another batch predicted another run (the request's note says so at the start).
  if (plan.pipeline_ms_per_minibatch <= 0 || (plan.batch_size > 0 && plan.batch_size != job_options.train.batch_size))
    return;
  // A split made here (--stages, no --profile) holds its busiest stage's compute alone, which
  // predicts no run: no bubble, transfer or step (1f1b on 2 stages, 4 microbatches, read 7285
  // samples/s as the planner's where the simulator, given the profile, says 5495).
  if (plan.simulated_ms_per_minibatch <= 0 && plan.cost_model == "even") {
    std::cout << prefix << "throughput: measured " << std::llround(r.samples_per_s) << " samples/s (the "
              << "stages were split here by their compute alone, which predicts no run: with --profile P, from "
              << "`pipetrain profile`, train simulates this one)\n";
    return;
  }
  int64_t planned_batch = job_options.train.batch_size;
  double scale = flags.model.emulated() ? flags.model.emulation.time_scale : 1.0;
  double predicted = planned_batch * 1000.0 / (plan.pipeline_ms_per_minibatch * scale);
  std::cout << prefix << "throughput: measured " << std::llround(r.samples_per_s)
            << " samples/s, planner predicted " << std::llround(predicted) << " samples/s";
  // The planner predicts (and its referee simulates) the schedule, microbatches and chunks it
  // names; others run the same stages with other bubbles.
  if (!planned_schedule(plan).empty() && ran_other_than_planned(plan, job))
    std::cout << " for " << schedule_setting(planned_schedule(plan), plan.microbatches, plan.chunks) << ", this ran "
              << schedule_setting(job_options.schedule, job.typical->microbatches, job.typical->chunks);
  std::cout << " (ratio " << fixed(r.samples_per_s / predicted, 3);
  // A plan made on a cluster `calibrate` measured here already shares the cores (a helper's audit).
  if (label.empty())
    std::cout << "; the plan's figure is its cluster's: one device per worker, unless `pipetrain calibrate` measured "
              << "that cluster on this host of " << counted(job::usable_cores(), "core")
              << "; --profile P, with a --cluster from `pipetrain calibrate`, simulates this run";
  std::cout << ")\n";
}

void print_modelled_memory(const job::Job& job, const TrainFlags& flags, const std::string& label,
                           const job::DataHeld& data, bool shared_memory) {
  if (!flags.request.profile) return;
  const job::PipelineOptions& job_options = job.options;
  std::string prefix = label.empty() ? "" : "[" + label + "] ";
  double scale = flags.model.emulated() ? flags.model.emulation.byte_scale : 1.0;
  profile::Profile prof = profile::with_batch_size(*flags.request.profile, job_options.train.batch_size);
  schedule::MemoryOptions mo;
  mo.optimizer_copies = job_options.train.sgd.state_copies();
  mo.weight_prediction = job_options.weight_prediction;
  if (flags.transport == "threads") mo.receives_ahead = 0, mo.sends_ahead = schedule::kThreadsSendsAhead;
  else if (shared_memory) mo.receives_ahead = schedule::kSharedMemoryReceivesAhead;
  auto over = [&](int minibatches) { return *job.schedule_over(minibatches); };
  auto memory = schedule::memory_per_worker(over(0), over, prof, mo);  // a long run's
  std::cout << prefix << "peak tensor memory per worker (modelled):";
  double tensors = 0;
  for (size_t w = 0; w < memory.size(); ++w) {
    tensors += static_cast<double>(memory[w].tensors()) * scale;
    std::cout << (w ? ", " : " ") << "w" << w << " " << human_bytes(static_cast<double>(memory[w].tensors()) * scale);
  }
  // Weight versions build up as an asynchronous pipeline fills: a 4-step pipedream run's first
  // worker measured 834 MiB against this 962, which it reached by step 8.
  // Predicting, a stage keeps no stash of versions but a predicted copy per minibatch in flight
  // (said "every weight version stashed" where none was).
  if (!job.typical->flush)
    std::cout << (schedule::predicts_copies(*job.typical, mo)
                      ? " (a long run's: a predicted copy of the weights for every minibatch in flight)"
                      : " (a long run's: every weight version stashed)");
  std::cout << "\n";
  // Emulated layers hold their weights, stashes and what crosses a stage, but run no kernels: the
  // device's scratch is not made (mnist-cnn's first stage: 2.7 MiB measured, 3.8 modelled). Not
  // always under it: VGG-16's first of 4 gloo stages measured 19.6 MiB against 16.1, unexplained.
  if (flags.model.emulated())
    std::cout << prefix << "  (the device's, as the profile measured the real layers: their backward's scratch (workspace) "
                           "and each weight gradient's temporary, which emulated layers do not make: an emulated run's "
                           "measured figure is no check of it (VGG-16's first stage measured 3% under it on threads, 22% "
                           "over on gloo))\n";
  // As the OS counts it: each process holds its tensors, the data and what calibrate measured a
  // worker process to hold besides (the cluster's process_bytes).
  int64_t process = job_options.cluster.process_bytes;
  if (process <= 0) return;
  // A threads process holds every worker's runtime and LibTorch once, a gloo process one worker's:
  // a threads run given a gloo-calibrated cluster was modelled at 178.9 MiB against 253.2 measured.
  std::string measured = job_options.cluster.calibrated_over();
  if (!measured.empty() && measured != flags.transport) {
    std::cout << prefix << "peak RSS (modelled): not modelled: " << job_options.cluster_source
              << "'s process_bytes were measured of " << process_kind(measured) << ", this run's are "
              << process_kind(flags.transport) << " (calibrate with --transport " << flags.transport << ")\n";
    return;
  }
  std::string besides = str(" (the tensors above, the data ", bytes_span(data.training),
                            data.at_start > 0 ? str(" (a worker starts holding all ", human_bytes(static_cast<double>(
                                                                                                 data.at_start)),
                                                    ", its peak at least the process and that)")
                                              : std::string(),
                            " and the process ", human_bytes(static_cast<double>(process)), " as calibrate measured it)");
  // Emulated layers write little of the device's tensors they allocate: the OS counted 328 MiB of
  // an emulated VGG-16's 597 modelled, which a run of the real layers would hold.
  if (flags.model.emulated())
    besides.insert(besides.size() - 1, "; a run of the real layers': emulated ones write little of what they "
                                       "allocate, and the OS counts less");
  if (flags.transport == "threads") {
    int64_t sums = flags.model.emulated() ? 0 : job::hub_sum_bytes(job, prof);
    if (sums > 0)
      besides.insert(besides.size() - 1, str(", and the all-reduce's sums ", human_bytes(static_cast<double>(sums)),
                                             " (a copy of each replicated stage's gradients)"));
    std::cout << prefix << "peak RSS (modelled): "
              << human_bytes(tensors + static_cast<double>(process + data.training.front() + sums)) << " for this process"
              << besides << "\n";
    return;
  }
  // Gloo workers on one host: the shared memory their transfers map (gloo_job.h).
  std::vector<int64_t> shared(memory.size(), 0);
  if (shared_memory) {
    std::vector<int64_t> gradients;
    for (const auto& m : memory) gradients.push_back(static_cast<int64_t>(static_cast<double>(m.gradients) * scale));
    shared = job::shared_memory_per_worker(job, gradients, prof.ties);
    besides.insert(besides.size() - 1, str(", and ", bytes_span(shared), " of shared memory for its transfers"));
  }
  std::cout << prefix << "peak RSS per worker process (modelled):";
  for (size_t w = 0; w < memory.size(); ++w)
    std::cout << (w ? ", " : " ") << "w" << w << " "
              << human_bytes(std::max(static_cast<double>(memory[w].tensors()) * scale +
                                          static_cast<double>(process + data.training[w] + shared[w]),
                                      static_cast<double>(process + data.at_start)));
  std::cout << besides << "\n";
}

}  // namespace pt::app
