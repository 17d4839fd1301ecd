// Notes on a schedule that runs otherwise than its name promises (schedule_notes.h).
#include "schedule/schedule_notes.h"

#include "core/error.h"

namespace pt::schedule {

std::string weight_delay_note(const Schedule& s, bool weight_prediction) {
  if (s.kind != "2bw" || s.weight_delay <= 1) return "";
  return str("2bw's weights lag ", s.weight_delay, " steps here, not PipeDream-2BW's 1: ", s.microbatches,
             s.microbatches == 1 ? " microbatch a minibatch does" : " microbatches a minibatch do",
             " not cover the pipeline's warm-up (on a straight pipeline of p stages, p - 1 do)",
             weight_prediction ? "; each minibatch runs on weights predicted that far ahead" : "");
}

std::string one_chunk_note(const Schedule& s) {
  if (s.kind != "interleaved" || s.num_stages > s.num_workers()) return "";
  return str("interleaved with one chunk a worker is 1F1B: each of the ", s.num_workers(),
             " workers holds one stage; give --chunks 2 or more to interleave");
}

}  // namespace pt::schedule
