// A zip archive's records against their CRC-32s (model/zip_records.h), on archives made here:
// a plain one, and one in zip64's form (sizes and offsets in the extra field, the end record's
// count and offset overflowed), as a model file over 4 GiB is written.
#include "model/zip_records.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"

namespace pt::model {
namespace {

void put(std::string& s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>(v >> (8 * i) & 0xff));
}

// One stored record `name` holding `data`, its CRC-32 recorded as `crc`.
std::string archive(const std::string& name, const std::string& data, uint32_t crc, bool zip64) {
  std::string s;
  put(s, 0x04034b50, 4), put(s, 20, 2), put(s, 0, 2), put(s, 0, 2), put(s, 0, 4), put(s, crc, 4);
  put(s, data.size(), 4), put(s, data.size(), 4), put(s, name.size(), 2), put(s, 0, 2);
  s += name + data;
  uint64_t directory = s.size(), wide = zip64 ? 0xffffffff : data.size();
  std::string extra;
  if (zip64) put(extra, 1, 2), put(extra, 24, 2), put(extra, data.size(), 8), put(extra, data.size(), 8), put(extra, 0, 8);
  put(s, 0x02014b50, 4), put(s, 45, 2), put(s, 45, 2), put(s, 0, 2), put(s, 0, 2), put(s, 0, 4), put(s, crc, 4);
  put(s, wide, 4), put(s, wide, 4), put(s, name.size(), 2), put(s, extra.size(), 2), put(s, 0, 2), put(s, 0, 2);
  put(s, 0, 2), put(s, 0, 4), put(s, zip64 ? 0xffffffff : 0, 4);
  s += name + extra;
  uint64_t directory_bytes = s.size() - directory;
  if (zip64) {
    uint64_t end64 = s.size();
    put(s, 0x06064b50, 4), put(s, 44, 8), put(s, 45, 2), put(s, 45, 2), put(s, 0, 4), put(s, 0, 4);
    put(s, 1, 8), put(s, 1, 8), put(s, directory_bytes, 8), put(s, directory, 8);
    put(s, 0x07064b50, 4), put(s, 0, 4), put(s, end64, 8), put(s, 1, 4);
  }
  put(s, 0x06054b50, 4), put(s, 0, 2), put(s, 0, 2), put(s, zip64 ? 0xffff : 1, 2), put(s, zip64 ? 0xffff : 1, 2);
  put(s, directory_bytes, 4), put(s, zip64 ? 0xffffffff : directory, 4), put(s, 0, 2);
  return s;
}

std::string written(const std::string& bytes) {
  std::string path = (std::filesystem::temp_directory_path() / ("pt_zip_" + std::to_string(::getpid()) + ".pt")).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string refusal(const std::string& bytes) {
  std::string path = written(bytes);
  std::string what;
  try {
    check_zip_records(path);
  } catch (const FormatError& e) {
    what = e.what();
  }
  std::filesystem::remove(path);
  return what;
}

TEST(ZipRecords, ARecordIsCheckedAgainstItsCrc) {
  const std::string data = "the weights of one layer";
  uint32_t crc = static_cast<uint32_t>(::crc32(0, reinterpret_cast<const Bytef*>(data.data()), data.size()));
  for (bool zip64 : {false, true}) {
    SCOPED_TRACE(zip64 ? "zip64" : "plain");
    EXPECT_EQ(refusal(archive("m/data/0", data, crc, zip64)), "");
    std::string flipped = data;
    flipped[5] ^= 0x10;
    std::string what = refusal(archive("m/data/0", flipped, crc, zip64));
    EXPECT_NE(what.find(": record 'm/data/0' does not match its CRC-32 (recorded " + std::to_string(crc)), std::string::npos)
        << what;
    // Cut short, its directory gone: left to the loader, which refuses it.
    std::string whole = archive("m/data/0", data, crc, zip64);
    EXPECT_EQ(refusal(whole.substr(0, 40)), "");
  }
  EXPECT_EQ(refusal("not a zip archive at all"), "");
}

}  // namespace
}  // namespace pt::model
