#pragma once
// Profile: per-layer costs of a model at one batch size (docs/design.md, "Profile").
// Plain C++: the planner, schedules and simulator read it without LibTorch.
#include <cstdint>
#include <string>
#include <vector>

#include "core/json_doc.h"

namespace pt::profile {

// A layer's forward and backward measured at one batch size (Layer::timings).
struct Timing {
  int64_t batch = 1;
  double forward_ms = 0;
  double backward_ms = 0;
};

struct Layer {
  std::string name;
  double forward_ms = 0;         // whole minibatch of Profile::batch_size
  double backward_ms = 0;
  int64_t activation_bytes = 0;  // this layer's output, whole minibatch
  int64_t parameter_bytes = 0;  // what its steps update: trainable parameters
  std::vector<int> inputs;       // indices of earlier layers whose outputs this layer reads
  // The runtime's own work on the layer's weights once per minibatch, whatever the batch: its
  // optimizer step and one copy of its weights (a stash). Measured by `pipetrain profile`;
  // optional in the file (0: not measured, as in PipeDream's profiles).
  double optimizer_ms = 0;
  // Of optimizer_ms, the stash copy's part. A schedule that stashes no weights (every flushing
  // one: gpipe, 1f1b, zero bubble) makes no copy, and its step takes optimizer_ms less this:
  // mnist-cnn's second stage stepped in 0.18-0.19 ms under 1f1b where its optimizer_ms summed to
  // 0.43. Measured by `pipetrain profile`; optional (0: not measured, the whole charged).
  double stash_copy_ms = 0;
  // Of backward_ms, what its input gradient alone takes (a zero-bubble B, model/split_backward.h),
  // whole minibatch. Measured by `pipetrain profile` where the input takes a gradient; optional
  // (0: not measured, kInputGradientShare of the backward).
  double input_gradient_ms = 0;
  // Bytes the layer's forward leaves alive until its backward (its output and what autograd
  // saves), whole minibatch. Measured by `pipetrain profile`; optional (absent: not measured, and
  // stash_bytes() falls back to activation_bytes, PipeDream's assumption).
  int64_t stash_bytes = 0;
  // Whether stash_bytes was measured: a view's 0 (Flatten) was written as no field and read back as
  // a whole activation (a BatchNorm CNN's second stage modelled at 3.8 MiB, 2.4 measured).
  bool stash_measured = false;
  // Of stash_bytes, what a forward keeps whatever its batch: under bf16, the cast of each weight
  // autograd saves, a copy per microbatch in flight, which scaled by the microbatch's share of
  // the batch left a dualpipev worker 25% over `plan --memory`'s cap. Measured by `pipetrain
  // profile` at the batch and an eighth of it; optional (0).
  int64_t fixed_stash_bytes = 0;
  // Bytes a zero-bubble B (the input gradient alone) leaves alive until its W, whole minibatch:
  // what the nodes feeding a weight saved (a matmul's input), the gradients that reached them
  // and the output and its gradient; the rest of the stash is freed at B (model/split_backward.h).
  // Measured by `pipetrain profile` (with the input needing a gradient, as on any stage but the
  // first); optional (0: not measured, and the model holds the stash until W).
  int64_t split_bytes = 0;
  // Bytes its forward or backward needs beyond the stash while it runs (scratch buffers, the
  // gradients passing through), whole minibatch, besides one gradient of its parameters (the
  // backward makes it before adding it in); measured, optional (0: not measured).
  int64_t workspace_bytes = 0;
  // Of workspace_bytes, what a backward needs whatever its batch: an LSTM's weight gradients
  // summed over its time steps, parameter-sized. Scaled by a microbatch's share of the batch,
  // lstm-lm's workers were modelled 15% under the OS at 8 microbatches, and a plan under `plan
  // --memory` ran over its cap. Measured by `pipetrain profile` at the batch and an eighth of it;
  // optional (0).
  int64_t fixed_workspace_bytes = 0;
  // The same for a zero-bubble B: beyond the stash, the most it holds while it runs (the
  // gradients it keeps for W beside what the chain has not yet freed, the input gradient), whole
  // minibatch. gpt's block: 16.8 MB at batch 64 against a whole backward's 11.8 + 0.8. Measured
  // with split_bytes; optional (0: not measured, workspace_bytes).
  int64_t split_workspace_bytes = 0;
  // What the layer holds that no step updates: its registered buffers (BatchNorm's running
  // statistics, fixed tables, masks) and frozen parameters (requires_grad false). One copy on
  // each worker holding the layer: no gradient, no optimizer state, no versions. Measured by
  // `pipetrain profile`; optional (0). Left out, a layer of 64 MiB tables was modelled at a
  // quarter of its worker's tensors and a plan under `plan --memory` ran 42% over its cap.
  int64_t buffer_bytes = 0;
  // Its forward and backward at several batch sizes, ascending (`pipetrain profile` measures the
  // batch and its halves down to a sixteenth): a call costs more per sample at a small batch
  // (mnist-cnn here: 22-24% more at 16 than at 64), so a microbatch's time is read here, not
  // scaled from the minibatch's. Empty (PipeDream's profiles, one batch size measured): times
  // scale linearly with the batch. Optional in the file.
  std::vector<Timing> timings{};
};

// A parameter shared by several layers (tied input and output embeddings), found by identity
// when the model is exported or built (model/layered_model.h). Optional in the file.
struct Tie {
  std::vector<int> layers;  // ascending, two or more
  int64_t bytes = 0;        // the parameter's size (each layer's parameter_bytes counts it)
};

// Below this many samples a batch, BatchNorm's statistics grow noisy: Wu and He (Group
// Normalization, ECCV 2018) saw ResNet-50's ImageNet error rise steeply under 8 images a batch.
// regnet_y_400mf at batch 32 and lr 0.05 ended 12 steps at loss 6.5 in one microbatch and
// diverged (4.7e10) in 16 microbatches of 2.
inline constexpr int64_t kFewBatchNormSamples = 8;

struct Profile {
  std::string model;
  int64_t batch_size = 1;
  std::string device = "cpu";
  // What the layers computed in (--precision): "fp32", or "bf16", whose activation_bytes are
  // the bf16 bytes crossing a stage boundary. Optional in the file (fp32).
  std::string precision = "fp32";
  // Whose step the layers' optimizer_ms times: "sgd" (with momentum), "adam" or "adamw".
  // Optional in the file (sgd).
  std::string optimizer = "sgd";
  // How the layers were timed: "in sequence" (one after another, as a stage runs them; the
  // profiler's way where its process holds the model) or "alone" (each layer by itself, again
  // and again: from warm caches, so faster than in a stage). Optional in the file ("alone").
  std::string timed = "alone";
  // In sequence, how far the timed rounds disagreed: the spread of their times at the batch size
  // from the 10th to the 90th percentile, over the median (round_spread). A busy machine's rounds
  // disagree, and its profile predicts as badly. 0: not measured. Optional in the file.
  double timing_spread = 0;
  // Timed while other work competed for its core (timing_spread over kBusySpread).
  bool timed_busy() const;
  // The BatchNorms that normalise each microbatch in training (export's DeferrableBatchNorm):
  // under kFewBatchNormSamples a microbatch they train otherwise than the minibatch would, which
  // `plan` notes where it splits the batch so. 0: none, or not known. Optional in the file.
  int64_t batch_norms = 0;
  // The model's input, whole minibatch: the data the first stage holds for each microbatch from
  // its forward to its backward, which no layer's stash counts (it exists before the forward).
  // Left out, resnet18's first stage under gpipe was modelled at 98.1 MiB of tensors and measured
  // 116.5: 4 microbatches of 4.6 MiB of images. Measured by `pipetrain profile`; optional (0).
  int64_t input_bytes = 0;
  std::vector<Layer> layers;
  std::vector<Tie> ties;  // trainable: one gradient and step, summed where a plan splits them
  // Frozen (no step updates them, each layer's buffer_bytes counts them): held once by a worker
  // holding several of their layers, and never exchanged. Optional in the file ("frozen_ties").
  // A frozen tie counted in `ties` took its bytes off the trainable parameters (a stage's
  // gradients went negative) and kept pipedream from splitting what needs no exchange.
  std::vector<Tie> frozen_ties;
  // Layers that compute alike (time_alike: a transformer's blocks), whose times are each group's
  // median. Each group ascending, two layers or more. Optional in the file ("alike_layers").
  std::vector<std::vector<int>> alike;

