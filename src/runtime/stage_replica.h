#pragma once
// One replica of one stage on a worker: its layers, its optimizer, the activations of the
// microbatches in flight, and (for asynchronous schedules) the weight stash: the version each
// in-flight microbatch's forward used, restored for its backward (PipeDream §3.3).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "model/layered_model.h"
#include "model/flat_parameters.h"
#include "model/optimizer.h"
#include "model/split_backward.h"

namespace pt::runtime {

// What a checkpoint keeps of one model layer: its parameters and their SGD momentum buffers
// (undefined before the first step).
struct LayerState {
  std::vector<torch::Tensor> params;
  std::vector<torch::Tensor> momentum;  // sgd's momentum, adam's first moment (undefined: none yet)
  std::vector<torch::Tensor> variance;  // adam's second moment (empty under sgd)
  // Each parameter's optimizer steps so far (adam's bias corrections; a parameter no backward
  // reached skips steps: model::OptimizerOptions::zero_grad); empty where a file holds none.
  std::vector<int64_t> optimizer_steps;
  std::vector<torch::Tensor> buffers;  // the layer's buffers (BatchNorm's running statistics)
};

class StageReplica {
 public:
  // `model` is this worker's own copy of the whole model; the replica keeps layers [first, last).
  // With stash_weights, at most max_versions weight versions are alive at once (the stashed and
  // the newest: the schedule's weight_versions), unless keep_history asks for more.
  // With recompute, a forward keeps only its input (and, on the last stage, the target) and
  // runs without building a graph; the backward runs the forward again first, with the weight
  // version the first one used, so the gradients are those of the plain backward. A stage whose
  // forward draws random numbers (dropout) would draw others the second time, and its backward
  // would differentiate another function than the one that gave the loss: its first forward is
  // run twice and compared, and a difference is a ConfigError naming the layers.
  // `held_by`: the replicas this worker built before, one of which may already hold (flatten and
  // step) a parameter of these layers: a tie group whose copies are one tensor on this worker (a
  // V schedule's first and last chunk, a language model's input embedding and its head). This
  // replica then borrows it: its backwards add to that replica's gradient buffer, which steps
  // it once, after every backward of the minibatch on the worker (TiedGradients checks the order).
  StageReplica(std::shared_ptr<model::LayeredModel> model, int first, int last, bool is_last,
               const model::OptimizerOptions& optimizer, bool stash_weights, int max_versions, bool recompute = false,
               const std::vector<const StageReplica*>& held_by = {});

  // Forward of microbatch `mb`. `input` is the data (first stage) or the received activation.
  // On the last stage, `target` gives the loss, scaled by `loss_scale`; returns the output
  // (the loss on the last stage), as it goes on the wire (model::to_wire: bf16 under bf16).
  // `version` >= 0 (vertical sync) runs the forward with that older weight version instead
  // of the newest; the replica must have been told to keep a history (keep_history).
  // `predict_steps` > 0 (weight prediction, asynchronous schedules): the gradient of this
  // microbatch will be applied that many steps from now, so its forward and backward run on
  // weights predicted that far ahead (Optimizer::predict, at the rate of step `minibatch`, the
  // microbatch's global minibatch, so a resumed run predicts as the uninterrupted one), held for
  // it alone, instead of the newest.
  torch::Tensor forward(int64_t mb, const torch::Tensor& input, const torch::Tensor& target, double loss_scale,
                        int64_t version = -1, int64_t predict_steps = 0, int64_t minibatch = 0);
  // Backward of `mb` from the output gradient (ignored on the last stage, which starts from its
  // loss). input_only: only the input gradient (zero-bubble B, model/split_backward.h; W
  // follows), but the whole backward where the input needs no gradient (the first stage).
  // Returns the input gradient (undefined on the first stage), as it goes on the wire.
  torch::Tensor backward(int64_t mb, const torch::Tensor& output_grad, bool input_only);
  // The weight gradient of `mb` after an input-only backward (zero-bubble W).
  void backward_weight(int64_t mb);
  void step(double grad_scale, int64_t minibatch);  // minibatch: see Optimizer::step
  // Vertical sync (PipeDream §3.3): keep the last `versions` weight versions, whether or not a
  // microbatch in flight uses them, because a later forward may ask for one.
  void keep_history(int64_t versions) { history_ = versions; }
  // 2bw's weight prediction: a minibatch's microbatches all run on one copy of the weights,
  // predicted at its first forward as far ahead as the step that applies its gradient (forward's
  // predict_steps; none where that step is the next one: the newest, which no step changes
  // before then), and freed by that step. Pipedream predicts per microbatch. Where the optimizer
  // has no velocity to follow (sgd without momentum) 2bw keeps its delayed version instead.
  void predict_per_minibatch() { per_minibatch_ = true; }
  bool predicts_per_minibatch() const { return per_minibatch_ && optimizer_.predicts() && stash_weights_; }
  // The weight version each microbatch's forward used (recorded with record_weight_sums).
  const std::map<int64_t, int64_t>& used_versions() const { return used_versions_; }

  // Checkpoints, at a drained boundary (nothing in flight): the newest weights and momentum
  // of model layer `layer`, which this replica must hold, as views of the live tensors (no copy
  // of a stage's state; the next step changes them); loading checks the shapes.
  // `storage`: the optimizer's state where it will live even before a first step, which a
  // resume reads the checkpoint's straight into (a borrowed tie's is its holder's to load).
  LayerState layer_state(int layer, bool storage = false) const;
  void load_layer_state(int layer, const LayerState& s, const std::string& source);
  // Its buffers alone (a replica's own, which a checkpoint keeps beside replica 0's layer file).
  void load_layer_buffers(int layer, const std::vector<torch::Tensor>& buffers, const std::string& source);
  int first_layer() const { return first_; }
  int last_layer() const { return last_; }  // exclusive

