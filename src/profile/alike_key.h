#pragma once
// What decides a layer's time, as a string equal for layers that compute alike (time_alike).
#include <string>

#include <torch/torch.h>
#include "profile/profile.h"

namespace pt::profile {

// Layer `index` (`l`, its memory measured) run as `module` from `input` to `output`: its code
// (the modules' printed form, a model file's TorchScript included), the shapes and types of its
// parameters, buffers, input and output, what its inputs are relative to it, and its measured
// bytes. In names, a number after a letter, '_', '.', '%' or '"' is dropped: blocks.3.attn and
// blocks.4.attn, or TorchScript's ___torch_mangle_7, read alike; a size, a stride or 0.25 do not.
std::string alike_key(const torch::nn::Sequential& module, const torch::Tensor& input, const torch::Tensor& output,
                      const Layer& l, int index);

}  // namespace pt::profile
