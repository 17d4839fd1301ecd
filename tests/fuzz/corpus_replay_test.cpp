// Replays every fuzz target's checked-in seed corpus (fuzz/corpus/<target>/) under the fuzz
// contract (fuzz/fuzz_target.h) in the ordinary build, so CI exercises the parsers on them
// without clang. Seeds named ok-* must parse and bad-* must be rejected with a pt::Error;
// any other name (inputs the fuzzer found) only has to keep the contract.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "fuzz_target.h"
#include "pt_paths.h"

namespace pt::fuzz {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(FuzzCorpus, EveryTargetHasSeeds) {
  ASSERT_FALSE(targets().empty());
  for (const auto& t : targets()) {
    fs::path dir = fs::path(PT_SOURCE_DIR) / "fuzz" / "corpus" / t.name;
    ASSERT_TRUE(fs::is_directory(dir)) << dir;
    bool ok = false, bad = false;
    for (const auto& e : fs::directory_iterator(dir)) {
      std::string name = e.path().filename().string();
      ok |= name.rfind("ok-", 0) == 0;
      bad |= name.rfind("bad-", 0) == 0;
    }
    EXPECT_TRUE(ok && bad) << t.name << ": seeds need at least one ok-* and one bad-* file";
  }
}

TEST(FuzzCorpus, SeedsKeepTheContract) {
  for (const auto& t : targets()) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(fs::path(PT_SOURCE_DIR) / "fuzz" / "corpus" / t.name))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::vector<uint8_t> bytes = read_bytes(f);
      Outcome o = t.run(bytes.data(), bytes.size());  // aborts on a contract violation
      std::string name = f.filename().string();
      if (name.rfind("ok-", 0) == 0) {
        EXPECT_EQ(o, Outcome::kParsed) << t.name << ": " << f;
      } else if (name.rfind("bad-", 0) == 0) {
        EXPECT_EQ(o, Outcome::kRejected) << t.name << ": " << f;
      }
    }
  }
}

}  // namespace
}  // namespace pt::fuzz
