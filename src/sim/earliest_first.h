#pragma once
// The simulator's queue of startable actions (internal to src/sim).
#include <limits>
#include <vector>

namespace pt::sim::detail {

// Each worker's startable action by (start, worker), earliest first, ties to the lowest worker:
// a tournament over the workers, whose root is the next action to run. A worker holds one entry
// at most, and queuing it again gives the same start (what its action waits for is written
// once). A heap of (start, worker, version) entries did the same, stale entries and all, in a
// fifth of a replay's time.
class EarliestFirst {
 public:
  explicit EarliestFirst(int workers) {
    while (size_ < workers) size_ *= 2;
    start_.assign(size_, kNone);
    winner_.assign(2 * size_, 0);
    for (int w = 0; w < size_; ++w) winner_[size_ + w] = w;
    for (int i = size_ - 1; i >= 1; --i) winner_[i] = first_of(winner_[2 * i], winner_[2 * i + 1]);
  }
  bool empty() const { return start_[winner_[1]] == kNone; }
  int top() const { return winner_[1]; }
  double start(int w) const { return start_[w]; }
  void set(int w, double start) {
    if (start_[w] == start) return;
    start_[w] = start;
    for (int i = (size_ + w) / 2; i >= 1; i /= 2) winner_[i] = first_of(winner_[2 * i], winner_[2 * i + 1]);
  }
  void clear(int w) { set(w, kNone); }

 private:
  static constexpr double kNone = std::numeric_limits<double>::infinity();
  // a < b, so ties go to a.
  int first_of(int a, int b) const { return a ^ ((a ^ b) & -static_cast<int>(start_[b] < start_[a])); }
  int size_ = 1;
  std::vector<double> start_;  // [worker] -> its startable action's start; kNone: none
  std::vector<int> winner_;    // [node] -> the first worker below it
};

}  // namespace pt::sim::detail
