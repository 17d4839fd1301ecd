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
    if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);  // data() may be null when empty
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

TEST(IdxReader, HostileHeadersAllocateNothingAndCorruptGzipIsNamed) {
  // 4 x 2^32-1 elements overflow 64 bits; the reader must not try to allocate them.
  std::vector<uint8_t> huge = {0, 0, 8, 4};
  for (int i = 0; i < 16; ++i) huge.push_back(0xff);
  huge.push_back(7);
  std::string p = write("huge.idx", huge, false);
  EXPECT_EQ(error_of(p), p + ": truncated IDX file: header promises 4294967295 x 4294967295 x 4294967295 x "
                             "4294967295 bytes of data, found 1");
  // 2^31 bytes promised by a 12-byte file: an error, not a 2 GiB allocation.
  p = write("big.idx", {0, 0, 8, 2, 0, 1, 0, 0, 0, 0, 0x80, 0}, false);
  EXPECT_EQ(error_of(p), p + ": truncated IDX file: header promises 2147483648 bytes of data, found 0");
  p = write("dims.idx", {0, 0, 8, 5, 0, 0, 0, 1}, false);
  EXPECT_EQ(error_of(p), p + ": IDX header has 5 dimensions (expected 1..4)");
  // A gzip stream with its deflate data spoiled: named as unreadable, not as a short file.
  std::string good = write("spoil.idx.gz", idx_bytes({64, 64}), true);
  std::FILE* f = std::fopen(good.c_str(), "r+b");
  std::fseek(f, 14, SEEK_SET);
  for (int i = 0; i < 8; ++i) std::fputc(0xff, f);
  std::fclose(f);
  std::string e = error_of(good);
  EXPECT_EQ(e.rfind(good + ": cannot read IDX data (", 0), 0u) << e;
  // A directory opens but cannot be read.
  std::string dir = ::testing::TempDir();
  e = error_of(dir);
  EXPECT_EQ(e.rfind(dir + ": cannot read IDX data (Is a directory)", 0), 0u) << e;
}

TEST(IdxReader, ParsesBytesInMemory) {
  std::vector<uint8_t> b = idx_bytes({2, 3});
  IdxArray a = parse_idx(b.data(), b.size(), "mem");
  EXPECT_EQ(a.dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.data.size(), 6u);
  b.pop_back();
  try {
    parse_idx(b.data(), b.size(), "mem");
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_EQ(std::string(e.what()), "mem: truncated IDX file: header promises 6 bytes of data, found 5");
  }
}

}  // namespace
}  // namespace pt::model
