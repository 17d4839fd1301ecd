#pragma once
// A synthetic profile of `layers` identical layers, for simulator and metrics tests.
#include <string>

#include "profile/profile.h"

namespace pt::schedule::testing {

inline profile::Profile uniform_profile(int layers, double forward_ms, double backward_ms, int64_t activation_bytes = 0,
                                        int64_t parameter_bytes = 0, int64_t batch_size = 64) {
  profile::Profile p;
  p.model = "uniform";
  p.batch_size = batch_size;
  for (int l = 0; l < layers; ++l) {
    profile::Layer layer;
    layer.name = "layer" + std::to_string(l);
    layer.forward_ms = forward_ms;
    layer.backward_ms = backward_ms;
    layer.activation_bytes = activation_bytes;
    layer.parameter_bytes = parameter_bytes;
    if (l > 0) layer.inputs = {l - 1};
    p.layers.push_back(layer);
  }
  return p;
}

}  // namespace pt::schedule::testing
