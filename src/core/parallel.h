#pragma once
// Independent pieces of work spread over the machine's cores.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <future>
#include <thread>
#include <vector>

namespace pt {

// Runs body(i) once for every i in [first, n) on up to as many threads as the machine has
// cores, the caller's among them, each taking the next index as it finishes one; returns once
// all are done (an exception from body is rethrown then).
template <class Body>
void side_by_side(size_t n, const Body& body, size_t first = 0) {
  if (first >= n) return;
  std::atomic<size_t> next{first};
  auto work = [&] {
    for (size_t i; (i = next++) < n;) body(i);
  };
  size_t threads = std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), n - first);
  std::vector<std::future<void>> others;
  for (size_t t = 1; t < threads; ++t) others.push_back(std::async(std::launch::async, work));
  work();
  for (auto& f : others) f.get();
}

}  // namespace pt
