#include <gtest/gtest.h>

#include "core/error.h"
#include "core/units.h"

namespace pt {
namespace {

TEST(Units, ParsesBinarySizes) {
  EXPECT_EQ(parse_bytes("16GB", "--memory"), 17179869184LL);
  EXPECT_EQ(parse_bytes("16GiB", "--memory"), 17179869184LL);
  EXPECT_EQ(parse_bytes("512mb", "--memory"), 536870912LL);
  EXPECT_EQ(parse_bytes("1000", "--memory"), 1000);
  EXPECT_EQ(parse_bytes("1.5K", "--memory"), 1536);
  EXPECT_EQ(parse_bytes("2PB", "--memory"), 2LL << 50);
  EXPECT_EQ(parse_bytes("1.3MB", "--memory"), 1363149);  // rounded to the byte
}

TEST(Units, RejectsBadSizesNamingTheFlag) {
  for (const char* bad : {"", "-1GB", "0", "12XB", "GB", "1e99TB", "1.5", "0.4", "9PB"}) {
    try {
      parse_bytes(bad, "--memory");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--memory: '"), std::string::npos) << e.what();
    }
  }
}

TEST(Units, SizesStayWithinWhatJsonFilesHoldExactly) {
  // Found by fuzz/cluster_fuzz.cpp: a cluster with this memory could not be read back.
  try {
    parse_bytes("622716505GB", "--memory");
    ADD_FAILURE();
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "--memory: '622716505GB' is more than 9e15 bytes (about 7.99 PiB)");
  }
  EXPECT_EQ(parse_bytes("8000TB", "--memory"), 8000LL << 40);
}

TEST(Units, Lists) {
  EXPECT_EQ(parse_int_list("4, 4", "--workers"), (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(parse_double_list("80,10", "--bandwidth-gbps"), (std::vector<double>{80, 10}));
  EXPECT_THROW(parse_int_list("4,x", "--workers"), UsageError);
  EXPECT_THROW(parse_int_list("4,", "--workers"), UsageError);
  // strtod's other notations are no counts or rates here: --workers 0x10 planned 16 workers.
  for (const char* bad : {"0x10", "1e3", "16.0", "+", "-"}) EXPECT_THROW(parse_int_list(bad, "--workers"), UsageError) << bad;
  for (const char* bad : {"0x10", "0x1p3", "inf", "nan", "1,infinity"})
    EXPECT_THROW(parse_double_list(bad, "--bandwidth-gbps"), UsageError) << bad;
  EXPECT_EQ(parse_double_list("1e1, 2.5", "--bandwidth-gbps"), (std::vector<double>{10, 2.5}));
  EXPECT_EQ(parse_int_list("-1", "--workers"), (std::vector<int64_t>{-1}));
}

TEST(Units, CountsAgreeWithTheirNouns) {
  EXPECT_EQ(counted(1, "worker"), "1 worker");
  EXPECT_EQ(counted(0, "worker"), "0 workers");
  EXPECT_EQ(counted(4, "stage"), "4 stages");
  EXPECT_EQ(counted(1, "microbatch", "microbatches"), "1 microbatch");
  EXPECT_EQ(counted(8, "microbatch", "microbatches"), "8 microbatches");
}

}  // namespace
}  // namespace pt
