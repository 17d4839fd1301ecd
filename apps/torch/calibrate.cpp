// pipetrain calibrate: measures the cluster over the job's own transport (issue 33) and writes
// a cluster file whose levels carry the measured latency per message and rate, with how they
// were measured (plan/link_fit.h). Started like train: --transport threads in this process,
// --transport gloo as one local process per worker, or as one worker under torchrun, mpirun or
// scripts/testbed.sh (RANK/WORLD_SIZE set).
#include <algorithm>
#include <cmath>
#include <csignal>
#include <ctime>
#include <iostream>
#include <thread>

#include "apps/command.h"
#include "core/error.h"
#include "core/files.h"
#include "core/json_doc.h"
#include "core/units.h"
#include "model/compute_threads.h"
#include "plan/link_fit.h"
#include "job/calibration.h"
#include "job/core_pinning.h"
#include "job/options.h"
#include "runtime/gloo_transport.h"
#include "runtime/launcher.h"
#include "runtime/thread_transport.h"

namespace pt::app {
namespace {

struct CalibrateFlags {
  std::string workers, output, transport = "threads", refit;
  double max_mb = 0;  // 0: kLargestMb, or kLargestMbOneHost for gloo ranks on one host
  double timeout_s = 60;
};

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

constexpr int kMaxLocalWorkers = 256;

// The cluster's shape: the fan-outs of --workers; their rates are what gets measured.
plan::Cluster shape_of(const CalibrateFlags& flags) {
  auto fan = parse_int_list(flags.workers, "--workers");
  std::string ones;
  for (size_t k = 0; k < fan.size(); ++k) ones += k ? ",1" : "1";
  plan::Cluster c = plan::cluster_from_shorthand(flags.workers, ones);
  for (size_t k = 0; k < c.levels.size(); ++k)
    if (c.levels[k].fan_out < 2)
      throw UsageError(str("--workers '", flags.workers, "': level ", k, " has fan-out ", c.levels[k].fan_out,
                           ", so no two workers talk over it to be measured"));
  if (c.workers() < 2) throw UsageError(str("--workers '", flags.workers, "': calibrating needs at least 2 workers"));
  return c;
}

// The largest message by default. Gloo ranks on one host hand tensors over through shared memory
// (docs/runtime.md), where a message over 32 MiB costs its receiver's fresh pages: 64 MiB took
// 40 ms one way and 16 MiB 2.2, and a rate fitted through 64 MiB put a 1 MiB activation at 3 times
// what it took.
constexpr double kLargestMb = 64, kLargestMbOneHost = 16;

job::CalibrationOptions options_of(const CalibrateFlags& flags, bool gloo_one_host = false) {
  job::CalibrationOptions calibration_options;
  double largest = flags.max_mb > 0 ? flags.max_mb : gloo_one_host ? kLargestMbOneHost : kLargestMb;
  double most_mb = static_cast<double>(job::default_calibration_sizes().back()) / (1 << 20);
  if (largest > most_mb)  // it was capped there without a word
    throw UsageError(str("--max-mb: at most ", most_mb, " (calibrate's sizes are 1 KiB x 4^k up to ", most_mb,
                         " MiB), got ", largest));
  for (int64_t s : job::default_calibration_sizes())
    if (static_cast<double>(s) <= largest * (1 << 20)) calibration_options.sizes.push_back(s);
  if (calibration_options.sizes.size() < 2) throw UsageError(str("--max-mb: ", largest, " leaves fewer than two message sizes (1 KiB x 4^k)"));
  calibration_options.progress = [](const std::string& line) { std::cerr << "calibrate: " << line << "\n"; };
  return calibration_options;
}

// How close a fit must come to every point it prints before calibrate says why it does not.
constexpr double kFitWithin = 0.10;
// Cores slower than this share of the fastest's rate are noted: a worker on one falls behind its
// profile by more than the profile's own rounds spread on a quiet machine (2-4% here).
constexpr double kCoresAlike = 0.9;

// Worker 0's result: the fits, the all-reduces against the fitted model, the file.
// `one_host`: every worker ran on this machine (threads, or gloo ranks meeting on loopback), so
// they share its cores (Cluster::host_cores).
int write_result(const CalibrateFlags& flags, const plan::Cluster& shape, job::Measured m, bool one_host) {
  plan::Cluster fitted = plan::calibrated_cluster(shape, m.levels, m.allreduces, m.action_us, flags.transport, now_utc());
  // Threads: once they have all joined (the others, waiting for worker 0, still hold their
  // transfers' state: 283 MiB there against 218 for 4); a gloo process: before its core rates.
  fitted.process_bytes = flags.transport == "threads" ? job::resident_besides_tensors() : m.process_bytes;
  fitted.core_rates = m.core_rates;
  fitted.core_share = m.core_share;
  if (one_host) fitted.host_cores = job::usable_cores();
  plan::Cluster terms = fitted;  // the latency, rate and host terms alone, as the record has them
  terms.ring_corrections.clear();
  for (auto& a : m.allreduces) a.modelled_ms = terms.allreduce_ms(a.group, a.bytes);
  std::string text = to_json(fitted).dump(1) + "\n";
  if (flags.output.empty() || flags.output == "-") std::cout << text;
  else write_text_file_atomic(flags.output, text), std::cerr << "wrote " << flags.output << "\n";
  for (const auto& l : m.levels)
    std::cerr << "level " << l.level << " (" << shape.levels[l.level].name << ", workers " << l.a << "-" << l.b
              << "): latency " << l.fit.latency_us << " us, " << l.fit.bandwidth_gbps << " Gbit/s, fit within "
              << 100 * l.fit.max_error << "% of every point\n";
  std::cerr << "all-reduce host terms (fitted to the " << m.allreduces.size() << " all-reduces below): summing "
            << fitted.reduce_us_per_mib << " us per MiB reduced, " << fitted.allreduce_step_us
            << " us per ring step (where it outlasts the step's message)\n";
  std::cerr << "the host's time per action (a forward, a backward, a step) besides its compute: " << fitted.action_us
            << " us\n";
  if (one_host) {
    std::cerr << "each of n computes at once on this host's " << job::usable_cores() << " cores runs at, of one alone:";
    if (fitted.host_cores > 0) std::cerr << " (the workers share them: host_cores " << fitted.host_cores << ")";
    for (size_t n = 0; n < fitted.core_rates.size(); ++n) std::cerr << " " << n + 1 << ": " << fitted.core_rates[n];
    std::cerr << "\n";
  } else {
    std::cerr << "the workers meet across addresses (MASTER_ADDR is not loopback), as on several hosts: their "
                 "computes share no cores, and no core rates are written\n";
  }
  if (one_host)
    std::cerr << "two workers pinned to one core (" << (flags.transport == "threads" ? "threads" : "processes")
              << ") get, together, " << fitted.core_share << " of what one gets alone on it\n";
  std::cerr << "a worker process's resident memory besides its tensors (LibTorch, the transport, the runtime): "
            << human_bytes(static_cast<double>(fitted.process_bytes)) << "\n";
  std::string misses;
  for (const auto& a : m.allreduces) {
    double off = a.modelled_ms / a.measured_ms - 1;
    double taken = fitted.allreduce_ms(a.group, a.bytes);
    std::cerr << "all-reduce of " << human_bytes(a.bytes) << " over " << a.group.size() << " workers: measured "
              << a.measured_ms << " ms, the fitted model " << a.modelled_ms << " ms (" << 100 * off << "%)"
              << (taken > a.modelled_ms ? str("; plan and simulate take ", taken, " ms") : "") << "\n";
    if (std::abs(off) > kFitWithin) misses += str(misses.empty() ? "" : ", ", human_bytes(a.bytes));
  }
  if (!m.core_speeds.empty()) {
    // Rounded down: 0.8996, rounded to 0.90, was printed as the reason for a note below 0.9.
    auto share = [](double s) { return fixed(std::floor(s * 1000) / 1000, 3); };
    std::cerr << "each core alone, of the fastest one's rate (by CPU number):";
    std::vector<int> cpus = job::usable_cpu_ids();
    for (size_t c = 0; c < m.core_speeds.size(); ++c)
      std::cerr << " " << (c < cpus.size() ? cpus[c] : static_cast<int>(c)) << ": " << share(m.core_speeds[c]);
    std::cerr << "\n";
    if (double slowest = *std::min_element(m.core_speeds.begin(), m.core_speeds.end()); slowest < kCoresAlike)
      std::cerr << "note: this host's cores do not run alike (the slowest at " << share(slowest)
                << " of the fastest's rate, under " << kCoresAlike << "): "
                << "a worker the kernel puts on a slower core runs that much under its profile, and the run under "
                   "its prediction, which takes every core at the profile's rate\n";
  }
  // Rounds that disagree this much measured a busy spell, not the cores: a prediction on these
  // rates moves with it (the demo's went 30% under what it measured).
  if (m.core_rates_spread > 0.2)
    std::cerr << "note: the rounds of n computes at once disagree by up to " << 100 * m.core_rates_spread
              << "%: the machine was busy while calibrate measured its cores (the rates are their medians); "
                 "calibrate again on a quiet one\n";
  // A fit that misses says which term cannot hold the points, and why where it is known.
  for (const auto& l : m.levels) {
    if (l.fit.max_error <= kFitWithin) continue;
    std::cerr << "note: level " << l.level << "'s latency and rate miss a point by more than " << 100 * kFitWithin
              << "%: ";
    if (flags.transport == "threads" && l.points.size() > 1) {
      // A hand-over between threads moves a tensor, not its bytes: the points are wake-ups.
      auto us = [](double ms) { return std::round(10000 * ms) / 10; };
      double lo = l.points.front().ms, hi = lo;
      for (size_t i = 0; i + 1 < l.points.size(); ++i) lo = std::min(lo, l.points[i].ms), hi = std::max(hi, l.points[i].ms);
      std::cerr << "on threads a hand-over passes the tensor, not its bytes, so no rate holds: it took " << us(lo)
                << "-" << us(hi) << " us from " << human_bytes(l.points.front().bytes) << " to "
                << human_bytes(l.points[l.points.size() - 2].bytes) << " and " << us(l.points.back().ms) << " us at "
                << human_bytes(l.points.back().bytes) << "\n";
    } else {
      std::cerr << "its points scatter more than a latency and a rate explain (a busy machine's do; calibrate again "
                   "on a quiet one)\n";
    }
  }
  if (!misses.empty())
    std::cerr << "note: the all-reduce model misses by more than " << 100 * kFitWithin << "% at " << misses << ": "
              << (flags.transport == "threads"
                      ? "on threads an all-reduce is no ring (the workers add into one sum under a lock and wake "
                        "each other, runtime/thread_transport.cpp): its fixed part is their wake-ups, not the "
                        "ring's 2(n-1) steps of the one-way latency that the model charges"
                      : "its two host terms (summing per MiB, a ring step's time) cannot fit every size measured")
              << "; where it models one under what it took, plan and simulate take the measured time (a ring's, "
                 "by log(bytes) between the sizes measured)\n";
  return 0;
}

int run_threads(const CalibrateFlags& flags, const plan::Cluster& shape) {
  auto hub = std::make_shared<runtime::ThreadHub>(shape.workers(), flags.timeout_s);
  std::vector<job::Measured> results(shape.workers());
  std::vector<std::string> errors(shape.workers());
  std::vector<std::thread> threads;
  auto options = options_of(flags);
  options.one_host = true;
  for (int r = 0; r < shape.workers(); ++r)
    threads.emplace_back([&, r] {
      try {
        runtime::ThreadTransport t(hub, r);
        results[r] = job::measure_cluster(t, shape, options);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        hub->abort(str("worker ", r, ": ", e.what()));
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < shape.workers(); ++r)
    if (!errors[r].empty() && errors[r].find("aborted") == std::string::npos)
      throw RuntimeFailure(str("calibrate: worker ", r, ": ", errors[r]));
  for (const auto& e : errors)
    if (!e.empty()) throw RuntimeFailure(str("calibrate: ", e));
  return write_result(flags, shape, results[0], true);
}

int run_gloo_worker(const CalibrateFlags& flags, const plan::Cluster& shape) {
  std::signal(SIGPIPE, SIG_IGN);
  runtime::GlooConfig config = runtime::gloo_config_from_env();
  if (config.world_size != shape.workers())
    throw ConfigError(str("--workers '", flags.workers, "' has ", shape.workers(), " workers but the gloo job has ",
                          config.world_size, " (WORLD_SIZE)"));
  config.timeout_s = flags.timeout_s;
  std::unique_ptr<runtime::GlooTransport> t;
  try {
    t = std::make_unique<runtime::GlooTransport>(config);
    t->prepare_channels(job::calibration_pairs(shape));  // measured as a job's transfers go
    // Ranks that meet at a loopback address run on this host (calibrate's own, or torchrun's on
    // one machine); the testbed's and mpirun's meet across addresses.
    bool one_host = config.master_addr == "localhost" || config.master_addr.rfind("127.", 0) == 0 ||
                    config.master_addr == "::1";
    auto options = options_of(flags, one_host);
    options.one_host = one_host;
    if (config.rank != 0) options.progress = nullptr;
    job::Measured m = job::measure_cluster(*t, shape, options);
    return config.rank == 0 ? write_result(flags, shape, m, options.one_host) : 0;
  } catch (const std::exception& e) {
    if (t) t->abandon(e.what());
    throw RuntimeFailure(str("calibrate: worker ", config.rank, ": ", e.what()));
  }
}

// --refit: the file's own measurements fitted again under this version's model; nothing measured.
int run_refit(const CalibrateFlags& flags) {
  if (!flags.workers.empty()) throw UsageError("--refit takes the shape from its file: drop --workers");
  // Nothing is measured: these were ignored without a word.
  if (flags.transport != CalibrateFlags{}.transport)
    throw UsageError("--refit takes the transport from its file's record (nothing is measured): drop --transport");
  if (flags.max_mb != CalibrateFlags{}.max_mb || flags.timeout_s != CalibrateFlags{}.timeout_s)
    throw UsageError(str("--refit measures nothing: drop ", flags.max_mb != CalibrateFlags{}.max_mb ? "--max-mb" : "--timeout"));
  check_output_path(flags.output == "-" ? "" : flags.output, "-o");
  plan::Cluster old = plan::read_cluster(flags.refit);
  plan::Cluster fitted = plan::refit_calibration(old, flags.refit);
  std::string text = to_json(fitted).dump(1) + "\n";
  if (flags.output.empty() || flags.output == "-") std::cout << text;
  else write_text_file_atomic(flags.output, text), std::cerr << "wrote " << flags.output << "\n";
  std::cerr << "refitted " << flags.refit << ": all-reduce host terms " << old.reduce_us_per_mib << " -> "
            << fitted.reduce_us_per_mib << " us per MiB reduced, " << old.allreduce_step_us << " -> "
            << fitted.allreduce_step_us << " us per ring step\n";
  for (const auto& a : fitted.calibration["allreduce"])
    std::cerr << "all-reduce of " << human_bytes(a["bytes"].get<double>()) << " over " << a["group"].size()
              << " workers: measured " << a["measured_ms"].get<double>() << " ms, the fitted model "
              << a["modelled_ms"].get<double>() << " ms (" << 100 * a["error"].get<double>() << "%)\n";
  return 0;
}

int run_calibrate(const CalibrateFlags& flags) {
  if (!flags.refit.empty()) return run_refit(flags);
  if (flags.workers.empty()) throw UsageError("--workers: required (the cluster's shape), unless --refit");
  if (!(flags.timeout_s <= job::kMostTimeoutS))
    throw UsageError(str("--timeout: must be in (0, ", job::kMostTimeoutS, "] seconds, got ", flags.timeout_s));
  model::use_one_compute_thread();
  if (flags.transport != "threads" && flags.transport != "gloo")
    throw UsageError(str("--transport: must be threads or gloo, got '", flags.transport, "'"));
  plan::Cluster shape = shape_of(flags);
  // One thread, or one process of this machine, per worker (gloo started by mpirun or torchrun
  // spreads them over machines): 100,000 threads aborted the process.
  if (!runtime::launched_as_gloo_worker() && shape.workers() > kMaxLocalWorkers)
    throw UsageError(str("--workers '", flags.workers, "': ", shape.workers(), " workers on this machine (a ",
                         flags.transport == "threads" ? "thread" : "process", " each); at most ", kMaxLocalWorkers,
                         " here, or start the gloo workers across machines with mpirun or torchrun"));
  // The file's folder before the measuring, not after it (-o /tmp measured for seconds, on a
  // testbed minutes, then failed on the folder).
  if (flags.output != "-") check_output_path(flags.output, "-o");
  if (flags.transport == "threads") return run_threads(flags, shape);
  if (runtime::launched_as_gloo_worker()) return run_gloo_worker(flags, shape);
  runtime::Launch launch = runtime::fork_gloo_workers(shape.workers(), runtime::self_argv());
  return launch.worker ? run_gloo_worker(flags, shape) : launch.status;
}

Register calibrate_command({"calibrate", kCalibrateDescription, [](CLI::App& app) -> std::function<int()> {
  auto flags = std::make_shared<CalibrateFlags>();
  app.add_option("--workers", flags->workers, "The cluster's shape: workers per level, innermost first (e.g. 4 or 4,4)");
  app.add_option("--transport", flags->transport,
                 "threads (one process: tensors handed over in memory) or gloo (one process per worker, TCP; "
                 "under torchrun, mpirun or scripts/testbed.sh, one worker)")
      ->capture_default_str();
  app.add_option("--max-mb", flags->max_mb,
                 "Largest message, MiB (sizes 1 KiB x 4^k up to it; default 64, or 16 for gloo workers on one host, "
                 "whose transfers go through shared memory)")
      ->check(finite_positive());
  app.add_option("--timeout", flags->timeout_s, "Longest wait for one message or all-reduce, seconds")
      ->check(finite_positive())->capture_default_str();
  app.add_option("-o,--output", flags->output, "Write the cluster file here (default: standard output)");
  app.add_option("--refit", flags->refit,
                 "Fit a cluster file that calibrate wrote again from its own measurements under this version's "
                 "model (nothing is measured; no --workers)");
  return [flags] { return run_calibrate(*flags); };
}});

}  // namespace
}  // namespace pt::app
