// A data file torch.save wrote is read into its tensors and held once: the launcher held its
// bytes, a copy of them, the tensors and a cat of them, 4x a 192 MiB file above its baseline.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "model/memory_meter.h"
#include "model/own_data.h"
#include "model/zoo.h"

namespace pt::model {
namespace {

TEST(OwnData, AFileIsHeldOnceAsItsTensors) {
  std::string path = ::testing::TempDir() + "own_data_memory.pt";
  int64_t file_bytes = 0;
  {
    c10::Dict<std::string, torch::Tensor> d;
    d.insert("x", torch::randn({12288, 1, 28, 28}));  // 36.75 MiB
    d.insert("y", torch::randint(0, 10, {12288}));
    std::vector<char> bytes = torch::pickle_save(c10::IValue(d));
    file_bytes = static_cast<int64_t>(bytes.size());
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  auto model = build_mnist_cnn({});
  std::ofstream reset("/proc/self/clear_refs");  // the peak back to what is resident now
  reset << "5" << std::flush;
  if (!reset || process_peak_rss_bytes() < 0) GTEST_SKIP() << "this kernel does not reset or report a process's peak memory";
  int64_t before = process_peak_rss_bytes();
  DataSplit split = load_own_data(path, *model);
  int64_t rise = process_peak_rss_bytes() - before;
  EXPECT_EQ(split.train.size() + split.test.size(), 12288);
  EXPECT_GT(rise, file_bytes * 9 / 10) << "the tensors themselves are resident";
  // Beside them, the checks' probe forward of mnist-cnn and their blocks: 18 MiB here, and a copy
  // of the file would be 37.
  EXPECT_LT(rise, file_bytes + (int64_t{24} << 20)) << "a copy of the file was held beside its tensors";
  std::remove(path.c_str());
}

}  // namespace
}  // namespace pt::model
