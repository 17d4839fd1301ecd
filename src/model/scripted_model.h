#pragma once
// A user's model imported from a TorchScript file that `pipetrain export` wrote
// (python/pipetrain/export.py). Each layer takes one tensor and returns one (the exporter packs a
// boundary of several tensors into one). Two layouts:
// - pipetrain.model/2: each layer its own TorchScript archive, stored in the file as an extra
//   record (extra/layer-<i>.pt) that pipetrain.json indexes with its size and parameter names;
//   the top-level module holds only the loss. A process reads the records of the layers it
//   holds, where they lie in the file, and nothing of the others.
// - pipetrain.model/1 (exports before 2026-11-29): the top-level module's children, in the
//   order pipetrain.json names them, are the layers; read whole by every process.
#include <memory>
#include <string>

#include "model/layered_model.h"

namespace pt::model {

// True when --model names a model file rather than a zoo model: it ends in .pt or is a path.
bool is_model_file(const std::string& model);

// --loss: "" (the file's own `loss` method if it has one, else cross-entropy), "cross-entropy",
// "mse" or "lm" (next-token cross-entropy over the last dimension).
std::vector<std::string> loss_names();

// Loads `path`, building the layers of `held`; FormatError names the file and the field of its
// pipetrain.json that is wrong. Tie groups are the file's, whichever layers are held. `seed`
// (--seed) keys the layers' random draws (dropout); the weights are the file's whatever it is.
std::shared_ptr<LayeredModel> load_scripted_model(const std::string& path, const std::string& loss,
                                                  const LayerSet& held = {}, uint64_t seed = 0);

}  // namespace pt::model
