// A plan file that lists its chunks on the workers that run them (an interleaved or V plan, as
// `plan` writes it): read as a worker a stage, as the code takes every plan, and its placement
// held against the schedule's wherever the plan's own schedule runs it.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/json_doc.h"
#include "plan/plan.h"
#include "schedule/generators.h"

namespace pt::schedule {
namespace {

// Four one-layer stages on the workers listed, under `kind` (2 chunks where interleaved).
plan::Plan four_stages(const std::string& kind, const std::vector<int>& workers) {
  json stages = json::array();
  for (int s = 0; s < 4; ++s) stages.push_back({{"layers", {s}}, {"replicas", 1}, {"workers", {workers[s]}}});
  json doc = {{"format", "pipetrain.plan/1"}, {"workers", 2}, {"schedule", kind}, {"stages", stages}};
  if (is_interleaved(kind)) doc["chunks"] = 2;
  return plan::plan_from_json(doc, "p.json");
}

std::string error_of(const std::string& kind, const plan::Plan& p) {
  try {
    make_schedule(kind, p, ScheduleOptions{2, is_interleaved(kind) ? 2 : 1});
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(SharedWorkers, APlanListedAsItRunsReadsAsAWorkerAStage) {
  plan::Plan p = four_stages("interleaved", {0, 1, 0, 1});
  EXPECT_EQ(p.workers, 4);
  EXPECT_EQ(p.stages[2].workers, std::vector<int>{2});
  EXPECT_EQ(p.shared_workers, (std::vector<std::vector<int>>{{0}, {1}, {0}, {1}}));
  EXPECT_EQ(make_schedule("interleaved", p, ScheduleOptions{2, 2}).stage_workers, p.shared_workers);
  plan::Plan v = four_stages("zb-v", {0, 1, 1, 0});
  EXPECT_EQ(make_schedule("zb-v", v, ScheduleOptions{2, 1}).stage_workers, v.shared_workers);
  // Another kind places the stages its own way, a worker a stage for 1f1b, as before.
  EXPECT_EQ(make_schedule("1f1b", p, ScheduleOptions{2, 1}).stage_workers,
            (std::vector<std::vector<int>>{{0}, {1}, {2}, {3}}));
}

// Written again as read: the gloo launcher hands each worker the plan through to_json, and every
// worker refused an interleaved or V plan file, written a worker a stage.
TEST(SharedWorkers, APlanReadWithItsPlacementIsWrittenWithIt) {
  for (const auto& [kind, on] : std::vector<std::pair<std::string, std::vector<int>>>{
           {"interleaved", {0, 1, 0, 1}}, {"zb-v", {0, 1, 1, 0}}}) {
    plan::Plan p = four_stages(kind, on);
    json written = plan::to_json(p);
    EXPECT_EQ(written["workers"], 2) << kind;
    for (int s = 0; s < 4; ++s) EXPECT_EQ(written["stages"][s]["workers"], json::array({on[s]})) << kind;
    plan::Plan again = plan::plan_from_json(written, "again.json");
    EXPECT_EQ(again.shared_workers, p.shared_workers) << kind;
    EXPECT_EQ(again.workers, p.workers) << kind;
  }
}

TEST(SharedWorkers, APlacementThatIsNotTheSchedulesIsRefusedByStage) {
  EXPECT_EQ(error_of("interleaved", four_stages("interleaved", {1, 0, 1, 0})),
            "p.json: field 'stages': stage 0 is listed on worker 1 but interleaved runs it on worker 0 (stage s on "
            "worker s mod 2 with 2 chunks)");
  EXPECT_EQ(error_of("zb-v", four_stages("zb-v", {0, 1, 0, 1})),
            "p.json: field 'stages': stage 2 is listed on worker 0 but zb-v runs it on worker 1 (stage s on worker "
            "min(s, 3 - s), a V)");
  EXPECT_EQ(error_of("1f1b", four_stages("1f1b", {0, 1, 0, 1})),
            "p.json: field 'stages': its stages share workers, which the 1f1b schedule does not place (a worker a "
            "stage's replica; interleaved, interleaved-zb and the V schedules share them)");
}

}  // namespace
}  // namespace pt::schedule
