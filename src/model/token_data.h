#pragma once
// --data FILE.bin as training data (own_data.h dispatches to it): a language model's tokenized
// corpus read as windows (token_stream.h), checked against the model before training.
#include <string>

#include "model/dataset.h"
#include "model/layered_model.h"

namespace pt::model {

// The test set is `eval_path` (--eval-data), else val.bin beside it (nanoGPT's pair), else the
// last tenth of its windows; at most 1024 of them, in memory. `token_dtype`: "" is uint16 not
// given (own_data.h, load_own_data).
DataSplit load_token_stream(const std::string& path, LayeredModel& model, const std::string& token_dtype,
                            const std::string& eval_path);

}  // namespace pt::model
