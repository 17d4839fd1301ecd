#pragma once
// A profile held against the model it is said to profile, layer by layer, by the bytes each holds.
#include <string>

#include <torch/torch.h>
#include "model/layered_model.h"
#include "profile/profile.h"

namespace pt::profile {

// A layer's bytes as a profile records them (Layer::parameter_bytes, buffer_bytes): what it
// trains, and its buffers with whatever it holds frozen.
struct LayerBytes {
  int64_t parameters = 0, buffers = 0;
};
LayerBytes layer_bytes(const torch::nn::Sequential& module);

// Each layer `model` holds against `source`'s record of it: a profile of another model or
// another size is refused, naming the file, the layer and both figures (mlp --width 2's profile
// trained --width 1 with its memory modelled at 113 MiB of tensors where the run held 29, exit 0).
void check_profile_fits_model(const Profile& profile, const std::string& source, const model::LayeredModel& model);

}  // namespace pt::profile
