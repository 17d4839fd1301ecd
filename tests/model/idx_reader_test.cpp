// IDX parsing: good files (gzip'd and plain) and each kind of bad file.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/idx_reader.h"

namespace pt::model {
namespace {

std::vector<uint8_t> idx_bytes(std::vector<int64_t> dims, uint8_t type = 0x08, int64_t data_bytes = -1) {
  std::vector<uint8_t> b = {0, 0, type, static_cast<uint8_t>(dims.size())};
  int64_t n = 1;
  for (int64_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
    n *= d;
  }
  if (data_bytes < 0) data_bytes = n;
  for (int64_t i = 0; i < data_bytes; ++i) b.push_back(static_cast<uint8_t>(i % 251));
  return b;
}

std::string write(const std::string& name, const std::vector<uint8_t>& bytes, bool gz) {
  std::string path = ::testing::TempDir() + name;
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  } else {
    FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
  return path;
}

std::string error_of(const std::string& path) {
  try {
    read_idx(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(IdxReader, ReadsGzipAndPlain) {
  for (bool gz : {true, false}) {
    std::string path = write(gz ? "good.idx.gz" : "good.idx", idx_bytes({3, 2, 4}), gz);
    IdxArray a = read_idx(path);
    EXPECT_EQ(a.dims, (std::vector<int64_t>{3, 2, 4}));
    ASSERT_EQ(a.data.size(), 24u);
    EXPECT_EQ(a.data[5], 5);
  }
}

TEST(IdxReader, BadFilesNameTheFileAndTheProblem) {
  std::string p = write("magic.idx", {1, 2, 8, 1, 0, 0, 0, 1, 7}, false);
  EXPECT_EQ(error_of(p), p + ": bad IDX magic number 0x1020801 (expected 0x0000080N)");
  p = write("type.idx", idx_bytes({2}, 0x0D), false);
  EXPECT_EQ(error_of(p), p + ": IDX element type 0xd is not unsigned byte (0x08)");
  p = write("trunc.idx.gz", idx_bytes({10, 4}, 0x08, 30), true);
  EXPECT_EQ(error_of(p), p + ": truncated IDX file: header promises 40 bytes of data, found 30");
  p = write("header.idx", {0, 0, 8, 3, 0, 0}, false);
  EXPECT_EQ(error_of(p), p + ": truncated IDX file (in the header)");
  p = write("extra.idx", idx_bytes({2}, 0x08, 3), false);
  EXPECT_EQ(error_of(p), p + ": IDX file has bytes after the 2 the header promises");
  p = write("empty.idx", {}, false);
  EXPECT_EQ(error_of(p), p + ": truncated IDX file (no header)");
  EXPECT_EQ(error_of("/nonexistent/x.idx"), "/nonexistent/x.idx: cannot open file");
}

}  // namespace
}  // namespace pt::model
