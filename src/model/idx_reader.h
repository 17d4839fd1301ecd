#pragma once
// Reader for the IDX format of (Fashion-)MNIST, gzip'd as Debian ships it or plain.
// Plain C++ (zlib): no LibTorch, so its tests are fast.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pt::model {

struct IdxArray {
  std::vector<int64_t> dims;  // e.g. {60000, 28, 28}
  std::vector<uint8_t> data;  // row-major, unsigned bytes
};

// Throws FormatError naming the file for a bad magic number, a wrong element type, a
// truncated file or trailing bytes; Error for a file that cannot be opened.
// `dims` > 0: the dimensions the file must have (`shape` names them), checked before its size (a
// labels file where images belong was refused for "bytes after" its header's count).
IdxArray read_idx(const std::string& path, int dims = 0, const std::string& shape = "");
// The IDX bytes (already decompressed) of `source`: the parsing read_idx does, for tests
// and the fuzzer. Checks the promised size against `size` before allocating anything.
IdxArray parse_idx(const uint8_t* bytes, size_t size, const std::string& source);

}  // namespace pt::model
