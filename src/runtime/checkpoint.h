#pragma once
// Training checkpoints: per-layer weights and SGD momentum, written by the workers at a
// drained segment boundary, verified and loaded into any plan (checkpoint_manifest.h has the
// layout). Writes are atomic: files go to a temporary directory that is renamed to step-<N>
// only after every file and the manifest are on disk, so a kill at any moment leaves the
// previous checkpoint intact.
#include <string>
#include <vector>

#include <torch/torch.h>

#include "runtime/checkpoint_manifest.h"
#include "runtime/transport.h"
#include "runtime/worker.h"
#include "schedule/schedule.h"

namespace pt::runtime {

struct CheckpointOptions {
  std::string dir;         // where step-<N> directories go; empty: no checkpoints
  int64_t every = 0;       // minibatches between checkpoints (0: only at the end)
  bool resume = false;     // continue from the newest complete checkpoint in dir
  bool overwrite = false;  // a fresh run may replace another run's checkpoints in dir
  int keep = 2;            // complete checkpoints of this run kept; older ones are removed
};

// How a run starts with its checkpoint folder (start_checkpoints).
struct CheckpointStart {
  std::string run_id;           // this run's: the resumed checkpoint's, or a new one
  std::string resume_from;      // the verified checkpoint to resume; "" for none
  CheckpointManifest manifest;  // its manifest
  // Resuming: the step folders after the one resumed that are no checkpoint (no manifest.json),
  // for a note: the resume was silently an earlier step's.
  std::vector<std::string> passed_over;
};

// Before training: a run owns its checkpoint folder. Creates options.dir and proves it writable
// (UsageError naming --checkpoint-dir otherwise); with --resume, the folder must exist (a
// misspelt one is an error, not a fresh start) and its newest complete checkpoint is verified;
// without it, a folder that holds checkpoints is refused (ConfigError: give --resume or
// --overwrite). Nothing happens when options.dir is empty.
CheckpointStart start_checkpoints(const CheckpointOptions& options);
// Before training: a step folder this run will write a checkpoint into (`steps`) that holds
// something else is refused now (ConfigError naming it), not when the run reaches the step.
void check_checkpoint_steps(const std::string& dir, const std::vector<int64_t>& steps);

// Removes pipetrain's files from every interrupted save's `.tmp-step-<N>` in `dir`, and each
// folder once empty, where no run holds the folder: a launcher's, once its workers are gone (a
// worker 0 stopped by a signal, the launcher's own after another failed, never unwound to remove
// its own: 2.6 MB stayed until the next save). One that holds its manifest is a complete
// checkpoint a failed rename left there, which the run told the user to move: it stays.
void remove_interrupted_saves(const std::string& dir);

// One layer's state (stage_replica.h) as a layer file (layer_file.h; an undefined tensor stands
// for a buffer not yet created), and back. Both go a tensor at a time between the file and the
// tensors, holding no copy of the file: a checkpoint costs no memory beyond the state.
void write_layer_state(const std::string& path, const LayerState& s);
// `into`, where given, is where the layer lives (StageReplica::layer_state with storage): a
// tensor of the same shape and dtype there is read into in place and returned, so a resume
// holds no second copy of a layer (it held one: +128 MiB for a 64 MiB weight and its momentum).
LayerState read_layer_state(const std::string& path, const LayerState* into = nullptr);
// The first tensor of `s` that is not all finite ("param.0", "momentum.2", "buffer.1"), or "",
// looked for a piece at a time (no temporary the size of a tensor).
std::string first_non_finite(const LayerState& s);

// The run's loss when a checkpoint is due, as the reporting worker knows it (the others: known
// false). A checkpoint shares it among the workers, keeps the first in its manifest, and is not
// written where the loss diverged (divergence(), trainer.h): a run refused as diverged kept the
// checkpoints it wrote on the way up, and a resume from them exited 0 at a loss of 2.8e31.
struct RunLoss {
  bool known = false;
  double first = 0;            // the run's first step's (a resumed run's: its checkpoint's)
  std::vector<double> recent;  // the last losses reported, up to kFinalLossSteps (trainer.h)
  int64_t steps = 0;           // reported by this run
  // `first` is the whole run's step 1's (not a resume's own first, where its checkpoint recorded
  // none): only then is it kept in the manifest, which a later resume's --metrics rows are judged by.
  bool first_of_run = true;
};

// Writes checkpoints for one worker; every worker of the job calls save() at the same steps
// (it is collective: the workers meet in barriers over the transport). Worker 0 leads: it
// prepares the temporary directory, writes the manifest and renames it into place, then keeps
// the newest `keep` checkpoints of this run (base.run_id) and removes other runs' only with
// --overwrite; it never removes the checkpoint it just wrote.
class Checkpointer {
 public:
  // `base` carries the job's description (model, layers, batch size, seed, schedule, plan,
  // workers, SGD settings); save() fills in the step and the files.
  Checkpointer(CheckpointOptions options, CheckpointManifest base, const schedule::Schedule& typical);
  void save(Worker& worker, Transport& transport, int64_t step, const RunLoss& loss = {});
  const CheckpointOptions& options() const { return options_; }

 private:
  CheckpointOptions options_;
  CheckpointManifest base_;
  std::vector<std::vector<int>> stage_workers_;
  std::vector<std::vector<int>> stage_layers_;
};

// Loads the layers of every stage `worker` holds from a verified checkpoint (tensor shapes
// are checked against the model: a ConfigError names the file, the tensor and both shapes).
void load_checkpoint(Worker& worker, const schedule::Schedule& typical, const std::string& checkpoint,
                     const CheckpointManifest& manifest);

// Checks that a checkpoint fits this job: the model and its layer count, the batch size and
// the seed (which together define the data position). ConfigError names the manifest, the
// field and both values.
void check_checkpoint_fits(const CheckpointManifest& m, const std::string& checkpoint, const std::string& model,
                           int layers, int64_t batch_size, uint64_t seed, bool shuffle);



}  // namespace pt::runtime
