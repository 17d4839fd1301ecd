// The threads transport's all-reduce: what it keeps is the hub's memory, not a worker's, and its
// sum does not depend on the order the members arrive in.
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

// Three replicas' buckets were summed in the order they arrived, which threads change from run to
// run: in float32 (1 + 1e8) - 1e8 is 0 and (-1e8 + 1e8) + 1 is 1, and `train --workers 3 --schedule
// dp` ended with weights 0.087 apart between two runs of one command. Summed in the group's order
// (as a gloo ring's order is fixed), every arrival order gives the same bits.
TEST(ThreadHub, AnAllReduceSumsInTheGroupsOrderWhateverTheOrderOfArrival) {
  const std::vector<float> values = {1.0f, 1e8f, -1e8f};
  const std::vector<std::vector<int>> arrivals = {{0, 1, 2}, {2, 1, 0}, {1, 2, 0}, {2, 0, 1}};
  for (const auto& order : arrivals) {
    auto hub = std::make_shared<ThreadHub>(3, 10);
    std::vector<std::unique_ptr<ThreadTransport>> members;
    for (int w = 0; w < 3; ++w) members.push_back(std::make_unique<ThreadTransport>(hub, w));
    std::vector<torch::Tensor> buckets(3);
    std::vector<std::shared_ptr<PendingTransfer>> pending(3);
    for (int w : order) {  // one thread: the adds do not block
      buckets[w] = torch::full({4}, values[w]);
      pending[w] = members[w]->allreduce_start(buckets[w], {0, 1, 2});
    }
    for (int w = 0; w < 3; ++w) {
      pending[w]->wait();
      EXPECT_EQ(buckets[w][0].item<float>(), (values[0] + values[1]) + values[2])
          << "arrival order " << order[0] << order[1] << order[2] << ", worker " << w;
    }
  }
}

}  // namespace
}  // namespace pt::runtime
