#pragma once
// One thread that runs posted jobs in the order they were posted: a worker's communication
// thread, so a transfer or an all-reduce proceeds while the worker computes, and a worker's
// collectives keep the order every member of a group started them in. Started on first use;
// the destructor runs what is queued, then joins.
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace pt::runtime {

class CommThread {
 public:
  CommThread() = default;
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;
  ~CommThread();
  // `job` must not throw (it reports through a promise).
  void post(std::function<void()> job);

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace pt::runtime
