#pragma once
// A schedule as data from the user (`simulate` and `train --schedule-file FILE`): pipetrain's
// own JSON (pipetrain.schedule/1, what `simulate --emit-schedule` writes), or a CSV in
// torch.distributed.pipelining's action notation, one row per rank (the file torchtitan reads):
// "2F0" forward of stage 2 on microbatch 0, "2B0" its whole backward, "2I0" and "2W0" the input
// and the weight gradient apart (zero bubble); empty cells are idle slots, and send, receive,
// unshard and reshard cells are left out (the comm pass puts the transfers in, comm_pass.h).
// The CSV names no layers: the plan gives each stage's; which rank runs a stage is its placement.
// Either way the schedule passes the validator before anything runs, so a file that would
// deadlock or leave a microbatch unfinished gets its error (worker, step, action, the grid).
#include <string>

#include "plan/plan.h"
#include "schedule/schedule.h"

namespace pt::schedule {

// The file as read: its actions and placement; stage_layers empty for a CSV. `plan_stages` > 0:
// the stages of the plan it will run on, known before the file is read: a CSV naming a stage past
// them, or holding more cells than those stages can run (F, B or I, W per microbatch, at most
// kMaxMicrobatches), is refused before its actions are built (a 52 MB CSV of 768 stages took
// 430 MB to be refused for its stage count).
Schedule read_schedule_file(const std::string& path, int plan_stages = 0);

// A file runs its own microbatches and chunks: --microbatches or --chunks given (`given`) with
// another value is refused (UsageError naming the flag, the file and its count), not ignored.
void refuse_settings_the_file_overrides(const Schedule& file, const std::string& path, bool microbatches_given,
                                        int microbatches, bool chunks_given, int chunks);

// The plan a JSON file's stages make (their layers, as many replicas as workers each);
// ConfigError for a CSV, which names no layers (`flag` names what gives them instead).
plan::Plan plan_of_schedule_file(const Schedule& file, const std::string& path, const std::string& flag);

// The file's schedule on `plan` (whose stages must be the file's, and for a JSON file hold the
// same layers), with its transfers and a Step per stage after the last action, validated.
// ConfigError naming the file and the field or value that does not fit; InvalidSchedule (with
// the file's name) when it cannot run.
Schedule bind_schedule(Schedule file, const plan::Plan& plan, const std::string& path);

}  // namespace pt::schedule
