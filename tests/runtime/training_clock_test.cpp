// The job's training time (job::TrainingClock): one figure on every worker, from the first
// worker's resume to the last one's stop between pauses, whatever each worker saw of them.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <thread>

#include "job/training_clock.h"
#include "runtime/thread_transport.h"

namespace pt::job {
namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Two workers start 30 ms apart and stop 10 ms apart (the later starter first), pause, and resume
// 30 ms apart: each part of the training runs from the first resume to the last stop (50 ms, then
// 35). The later worker's own clock said 20 and 5: a reporter timing its own part of each leaves out
// what the others trained before it resumed.
TEST(TrainingClock, EachPartRunsFromTheFirstResumeToTheLastStop) {
  auto hub = std::make_shared<runtime::ThreadHub>(2, 20.0);
  using Clock = std::chrono::steady_clock;
  double seconds[2][2];
  // Each call's start and end as seen around it: a sleep that wakes late (a busy machine) moves
  // the times the clock takes, and the bounds the test sets with them. The old 8 ms tolerance
  // around the sleeps' nominal lengths failed where a thread woke late.
  enum { kStart, kStop, kResume, kStopAgain, kCalls };
  Clock::time_point before[2][kCalls], after[2][kCalls];
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w)
    threads.emplace_back([&, w] {
      runtime::ThreadTransport transport(hub, w);
      auto timed = [&](int call, auto&& f) {
        before[w][call] = Clock::now();
        f();
        after[w][call] = Clock::now();
      };
      if (w == 1) sleep_ms(30);
      std::optional<TrainingClock> clock;
      timed(kStart, [&] { clock.emplace(); });
      sleep_ms(w == 0 ? 50 : 10);
      timed(kStop, [&] { clock->stop(transport); });
      seconds[w][0] = clock->seconds();
      sleep_ms(100);  // the pause: not training
      EXPECT_EQ(clock->seconds(), seconds[w][0]);
      if (w == 1) sleep_ms(30);
      timed(kResume, [&] { clock->resume(); });
      sleep_ms(w == 0 ? 20 : 5);
      timed(kStopAgain, [&] { clock->stop(transport); });
      seconds[w][1] = clock->seconds();
    });
  for (auto& t : threads) t.join();
  // From the first start (resume) to the last stop, within what the calls' own times allow.
  auto span = [&](int from, int to, bool widest) {
    auto first = widest ? std::min(before[0][from], before[1][from]) : std::min(after[0][from], after[1][from]);
    auto last = widest ? std::max(after[0][to], after[1][to]) : std::max(before[0][to], before[1][to]);
    return std::chrono::duration<double>(last - first).count();
  };
  double first_least = span(kStart, kStop, false), first_most = span(kStart, kStop, true);
  double second_least = first_least + span(kResume, kStopAgain, false);
  double second_most = first_most + span(kResume, kStopAgain, true);
  for (int w = 0; w < 2; ++w) {
    SCOPED_TRACE(w);
    EXPECT_GE(seconds[w][0], first_least);
    EXPECT_LE(seconds[w][0], first_most);
    EXPECT_GE(seconds[w][1], second_least);
    EXPECT_LE(seconds[w][1], second_most);
    // From the same exchanged times: equal to the bit.
    EXPECT_EQ(seconds[w][0], seconds[0][0]);
    EXPECT_EQ(seconds[w][1], seconds[0][1]);
  }
  // The later worker's own part (10 ms, then 5) lies far outside: the bounds can tell.
  EXPECT_GT(first_least, 0.040);
}

}  // namespace
}  // namespace pt::job
