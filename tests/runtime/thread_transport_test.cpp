// The threads transport's all-reduce: what it keeps is the hub's memory, not a worker's.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/memory_meter.h"
#include "runtime/thread_transport.h"

namespace pt::runtime {
namespace {

// The first member to add to a sum made the sum's copy in its own thread, so its account held
// the group's bucket twice until every member had taken it: 2 MiB here where it holds 1. The
// sum stands for a device's in-place reduction; no worker holds it.
TEST(ThreadHub, AnAllReduceChargesNoMemberForTheSumItKeeps) {
  model::install_memory_meter();
  auto hub = std::make_shared<ThreadHub>(2, 10);
  ThreadTransport first(hub, 0), second(hub, 1);
  std::vector<std::shared_ptr<model::MemoryAccount>> accounts = {std::make_shared<model::MemoryAccount>(),
                                                                 std::make_shared<model::MemoryAccount>()};
  const int64_t bytes = int64_t{1} << 20;
  std::vector<torch::Tensor> buckets;
  std::vector<std::shared_ptr<PendingTransfer>> pending;
  for (int w = 0; w < 2; ++w) {  // one thread, each member in turn: the adds do not block
    model::ChargeTo charge(accounts[w]);
    buckets.push_back(torch::full({bytes / 4}, 1.0f + w));
    pending.push_back((w == 0 ? first : second).allreduce_start(buckets[w], {0, 1}));
    EXPECT_EQ(accounts[w]->live(), bytes) << "worker " << w << " after its add";
  }
  for (int w = 0; w < 2; ++w) {
    model::ChargeTo charge(accounts[w]);
    pending[w]->wait();
    EXPECT_EQ(accounts[w]->peak(), bytes) << "worker " << w;
    EXPECT_TRUE(torch::allclose(buckets[w], torch::full({bytes / 4}, 3.0f))) << "worker " << w << "'s sum";
  }
}

}  // namespace
}  // namespace pt::runtime
