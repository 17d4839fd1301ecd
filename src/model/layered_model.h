#pragma once
// A model as a sequence of named layers that later steps can cut between (docs/design.md, "model").
// A residual block or a transformer block is one layer. Every zoo model is a chain: layer i
// reads layer i-1's output (layer 0 reads the input batch); `inputs` records it explicitly so
// profiles carry the graph.
//
// A process builds only the layers it holds (docs/runtime.md, "A worker holds only its stage"):
// every layer is added with the function that makes it, which runs at once for a held layer
// and never otherwise; the names, the graph and the tie groups are known for every layer.
// Initial weights do not depend on which layers are built: layer i draws from a generator seeded
// by (seed, i), so every plan and one worker start from the same weights.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "model/deferred_batch_norm.h"
#include "model/precision.h"

namespace pt::model {

enum class Task {
  kClassification,  // output [N, classes, d...] logits, target [N, d...] class ids (d: pixels, tokens)
  kLanguageModel,   // output [N, T, vocab] logits, target [N, T] token ids
  kEmulated,        // emulated compute (emulated_layer.h): output zeros, loss their mean, no accuracy
  kRegression,      // output and target of one shape, mean squared error, no accuracy
};

// A loss the model brings (an imported model file's own `loss` method): (output, target) -> scalar.
using LossFunction = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>;

// A parameter that two or more layers share (tied input and output embeddings, a shared block):
// one tensor, found by identity. `param` indexes LayeredModel::layer_parameters(layer).
struct TieMember {
  int layer = 0;
  int param = 0;
};
struct TieGroup {
  std::vector<TieMember> members;  // in layer order, one per layer that holds it
  int64_t bytes = 0;               // the parameter's size
  bool trains = true;              // requires_grad: a frozen tie takes no step
  std::vector<int> layers() const;
};

// The layers a process builds: every one (the default), none (a description: names, graph,
// ties), or a list (a worker's stages).
class LayerSet {
 public:
  LayerSet() = default;
  explicit LayerSet(std::vector<int> layers) : layers_(std::move(layers)) {}
  static LayerSet none() { return LayerSet(std::vector<int>{}); }
  bool all() const { return !layers_.has_value(); }
  bool contains(int layer) const;
  std::string describe() const;  // "all", "none", "0-2, 5"

 private:
  std::optional<std::vector<int>> layers_;
};

using LayerMaker = std::function<torch::nn::Sequential()>;

struct Layer {
  std::string name;
  torch::nn::Sequential module{nullptr};  // every layer is a Sequential: uniform, cloneable; null where not held
  std::vector<int> inputs;
  LayerMaker make;  // builds the layer afresh, with its initial weights
  bool draws_random = false;  // its forward draws random numbers in training (dropout)
};

class LayeredModel {
 public:
  // `seed`: layer i's initial weights come from a generator seeded by (seed, i).
  LayeredModel(std::string name, Task task, std::vector<int64_t> sample_shape, bool integer_input,
               LayerSet held = {}, uint64_t seed = 0);

  // Adds the next layer; `make` runs now (with the layer's generator) when this model holds it,
  // unless `built` gives the layer already made.
  void add(std::string name, LayerMaker make, torch::nn::Sequential built = nullptr);
  // A layer built by the caller, which make_layer hands out as it is (a model held whole).
  void add(std::string name, torch::nn::Sequential module);
  bool holds(int layer) const { return static_cast<bool>(layers_.at(layer).module); }
  const LayerSet& held() const { return held_; }
  // Layer `layer` built afresh with its initial weights, whether or not this model holds it:
  // a forward or a profile of a model no process holds whole, one layer at a time.
  torch::nn::Sequential make_layer(int layer) const;
  // Replaces the task's loss (the accuracy still follows the task).
  void set_loss(LossFunction loss) { custom_loss_ = std::move(loss); }
  bool has_own_loss() const { return static_cast<bool>(custom_loss_); }
  // The built-in cross-entropy's label smoothing in training (--label-smoothing; PyTorch's
  // label_smoothing, ignored targets skipped as ever). An evaluation's loss is the plain
  // cross-entropy, whose exp is the perplexity. Throws UsageError where no built-in
  // cross-entropy trains the model (mse, a file's own loss, emulated compute).
  void set_label_smoothing(double smoothing);
  double label_smoothing() const { return label_smoothing_; }
  // The precision forward and loss compute in (precision.h): under bf16, in an autocast scope.
  void set_precision(Precision p) { precision_ = p; }
  Precision precision() const { return precision_; }
  // The precision layer `layer`'s output crosses to the next stage in: the model's, but fp32 for
  // an output that packs integer tensors (token ids) into a float one, which bf16 would round
  // (it holds integers exactly up to 256 only: ids past it changed, and past the vocabulary
  // failed an embedding's lookup). A model file records which (set_exact_outputs).
  Precision wire_precision(int layer) const;
  void set_exact_outputs(std::vector<bool> exact) { exact_outputs_ = std::move(exact); }
  // The device's share of an optimizer step. An emulated model (emulated_layer.h) stands for an
  // accelerator whose step over layers [first, last) takes the profile's time, which the host's
  // step on the emulated weights does not: after stepping, a stage calls device_step with the
  // host's own time and whether the step stashed a copy of the weights (a schedule that
  // flushes stashes none), and the model waits for the rest. Real models do nothing.
  using DeviceStep = std::function<void(int first, int last, double host_ms, bool stashed)>;
  void set_device_step(DeviceStep d) { device_step_ = std::move(d); }
  void device_step(int first, int last, double host_ms, bool stashed) const {
    if (device_step_) device_step_(first, last, host_ms, stashed);
  }

