#pragma once
// Emulated compute (docs/design.md, "Measuring without a cluster"): a layer that stands in for an
// accelerator's kernel. Its forward and backward are timed waits of a profiled duration (a
// sleep, so the CPU stays idle as it would while a GPU computes); its output and gradients have
// the profiled sizes, so the tensors the runtime sends, stashes and all-reduces have the real
// byte counts. The values are zeros: nothing is learnt.
//
// Sizes are per sample, so a microbatch of r rows outputs r rows: the runtime splits minibatches
// along dim 0 and every slice is right. A microbatch of r rows waits the cost's time at r rows:
// a profile's, where it timed the layer at several sizes (as the simulator charges it), else r x
// the per-sample time.
//   x [r, any] -> out [r, output_floats_per_sample] (float32 zeros); weight [parameter_floats];
//   kept for the backward: [r, stash_floats_per_sample] (allocated, not written)
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "model/layered_model.h"

namespace pt::model {

struct EmulatedCost {
  std::string name;
  double forward_ms_per_sample = 0;   // the wait of one sample's forward (time scale applied)
  double backward_ms_per_sample = 0;  // of its full backward (input and weight gradients)
  // Where set, the waits of a microbatch of `rows` (time scale applied), over the per-sample ones:
  // a kernel's time is not linear in its rows, and an emulation that waited r x the per-sample
  // time ran 5-7% faster than the simulator, which charges the profile's timings, predicted
  // (mnist-cnn, 4 stages, microbatches of 8: a stage waited 0.109 ms where they give 0.306).
  std::function<double(int64_t rows)> forward_ms_at_rows = {}, backward_ms_at_rows = {};
  double input_gradient_share = 0.5;  // of the backward, charged to the input gradient (B)
  double step_ms = 0;                 // its optimizer step and stash copy, once per step (scaled)
  double stash_copy_ms = 0;           // of step_ms, the copy: a step that stashes none waits less it
  int64_t output_floats_per_sample = 1;
  int64_t parameter_floats = 0;       // may be 0: the layer still holds an empty weight
  // What its forward keeps for the backward (the profile's stash bytes): allocated, never
  // written, held until the backward, so that measured memory follows the activations the
  // accelerator would hold (the outputs themselves take no memory here).
  int64_t stash_floats_per_sample = 0;
};

class EmulatedLayerImpl : public torch::nn::Module {
 public:
  explicit EmulatedLayerImpl(EmulatedCost cost);
  torch::Tensor forward(torch::Tensor x);
  const EmulatedCost& cost() const { return cost_; }
  double forward_ms(int64_t rows) const;   // the waits of a microbatch of `rows`
  double backward_ms(int64_t rows) const;
  // Its waits and step: two emulated layers of equal shapes differ by them (profile::time_alike).
  void pretty_print(std::ostream& stream) const override;

 private:
  EmulatedCost cost_;
  torch::Tensor weight_;
};
TORCH_MODULE(EmulatedLayer);

// A chain of emulated layers, one per cost, with Task::kEmulated (loss = emulated_loss,
// which is zero) and a one-float input per sample (stage 0 reads its input from memory, so the
// input's size crosses no link). A step of layers [first, last) takes the sum of their step_ms
// (less their stash_copy_ms where it stashed no copy): the model waits for what the host's step
// did not take (LayeredModel::device_step).
std::shared_ptr<LayeredModel> build_emulated_model(const std::string& name, const std::vector<EmulatedCost>& costs,
                                                   const LayerSet& held = {});

// An emulated model's loss of `output`: zero, differentiable, and free of passes over the output.
torch::Tensor emulated_loss(const torch::Tensor& output);

// Sleeps `ms` on this thread. Sleeps overshoot by tens of microseconds; the overshoot is carried
// (per thread) and taken off the next waits, so a stage of many short layers still waits the
// sum of their times instead of the sum plus one overshoot per layer. With continues_previous
// (the layer before ran in the same forward or backward pass), the host's time since the last
// wait is taken off too, and a wake-up of any length late is paid back over the rest of the
// pass, as an accelerator's asynchronous launches hide both; the sum of the waits is kept
// either way, so a pass never takes less than its profiled time (less at most the 1 ms carried
// into it from the pass before).
void emulated_wait(double ms, bool continues_previous = false);

}  // namespace pt::model
