#include "job/worker_data.h"

#include <algorithm>

#include "core/host_allocator.h"

namespace pt::job {

DataRead data_read_by(const Job& job, int worker) {
  const auto& workers = job.typical->stage_workers;
  auto runs = [&](const std::vector<int>& stage) { return std::count(stage.begin(), stage.end(), worker) > 0; };
  return {runs(workers.front()), runs(workers.back())};
}

void release_unread_data(const Job& job, int worker, model::DataSplit& data) {
  const DataRead read = data_read_by(job, worker);
  for (model::Dataset* d : {&data.train, &data.test}) {
    if (!read.inputs) d->release(false);
    if (!read.targets) d->release(true);
  }
  release_freed_host_memory();
}

int64_t DataHeld::peak_share(size_t worker) const {
  return std::max(worker < training.size() ? training[worker] : 0, at_start);
}

DataHeld data_held_per_worker(const Job& job, const model::DataSplit& data, bool one_process) {
  const int64_t inputs = data.train.input_bytes() + data.test.input_bytes();
  const int64_t targets = data.train.target_bytes() + data.test.target_bytes();
  DataHeld held{std::vector<int64_t>(static_cast<size_t>(job.workers()), inputs + targets),
                one_process ? 0 : inputs + targets};
  if (one_process) return held;
  for (int w = 0; w < job.workers(); ++w) {
    const DataRead read = data_read_by(job, w);
    held.training[static_cast<size_t>(w)] = (read.inputs ? inputs : 0) + (read.targets ? targets : 0);
  }
  return held;
}

}  // namespace pt::job
