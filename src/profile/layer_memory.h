#pragma once
// A layer's forward as the profiler runs it, and the memory it holds as the meter counts it.
#include <torch/torch.h>
#include "model/layered_model.h"
#include "profile/profile.h"

namespace pt::profile {

// The layer's forward into `out`; where `targets` is defined (the last layer), the model's loss
// after it too, as the last stage computes it. Returns what the backward starts from.
torch::Tensor layer_forward(model::LayeredModel& model, torch::nn::Sequential& module, const torch::Tensor& input,
                            const torch::Tensor& targets, torch::Tensor& out);

// The layer's memory as the meter sees it allocated on this thread: what one forward leaves
// alive for the backward (Layer::stash_bytes: its output and what autograd saves), and the most
// its forward or backward holds beyond that while running (Layer::workspace_bytes: scratch
// buffers, the input gradient). The parameters' gradients exist beforehand, as in the runtime.
// With `targets`, the loss's share too (measure_profile). Fills Layer::stash_bytes,
// fixed_stash_bytes, workspace_bytes (less l.parameter_bytes, set first), split_bytes and
// split_workspace_bytes.
//
// The fixed parts are read from the layer run again at an eighth of the batch, on `eighth.input`:
// the first samples through the layers before it, as a packed input (several tensors in one,
// python/pipetrain/export.py) cannot be cut to fewer samples (cut to an eighth of its elements, a
// Llama block's bf16 weight copies read 0 where its twin read 49152). Its output is left in
// `eighth.output` for the next layer (undefined where none ran).
struct EighthBatch {
  torch::Tensor input, output;
  int64_t samples = 0, batch = 0;  // the eighth's samples, the whole batch's
};
void measure_layer_memory(model::LayeredModel& model, torch::nn::Sequential& module, const torch::Tensor& input,
                          const torch::Tensor& targets, Layer& l, EighthBatch& eighth);

}  // namespace pt::profile
