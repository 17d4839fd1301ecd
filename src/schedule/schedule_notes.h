#pragma once
// What train and simulate say of a schedule that runs otherwise than its name promises, each a
// note's text ("": nothing to say).
#include <string>

#include "schedule/schedule.h"

namespace pt::schedule {

// 2bw's delay above PipeDream-2BW's 1, where a minibatch's microbatches do not cover the
// pipeline's warm-up (docs/schedules.md): train ran it without a word, and simulate still did.
// `weight_prediction`: the run predicts each minibatch's weights that far ahead.
std::string weight_delay_note(const Schedule& s, bool weight_prediction);
// interleaved with one chunk a worker: each worker holds one stage, and the order is 1F1B's
// (`--schedule interleaved` without --chunks ran so, exit 0, as if interleaved).
std::string one_chunk_note(const Schedule& s);

}  // namespace pt::schedule
