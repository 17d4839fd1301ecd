#include "job/training_clock.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

#include "runtime/progress.h"
#include "runtime/shm_region.h"

namespace pt::job {

using runtime::wall_ms;

namespace {

// The boot id, hashed to a whole number a double holds exactly (a sum of zeros and it stays so).
double boot_key() {
  std::string boot = runtime::SharedRegion::boot_id();
  if (boot.empty()) return 0;
  return static_cast<double>((std::hash<std::string>{}(boot) & ((uint64_t{1} << 52) - 1)) + 1);
}

}  // namespace

TrainingClock::TrainingClock() : key_(boot_key()), resumed_ms_(wall_ms()) {}

// Each worker took its own pause from the barrier's exit to its resume. The exits and resumes
// differ by a thread's wake-up, up to a busy core's timer tick, and the reporting worker's pauses
// made the training time: 1f1b on 2 threads evaluating every 2 of 40 steps read 0.472 s where its
// actions ran from the first worker's resume to the last one's stop for 0.467 (1.0%).
void TrainingClock::stop(runtime::Transport& transport) {
  const int n = transport.world_size(), me = transport.rank();
  double stopped = wall_ms();
  std::vector<torch::Tensor> t{torch::zeros({3 * n}, torch::kDouble)};
  t[0][3 * me] = key_, t[0][3 * me + 1] = resumed_ms_, t[0][3 * me + 2] = stopped;
  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  transport.allreduce_sum(t, all);
  auto a = t[0].accessor<double, 1>();
  bool shared = key_ != 0;
  double first_resume = std::numeric_limits<double>::infinity(), last_stop = 0;
  for (int w = 0; w < n; ++w) {
    shared = shared && a[3 * w] == key_;
    first_resume = std::min(first_resume, a[3 * w + 1]);
    last_stop = std::max(last_stop, a[3 * w + 2]);
  }
  // Apart: from this worker's resume to the exchange, when every worker had stopped.
  trained_ms_ += shared ? last_stop - first_resume : wall_ms() - resumed_ms_;
  stopped_ = true;
}

void TrainingClock::resume() {
  resumed_ms_ = wall_ms();
  stopped_ = false;
}

double TrainingClock::seconds() const { return (trained_ms_ + (stopped_ ? 0 : wall_ms() - resumed_ms_)) / 1000; }

}  // namespace pt::job
