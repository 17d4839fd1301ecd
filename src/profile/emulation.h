#pragma once
// Emulated compute from a profile (docs/emulation.md): a model of emulated layers
// (model/emulated_layer.h) whose waits and tensor sizes are a profile's, scaled so that the
// ratio of compute to communication is the emulated cluster's. The runtime runs it like any
// model; nothing in the runtime knows it is emulated.
#include <memory>
#include <string>
#include <vector>

#include "model/dataset.h"
#include "model/emulated_layer.h"
#include "profile/profile.h"

namespace pt::profile {

struct EmulationOptions {
  double time_scale = 1;  // S: a layer waits its profiled forward/backward time x S
  double byte_scale = 1;  // B: activations and parameters carry their profiled bytes x B
};

// One emulated layer per profile layer, in the profile's (topological) order. Layer i outputs
// every byte that crosses the cut after it: the outputs of layers <= i that a layer > i reads
// (for a chain, its own activation), which is what a stage boundary there carries in a DAG, as
// sim::stage_costs counts it; the last layer outputs its own activation. Sources named
// "Input..." wait nothing (the planner also leaves their data-loading time out). Throws
// ConfigError naming the option for a scale <= 0.
std::vector<model::EmulatedCost> emulated_costs(const profile::Profile& p, const EmulationOptions& emulation_options);
std::shared_ptr<model::LayeredModel> build_emulated_model(const profile::Profile& p, const EmulationOptions& emulation_options,
                                                          const model::LayerSet& held = {});

// The profile as its emulated layers run it: every time x S, every byte x B. The host's own time
// per action and the links' are real time, which a simulation of the profile itself, scaled by S
// after, shrank with the compute: awd-lm at S = 1e-3 on a calibrated cluster was predicted at
// 1,162,201 samples/s, its host's 0.109 ms a minibatch charged as 0.000109.
Profile as_emulated(const Profile& p, const EmulationOptions& emulation_options);

// Seeded synthetic samples for an emulated model (one float each, class 0).
model::DataSplit emulated_data(const model::LayeredModel& m, int64_t train_samples, uint64_t seed);

// "emulated: compute x S, bytes x B", the label every emulated figure carries.
std::string emulation_label(const EmulationOptions& emulation_options);

}  // namespace pt::profile
