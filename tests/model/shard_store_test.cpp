// Samples kept on disk in shards: rows come back in the order asked, across shards; a shuffled
// epoch reads every shard once (the sampler walks them one at a time) and covers every sample once.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "model/batch_sampler.h"
#include "model/own_data.h"
#include "model/shard_store.h"
#include "model/zoo.h"

namespace pt::model {
namespace {

// Shard "s<k>" of n samples: x row i holds the global sample number, y its negation.
ShardStore make_store(const std::vector<int64_t>& sizes) {
  std::vector<std::string> files;
  std::vector<int64_t> firsts{0};
  for (size_t k = 0; k < sizes.size(); ++k) {
    files.push_back("s" + std::to_string(k));
    firsts.push_back(firsts.back() + sizes[k]);
  }
  auto load = [sizes, firsts](const std::string& file) {
    int k = std::stoi(file.substr(1));
    auto x = torch::arange(firsts[k], firsts[k] + sizes[k], torch::kInt64).unsqueeze(1).repeat({1, 3});
    return std::make_pair(x, -x.select(1, 0));
  };
  return ShardStore(files, sizes, std::vector<uint32_t>(sizes.size(), 0), load);
}

TEST(ShardStore, GathersRowsInOrderAcrossShards) {
  ShardStore store = make_store({4, 5, 3});
  EXPECT_EQ(store.size(), 12);
  std::vector<int64_t> rows{11, 0, 4, 8, 3};
  auto x = store.gather(rows, false), y = store.gather(rows, true);
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(x[i][0].item<int64_t>(), rows[i]);
    EXPECT_EQ(x[i][2].item<int64_t>(), rows[i]);
    EXPECT_EQ(y[i].item<int64_t>(), -rows[i]);
  }
}

TEST(ShardStore, AShuffledEpochReadsEachShardOnce) {
  std::vector<int64_t> sizes{10, 7, 10, 9, 10};
  ShardStore store = make_store(sizes);
  int64_t batch = 4;
  BatchSampler sampler(store.size(), batch, 3, true, sizes);
  std::set<int64_t> seen;
  for (int64_t step = 0; step < sampler.batches_per_epoch(); ++step)
    for (int64_t r : sampler.batch(step)) {
      EXPECT_TRUE(seen.insert(r).second) << "sample " << r << " twice in one epoch";
      store.gather({r}, false);
    }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), sampler.batches_per_epoch() * batch);
  // At most two shards are held: walking them one at a time reads each once (the last
  // partial minibatch is dropped, so the epoch's final shard may be cut short, not skipped).
  EXPECT_LE(store.loads(), static_cast<int64_t>(sizes.size()));
  EXPECT_GE(store.loads(), static_cast<int64_t>(sizes.size()) - 1);
  // Unsharded, the same seed gives a different order: the shards' walk is not a plain shuffle.
  BatchSampler plain(store.size(), batch, 3, true);
  EXPECT_NE(plain.batch(0), BatchSampler(store.size(), batch, 3, true, sizes).batch(0));
}

// A shard rewritten during training with as many samples trained on them unchecked, exit 0: a
// read after the first must find the CRC-32 the check found.
TEST(ShardStore, AShardRewrittenSinceItWasCheckedIsRefused) {
  std::string dir = ::testing::TempDir() + "rewritten_shards";
  std::filesystem::create_directories(dir);
  auto write = [&](int k, float value) {
    c10::Dict<std::string, torch::Tensor> d;
    d.insert("x", torch::full({8, 1, 28, 28}, value));
    d.insert("y", torch::zeros({8}, torch::kInt64));
    std::vector<char> bytes = torch::pickle_save(c10::IValue(d));
    std::ofstream(dir + "/s" + std::to_string(k) + ".pt", std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  };
  for (int k = 0; k < 3; ++k) write(k, 0.5f);  // s2: the test set
  auto model = build_mnist_cnn({});
  ::testing::internal::CaptureStderr();
  DataSplit split = load_own_data(dir, *model);
  // Which shard tests is said: in name order shard_10.pt came before shard_9.pt, unsaid.
  std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("no shard holds x_test, so the last in name order, " + dir + "/s2.pt, is the test set (8 samples)"),
            std::string::npos)
      << said;
  EXPECT_FLOAT_EQ(split.train.on_disk->gather({0}, false).flatten()[0].item<float>(), 0.5f);
  write(1, 0.25f);
  try {
    split.train.on_disk->gather({8}, false);
    ADD_FAILURE() << "a rewritten shard was read";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/s1.pt changed since it was checked"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pt::model
