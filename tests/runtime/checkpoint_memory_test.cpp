// A checkpoint costs no memory beyond the state it writes: a layer goes between its tensors and
// its file a tensor at a time. Copied into records, joined into one string and read back whole
// for its checksum, a save held 2-4x the stage's state (a 2-worker run of a 300 MB MLP peaked at
// 1.1 GiB a worker against 800 MiB without a checkpoint), outside the memory model and any cap.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/host_allocator.h"
#include "model/memory_meter.h"
#include "runtime/checkpoint.h"

namespace pt::runtime {
namespace {

namespace fs = std::filesystem;

// The most this process's RSS rose above its level at the start while `work` ran, as the
// kernel's own peak counts it (reset to what is resident now), or -1 where the kernel does not
// reset it. A thread sampling the RSS every 0.5 ms missed a short-lived copy where it was not
// scheduled during it (a busy machine).
template <class Work>
int64_t rss_rise_during(Work work) {
  release_freed_host_memory();  // what earlier tests freed cannot hide a copy
  std::ofstream reset("/proc/self/clear_refs");
  reset << "5" << std::flush;
  const int64_t start = model::process_peak_rss_bytes();
  if (!reset || start < 0) return -1;
  work();
  return model::process_peak_rss_bytes() - start;
}

TEST(CheckpointMemory, ALayerIsWrittenAndReadWithoutACopyOfItsFile) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  LayerState s;
  s.params = {torch::randn({16 * kMiB / 4}), torch::randn({32})};
  s.momentum = {torch::randn({16 * kMiB / 4}), torch::Tensor()};
  s.variance = {torch::randn({16 * kMiB / 4}), torch::randn({32})};
  s.optimizer_steps = {7, 9};
  const int64_t state = 48 * kMiB;
  // The meter sees a copy of the state (as the old save made one).
  int64_t copied = rss_rise_during([&] {
    std::string copy(static_cast<size_t>(state), '\0');
    std::memcpy(copy.data(), s.params[0].data_ptr(), static_cast<size_t>(16 * kMiB));
  });
  if (copied < 0) GTEST_SKIP() << "this kernel does not reset or report a process's peak memory";
  ASSERT_GT(copied, state / 2) << "the RSS meter missed a copy of " << state << " bytes";
  fs::path file = fs::temp_directory_path() / ("pt_ckmem_" + std::to_string(::getpid()) + ".tensors");

  int64_t written = rss_rise_during([&] { write_layer_state(file.string(), s); });
  EXPECT_GT(fs::file_size(file), static_cast<uintmax_t>(state));
  EXPECT_LT(written, state / 8) << "writing " << state << " bytes of state raised the RSS by " << written;

  LayerState back;
  int64_t read = rss_rise_during([&] { back = read_layer_state(file.string()); });
  // The state itself lands in new tensors; nothing more.
  EXPECT_LT(read, state + state / 8) << "reading " << state << " bytes of state raised the RSS by " << read;
  ASSERT_EQ(back.params.size(), 2u);
  EXPECT_TRUE(torch::equal(back.params[0], s.params[0]));
  EXPECT_TRUE(torch::equal(back.momentum[0], s.momentum[0]));
  EXPECT_FALSE(back.momentum[1].defined());
  EXPECT_TRUE(torch::equal(back.variance[1], s.variance[1]));
  EXPECT_EQ(back.optimizer_steps, (std::vector<int64_t>{7, 9}));
  // Read where a resumed stage's state lives: in place, no second copy (it held one).
  LayerState into;
  for (const auto& p : s.params) into.params.push_back(torch::zeros_like(p));
  into.momentum = {torch::zeros_like(s.momentum[0]), torch::Tensor()};
  for (const auto& v : s.variance) into.variance.push_back(torch::zeros_like(v));
  LayerState placed;
  int64_t in_place = rss_rise_during([&] { placed = read_layer_state(file.string(), &into); });
  EXPECT_LT(in_place, state / 8) << "reading " << state << " bytes of state in place raised the RSS by " << in_place;
  EXPECT_TRUE(placed.params[0].is_same(into.params[0]));
  EXPECT_TRUE(torch::equal(into.params[0], s.params[0]));
  EXPECT_TRUE(torch::equal(into.momentum[0], s.momentum[0]));
  EXPECT_TRUE(torch::equal(into.variance[0], s.variance[0]));
  // Looking for NaN raises the RSS by a piece, not by a tensor's |t| and masks (1.5x it).
  // Once before, so that the threads of LibTorch's parallel loops exist (their start alone raised
  // the RSS by 7 MiB after other tests had run); a whole-tensor check would allocate again.
  std::string bad = first_non_finite(s);
  int64_t checked = rss_rise_during([&] { bad = first_non_finite(s); });
  EXPECT_EQ(bad, "");
  EXPECT_LT(checked, state / 8) << "checking " << state << " bytes of state for NaN raised the RSS by " << checked;
  s.variance[0][12345] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(first_non_finite(s), "variance.0");
  fs::remove(file);
}

}  // namespace
}  // namespace pt::runtime
