#include "model/idx_reader.h"

#include <zlib.h>

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

int64_t read_all(gzFile f, uint8_t* out, int64_t n) {
  int64_t got = 0;
  while (got < n) {
    unsigned chunk = static_cast<unsigned>(std::min<int64_t>(n - got, 1 << 30));
    int r = gzread(f, out + got, chunk);
    if (r <= 0) break;
    got += r;
  }
  return got;
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  GzFile file(path);
  if (!file.f) throw Error(str(path, ": cannot open file"));
  uint8_t head[4];
  if (read_all(file.f, head, 4) != 4) throw FormatError(str(path, ": truncated IDX file (no header)"));
  if (head[0] != 0 || head[1] != 0)
    throw FormatError(str(path, ": bad IDX magic number 0x", std::hex, (head[0] << 24 | head[1] << 16 | head[2] << 8 | head[3]),
                          " (expected 0x0000080N)"));
  if (head[2] != 0x08)
    throw FormatError(str(path, ": IDX element type 0x", std::hex, int(head[2]), " is not unsigned byte (0x08)"));
  int ndims = head[3];
  if (ndims < 1 || ndims > 4) throw FormatError(str(path, ": IDX header has ", ndims, " dimensions (expected 1..4)"));
  IdxArray a;
  int64_t count = 1;
  for (int i = 0; i < ndims; ++i) {
    uint8_t b[4];
    if (read_all(file.f, b, 4) != 4) throw FormatError(str(path, ": truncated IDX file (in the header)"));
    int64_t d = (int64_t(b[0]) << 24) | (b[1] << 16) | (b[2] << 8) | b[3];
    if (d > (int64_t(1) << 31) / std::max<int64_t>(count, 1))
      throw FormatError(str(path, ": IDX dimension ", i, " is ", d, ", too large"));
    a.dims.push_back(d);
    count *= d;
  }
  a.data.resize(static_cast<size_t>(count));
  int64_t got = read_all(file.f, a.data.data(), count);
  if (got != count)
    throw FormatError(str(path, ": truncated IDX file: header promises ", count, " bytes of data, found ", got));
  uint8_t extra;
  if (read_all(file.f, &extra, 1) != 0)
    throw FormatError(str(path, ": IDX file has bytes after the ", count, " the header promises"));
  return a;
}

}  // namespace pt::model
