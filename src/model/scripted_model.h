#pragma once
// A user's model imported from a TorchScript file that `pipetrain export` wrote
// (python/pipetrain/export.py): its top-level children, in the order its pipetrain.json names
// them, are the layers; the parameters and buffers are the module's own. Each layer takes one
// tensor and returns one (the exporter packs a boundary of several tensors into one).
#include <memory>
#include <string>

#include "model/layered_model.h"

namespace pt::model {

// True when --model names a model file rather than a zoo model: it ends in .pt or is a path.
bool is_model_file(const std::string& model);

// --loss: "" (the file's own `loss` method if it has one, else cross-entropy), "cross-entropy",
// "mse" or "lm" (next-token cross-entropy over the last dimension).
std::vector<std::string> loss_names();

// Loads `path`; FormatError names the file and the field of its pipetrain.json that is wrong.
std::shared_ptr<LayeredModel> load_scripted_model(const std::string& path, const std::string& loss);

}  // namespace pt::model
