#include "model/token_stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace pt::model {

namespace {

// Reads exactly `n` bytes at `offset`; Error naming the file otherwise.
void read_at(int fd, char* out, int64_t n, int64_t offset, const std::string& path) {
  while (n > 0) {
    ssize_t got = ::pread(fd, out, static_cast<size_t>(n), static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw Error(str(path, ": reading ", n, " bytes at ", offset, " failed (", got < 0 ? std::strerror(errno) : "end of file",
                      "; was it changed while training?)"));
    out += got, n -= got, offset += got;
  }
}

TokenFile::FileState state_of(const struct stat& st) {
  return {static_cast<int64_t>(st.st_dev), static_cast<int64_t>(st.st_ino), static_cast<int64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

int64_t id_at(const char* p, int64_t token_bytes) {
  if (token_bytes == 2) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

TokenFile scan_token_file(const std::string& path, const std::string& dtype, const std::string& flag) {
  TokenFile f;
  f.path = path;
  if (dtype != "uint16" && dtype != "uint32")
    throw UsageError(str("--token-dtype: must be uint16 or uint32, got '", dtype, "'"));
  f.token_bytes = dtype == "uint16" ? 2 : 4;
  // Non-blocking, so that a FIFO is refused below rather than waited on for a writer (it hung).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw UsageError(str(flag, ": cannot open ", path, ": ", std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw UsageError(str(flag, ": ", path, " is not a regular file"));
  }
  f.state = state_of(st);
  int64_t size = st.st_size;
  if (size % f.token_bytes != 0) {
    ::close(fd);
    throw FormatError(str(path, ": ", size, " bytes is not a whole number of ", dtype, " token ids (", f.token_bytes,
                          " bytes each); is it ", dtype == "uint16" ? "uint32" : "uint16", " (--token-dtype)?"));
  }
  f.tokens = size / f.token_bytes;
  constexpr int64_t kChunk = int64_t{16} << 20;
  std::vector<char> buf(static_cast<size_t>(std::min<int64_t>(kChunk, std::max<int64_t>(size, 1))));
  uLong crc = ::crc32(0L, Z_NULL, 0);
  int64_t even_max = 0;
  try {
    for (int64_t at = 0; at < size; at += kChunk) {  // kChunk holds whole pairs of ids
      int64_t n = std::min(kChunk, size - at);
      read_at(fd, buf.data(), n, at, path);
      crc = ::crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(n));
      for (int64_t i = 0; i < n; i += f.token_bytes) {
        int64_t id = id_at(buf.data() + i, f.token_bytes);
        if (id > f.max_id || (at == 0 && i == 0)) f.max_id = id, f.max_at = (at + i) / f.token_bytes;
        int64_t& half_max = (i / f.token_bytes) % 2 ? f.odd_max : even_max;
        half_max = std::max(half_max, id);
      }
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  f.crc32 = static_cast<uint32_t>(crc);
  f.like_uint32 = f.token_bytes == 2 && f.tokens % 2 == 0 && even_max > 0 &&
                  (f.odd_max == 0 || (f.odd_max <= TokenFile::kHighHalvesAtMost && even_max >= TokenFile::kLowHalvesReach));
  return f;
}

TokenStream::TokenStream(TokenFile file, int64_t seq_len, int64_t first, int64_t count)
    : file_(std::move(file)), seq_len_(seq_len), first_(first), count_(count) {
  PT_CHECK(seq_len_ > 0 && first_ >= 0 && count_ >= 0 && first_ + count_ <= windows(file_.tokens, seq_len_),
           "windows ", first_, "+", count_, " of ", file_.path);
  fd_ = ::open(file_.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw Error(str(file_.path, ": cannot open: ", std::strerror(errno)));
  check_unchanged();  // the path may name another file by now
}

void TokenStream::check_unchanged() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) throw Error(str(file_.path, ": cannot stat: ", std::strerror(errno)));
  TokenFile::FileState now = state_of(st);
  if (now == file_.state) return;
  throw FormatError(str(file_.path, ": changed since it was checked when training began (",
                        now.inode != file_.state.inode ? "another file by that name"
                        : now.bytes != file_.state.bytes ? str(now.bytes, " bytes, was ", file_.state.bytes)
                                                         : std::string("written to since"),
                        "; its CRC-32 was ", file_.crc32, "): train on a copy that nothing writes"));
}

TokenStream::~TokenStream() {
  if (fd_ >= 0) ::close(fd_);
}

torch::Tensor TokenStream::gather(const std::vector<int64_t>& indices, bool targets) const {
  auto out = torch::empty({static_cast<int64_t>(indices.size()), seq_len_}, torch::kInt64);
  int64_t* o = out.data_ptr<int64_t>();
  std::vector<char> buf(static_cast<size_t>(seq_len_ * file_.token_bytes));
  for (int64_t i : indices) {
    PT_CHECK(i >= 0 && i < count_, "window ", i, " of ", count_);
    int64_t token = (first_ + i) * seq_len_ + (targets ? 1 : 0);
    read_at(fd_, buf.data(), static_cast<int64_t>(buf.size()), token * file_.token_bytes, file_.path);
    for (int64_t k = 0; k < seq_len_; ++k) *o++ = id_at(buf.data() + k * file_.token_bytes, file_.token_bytes);
  }
  check_unchanged();  // after the reads, which a write before or among them shows in: an fstat a batch
  return out;
}

}  // namespace pt::model
