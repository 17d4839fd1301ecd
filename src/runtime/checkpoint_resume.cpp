#include "runtime/checkpoint.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "runtime/trainer.h"

// Resuming: a checkpoint's fit to the job, and its layers loaded into a worker's replicas.
namespace pt::runtime {

namespace fs = std::filesystem;

void load_checkpoint(Worker& worker, const schedule::Schedule& typical, const std::string& checkpoint,
                     const CheckpointManifest& manifest) {
  for (int st = 0; st < typical.num_stages; ++st) {
    StageReplica* rep = worker.replica(st);
    if (!rep) continue;
    for (int layer : typical.stage_layers[st]) {
      const auto& f = manifest.files.at(layer);
      std::string path = (fs::path(checkpoint) / f.name).string();
      // Its size and checksum were verified with the manifest (start_checkpoints); a file changed
      // since is a FormatError naming it, from the reader's own checks of its header and length.
      LayerState in_place = rep->layer_state(layer, /*storage=*/true);
      LayerState state = read_layer_state(path, &in_place);
      // A diverged run's weights would train on as NaN and end "final loss nan", exit 0. (save()
      // writes none, but a checkpoint of an older pipetrain may hold them.)
      std::string bad = first_non_finite(state);
      if (!bad.empty())
        throw FormatError(str(path, ": ", bad, " holds NaN or infinite values (a checkpoint of a run that diverged); "
                              "resume an earlier checkpoint or start afresh"));
      // Each parameter steps at most once a minibatch: a count outside 0..step is a hand-edited
      // file, and Adam's bias correction divides by 1 - beta^(count + 1), 0 at -1.
      for (int64_t steps : state.optimizer_steps)
        if (steps < 0 || steps > manifest.step)
          throw FormatError(str(path, ": optimizer_steps holds ", steps, "; a parameter's count of optimizer steps is ",
                                "0 to the checkpoint's step (", manifest.step, ")"));
      rep->load_layer_state(layer, std::move(state), path);
      // A replica's own buffers where the checkpoint kept them: a run on fewer replicas leaves
      // the rest, and one on more gives its new replicas replica 0's.
      const auto& holders = typical.stage_workers[st];
      int r = static_cast<int>(std::find(holders.begin(), holders.end(), worker.rank()) - holders.begin());
      for (const auto& own : manifest.replica_buffers)
        if (r > 0 && own.layer == layer && own.replica == r) {
          std::string own_path = (fs::path(checkpoint) / own.name).string();
          LayerState buffers = read_layer_state(own_path);
          if (std::string bad = first_non_finite(buffers); !bad.empty())
            throw FormatError(str(own_path, ": ", bad, " holds NaN or infinite values; resume an earlier checkpoint"));
          rep->load_layer_buffers(layer, buffers.buffers, own_path);
        }
    }
  }
}

void check_checkpoint_fits(const CheckpointManifest& m, const std::string& checkpoint, const std::string& model,
                           int layers, int64_t batch_size, uint64_t seed, bool shuffle) {
  std::string where = (fs::path(checkpoint) / "manifest.json").string();
  if (m.model != model)
    throw ConfigError(str(where, ": the checkpoint is of model '", m.model, "' but this job trains '", model, "'"));
  if (m.layers != layers)
    throw ConfigError(str(where, ": the checkpoint has ", m.layers, " layers but ", model, " has ", layers));
  if (m.batch_size != batch_size)
    // Not always the flag's: a plan's or --profile's batch where none is given (a resume named the
    // flag never given).
    throw ConfigError(str(where, ": batch_size is ", m.batch_size, " but this run's batch is ", batch_size,
                          " (--batch-size; where not given, the plan's or --profile's): the data position depends on it; "
                          "give --batch-size ", m.batch_size));
  if (m.seed != seed)
    throw ConfigError(str(where, ": seed is ", m.seed, " but --seed is ", seed, " (the data order depends on it)"));
  if (m.shuffle != shuffle)
    throw ConfigError(str(where, ": the run ", m.shuffle ? "shuffled" : "did not shuffle (--no-shuffle)", " but this one ",
                          shuffle ? "shuffles" : "does not (--no-shuffle)", " (the data order depends on it)"));
}

}  // namespace pt::runtime