  const std::string& name() const { return name_; }
  // A model file's SHA-256 (scripted_model.h): the code this model runs; "" for the zoo's.
  const std::string& file_sha256() const { return file_sha256_; }
  void set_file_sha256(std::string digest) { file_sha256_ = std::move(digest); }
  Task task() const { return task_; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  const Layer& layer(int i) const { return layers_[i]; }
  Layer& layer(int i) { return layers_[i]; }
  // Shape of one sample (without the batch dimension); token ids when integer_input().
  const std::vector<int64_t>& sample_shape() const { return sample_shape_; }
  bool integer_input() const { return integer_input_; }
  // Integer inputs: the ids it takes are below this (export's --input-high; 0: not known).
  // Synthetic data for a token classifier draws its ids below it, not below its classes: a DNA
  // model of 4 tokens and 10 classes failed its embedding's lookup on every synthetic batch.
  int64_t input_high() const { return input_high_; }
  void set_input_high(int64_t high) { input_high_ = high; }

  // Runs layers [first, last) on x; a layer this model does not hold is built for the call and
  // dropped after it (its initial weights).
  torch::Tensor forward(torch::Tensor x, int first = 0, int last = -1);
  torch::Tensor loss(const torch::Tensor& output, const torch::Tensor& target) const;
  // PyTorch's ignore_index: a target the built-in cross-entropy losses (classes, --loss lm) skip,
  // as its own do; they average over the targets they keep (padding at a text's end).
  static constexpr int64_t kIgnoredTarget = -100;
  bool skips_ignored_targets() const;
  // The targets an accuracy counts and a built-in cross-entropy averages over: those not ignored
  // where it skips some, else every one.
  int64_t kept_targets(const torch::Tensor& target) const;
  // What loss() averages over, to weigh batches by: the kept targets where it skips some, else
  // the samples (a mean over samples: mse, a file's own loss).
  int64_t loss_weight(const torch::Tensor& target) const;
  // The dimension of `output` whose argmax predicts `target`'s class ids: 1 for cross-entropy
  // ([N, C, d1..dk] against [N, d1..dk]), the last for an LM; none for mse, float targets, or a
  // file's own loss whose shapes leave it open. That loss says nothing of where its classes lie:
  // the one of dimension 1 and the last that leaves the targets' shape, per sample, is taken, and
  // where both do (an LM's [N, T, V] against [N, T] with T = V), neither.
  std::optional<int64_t> class_dim(const torch::Tensor& output, const torch::Tensor& target) const;
  // Whether `output` less its dimension `dim` has `target`'s shape, per sample.
  static bool classes_along(const torch::Tensor& output, const torch::Tensor& target, int64_t dim);
  // Number of correct predictions along class_dim (each of an LM's tokens counts); 0 without one.
  int64_t correct(const torch::Tensor& output, const torch::Tensor& target) const;

  // Each layer's parameters in layer order: a tied tensor once per layer holding it (per-layer
  // offsets index this list; FlatParameters keeps one slot for it).
  // Held layers only (a check names the layer otherwise).
  std::vector<torch::Tensor> parameters(int first = 0, int last = -1) const;
  // Every tensor once (a tie at its first layer): what an optimizer steps. Given the list above,
  // torch::optim::SGD updated a tied weight twice per step, once per layer holding it.
  std::vector<torch::Tensor> unique_parameters() const;
  std::vector<torch::Tensor> layer_parameters(int i) const;
  int64_t parameter_bytes(int i) const;
  // Parameters held by more than one layer (docs/design.md, "Parameters shared between layers"):
  // those a model file records (set_tie_groups), else found by tensor identity among the held
  // layers. FormatError when two layers' parameters overlap without being one tensor.
  std::vector<TieGroup> tie_groups() const;
  // For a model whose layers are built apart (a model file read per layer): its ties as recorded.
  // A model built in part finds by identity only the ties among the layers it holds, so a model
  // whose layers share a parameter declares its ties here to be built in part.
  void set_tie_groups(std::vector<TieGroup> ties) { declared_ties_ = std::move(ties); }
  // The deferrable BatchNorms of held layers [first, last) (deferred_batch_norm.h).
  std::vector<DeferredBatchNorm> deferred_batch_norms(int first, int last) const;
  // How many there are in the model, held or not (a layer not held is built to count them).
  int64_t deferrable_batch_norms() const;
  // Whether a layer's forward draws random numbers in training (dropout), held here or not.
  bool any_layer_draws() const;
  void train(bool on = true);  // the held layers
  // Random draws (dropout masks) come from a generator seeded by (seed, layer, key) for each
  // forward of a layer that draws, never from the process's one generator: the workers of a
  // threads run drew from it in the order their threads reached it (weights 13-35% apart from run
  // to run), and every gloo process drew the same masks on every stage and replica. The runtime
  // keys each forward by its microbatch's global index (minibatch x microbatches + microbatch), so
  // a microbatch's masks are the same whichever stage, replica or worker runs it, whatever the
  // order, on a resume, and in a recomputed forward.
  void set_draw_key(int64_t key) { draw_key_ = key; }

 private:
  const Layer& held_layer(int i) const;  // a check names the layer when it is not held

  std::string name_;
  LayerSet held_;
  uint64_t seed_;
  std::optional<std::vector<TieGroup>> declared_ties_;
  std::string file_sha256_;
  Task task_;
  std::vector<int64_t> sample_shape_;
  bool integer_input_;
  int64_t input_high_ = 0;
  std::vector<Layer> layers_;
  bool is_training_ = true;
  int64_t draw_key_ = 0;
  LossFunction custom_loss_;
  double label_smoothing_ = 0;
  Precision precision_ = Precision::kFloat32;
  std::vector<bool> exact_outputs_;  // [layer]: wire_precision; empty: none
  DeviceStep device_step_;
};

}  // namespace pt::model
