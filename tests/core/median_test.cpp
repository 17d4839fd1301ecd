// What repeated timings keep: the median, and the mean less the stalls (typical_mean).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/median.h"

namespace pt {
namespace {

TEST(Median, OfAnEvenCountIsTheMeanOfTheMiddleTwo) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({}), 0);
}

// A run's rate follows the mean of its timings, spread and all; a timing over twice the median is
// a stall and is left out.
TEST(Median, TheTypicalMeanKeepsTheSpreadAndDropsTheStalls) {
  EXPECT_DOUBLE_EQ(typical_mean({1, 1, 1, 1.6}), 1.15);  // the spread counts: the median says 1
  EXPECT_DOUBLE_EQ(typical_mean({1, 1, 1, 2}), 1.25);    // twice the median is still the work's
  EXPECT_DOUBLE_EQ(typical_mean({1, 1, 1, 2.01}), 1);    // over it: descheduled
  EXPECT_DOUBLE_EQ(typical_mean({5}), 5);
  EXPECT_DOUBLE_EQ(typical_mean({}), 0);
}

// The rounds' spread is the 10th to the 90th percentile over the median: one stall in eleven is
// not a spread, rounds that drift are.
TEST(Median, TheSpreadOfRoundsLeavesOutOneStall) {
  EXPECT_DOUBLE_EQ(round_spread({1, 1, 1, 1, 1, 10, 1, 1, 1, 1, 1}), 0);
  EXPECT_DOUBLE_EQ(round_spread({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}), 8.0 / 6);
  EXPECT_DOUBLE_EQ(round_spread({2, 3}), 1 / 2.5);
  // Nearest ranks at any count: of 10 the 1st and the 9th (the 10th, a stall, left out), of 20
  // the 2nd and the 18th (the 19th was taken).
  EXPECT_DOUBLE_EQ(round_spread({1, 1, 1, 1, 10, 1, 1, 1, 1, 1}), 0);
  std::vector<double> twenty(20);
  std::iota(twenty.begin(), twenty.end(), 1.0);
  EXPECT_DOUBLE_EQ(round_spread(twenty), (18.0 - 2.0) / 10.5);
  EXPECT_DOUBLE_EQ(round_spread({4}), 0);
  EXPECT_DOUBLE_EQ(round_spread({}), 0);
}

}  // namespace
}  // namespace pt
