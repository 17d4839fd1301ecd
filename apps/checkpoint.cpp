// pipetrain checkpoint inspect D: what a checkpoint holds, verified (sizes and checksums, and
// no NaN or infinite value, which train --resume refuses).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "apps/command.h"
#include "core/error.h"
#include "core/files.h"
#include "core/input_limits.h"
#include "core/json_doc.h"
#include "core/tensor_file.h"
#include "core/units.h"
#include "runtime/checkpoint_manifest.h"
#include "runtime/layer_file.h"

namespace pt::app {
namespace {

namespace fs = std::filesystem;

// The run that wrote checkpoint `dir` ("" where its manifest cannot be read).
std::string run_of(const fs::path& dir) {
  std::string manifest = (dir / "manifest.json").string();
  try {
    return runtime::manifest_from_json(read_regular_file(manifest, input_limit(InputKind::manifest)), manifest).run_id;
  } catch (const Error&) {
    return "";
  }
}

int inspect(const std::string& path) {
  // D is a checkpoint directory (step-N) or the --checkpoint-dir holding several.
  std::string checkpoint = fs::exists(fs::path(path) / "manifest.json") ? path : runtime::newest_checkpoint(path);
  if (checkpoint.empty()) {
    if (!fs::exists(path)) throw ConfigError(str(path, ": does not exist"));
    if (!fs::is_directory(path))
      throw ConfigError(str(path, ": is not a folder (give a checkpoint, step-N, or the --checkpoint-dir holding them)"));
    throw ConfigError(str(path, ": holds no complete checkpoint (no step-N directory with a manifest.json)"));
  }
  if (checkpoint != path) {
    // In step order (the directory's is the file system's), a folder without a manifest (a run
    // killed while writing it) marked, as --resume passes it over; so is one of another run than
    // the newest (an --overwrite run killed before it removed them).
    std::vector<std::pair<int64_t, std::string>> steps;
    const std::string newest_run = run_of(checkpoint);
    for (const auto& e : fs::directory_iterator(path))
      if (int64_t step = runtime::checkpoint_step_of(e.path().filename().string()); step >= 0) {
        std::string run = run_of(e.path());
        steps.emplace_back(step, e.path().filename().string() +
                                     (!fs::exists(e.path() / "manifest.json") ? " (incomplete: no manifest.json)"
                                      : run != newest_run                      ? " (another run: " + run + ")"
                                                                               : ""));
      }
    std::sort(steps.begin(), steps.end());
    std::cout << "checkpoints in " << path << ":";
    for (const auto& [step, name] : steps) std::cout << " " << name;
    std::cout << "\nnewest: " << checkpoint << "\n";
  }
  runtime::CheckpointManifest m = runtime::read_verified_manifest(checkpoint);
  // The manifest's text is the file's, not ours: shown with its control characters escaped.
  std::cout << "model " << printable(m.model) << (m.model_sha256.empty() ? "" : " (model file sha256 " + m.model_sha256 + ")")
            << " (" << m.layers << " layers), step " << m.step << ", batch size " << m.batch_size
            << ", seed " << m.seed << ", run " << m.run_id << "\n"
            << (m.data.train_samples >= 0 ? "data " + printable(m.data.describe()) + "\n" : std::string())
            // One worker trains as a one-stage pipeline of one microbatch (the manifest says 1f1b).
            << (m.workers == 1 && m.plan == "1"
                    ? std::string("written by one worker (no pipeline)\n")
                    : str("written by schedule ", printable(m.schedule), " on plan ", printable(m.plan), " (",
                          counted(m.workers, "worker"),
                          m.microbatches > 0 ? ", " + counted(m.microbatches, "microbatch", "microbatches") : "",
                          m.deferred_batch_norm == 1 ? ", BatchNorm statistics deferred" : "", ")\n"))
            << printable(m.optimizer) << ": lr " << m.lr
            << (m.optimizer == "sgd" ? str(", momentum ", m.momentum) : std::string()) << ", weight decay "
            << m.weight_decay << (m.weight_decay_on == "all" ? "" : " on " + m.weight_decay_on)
            << (m.eps >= 0 && m.optimizer != "sgd" ? str(", betas ", m.beta1, ",", m.beta2, ", eps ", m.eps) : "")
            << (m.clip_grad_norm > 0 ? str(", gradients clipped to norm ", m.clip_grad_norm) : "")
            << (m.precision.empty() ? "" : ", in " + m.precision)
            << (m.lr_schedule.empty() ? std::string()
                                      : str(", lr schedule ", runtime::lr_course(m.lr_schedule, m.schedule_steps, m.min_lr),
                                            m.warmup_steps > 0 ? str(" after ", m.warmup_steps, " warm-up steps") : ""))
            << "\n"
            << (std::isfinite(m.first_loss) ? str("the run's first step's loss ", m.first_loss, " (a resume judges divergence by it)\n")
                                            : std::string())
            << "files verified (sizes and CRC-32):\n";
  int64_t params = 0, bytes = 0;
  std::string first_bad;  // the first tensor holding NaN or infinite values
  std::vector<std::vector<int64_t>> numels;  // per layer, per parameter
  std::vector<std::vector<std::vector<int64_t>>> param_shapes;  // per layer, per parameter
  for (const auto& f : m.files) {
    std::string file = (fs::path(checkpoint) / f.name).string();
    runtime::LayerFile layer = runtime::read_layer_file_header(file);  // its bytes were verified above
    // Values no run resumes from (checkpoints written before train refused to write them).
    std::vector<TensorRecord> records = read_tensor_file_header(file);
    std::vector<int64_t> non_finite = count_non_finite_in_file(file);
    for (size_t t = 0; t < records.size() && first_bad.empty(); ++t)
      if (non_finite[t] > 0) first_bad = str(file, ": tensor '", records[t].name, "' holds ", non_finite[t], " NaN or infinite values");
    int64_t n = 0;
    std::string shapes;
    numels.emplace_back();
    param_shapes.emplace_back();
    for (const auto& p : layer.params) {
      int64_t numel = 1;
      for (int64_t d : p.shape) numel *= d;
      n += numel;
      numels.back().push_back(numel);
      param_shapes.back().push_back(p.shape);
      shapes += (shapes.empty() ? "" : " ") + shape_text(p.shape);
    }
    // Each parameter's state, not the first's: a layer whose first parameter is frozen was said
    // to have "no optimizer state yet" beside its bias's momentum.
    const size_t stepped = static_cast<size_t>(
        std::count_if(layer.momentum.begin(), layer.momentum.end(), [](const auto& s) { return s.has_value(); }));
    bool moments = !layer.variance.empty();  // adam's second moment beside its first
    std::string state = moments ? "moments" : "momentum";
    if (stepped > 0 && stepped < layer.params.size())
      state += str(" of ", stepped, " of its ", layer.params.size(), " parameters (the others took no step: frozen, or no "
                   "gradient reached them)");
    // "layer-3  16 parameters [8] [8], momentum, 3 buffers": the shapes belong to the parameters.
    std::cout << "  " << std::setw(16) << std::left << f.name << std::right << std::setw(10) << n << " parameters"
              << (shapes.empty() ? "" : " " + shapes)
              << (layer.params.empty()                      ? ""
                  : stepped > 0                              ? ", " + state
                  : m.optimizer == "sgd" && m.momentum == 0 ? ", no optimizer state (plain SGD keeps none)"
                                                             : ", no optimizer state: no step reached its parameters "
                                                               "(frozen, or no gradient reached them)")
              << (layer.buffers.empty() ? "" : str(", ", layer.buffers.size(), layer.buffers.size() == 1 ? " buffer" : " buffers"))
              << "\n";
    params += n;
    bytes += f.bytes;
  }
  // Each layer's file holds its copy of a tied parameter: the model has it once.
  int64_t copies = 0;
  for (size_t g = 0; g < m.ties.size(); ++g)
    for (size_t k = 0; k < m.ties[g].size(); ++k) {
      auto [layer, param] = m.ties[g][k];
      if (param >= static_cast<int>(numels[layer].size()))
        throw FormatError(str(checkpoint, "/manifest.json: field 'ties[", g, "][", k, "]': layer ", layer, "'s file holds ",
                              numels[layer].size(), " parameters, not a parameter ", param));
      // One tensor shared: a group of unlike shapes is no tie (a [10, 256] weight "tied" to a
      // [256, 256] one was counted as one).
      auto [first_layer, first_param] = m.ties[g][0];
      if (param_shapes[layer][param] != param_shapes[first_layer][first_param])
        throw FormatError(str(checkpoint, "/manifest.json: field 'ties[", g, "][", k, "]': layer ", layer, "'s parameter ",
                              param, " is ", shape_text(param_shapes[layer][param]), ", layer ", first_layer,
                              "'s parameter ", first_param, " ", shape_text(param_shapes[first_layer][first_param]),
                              ": tied parameters are one tensor"));
      if (k > 0) copies += numels[layer][param];
    }
  std::cout << "total " << params - copies << " parameters";
  if (copies > 0) std::cout << " (" << m.ties.size() << " tied, counted once; the layer files hold " << params << ")";
  std::cout << ", " << bytes << " bytes\n";
  if (!m.replica_buffers.empty()) {
    int64_t own = 0;
    for (const auto& f : m.replica_buffers) own += f.bytes;
    std::cout << "and the buffers of the other replicas of replicated stages, which each keeps: "
              << counted(static_cast<int64_t>(m.replica_buffers.size()), "file") << ", " << own << " bytes\n";
  }
  if (!first_bad.empty())
    throw FormatError(str(first_bad, ": the run had diverged by step ", m.step, "; train --resume refuses it"));
  return 0;
}

Register checkpoint_command({"checkpoint", "Inspect training checkpoints: pipetrain checkpoint inspect DIR",
              [](CLI::App& app) -> std::function<int()> {
  auto dir = std::make_shared<std::string>();
  auto* sub = app.add_subcommand("inspect", "Print what a checkpoint holds and verify its files");
  sub->add_option("dir", *dir, "A checkpoint (step-N) or a --checkpoint-dir")->required();
  app.require_subcommand(1);
  return [dir] { return inspect(*dir); };
}});

}  // namespace
}  // namespace pt::app
