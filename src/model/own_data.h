#pragma once
// A user's own data (--data FILE.pt, DIR or FILE.bin): dicts of tensors written by Python's
// torch.save: "x" and "y", and optionally "x_test" and "y_test". A FILE is held in memory
// (without x_test the last tenth of x and y is held out as the test set). A DIR holds shards of
// such dicts (*.pt, in name order) that stay on disk: training reads them as it needs them, at
// most two at a time (shard_store.h), so the data may be larger than memory; the test set is
// the shards' x_test and y_test, or without any the last shard, in memory. Everything is
// checked against the model before training: the key, the dtype and the shape, and the targets
// against what the model outputs (class ids below its classes).
#include <string>

#include "model/dataset.h"
#include "model/layered_model.h"

namespace pt::model {

// True when --data names a file or a directory rather than a built-in data set.
bool is_own_data(const std::string& data);

// FormatError names the file, the key, what it holds and what the model expects. A FILE.bin is
// a tokenized corpus of `token_dtype` ids (token_stream.h), which stays on disk; its test set is
// `eval_path` where given (--eval-data), else val.bin beside it, else its last tenth. A token_dtype
// of "" is uint16 not given: ids that look uint32 (every other one 0) are refused, not noted.
DataSplit load_own_data(const std::string& path, LayeredModel& model, const std::string& token_dtype = "uint16",
                        const std::string& eval_path = "");

}  // namespace pt::model