  int num_layers() const { return static_cast<int>(layers.size()); }
  // True when every layer reads exactly the previous one (layer 0 reads nothing).
  bool is_chain() const;
  double total_compute_ms() const;   // sum of forward + backward
  double total_step_ms() const;      // sum of optimizer_ms: one step of every layer
  int64_t total_parameter_bytes() const;  // a tied tensor once (parameter_bytes below)
};

// True for a layer that only feeds data in, which PipeDream's optimizer leaves out of every
// stage's compute: a source whose name starts with "Input".
bool is_input_layer(const Profile& profile, int layer);
// True for a sink named "__getitem__..." (an unused output of a tuple-returning layer), which
// PipeDream's optimizer removes; placed with the layer it reads.
bool is_detached_sink(const Profile& profile, int layer);
// is_detached_sink of every layer at once, in one pass over the edges (the planner asks it of
// every layer of every plan it weighs: one layer at a time, GNMT's cost grew with its square).
std::vector<char> detached_sinks(const Profile& profile);
// Whether any layer is neither an Input source nor a detached sink: one to place on a stage.
bool has_layer_to_plan(const Profile& profile);

// The cost engine's per-layer rules (docs/design.md, "One cost model"), for the planner, the
// simulator and emulation alike.
// Compute: an Input layer loads data and costs no compute (PipeDream's optimizer leaves it out).
// A minibatch of profile.batch_size computed as `microbatches` microbatches: m times the time of
// one microbatch (at batch / m, from the layer's timings). It may be under the whole minibatch's
// time (mnist-cnn's first convolution here: 4.6 ms in microbatches of 16 against 6.3 at 64,
// whose output leaves the cache), which microbatch_share_floor bounds.
double compute_forward_ms(const Profile& profile, int layer, int microbatches = 1);
double compute_backward_ms(const Profile& profile, int layer, int microbatches = 1);
// The layer's forward (backward) time at a batch of `batch` samples: interpolated between its
// timings (beyond them, along the line through the two nearest, between constant and linear);
// without timings, its time at profile_batch scaled linearly.
double forward_ms_at(const Layer& l, double batch, int64_t profile_batch);
double backward_ms_at(const Layer& l, double batch, int64_t profile_batch);
// The least share of a layer's whole-minibatch time its microbatches may take (1 without
// timings): the planner's closed forms, which take whole minibatches, times this are lower
// bounds of what the simulator charges (plan::physical_limit).
double microbatch_share_floor(const Profile& profile);
// The same for one layer's forward (backward) at a minibatch of `batch`: its fastest per sample.
double layer_share_floor(const Layer& l, int64_t batch, bool backward);
// True when every timed layer has timings at two batch sizes or more.
bool knows_batch_sizes(const Profile& profile);
// The layer's optimizer step and stash copy (Layer::optimizer_ms), charged at each Step; without
// the copy (Layer::stash_copy_ms) where the schedule stashes no weights (`stashes` false).
double compute_step_ms(const Profile& profile, int layer, bool stashes = true);
// Bytes a forward of the layer keeps for its backward (Layer::stash_bytes, or its output when
// not measured), whole minibatch; an Input layer keeps nothing. The memory model's rule.
int64_t stash_bytes(const Profile& profile, int layer);
// What a forward of `scale` of the profile's batch keeps: the fixed part whole, the rest scaled.
double stash_bytes_at(const Profile& profile, int layer, double scale);
// Layer `layer`'s workspace_bytes at `scale` of the profile's batch: its fixed part whole.
double workspace_bytes_at(const Profile& profile, int layer, double scale);
// What a zero-bubble B of `scale` of the batch leaves until its W (Layer::split_bytes, its fixed
// part the stash's); negative where not measured.
double split_bytes_at(const Profile& profile, int layer, double scale);
// Bytes of the parameters `layers` hold, a tied tensor once however many of them hold it (each
// tied layer's parameter_bytes counts it; the runtime keeps one copy, one gradient, one momentum).
// Summing layers counted a GPT's tied embedding twice in a stage's memory and all-reduce.
int64_t parameter_bytes(const Profile& profile, const std::vector<int>& layers);
// What `layers` count twice or more of the ties: the sum of their parameter_bytes less the above.
int64_t tied_duplicate_bytes(const Profile& profile, const std::vector<int>& layers);
// Bytes of the buffers and frozen parameters `layers` hold, a frozen tie once.
int64_t buffer_bytes(const Profile& profile, const std::vector<int>& layers);
// Per layer, the parameter bytes it adds to the layers before it: a tie's later members less the
// tie. Sums over sets that hold each tie whole or not at all (the planner's states) are exact.
std::vector<int64_t> own_parameter_bytes(const Profile& profile);
// Where the profile does not separate a backward's input gradient (B) from its weight gradient
// (W: no Layer::input_gradient_ms), a schedule that runs them apart (zero bubble) charges this
// share of the backward to B and the rest to W (the zero-bubble paper's T_B ~ T_W).
inline constexpr double kInputGradientShare = 0.5;
// A spread of rounds (Profile::timing_spread) no quiet machine showed. mnist-cnn, gpt and mlp
// profiled here spread 2.7-10%, also beside one busy process on the 2 cores; beside two, 34-119%,
// and their times came out 29% longer.
inline constexpr double kBusySpread = 0.2;
// Of layer `layer`'s backward, the share its input gradient takes (Layer::input_gradient_ms, or
// kInputGradientShare). gpt's blocks measure 0.59: charged 0.5, zb-h1 on 2 of its stages
// simulated 7% over 1f1b where the two ran alike.
double input_gradient_share(const Profile& profile, int layer);
// The share of stage `stage`'s backward (its `layers`) that its B takes: the layers' shares
// weighted by their backwards, but all of it on
// the first stage, whose input (the data) needs no gradient: the runtime runs its whole backward
// at B and its W only releases the microbatch (runtime/stage_replica.h). The runtime had run
// no B there and the whole backward at W (vgg16's first of 8 chunks under zb-v: B 0.002 ms, W
// 5.05), where the simulator charged 2.51 each, and measured 0.87 of what it simulated.
double input_gradient_share(const Profile& profile, int stage, const std::vector<int>& layers);
// Part of a stage's gradients that the runtime all-reduces as one bucket (gradient_buckets.h).
struct GradientBucket {
  double ready_share = 1;  // share of the stage's backward done when its gradients are final
  int64_t bytes = 0;
};
// The buckets of the layers `layers` (a stage, in order): layers from the last to the first
// (the backward's order), cut where a bucket would exceed bucket_bytes (a larger layer is a
// bucket of its own), in the order they all-reduce. bucket_bytes <= 0: one bucket, ready at the
// end of the backward.
std::vector<GradientBucket> gradient_buckets(const Profile& profile, const std::vector<int>& layers,
                                             int64_t bucket_bytes);
// Bytes crossing each cut of a partition, per minibatch: out[s] = the activations of layers in
// stages <= s read by a layer in a stage > s (a tensor skipping stages crosses every cut it
// passes, once per cut). stage_of[l] is layer l's stage in 0..stages-1; out has `stages`
// entries (the last is 0). With count_input_layers false, Input layers' outputs are left out
// (the planner's search space pins them to stage 0 and does not track them).
std::vector<double> cut_bytes(const Profile& profile, const std::vector<int>& stage_of, int stages,
                              bool count_input_layers = true);
// cut_bytes with each layer a stage of its own: out[c] crosses the cut after layer c.
std::vector<double> bytes_after_each_layer(const Profile& profile);

inline constexpr int kProfileVersion = 1;
// The most layers a profile may have, and the longest time one layer may take (ms, forward or
// backward): far beyond any real model, small enough that every table and sum stays finite.
inline constexpr int kMaxLayers = 100000;
inline constexpr double kMaxLayerMs = 1e9;
// FormatError naming `where` when a reader's layer count or a time passes those bounds. A time's
// `where` is a callable giving the name, built only for the error: a reader checks thousands.
void check_layer_count(size_t layers, const std::string& where);
[[noreturn]] void refuse_layer_ms(double ms, const std::string& where);
template <class Where>
double check_layer_ms(double ms, const Where& where) {
  if (!(ms <= kMaxLayerMs)) refuse_layer_ms(ms, where());
  return ms;
}
// FormatError naming `path` when no layer takes any forward or backward time: plans and
// simulations of it are all 0 ms (`plan` chose one worker at 0 ms per minibatch, `simulate`
// printed 0 samples/s), so those that time a profile refuse it.
void require_timed(const Profile& profile, const std::string& path);
// The most bytes one layer's activation or parameters may claim (1 PiB, beyond any device):
// keeps sums over a profile's layers far from int64 overflow.
inline constexpr int64_t kMaxLayerBytes = int64_t(1) << 50;

// Layers whose keys are equal compute alike: their timed figures (forward, backward, input
// gradient, step, each timing) become the group's medians, and Profile::alike lists the groups.
// Timed in turn on a busy machine, gpt's eight identical blocks measured apart by noise alone,
// and `train --stages 4` split them three ways in five runs.
void time_alike(Profile& profile, const std::vector<std::string>& keys);

// The same model at another batch size: times read from the layers' timings (linearly scaled
// without), activation bytes scaled linearly; parameter bytes unchanged.
Profile with_batch_size(const Profile& p, int64_t batch_size);

json to_json(const Profile& p);
// Validates: format tag, fields, types, non-negative numbers, `inputs` in range and earlier
// than the layer. `source` names the file in errors. A missing `inputs` means "the previous
// layer" (none for layer 0).
Profile profile_from_json(const json& doc, const std::string& source);

Profile read_profile_json(const std::string& path);
void write_profile(const Profile& p, const std::string& path);  // atomic

}  // namespace pt::profile