  // The flat weight and gradient buffers (all-reduce buckets are ranges of the gradients).
  model::FlatParameters& flat() { return *flat_; }
  // p's one-element view of flat().reached(); undefined where this replica does not step p.
  torch::Tensor reached_flag(const torch::Tensor& p);
  // Whether `p` is one of this replica's own parameters (flattened and stepped here), and its
  // optimizer state (a copy; undefined before the first step).
  bool holds(const torch::Tensor& p) const;
  torch::Tensor state_of(const torch::Tensor& p, int which) const;  // model::Optimizer::state
  int64_t steps_of(const torch::Tensor& p) const;                   // model::Optimizer::steps_taken
  const std::vector<torch::Tensor>& parameters() const { return params_; }
  int64_t version() const { return version_; }
  int64_t stash_size() const { return static_cast<int64_t>(in_flight_.size()); }
  int64_t versions_held() const { return static_cast<int64_t>(versions_.size()); }
  int64_t peak_versions_held() const { return peak_versions_; }
  // The most copies of the stage's weights alive at once: the newest, the stashed versions and
  // the predicted copies (the memory model's WorkerMemory::weights counts the same).
  int64_t peak_weight_copies() const { return peak_copies_; }
  double last_loss() const { return last_loss_; }
  int64_t activation_bytes(int64_t mb) const;
  // Sum of the weights a microbatch's forward/backward ran with: tests check stashing with it.
  std::map<int64_t, std::pair<double, double>>& weight_sums() { return weight_sums_; }
  void record_weight_sums(bool on) { record_sums_ = on; }

 private:
  struct InFlight {
    torch::Tensor input;   // requires grad (all but the first stage)
    torch::Tensor output;  // the stage output, or the loss on the last stage (recompute: from the backward)
    torch::Tensor output_grad;
    std::vector<int64_t> output_sizes;
    torch::Tensor target;  // recompute on the last stage: the loss is rebuilt in the backward
    double loss_scale = 1;
    int64_t version = 0;
    int64_t microbatch = 0;  // its global index: its dropout masks' key
    std::vector<torch::Tensor> predicted;  // its own predicted weights (weight prediction), else empty
    int64_t shares = -1;  // predict_per_minibatch: the minibatch whose predicted weights it runs on
    // A split backward's W, where its B kept what W needs (split_backward.h); else W runs a
    // backward to the weights.
    bool split = false;
    model::WeightBackward weight_backward;
  };
  bool runs_on_copy(const InFlight& f) const { return !f.predicted.empty() || f.shares >= 0; }
  // Recompute: runs f's forward again with gradients (its weight version must be in place).
  // Returns the layers' buffers with their own data, to be given back after the backward.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> rebuild(InFlight& f);
  double weight_sum() const;
  size_t param_offset(int layer) const;  // index in params_ of the layer's first parameter
  // Runs f with the weights of `version` in place (restoring the newest after), so the
  // backward sees exactly the values its forward graph used.
  template <typename F>
  void with_version(int64_t version, F&& f);
  // Runs f with the weights f's microbatch uses: its predicted ones, or its version.
  template <typename F>
  void with_weights(InFlight& mb, F&& f);
  void release_version_if_unused(int64_t version);
  std::vector<torch::Tensor> trainable() const;  // params_ that take a gradient
  void finish(std::map<int64_t, InFlight>::iterator it);  // a microbatch's backward is complete

  std::shared_ptr<model::LayeredModel> model_;
  int first_, last_;
  bool is_last_;
  bool stash_weights_;
  int max_versions_;
  bool recompute_;
  // An emulated model's weights hold no values: its steps, stashes and predictions make no pass
  // over them (the profile's step time holds the device's; the host's took vgg16's 2bw to 0.22 of
  // its simulated throughput).
  bool values_;
  bool checked_determinism_ = false;  // recompute: the first forward was run twice and compared
  // Runs layers [first, last) on `input` again, without a graph, their buffers left as they were,
  // and refuses recomputation where the output is not `output`.
  void check_recomputable(const torch::Tensor& input, const torch::Tensor& output);
  std::vector<torch::Tensor> params_;
  std::vector<const StageReplica*> owner_;  // params_ index -> the replica it is borrowed from, or nullptr
  std::unique_ptr<model::FlatParameters> flat_;
  static constexpr size_t kNoSlot = static_cast<size_t>(-1);
  std::vector<size_t> slot_of_;  // params_ index -> flat_ slot (tied weights share one); kNoSlot: borrowed or frozen
  model::Optimizer optimizer_;
  int64_t version_ = 0;
  std::map<int64_t, std::vector<torch::Tensor>> versions_;  // stashed copies of older versions
  std::vector<torch::Tensor> spare_;  // a released stash's buffers, reused by the next stash
  std::vector<std::vector<torch::Tensor>> spare_predicted_;  // released predictions, reused
  bool per_minibatch_ = false;
  std::map<int64_t, std::vector<torch::Tensor>> minibatch_predicted_;  // predict_per_minibatch: by minibatch
  std::map<int64_t, InFlight> in_flight_;
  int64_t peak_versions_ = 0;
  int64_t peak_copies_ = 1;
  void count_copies();  // updates peak_copies_
  int64_t history_ = 0;
  std::map<int64_t, int64_t> used_versions_;
  double last_loss_ = 0;
  bool record_sums_ = false;
  std::map<int64_t, std::pair<double, double>> weight_sums_;
};

}  // namespace pt::runtime
