// Schedules as files (schedule_file.h): every built-in synchronous schedule written out and read
// back is itself; a CSV in torch.distributed.pipelining's notation gives the same schedule as
// the generator it transcribes; a broken file gets the validator's error or one naming the
// cell, never a schedule that hangs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "schedule/generators.h"
#include "schedule/schedule_file.h"
#include "schedule/validate.h"
#include "test_plans.h"

namespace pt::schedule {
namespace {

using testing::straight_plan;
namespace fs = std::filesystem;

struct TempFile {
  fs::path path;
  TempFile(const std::string& name, const std::string& text)
      : path(fs::temp_directory_path() / ("pt_sched_" + std::to_string(::getpid()) + "_" + name)) {
    std::ofstream(path) << text;
  }
  ~TempFile() { fs::remove(path); }
};

// The compute actions of each worker as CSV rows, in torch.distributed.pipelining's notation: a
// split backward's B is its "I"; Steps are left out (the reader appends them).
std::string as_csv(const Schedule& s) {
  std::ostringstream os;
  for (int w = 0; w < s.num_workers(); ++w) {
    bool first = true;
    for (const Action& a : s.actions[w]) {
      if (!is_compute(a.kind)) continue;
      std::string code = a.kind == ActionKind::kForward ? "F"
                         : a.kind == ActionKind::kBackwardWeight ? "W"
                         : s.split_backward[a.stage]             ? "I"
                                                                 : "B";
      os << (first ? "" : ",") << a.stage << code << a.microbatch;
      first = false;
    }
    os << "\n";
  }
  return os.str();
}

Schedule from_file(const std::string& name, const std::string& text, const plan::Plan& plan) {
  TempFile f(name, text);
  return bind_schedule(read_schedule_file(f.path.string()), plan, f.path.string());
}

struct Case {
  std::string kind;
  plan::Plan plan;
  ScheduleOptions options;
};

std::vector<Case> builtins() {
  return {{"gpipe", straight_plan(3), {4}},        {"1f1b", straight_plan(4), {8}},
          {"zb-h1", straight_plan(3), {6}},        {"interleaved", straight_plan(4), {4, 2}},
          {"zb-v", straight_plan(6), {6}},         {"v-half", straight_plan(8), {8}},
          {"mp", straight_plan(3), {2}},           {"1f1b", testing::plan_with_replicas({2, 1}), {4}}};
}

TEST(ScheduleFile, EveryBuiltInReadsBackAsItself) {
  for (const auto& c : builtins()) {
    SCOPED_TRACE(c.kind);
    Schedule s = make_schedule(c.kind, c.plan, c.options);
    Schedule back = from_file(c.kind + ".json", to_json(s).dump(1), c.plan);
    EXPECT_EQ(to_text(back), to_text(s));
    EXPECT_EQ(back.split_backward, s.split_backward);
    EXPECT_EQ(back.stage_workers, s.stage_workers);
  }
}

TEST(ScheduleFile, CsvOfActionsGivesTheGeneratorsSchedule) {
  for (const auto& c : builtins()) {
    bool replicated = false;
    for (const auto& st : c.plan.stages) replicated = replicated || st.replicas > 1;
    if (replicated) continue;  // a CSV places each stage on one rank
    SCOPED_TRACE(c.kind);
    Schedule s = make_schedule(c.kind, c.plan, c.options);
    Schedule back = from_file(c.kind + ".csv", as_csv(s), c.plan);
    EXPECT_EQ(to_text(back), to_text(s));
  }
  // torch.distributed.pipelining's own cells that move data are left out; blanks are idle slots.
  Schedule s = from_file("comms.csv", "0F0,0SEND_F0,,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n", straight_plan(2));
  EXPECT_EQ(to_text(s, true), "w0: 0F0 0B0 0ST0\nw1: 1F0 1B0 1ST0\n");
  // A spreadsheet's "CSV UTF-8" leads with a byte-order mark: read past, not taken for the first cell.
  Schedule marked = from_file("marked.csv", "\xEF\xBB\xBF" "0F0,0B0\n,1F0,1B0\n", straight_plan(2));
  EXPECT_EQ(to_text(marked, true), "w0: 0F0 0B0 0ST0\nw1: 1F0 1B0 1ST0\n");
}

// What the error says, or "" when the file was accepted.
std::string error_of(const std::string& name, const std::string& text, const plan::Plan& plan) {
  try {
    from_file(name, text, plan);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ScheduleFile, BrokenFilesAreNamedNotRun) {
  plan::Plan two = straight_plan(2);
  // A backward before its forward: the validator's error, naming the worker and the step.
  std::string e = error_of("order.csv", "0B0,0F0\n1F0,1B0\n", two);
  EXPECT_NE(e.find("order.csv: "), std::string::npos) << e;
  EXPECT_NE(e.find("worker 0, step 0, action 0B0: runs before 0F0 on its worker"), std::string::npos) << e;
  // A CSV's split backward is named I, as written (it said 0B0, a cell the file lacks).
  e = error_of("split.csv", "0F0,0W0,0I0\n1F0,1I0,1W0\n", two);
  EXPECT_NE(e.find("action 0W0: runs before 0I0 on its worker"), std::string::npos) << e;
  // A cycle of waits, in the file's own cells (it named a send placed before its forward).
  e = error_of("deadlock.csv", "0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n", two);
  EXPECT_NE(e.find("deadlock.csv: file schedule is invalid: it deadlocks: worker 0 waits at 0B0 for 1B0, worker 1 "
                   "waits at 1F1 for 0F1"),
            std::string::npos)
      << e;
  // A microbatch left unfinished.
  e = error_of("unfinished.csv", "0F0,0F1,0B0,0B1\n1F0,1B0,1F1\n", two);
  EXPECT_NE(e.find("stage 1 never runs backward of microbatch 1"), std::string::npos) << e;
  // Cells and shapes that name the file and the place.
  e = error_of("cell.csv", "0F0,0X1\n1F0,1B0\n", two);
  EXPECT_NE(e.find("cell.csv: rank 0, column 1: '0X1' has type 'X'"), std::string::npos) << e;
  // A number past any a run takes is named, not said to be missing.
  e = error_of("huge.csv", "0F0,0F99999999999\n1F0,1B0\n", two);
  EXPECT_NE(e.find("huge.csv: rank 0, column 1: '0F99999999999' names microbatch 99999999999; at most"),
            std::string::npos) << e;
  e = error_of("two_ranks.csv", "0F0,0B0\n0F1,1F0,1B0,0B1\n", two);
  EXPECT_NE(e.find("stage 0 runs on rank 0 and rank 1"), std::string::npos) << e;
  e = error_of("stages.csv", "0F0,0B0\n1F0,1B0\n2F0,2B0\n", two);
  EXPECT_NE(e.find("the schedule has 3 stages but the plan has 2"), std::string::npos) << e;
  e = error_of("mixed.csv", "0F0,0F1,0B0,0I1,0W1\n1F0,1B0,1F1,1B1\n", two);
  EXPECT_NE(e.find("stage 0 has both whole backwards (B) and split ones (I, W)"), std::string::npos) << e;
  e = error_of("idle.csv", "0F0,0B0\n\n1F0,1B0\n", straight_plan(2));
  EXPECT_NE(e.find("rank 1 (row 2) runs nothing"), std::string::npos) << e;
  // A JSON file whose stages hold other layers than the plan's.
  Schedule s = make_schedule("1f1b", straight_plan(2), {2});
  json doc = to_json(s);
  doc["stages"][0]["layers"] = {0, 1};
  doc["stages"][1]["layers"] = json::array();
  e = error_of("layers.json", doc.dump(), two);
  EXPECT_NE(e.find("stage 0 holds layers [0,1] but the plan's stage 0 holds [0]"), std::string::npos) << e;
  doc = to_json(s);
  doc["microbatches"] = 1000000000;
  e = error_of("huge.json", doc.dump(), two);
  EXPECT_NE(e.find("1000000000 microbatches"), std::string::npos) << e;
  // Counts past an int, named rather than narrowed (4294967297 read as 1).
  doc = to_json(s);
  doc["minibatches"] = 4294967297LL;
  e = error_of("narrowed.json", doc.dump(), two);
  EXPECT_NE(e.find("field 'minibatches' must be in 1..2147483647, got 4294967297"), std::string::npos) << e;
  doc = to_json(s);
  doc["stages"][0]["layers"] = {4294967296LL};  // layer 0 after narrowing, the plan's own
  e = error_of("layer.json", doc.dump(), two);
  EXPECT_NE(e.find("field 'stages[0].layers' has layer 4294967296, not a layer index"), std::string::npos) << e;
  // Layers out of order or twice, named as a plan file's are (the workers failed building "3..2").
  for (const auto& [layers, said] : std::vector<std::pair<std::vector<int>, std::string>>{{{1, 0}, "got 1 then 0"},
                                                                                          {{0, 0}, "got 0 then 0"}}) {
    doc = to_json(s);
    doc["stages"][0]["layers"] = layers;
    e = error_of("order.json", doc.dump(), two);
    EXPECT_NE(e.find("order.json: field 'stages[0].layers' must list layers in ascending order, each once, " + said),
              std::string::npos)
        << e;
  }
  // A stash budget no run needs: the runtime sizes its stash and pipedream's stale-weight warm-up by it.
  doc = to_json(s);
  doc["stages"][1]["weight_versions"] = 1000000000;
  e = error_of("versions.json", doc.dump(), two);
  EXPECT_NE(e.find("field 'stages[1].weight_versions' is 1000000000: more than one for each of the 2 microbatches"),
            std::string::npos)
      << e;
  // An action that is not a string: the field named once (it was twice, "F: field 'workers[0][0]' F: field ...").
  doc = to_json(s);
  doc["workers"][0][0] = 7;
  e = error_of("action.json", doc.dump(), two);
  EXPECT_NE(e.find("action.json: field 'workers[0][0]' must be a string, got 7"), std::string::npos) << e;
  EXPECT_EQ(e.find("action.json", e.find("action.json") + 1), std::string::npos) << e;
  // Chunks that are not the most stages a worker holds (every action's chunk follows from them).
  for (int chunks : {2, 7}) {
    doc = to_json(s);
    doc["chunks"] = chunks;
    e = error_of("chunks.json", doc.dump(), two);
    EXPECT_NE(e.find(str("field 'chunks' is ", chunks, " but worker 0 holds 1 of the stages")), std::string::npos) << e;
  }
  Schedule v = make_schedule("interleaved", straight_plan(4), {4, 2});
  doc = to_json(v);
  doc["chunks"] = 1;
  e = error_of("chunks1.json", doc.dump(), straight_plan(4));
  EXPECT_NE(e.find("field 'chunks' is 1 but worker 0 holds 2 of the stages"), std::string::npos) << e;
}

// With the plan's stage count known before the file is read (train --stages/--plan), a CSV that
// cannot fit it is refused before its actions are built: a cell naming a stage past the plan's,
// or more cells than its stages can run (a 52 MB CSV of 768 stages took 430 MB of memory to be
// refused for its stage count; 277 MB now, of which the text 52 and the process 220).
TEST(ScheduleFile, ACsvThatCannotFitThePlanIsRefusedBeforeItIsParsed) {
  auto refused = [](const std::string& name, const std::string& text, int stages) {
    TempFile f(name, text);
    try {
      read_schedule_file(f.path.string(), stages);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  std::string past = refused("past.csv", "0F0,0B0\n1F0,1B0\n2F0,2B0\n", 2);
  EXPECT_NE(past.find("rank 2, column 0: '2F0' names stage 2, but the plan has 2 stages (0..1)"), std::string::npos)
      << past;
  std::string row;
  for (int m = 0; m < 8 * kMaxMicrobatches; ++m) row += std::string(m ? "," : "") + "0F" + std::to_string(m % 4096);
  std::string many = refused("many.csv", row + "\n", 1);
  EXPECT_NE(many.find("holds 32768 cells, more than the plan's 1 stage can run (28675:"), std::string::npos) << many;
  // Empty cells are idle slots, not counted; what fits is read as before.
  TempFile ok("ok.csv", "0F0,,0B0\n , \n");
  EXPECT_EQ(read_schedule_file(ok.path.string(), 1).actions[0].size(), 2u);
}

}  // namespace
}  // namespace pt::schedule
