#include "model/idx_reader.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>

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

// The whole decompressed stream. A corrupt gzip stream or a read error (a directory, say) is
// an error naming the file rather than a short read that would look like a truncated IDX.
std::vector<uint8_t> read_all(const std::string& path) {
  GzFile file(path);
  if (!file.f) throw Error(str(path, ": cannot open file"));
  std::vector<uint8_t> out;
  uint8_t chunk[1 << 16];
  for (;;) {
    int r = gzread(file.f, chunk, sizeof chunk);
    if (r < 0) {
      int code = 0;
      const char* msg = gzerror(file.f, &code);
      std::string why = code == Z_ERRNO ? std::strerror(errno) : std::string(msg ? msg : "unknown zlib error");
      throw FormatError(str(path, ": cannot read IDX data (", why, ")"));
    }
    if (r == 0) return out;
    out.insert(out.end(), chunk, chunk + r);
  }
}

uint32_t big_endian_u32(const uint8_t* b) {
  return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
}

}  // namespace

IdxArray parse_idx(const uint8_t* bytes, size_t size, const std::string& source) {
  if (size < 4) throw FormatError(str(source, ": truncated IDX file (no header)"));
  const uint8_t* head = bytes;
  if (head[0] != 0 || head[1] != 0)
    throw FormatError(str(source, ": bad IDX magic number 0x", std::hex, big_endian_u32(head), " (expected 0x0000080N)"));
  if (head[2] != 0x08)
    throw FormatError(str(source, ": IDX element type 0x", std::hex, int(head[2]), " is not unsigned byte (0x08)"));
  int ndims = head[3];
  if (ndims < 1 || ndims > 4) throw FormatError(str(source, ": IDX header has ", ndims, " dimensions (expected 1..4)"));
  size_t header = 4 + 4 * static_cast<size_t>(ndims);
  if (size < header) throw FormatError(str(source, ": truncated IDX file (in the header)"));
  size_t available = size - header;
  IdxArray a;
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
  a.data.assign(bytes + header, bytes + size);
  return a;
}

IdxArray read_idx(const std::string& path) {
  std::vector<uint8_t> bytes = read_all(path);
  return parse_idx(bytes.data(), bytes.size(), path);
}

}  // namespace pt::model
