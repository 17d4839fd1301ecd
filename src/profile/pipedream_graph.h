#pragma once
// Readers for PipeDream's profiles, so users can bring the profiles they already have:
// - the profiler's `graph.txt` (msr-fiddle/pipedream, profiler/*/profiles/<model>/graph.txt):
//     node lines   `nodeID -- description -- forward_compute_time=F, backward_compute_time=B,
//                   activation_size=A, parameter_size=P[ -- stage_id=S]`
//     edge lines   `<tab>srcID -- dstID`
//   (ms, ms, bytes, bytes; A may be a list `[a; b]`, whose sum is the layer's activation);
// - the JSON figures of ../shared/data/pipedream-profiles/ (`layers` with `id`, `edges`).
// Both become a pt::profile::Profile whose layers are in topological order and whose
// `inputs` come from the edges.
#include <string>

#include "core/json_doc.h"
#include "profile/profile.h"

namespace pt::profile {

// `source` names the text in errors ("graph.txt line 12: ...").
Profile profile_from_pipedream_graph(const std::string& text, const std::string& source);
Profile profile_from_pipedream_json(const json& doc, const std::string& source);

// Parses any of the three formats, detected by content: a JSON object with "format" is a
// pipetrain profile, one with "layers" (each with an "id") and "edges" is PipeDream's JSON
// figures, anything else is parsed as graph.txt. `source` names the text in errors.
Profile parse_any_profile(const std::string& text, const std::string& source);
// parse_any_profile of the file; a graph.txt's model is named after its folder
// (profiles/<model>/graph.txt).
Profile read_any_profile(const std::string& path);
// How many files read_any_profile has read in this process: a command reads its profile once
// (tests/apps count it).
int64_t profiles_read();

}  // namespace pt::profile
