// The validator names the worker, step and action of a broken schedule and prints the grid.
#include <gtest/gtest.h>

#include "schedule/comm_pass.h"
#include "schedule/generators.h"
#include "schedule/validate.h"
#include "test_plans.h"

namespace pt::schedule {
namespace {

using testing::straight_plan;

std::string error_of(const Schedule& s) {
  try {
    validate(s);
  } catch (const InvalidSchedule& e) {
    return e.what();
  }
  return "";
}

void expect_has(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "missing '" << part << "' in:\n" << text;
}

TEST(Validate, BackwardBeforeForwardNamesWorkerStepAction) {
  Schedule s = make_schedule("1f1b", straight_plan(2), {2});
  // w1: 1RA0<0 1F0 ... swap F0 and B0 on worker 1.
  std::swap(s.actions[1][1], s.actions[1][3]);
  std::string e = error_of(s);
  expect_has(e, "worker 1, step 1, action 1B0");
  expect_has(e, "forward before backward");
  expect_has(e, "[1B0]");  // the grid marks the bad step
  expect_has(e, "w0 ");
}

TEST(Validate, UnmatchedSend) {
  Schedule s = make_schedule("gpipe", straight_plan(2), {2});
  auto& w1 = s.actions[1];
  w1.erase(std::find_if(w1.begin(), w1.end(), [](const Action& a) { return a.kind == ActionKind::kRecvActivation; }));
  std::string e = error_of(s);
  // Worker 1's F0 now runs without its input.
  expect_has(e, "action 1F0");
  expect_has(e, "runs before 1RA0");
}

TEST(Validate, MissingMicrobatch) {
  Schedule s = gpipe(straight_plan(2), 2);
  s.actions[0].erase(s.actions[0].begin() + 1);  // 0F1
  expect_has(error_of(insert_comm(s)), "stage 0 never runs forward of microbatch 1");
}

// A synchronous schedule steps each stage once per minibatch, after its backwards: a file
// without the step, with two, or with it first trained wrong weights and exited 0.
TEST(Validate, EachStageStepsOnceAfterItsBackwards) {
  auto is_step = [](const Action& a) { return a.kind == ActionKind::kStep; };
  Schedule base = make_schedule("1f1b", straight_plan(2), {4});
  ASSERT_EQ(error_of(base), "");
  Schedule none = base;
  none.actions[0].erase(std::find_if(none.actions[0].begin(), none.actions[0].end(), is_step));
  expect_has(error_of(none), "worker 0 never steps stage 0 for minibatch 0");
  Schedule twice = base;
  twice.actions[0].push_back(*std::find_if(twice.actions[0].begin(), twice.actions[0].end(), is_step));
  expect_has(error_of(twice), "stage 0 steps twice for minibatch 0");
  Schedule first = base;
  auto& w0 = first.actions[0];
  Action step = *std::find_if(w0.begin(), w0.end(), is_step);
  w0.erase(std::find_if(w0.begin(), w0.end(), is_step));
  w0.insert(w0.begin(), step);
  std::string e = error_of(first);
  expect_has(e, "action 0ST0");
  expect_has(e, "stage 0 steps before its backward of minibatch 0 ends");
  // A replicated stage all-reduces before it steps.
  plan::Plan dp = plan::data_parallel_plan(4, 2);
  Schedule reduced = make_schedule("dp", dp, {2});
  ASSERT_EQ(error_of(reduced), "");
  auto& r0 = reduced.actions[0];
  r0.erase(std::find_if(r0.begin(), r0.end(), [](const Action& a) { return a.kind == ActionKind::kAllReduce; }));
  EXPECT_NE(error_of(reduced), "");
}

TEST(Validate, CrossingSendsDeadlock) {
  // Two workers each send first and receive second: fine with buffered sends, a deadlock when
  // sends block.
  Schedule s = make_schedule("1f1b", straight_plan(2), {2});
  // w0: 0F0 0SA0>1 0F1 0SA1>1 0RG0<1 0B0 ...   w1: 1RA0<0 1F0 1RA1<0 1B0 1SG0>0 1F1 1B1 1SG1>0
  // Make w1 run B0 (and send its gradient) before receiving microbatch 1: the order is still
  // data-correct, but w0 blocks in 0SA1>1 while w1 blocks in 1SG0>0.
  auto& v = s.actions[1];
  v = {v[0], v[1], v[3], v[4], v[2], v[5], v[6], v[7], v[8]};
  std::string e = error_of(s);
  expect_has(e, "deadlock");
  expect_has(e, "worker 0 waits at step 3 on 0SA1>1");
  expect_has(e, "worker 1 waits at step 3 on 1SG0>0");
  expect_has(e, "[0SA1>1]");
}

TEST(Validate, WrongPeer) {
  Schedule s = make_schedule("gpipe", straight_plan(3), {1});
  s.actions[0][1].peer = 2;
  expect_has(error_of(s), "peer should be worker 1");
}

// PipeDream's stage 0 of 4 keeps 4 versions (NOAM): with a budget of 3 the validator fails
// and says where.
TEST(Validate, StashBeyondTheBudget) {
  ScheduleOptions o;
  o.minibatches = 12;
  Schedule s = make_schedule("pipedream", straight_plan(4), o);
  EXPECT_EQ(s.weight_versions, (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(error_of(s), "");
  s.weight_versions[0] = 3;
  std::string e = error_of(s);
  expect_has(e, "worker 0");
  expect_has(e, "4 weight versions of stage 0 alive at once, more than the 3 the schedule keeps");
  // 2BW keeps two versions once m covers the warm-up, and the flushing schedules one.
  o.microbatches = 4;
  EXPECT_EQ(make_schedule("2bw", straight_plan(4), o).weight_versions, (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(make_schedule("1f1b", straight_plan(4), o).weight_versions, (std::vector<int>{1, 1, 1, 1}));
}

TEST(Schedule, JsonRoundTrip) {
  Schedule s = make_schedule("interleaved", straight_plan(4), {3, 2});
  Schedule t = schedule_from_json(to_json(s), "test");
  EXPECT_EQ(to_text(t), to_text(s));
  EXPECT_EQ(t.actions, s.actions);  // chunk restored from the placement
  EXPECT_EQ(t.stage_workers, s.stage_workers);
  EXPECT_EQ(t.chunks, 2);
}

}  // namespace
}  // namespace pt::schedule
