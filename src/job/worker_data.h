#pragma once
// The data each worker's process holds. A gloo worker keeps what its stages read: the inputs
// where it runs a replica of the first stage, the targets where it runs one of the last (a
// stage's evaluation reads through replica 0, one of those). A middle stage held the whole data
// set: 188 MiB more in each of 4 ranks of a 196 MB data file, over a plan's memory cap.
#include <cstdint>
#include <vector>

#include "job/job.h"
#include "model/dataset.h"

namespace pt::job {

struct DataRead {
  bool inputs = false, targets = false;
};
DataRead data_read_by(const Job& job, int worker);

// Releases the training and test data `worker`'s stages never read, in its own process, and
// hands what malloc held of it back to the OS.
void release_unread_data(const Job& job, int worker, model::DataSplit& data);

// The bytes of data each worker's process holds while it trains (a threads run's one process the
// whole data set, each gloo process what its stages read), and what each gloo process held at its
// start: the whole set, whether forked from the launcher that loaded it (fork copies the page
// tables, and the peak RSS counts them) or started anew or apart (it reads the data before it
// knows its stage). Releasing lowers a rank's peak only where its stage's tensors outgrow the
// data: modelled without it, a rank started apart read 190 MiB for 361 measured, and was told
// it went over a cap it did not.
struct DataHeld {
  std::vector<int64_t> training;
  int64_t at_start = 0;
  // What to take off a worker's measured peak RSS for its data: the more of the two.
  int64_t peak_share(size_t worker) const;
};
DataHeld data_held_per_worker(const Job& job, const model::DataSplit& data, bool one_process);

}  // namespace pt::job
