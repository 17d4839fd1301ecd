// The job's training time (job::TrainingClock): one figure on every worker, from the first
// worker's resume to the last one's stop between pauses, whatever each worker saw of them.
#include <gtest/gtest.h>

#include <chrono>
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
  double seconds[2][2];
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w)
    threads.emplace_back([&, w] {
      runtime::ThreadTransport transport(hub, w);
      if (w == 1) sleep_ms(30);
      TrainingClock clock;
      sleep_ms(w == 0 ? 50 : 10);
      clock.stop(transport);
      seconds[w][0] = clock.seconds();
      sleep_ms(100);  // the pause: not training
      EXPECT_EQ(clock.seconds(), seconds[w][0]);
      if (w == 1) sleep_ms(30);
      clock.resume();
      sleep_ms(w == 0 ? 20 : 5);
      clock.stop(transport);
      seconds[w][1] = clock.seconds();
    });
  for (auto& t : threads) t.join();
  for (int w = 0; w < 2; ++w) {
    SCOPED_TRACE(w);
    EXPECT_NEAR(seconds[w][0], 0.050, 0.008);
    EXPECT_NEAR(seconds[w][1], 0.085, 0.012);
    // From the same exchanged times: equal to the bit.
    EXPECT_EQ(seconds[w][0], seconds[0][0]);
    EXPECT_EQ(seconds[w][1], seconds[0][1]);
  }
}

}  // namespace
}  // namespace pt::job
