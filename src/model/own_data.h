#pragma once
// A user's own data (--data FILE.pt or --data DIR): dicts of tensors written by Python's
// torch.save: "x" and "y", and optionally "x_test" and "y_test" (without them the last tenth of
// x and y is held out as the test set). A DIR holds shards of such dicts (*.pt), concatenated in
// name order. Everything is checked against the model before training: the key, the dtype and
// the shape, and the targets against what the model outputs (class ids below its classes).
#include <string>

#include "model/dataset.h"
#include "model/layered_model.h"

namespace pt::model {

// True when --data names a file or a directory rather than a built-in data set.
bool is_own_data(const std::string& data);

// FormatError names the file, the key, what it holds and what the model expects.
DataSplit load_own_data(const std::string& path, LayeredModel& model);

}  // namespace pt::model
