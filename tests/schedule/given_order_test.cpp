// A plan's compute order (given_order.h): a zero-bubble schedule runs the order given in place of
// its generator's, and an order that is not the schedule's computes, or runs one before what it
// needs, is refused naming the worker and the action.
#include <gtest/gtest.h>

#include "core/error.h"
#include "schedule/generators.h"
#include "schedule/given_order.h"
#include "schedule/validate.h"
#include "test_plans.h"

namespace pt::schedule {
namespace {

using testing::straight_plan;

std::string error_of(const std::vector<std::string>& order) {
  ScheduleOptions o{2, 2};
  o.order = order;
  o.order_source = "p.json: field 'order'";
  try {
    make_schedule("interleaved-zb", straight_plan(4), o);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(GivenOrder, AScheduleRunsTheOrderGivenInPlaceOfItsGenerators) {
  ScheduleOptions o{2, 2};
  Schedule own = make_schedule("interleaved-zb", straight_plan(4), o);
  EXPECT_EQ(compute_order(own), (std::vector<std::string>{"0F0 0F1 2F0 2F1 2B0 2W0 0B0 2B1 0W0 0B1 2W1 0W1",
                                                          "1F0 1F1 3F0 3B0 3F1 1B0 3B1 3W0 1B1 1W0 3W1 1W1"}));
  // Its own order given back is itself.
  o.order = compute_order(own);
  EXPECT_EQ(to_text(make_schedule("interleaved-zb", straight_plan(4), o)), to_text(own));
  // Another valid order (every W deferred to the end) runs as given, transfers and steps placed around it.
  o.order = {"0F0 0F1 2F0 2F1 2B0 0B0 2B1 0B1 2W0 2W1 0W0 0W1", "1F0 1F1 3F0 3B0 3F1 3B1 1B0 1B1 3W0 3W1 1W0 1W1"};
  Schedule given = make_schedule("interleaved-zb", straight_plan(4), o);
  EXPECT_EQ(compute_order(given), o.order);
  EXPECT_EQ(to_text(given, /*compute_only=*/true),
            "w0: 0F0 0F1 2F0 2F1 2B0 0B0 2B1 0B1 2W0 2W1 0W0 0W1 0ST0 2ST0\n"
            "w1: 1F0 1F1 3F0 3B0 3F1 3B1 1B0 1B1 3W0 3W1 1W0 1W1 1ST0 3ST0\n");
  ValidationReport r = validate(given);
  EXPECT_EQ(r.workers[0].peak_stash, 4);  // all four chunk-microbatches held until the W's
}

TEST(GivenOrder, AnOrderThatIsNotTheSchedulesIsRefusedByWorkerAndAction) {
  const std::string w1 = "1F0 1F1 3F0 3B0 3F1 3B1 3W0 1B0 3W1 1W0 1B1 1W1";
  EXPECT_EQ(error_of({"0F0 0F1 2F0 2F1 2B0 2W0 0B0 2B1 2W1 0W0 0B1 0W1"}),
            "p.json: field 'order': lists 1 workers' orders, the interleaved-zb schedule of this plan runs 2");
  EXPECT_EQ(error_of({"0F0 0F1 2F0 2F1 2B0 2W0 0B0 2B1 2W1 0W0 0B1", w1}),
            "p.json: field 'order': worker 0's order lacks 0W1 (1 of its computes under interleaved-zb missing)");
  EXPECT_EQ(error_of({"0F0 0F1 2F0 2F1 2B0 2W0 0B0 2B1 2W1 0W0 0B1 0W1 1F0", w1}),
            "p.json: field 'order': worker 0's action 12 '1F0' is not one of the worker's computes under interleaved-zb");
  EXPECT_EQ(error_of({"0F0 0F1 2F0 2F1 2B0 2W0 2W0 0B0 2B1 2W1 0W0 0B1 0W1", w1}),
            "p.json: field 'order': worker 0's action 6 '2W0' is not one of the worker's computes under interleaved-zb "
            "(it runs once)");
  EXPECT_EQ(error_of({"0F0 0F1 2F0 2F1 2W0 2B0 0B0 2B1 2W1 0W0 0B1 0W1", w1}),
            "p.json: field 'order': worker 0's action 4 '2W0' runs before 2B0 on its worker");
  EXPECT_EQ(error_of({"0F0 0F1 2F0 2F1 2B0 2W0 0B0 2B1 2W1 0W0 0B1 0ST0", w1}),
            "p.json: field 'order': worker 0's action 11 '0ST0' is not a compute (F, B or W)");
  EXPECT_NE(error_of({"0F0 0F1 2F0 2F1 2B0 2W0 0B0 2B1 2W1 0W0 0B1 0Q1", w1})
                .find("worker 0's action 11 '0Q1' is not an action"),
            std::string::npos);
  // Every computes in place but one waits on another worker in a cycle: the validator names it.
  ScheduleOptions o{2, 2};
  o.order = {"2F0 0F0 0F1 2F1 2B0 2W0 0B0 2B1 2W1 0W0 0B1 0W1", w1};
  EXPECT_THROW(make_schedule("interleaved-zb", straight_plan(4), o), InvalidSchedule);
}

TEST(GivenOrder, APlansOrderIsRunOnlyForTheRunItWasPlannedFor) {
  plan::Plan p = straight_plan(4);
  EXPECT_TRUE(plan_order(p, "p.json", "interleaved-zb", 2, 2).empty());  // none written
  p.schedule = "interleaved-zb", p.microbatches = 2, p.chunks = 2, p.order = {"a", "b"};
  EXPECT_EQ(plan_order(p, "p.json", "interleaved-zb", 2, 2), p.order);
  EXPECT_TRUE(plan_order(p, "p.json", "interleaved", 2, 2).empty());     // --schedule runs another
  EXPECT_TRUE(plan_order(p, "p.json", "interleaved-zb", 4, 2).empty());  // --microbatches
  EXPECT_TRUE(plan_order(p, "p.json", "interleaved-zb", 2, 4).empty());  // --chunks
  p.schedule = "1f1b", p.chunks = 0;
  EXPECT_THROW(plan_order(p, "p.json", "1f1b", 2, 1), ConfigError);  // an order 1f1b would not weigh
  for (const char* kind : {"zb-h1", "interleaved-zb", "zb-v", "v-half", "v-min"}) EXPECT_TRUE(order_is_weighed(kind));
  for (const char* kind : {"1f1b", "gpipe", "interleaved", "dualpipev", "pipedream"}) EXPECT_FALSE(order_is_weighed(kind));
}

}  // namespace
}  // namespace pt::schedule
