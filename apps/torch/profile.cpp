// pipetrain profile: measures a model layer by layer and writes the profile format.
#include <iostream>
#include <numeric>
#include <vector>

#include <torch/torch.h>

#include "model/compute_threads.h"
#include "model/data_checks.h"
#include "core/host_allocator.h"
#include "apps/command.h"
#include "apps/torch/model_flags.h"
#include "core/error.h"
#include "core/units.h"
#include "model/optimizer.h"
#include "profile/profiler.h"

namespace pt::app {
namespace {

// A profile expected to take this long or more says how far it has come.
constexpr double kQuietProfileMs = 10000;

// Where the machine can hold the model, its layers timed as a stage runs them.
profile::ProfilerOptions in_sequence() {
  profile::ProfilerOptions options;
  options.sequence_share = 0.25;
  options.sequence_min_ms = 1000;
  return options;
}

struct ProfileFlags {
  ModelFlags model;
  int64_t batch_size = 64;
  CLI::Option* batch_size_flag = nullptr;
  profile::ProfilerOptions options = in_sequence();
  std::string output;
};

int run_profile(ProfileFlags& flags) {
  model::use_one_compute_thread();
  keep_freed_host_memory();
  if (flags.batch_size < 1) throw UsageError(str("--batch-size: must be >= 1, got ", flags.batch_size));
  // Emulated, the profile's batch unless given, as `train --compute emulated` takes it: at 64 an
  // awd-lm profile of batch 80 was measured at 0.8 of its times and bytes, predicting another run.
  if (flags.model.emulated() && flags.batch_size_flag->count() == 0)
    flags.batch_size = flags.model.emulated_profile().batch_size;
  // It was read by nothing (--time-scale, the same case, was refused).
  if (!flags.model.profile_path.empty() && !flags.model.emulated())
    throw UsageError(str("--profile ", flags.model.profile_path, ": the profile --compute emulated emulates; this "
                         "run measures --model's layers computing for real (give --compute emulated, or leave "
                         "--profile out)"));
  // The smaller batches a plan's microbatches take: one larger than the batch was dropped without
  // a word, and the profile scaled its times linearly.
  for (int64_t b : flags.options.batch_sizes)
    if (b > flags.batch_size)
      throw UsageError(str("--batch-sizes: ", b, " is more than --batch-size ", flags.batch_size,
                           " (the sizes timed are the microbatches the batch splits into)"));
  // Before the timing: the profile must be writable, and not over a file the run reads.
  check_output_path(flags.output == "-" ? "" : flags.output, "-o");
  check_outputs_apart(flags.model.input_paths(), {{"-o", flags.output}});
  // Synthetic data of at least a batch: a refusal of that many samples is the batch's.
  const int64_t given_samples = flags.model.synthetic_samples;
  if (flags.model.data.empty() && flags.model.model != "mnist-cnn" && !model::is_language_model(flags.model.model))
    flags.model.synthetic_samples = std::max(flags.model.synthetic_samples, flags.batch_size);
  model::DataSplit data;
  std::shared_ptr<model::LayeredModel> m;
  try {
    m = flags.model.build(&data);
  } catch (const UsageError& e) {
    if (flags.model.synthetic_samples == given_samples) throw;
    throw UsageError(str("--batch-size ", flags.batch_size, ": profiling it takes synthetic data of as many samples, and ",
                         e.what()));
  }
  if (flags.batch_size > data.train.size())
    throw UsageError(str("--batch-size: ", flags.batch_size, " is larger than the ", data.train.size(),
                         " training samples of ", data.name, model::held_out_text(data)));
  // A slow model's profile says where it is (a full-size AWD-LSTM at batch 32: 20 s a round).
  flags.options.on_progress = [](const std::string& what, int done, int of, double ms) {
    if (ms * of < kQuietProfileMs) return;
    std::cerr << "profile: " << what << " " << done << " of " << of << " took " << fixed(ms / 1000, 1) << " s"
              << (what == "round" && done < of ? str(" (about ", fixed((of - done) * ms / 60000, 1), " min to go)")
                                               : std::string())
              << "; fewer --repeats, --warmup or --batch-sizes shorten it\n";
  };
  profile::Profile p;
  try {
    p = profile::measure_profile(*m, data.train.first_inputs(flags.batch_size), flags.options,
                                 data.train.first_targets(flags.batch_size));
  } catch (const c10::Error& e) {  // LibTorch's own words, without its C++ stack
    std::string why = e.what_without_backtrace();
    throw ConfigError(str("profiling ", m->name(), " on ", data.name, " failed: ", why.substr(0, why.find('\n')),
                          why.find("target") != std::string::npos
                              ? " (the loss takes the model's output and the targets: a language model's export "
                                "needs --loss lm)"
                              : ""));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // the model's own code failing (a TorchScript error)
    throw ConfigError(str("profiling ", m->name(), " on ", data.name, " failed: ",
                          model::explain_training_error(
                              e, flags.options.batch_sizes.empty() && flags.batch_size > 1
                                     // The defaults' doing (batch 8: 1, 2 and 4), not a flag the user gave.
                                     ? str("a batch of one sample was timed (by default the batch's halves down to a "
                                           "sixteenth: ", flags.batch_size / std::min<int64_t>(flags.batch_size, 16),
                                           " of --batch-size ", flags.batch_size, "); give --batch-sizes of 2 or "
                                           "more (2,4), or a larger --batch-size")
                                     : "a batch of one sample was timed (--batch-size or --batch-sizes 1); time "
                                       "batches of 2 or more")));
  }
  if (flags.output.empty() || flags.output == "-") {
    std::cout << profile::to_json(p).dump(1) << "\n";
  } else {
    profile::write_profile(p, flags.output);
    std::cerr << "wrote " << flags.output << "\n";
  }
  double fwd = 0, bwd = 0;
  std::vector<int> every(p.num_layers());
  std::iota(every.begin(), every.end(), 0);
  for (const auto& l : p.layers) fwd += l.forward_ms, bwd += l.backward_ms;
  const int64_t buffers = profile::buffer_bytes(p, every);  // a frozen tie's once
  std::cerr << p.model << " at batch " << p.batch_size << ": " << p.num_layers() << " layers, forward "
            << fwd << " ms, backward " << bwd << " ms (the layers timed " << p.timed << "), parameters "
            << p.total_parameter_bytes() << " bytes"
            // The file's per-layer figures count a tied parameter at each layer holding it.
            << (p.ties.empty() ? "" : str(" (", counted(static_cast<int64_t>(p.ties.size()), "tie"), " counted once)"))
            << (buffers > 0 ? str(", buffers and frozen parameters ", buffers, " bytes") : "") << "\n";
  if (p.timing_spread > 0)
    std::cerr << "the rounds at batch " << p.batch_size << " spread " << fixed(100 * p.timing_spread, 1)
              << "% (10th to 90th percentile, of their median)\n";
  if (p.timed_busy())
    std::cerr << "warning: a spread over " << fixed(100 * profile::kBusySpread, 0)
              << "%: other work competed for this core while it timed, and predictions from this profile will be "
                 "off by as much; profile again on a quiet machine\n";
  for (const auto& group : p.alike)
    std::cerr << "layers " << model::LayerSet(group).describe()
              << " compute alike (the same code, shapes and memory): each takes the group's median times\n";
  return 0;
}

Register profile_command({"profile", kProfileDescription,
              [](CLI::App& app) -> std::function<int()> {
  auto flags = std::make_shared<ProfileFlags>();
  flags->model.add_to(app);
  flags->model.add_emulation_to(app);
  app.add_option("--profile", flags->model.profile_path,
                 "The profile --compute emulated emulates: measuring it gives the runtime's own work on this "
                 "machine (optimizer step, gradient accumulation) on its bytes x --byte-scale");
  flags->batch_size_flag = app.add_option("--batch-size", flags->batch_size,
                                          "Minibatch size to profile (emulated: by default the emulated profile's)")
                               ->capture_default_str();
  app.add_option("--warmup", flags->options.warmup, "Untimed repetitions")->check(finite_non_negative())->capture_default_str();
  app.add_option("--repeats", flags->options.repeats, "Timed repetitions (each layer alone: the median kept; in sequence: the mean less stalls over twice the median, the rounds repeating until they have taken a second, up to 31)")->check(finite_positive())->capture_default_str();
  app.add_flag_callback(
      "--alone", [flags] { flags->options.sequence_share = 0; },
      "Time each layer alone, built and dropped in turn (the default times the layers one after another, as a "
      "stage runs them, where the model's weights, gradients and step copies fit in a quarter of this machine's "
      "memory)");
  app.add_option("--batch-sizes", flags->options.batch_sizes,
                 "Smaller batches to time each layer at too (default: the batch's halves down to a sixteenth), for "
                 "the microbatches a plan may split it into; --batch-sizes B (the batch alone): times scale linearly")
      ->delimiter(',')
      ->check(finite_positive());
  app.add_option("--optimizer", flags->options.optimizer,
                 "Whose step each layer's optimizer_ms times (with a stash copy): the optimizer train will run")
      ->check(CLI::IsMember(model::optimizer_kinds()))
      ->capture_default_str();
  app.add_option("-o,--output", flags->output, "Write the profile JSON here (default: standard output)");
  return [flags] { return run_profile(*flags); };
}});

}  // namespace
}  // namespace pt::app
