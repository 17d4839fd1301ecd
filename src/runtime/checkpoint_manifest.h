#pragma once
// The manifest of a training checkpoint (pipetrain.checkpoint/2): what a checkpoint directory
// holds and how to verify it. Plain C++ (no LibTorch) so that it can be fuzzed and its tests
// build fast; the tensors themselves are written by checkpoint.h.
//
// A checkpoint is a directory <dir>/step-<N> holding manifest.json and one file per model
// layer (layer-<i>.tensors, layer_file.h: the layer's parameters and SGD momentum buffers, data
// only). Weights are stored per layer, not per stage, so a checkpoint resumes into any plan.
// Reading one never runs code; version 1 (TorchScript layer files) is refused with a message.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace pt::runtime {

struct CheckpointFile {
  std::string name;     // relative to the checkpoint directory
  int layer = -1;       // the model layer it holds
  int64_t bytes = 0;
  uint32_t crc32 = 0;
  int replica = 0;      // a replica_buffers file's: the replica of its layer's stage (>= 1)
};

// The data a run trained on: its name, its training samples and a CRC-32 of them (their tensors,
// or their shards' CRCs). A resumed run on other data is refused (train_samples < 0: an older
// checkpoint, which does not say).
struct DataIdentity {
  std::string name;
  int64_t train_samples = -1;
  uint32_t crc32 = 0;
  std::string describe() const;  // "synthetic (2048 training samples, CRC-32 1a2b3c4d)"
  // The same samples, whatever path they were read by: a file moved, or named from another folder
  // ("file:../d.pt" and "file:d.pt"), was refused as other data. The kind ("file", "tokens") must match.
  bool operator==(const DataIdentity& o) const {
    return kind() == o.kind() && train_samples == o.train_samples && crc32 == o.crc32;
  }
  std::string kind() const { return name.substr(0, name.find(':')); }
};

struct CheckpointManifest {
  std::string run_id;           // the run that wrote it (a fresh run draws one; --resume keeps it)
  std::string model;            // model name, e.g. "mnist-cnn"
  std::string model_sha256;     // a model file's SHA-256 (the code it was trained by); "" for the zoo's
  int layers = 0;               // model layer count
  int64_t step = 0;             // minibatches completed; training resumes at this minibatch
  int64_t batch_size = 0;
  uint64_t seed = 0;            // data order is a function of (seed, epoch): no other RNG state
  bool shuffle = true;          // and of whether it shuffles (--no-shuffle; absent in older files: true)
  std::string schedule;         // what wrote it (informative: any plan may resume it)
  std::string plan;             // plan shape, e.g. "2-1-1"
  int workers = 0;
  double lr = 0, momentum = 0, weight_decay = 0;
  std::string weight_decay_on = "all";  // model::OptimizerOptions::weight_decay_on (older files: all)
  // model::OptimizerOptions::zero_grad: which parameters a step takes (absent in older files: "",
  // not compared on resume).
  std::string zero_grad;
  // Which optimizer's state the layer files hold (model::OptimizerOptions::kind; older files: sgd).
  std::string optimizer = "sgd";
  // The learning rate's course (model::OptimizerOptions): its schedule, warm-up, and the steps the
  // schedule spans (the run's minibatch count). Absent in older files: lr_schedule "".
  std::string lr_schedule;
  int64_t warmup_steps = 0, schedule_steps = 0;
  double min_lr = 0;  // where cosine and linear end (older files: 0, as they decayed to)
  // Adam's betas and eps, the clipping cap (0: none) and the precision computed in: absent in
  // older files (-1, ""), and then not compared on resume.
  double beta1 = -1, beta2 = -1, eps = -1, clip_grad_norm = -1;
  std::string precision;
  double label_smoothing = -1;  // the cross-entropy's in training (absent in older files: -1, not compared)
  // A minibatch's microbatches and whether BatchNorm's statistics were deferred (WorkerOptions):
  // a model's BatchNorms follow them, so a resume under others differs from an uninterrupted run
  // (absent in older files: 0 and -1, not compared).
  int microbatches = 0;
  int deferred_batch_norm = -1;
  // What sets an asynchronous schedule's weight lag (job::weight_lag): the schedule, each stage's
  // layers and replicas, and the flags of its lag. A resume under others differs from an
  // uninterrupted run, where a synchronous one computes the same (absent in older files and for
  // synchronous schedules: "", not compared).
  std::string weight_lag;
  std::vector<CheckpointFile> files;  // one per layer, in layer order
  // The buffers of a replicated stage's other replicas (layer-<i>.replica-<r>.tensors, buffers
  // only): nothing keeps a replica's buffers in step with replica 0's, so a resume that gave
  // every replica replica 0's trained another model than the run it continued (a forward that
  // reads a running average it updates, dp on 2 workers: 7e-4 apart). Absent in older files.
  std::vector<CheckpointFile> replica_buffers;
  // Parameters shared between layers (model::TieGroup): each group's (layer, parameter index)
  // pairs. Every layer's file holds its copy, so readers count a group once (absent in older
  // files: none known).
  std::vector<std::vector<std::pair<int, int>>> ties;
  DataIdentity data;  // absent in older files: train_samples -1
  // The run's first step's loss (TrainResult::first_loss), which a resume judges divergence by:
  // judged by its own first loss, a run resumed from one that had diverged to 1e30 exited 0.
  // Absent in older files and for emulated layers (no loss): NaN.
  double first_loss = std::numeric_limits<double>::quiet_NaN();
};

std::string manifest_to_json(const CheckpointManifest& m);
// A new run id: 16 random hexadecimal digits.
std::string new_run_id();
// Parses a manifest; `source` names it in errors (FormatError naming the field and value).
CheckpointManifest manifest_from_json(const std::string& text, const std::string& source);

// CRC-32 (zlib's) of a byte string, or of `size` bytes at `data`, read where they lie; given the
// CRC of the bytes before them, that of the whole.
uint32_t crc32_of(const void* data, size_t size, uint32_t before = 0);
inline uint32_t crc32_of(const std::string& bytes) { return crc32_of(bytes.data(), bytes.size()); }
// The CRC-32 of a file's bytes, read in pieces.
uint32_t crc32_of_file(const std::string& path);

// The name of the directory of step N ("step-00000120"), and the step of such a name (-1 when
// the name is not one).
std::string checkpoint_dir_name(int64_t step);
int64_t checkpoint_step_of(const std::string& name);
// The file of layer N's state ("layer-3.tensors"), and of a replica's own buffers beside it.
std::string layer_file_name(int layer);
std::string replica_file_name(int layer, int replica);

// The newest complete checkpoint under `dir` (a step-N directory with a manifest.json), or ""
// when there is none; with `before`, the newest of an earlier step. Temporary directories of
// interrupted writes are ignored.
std::string newest_checkpoint(const std::string& dir, int64_t before = INT64_MAX);

// Reads <checkpoint>/manifest.json and checks every file's size and checksum: FormatError
// naming the file and what differs (truncated, wrong checksum, missing).
CheckpointManifest read_verified_manifest(const std::string& checkpoint);

// A learning rate's course as `checkpoint inspect` and a resume's notes say it: "constant",
// "cosine over 40 steps", "linear to 0.0003 over 40 steps" (model/optimizer.h's schedules).
std::string lr_course(const std::string& schedule, int64_t steps, double min_lr);

}  // namespace pt::runtime
