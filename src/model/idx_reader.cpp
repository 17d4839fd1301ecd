#include "model/idx_reader.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace pt::model {

namespace {

// gzopen reads gzip'd and plain files alike.
struct GzFile {
  explicit GzFile(const std::string& path) : f(gzopen(path.c_str(), "rb")) {}
  ~GzFile() {
    if (f) gzclose(f);
  }
  gzFile f;
};

// The size read_all starts with: a gzip file's own record of its data's size (its last 4
// bytes, modulo 2^32), else the file's size; never more than deflate's largest ratio (1032:1)
// allows, so that a file that lies allocates no more than its data could fill. Wrong guesses
// only cost growing the buffer.
size_t expected_size(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return 0;  // a directory, a pipe: read_all names it
  auto size = static_cast<size_t>(st.st_size);
  std::ifstream in(path, std::ios::binary);
  uint8_t head[2] = {0, 0}, tail[4] = {0, 0, 0, 0};
  in.read(reinterpret_cast<char*>(head), 2);
  bool gzip = in && head[0] == 0x1f && head[1] == 0x8b && size >= 18;
  if (!gzip) return size;
  in.seekg(static_cast<std::streamoff>(size - 4));
  in.read(reinterpret_cast<char*>(tail), 4);
  size_t recorded = uint32_t(tail[0]) | uint32_t(tail[1]) << 8 | uint32_t(tail[2]) << 16 | uint32_t(tail[3]) << 24;
  return std::min(recorded, size * 1032);
}

// The whole decompressed stream, read in place into one buffer (growing one in 64 KiB appends
// copied Fashion-MNIST's 47 MB several times, each larger block faulted in afresh). A corrupt
// gzip stream or a read error (a directory, say) is an error naming the file rather than a short
// read that would look like a truncated IDX.
std::vector<uint8_t> read_all(const std::string& path) {
  GzFile file(path);
  if (!file.f) throw Error(str(path, ": cannot open file"));
  std::vector<uint8_t> out(std::max<size_t>(expected_size(path) + 1, 1 << 16));  // + 1: the end is seen
  size_t n = 0;
  for (;;) {
    if (n == out.size()) out.resize(2 * out.size());
    size_t room = std::min<size_t>(out.size() - n, 1u << 30);
    int r = gzread(file.f, out.data() + n, static_cast<unsigned>(room));
    if (r < 0) {
      int code = 0;
      const char* msg = gzerror(file.f, &code);
      std::string why = code == Z_ERRNO ? std::strerror(errno) : std::string(msg ? msg : "unknown zlib error");
      throw FormatError(str(path, ": cannot read IDX data (", why, ")"));
    }
    if (r == 0) {
      out.resize(n);
      return out;
    }
    n += static_cast<size_t>(r);
  }
}

uint32_t big_endian_u32(const uint8_t* b) {
  return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
}

// parse_idx's checks, and the header's size; `a.data` is left to the caller.
size_t parse_header(const uint8_t* bytes, size_t size, const std::string& source, IdxArray& a, int dims = 0,
                    const std::string& shape = "") {
  if (size < 4) throw FormatError(str(source, ": truncated IDX file (no header)"));
  const uint8_t* head = bytes;
  if (head[0] != 0 || head[1] != 0)
    throw FormatError(str(source, ": bad IDX magic number 0x", std::hex, big_endian_u32(head), " (expected 0x0000080N)"));
  if (head[2] != 0x08)
    throw FormatError(str(source, ": IDX element type 0x", std::hex, int(head[2]), " is not unsigned byte (0x08)"));
  int ndims = head[3];
  if (ndims < 1 || ndims > 4) throw FormatError(str(source, ": IDX header has ", ndims, " dimensions (expected 1..4)"));
  if (dims > 0 && ndims != dims)
    throw FormatError(str(source, ": expected ", dims, " dimension", dims == 1 ? "" : "s", " (", shape,
                          "; magic number 0x0000080", dims, "), found ", ndims, " (magic number 0x0000080", ndims, ")"));
  size_t header = 4 + 4 * static_cast<size_t>(ndims);
  if (size < header) throw FormatError(str(source, ": truncated IDX file (in the header)"));
  size_t available = size - header;
  // Four 32-bit dimensions can multiply past 64 bits: such a header promises more than any
  // file holds, so it is truncated whatever the rest says.
  uint64_t count = 1;
  bool overflow = false;
  for (int i = 0; i < ndims; ++i) {
    uint32_t d = big_endian_u32(bytes + 4 + 4 * i);
    a.dims.push_back(d);
    overflow |= __builtin_mul_overflow(count, uint64_t(d), &count);
  }
  if (overflow && count != 0) {
    std::string shape;
    for (int64_t d : a.dims) shape += (shape.empty() ? "" : " x ") + std::to_string(d);
    throw FormatError(str(source, ": truncated IDX file: header promises ", shape, " bytes of data, found ", available));
  }
  if (count > available)
    throw FormatError(str(source, ": truncated IDX file: header promises ", count, " bytes of data, found ", available));
  if (count < available)
    throw FormatError(str(source, ": IDX file has bytes after the ", count, " the header promises"));
  return header;
}

}  // namespace

IdxArray parse_idx(const uint8_t* bytes, size_t size, const std::string& source) {
  IdxArray a;
  size_t header = parse_header(bytes, size, source, a);
  a.data.assign(bytes + header, bytes + size);
  return a;
}

IdxArray read_idx(const std::string& path, int dims, const std::string& shape) {
  std::vector<uint8_t> bytes = read_all(path);
  IdxArray a;
  size_t header = parse_header(bytes.data(), bytes.size(), path, a, dims, shape);
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(header));  // the data moves, not a copy
  a.data = std::move(bytes);
  return a;
}

}  // namespace pt::model
