// A zip archive's records against their CRC-32s (zip_records.h), after the zip format's
// APPNOTE: the end-of-central-directory record (zip64's where a count or offset overflows), then
// one central header per record, whose local header says where its bytes begin.
#include "model/zip_records.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include <zlib.h>

#include "core/error.h"

namespace pt::model {

namespace {

constexpr uint32_t kEndSig = 0x06054b50, kEnd64Sig = 0x06064b50, kLocator64Sig = 0x07064b50;
constexpr uint32_t kCentralSig = 0x02014b50, kLocalSig = 0x04034b50;
constexpr size_t kEndBytes = 22, kLocator64Bytes = 20, kLongestComment = 0xffff;

uint64_t le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

class Archive {
 public:
  explicit Archive(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    struct stat st;
    if (fd_ < 0 || ::fstat(fd_, &st) != 0) throw Error(str(path, ": cannot read (", std::strerror(errno), ")"));
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~Archive() {
    if (fd_ >= 0) ::close(fd_);
  }
  Archive(const Archive&) = delete;
  Archive& operator=(const Archive&) = delete;

  uint64_t size() const { return size_; }
  // `n` bytes at `at`, or an empty vector where the file ends first.
  std::vector<unsigned char> read(uint64_t at, size_t n) const {
    std::vector<unsigned char> out(n);
    if (at > size_ || n > size_ - at) return {};
    for (size_t done = 0; done < n;) {
      ssize_t got = ::pread(fd_, out.data() + done, n - done, static_cast<off_t>(at + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) throw Error(str(path_, ": cannot read (", got < 0 ? std::strerror(errno) : "it shrank", ")"));
      done += static_cast<size_t>(got);
    }
    return out;
  }
  uint32_t crc_of(uint64_t at, uint64_t n) const {
    uLong crc = ::crc32(0L, Z_NULL, 0);
    std::vector<unsigned char> block;
    for (uint64_t done = 0; done < n; done += block.size()) {
      block = read(at + done, static_cast<size_t>(std::min<uint64_t>(n - done, 1 << 20)));
      crc = ::crc32(crc, block.data(), static_cast<uInt>(block.size()));
    }
    return static_cast<uint32_t>(crc);
  }

 private:
  std::string path_;
  int fd_;
  uint64_t size_ = 0;
};

struct Directory {
  uint64_t entries = 0, offset = 0;
  bool found = false;
};

// The central directory's place and count, from the last end record in the file's tail.
Directory find_directory(const Archive& a) {
  Directory d;
  uint64_t tail = std::min<uint64_t>(a.size(), kEndBytes + kLongestComment);
  std::vector<unsigned char> t = a.read(a.size() - tail, static_cast<size_t>(tail));
  for (int64_t i = static_cast<int64_t>(tail) - static_cast<int64_t>(kEndBytes); i >= 0; --i) {
    if (le(&t[i], 4) != kEndSig) continue;
    d.found = true, d.entries = le(&t[i + 10], 2), d.offset = le(&t[i + 16], 4);
    uint64_t end_at = a.size() - tail + static_cast<uint64_t>(i);
    if ((d.entries == 0xffff || d.offset == 0xffffffff) && end_at >= kLocator64Bytes) {
      std::vector<unsigned char> loc = a.read(end_at - kLocator64Bytes, kLocator64Bytes);
      if (le(loc.data(), 4) == kLocator64Sig) {
        std::vector<unsigned char> end64 = a.read(le(&loc[8], 8), 56);
        if (!end64.empty() && le(end64.data(), 4) == kEnd64Sig)
          d.entries = le(&end64[32], 8), d.offset = le(&end64[48], 8);
      }
    }
    return d;
  }
  return d;
}

}  // namespace

void check_zip_records(const std::string& path) {
  Archive a(path);
  Directory d = find_directory(a);
  if (!d.found) return;  // not a zip archive: the loader says what it is not
  auto damaged = [&](const std::string& what) {
    return FormatError(str(path, ": ", what, ": the file was damaged after it was written (LibTorch does not check "
                                             "this); write it again (`pipetrain export`, or torch.save)"));
  };
  uint64_t at = d.offset;
  for (uint64_t r = 0; r < d.entries; ++r) {
    std::vector<unsigned char> h = a.read(at, 46);
    if (h.empty() || le(h.data(), 4) != kCentralSig)
      throw damaged(str("its zip directory's record ", r, " of ", d.entries, " at byte ", at, " is not one"));
    uint32_t crc = static_cast<uint32_t>(le(&h[16], 4));
    uint64_t method = le(&h[10], 2), packed = le(&h[20], 4), plain = le(&h[24], 4), local = le(&h[42], 4);
    uint64_t name_len = le(&h[28], 2), extra_len = le(&h[30], 2), comment_len = le(&h[32], 2);
    std::vector<unsigned char> rest = a.read(at + 46, static_cast<size_t>(name_len + extra_len));
    if (rest.empty()) throw damaged(str("its zip directory's record ", r, " runs past the file's end"));
    std::string name(rest.begin(), rest.begin() + static_cast<int64_t>(name_len));
    // zip64: the sizes and offset that overflow 32 bits, in this order, in extra field 1.
    for (size_t e = name_len; e + 4 <= rest.size();) {
      uint64_t id = le(&rest[e], 2), len = le(&rest[e + 2], 2);
      if (id == 1) {
        size_t p = e + 4;
        for (uint64_t* field : {&plain, &packed, &local})
          if (*field == 0xffffffff && p + 8 <= e + 4 + len && p + 8 <= rest.size()) *field = le(&rest[p], 8), p += 8;
      }
      e += 4 + len;
    }
    at += 46 + name_len + extra_len + comment_len;
    if (method != 0) continue;  // compressed: torch.save writes none
    std::vector<unsigned char> lh = a.read(local, 30);
    if (lh.empty() || le(lh.data(), 4) != kLocalSig)
      throw damaged(str("record '", name, "' has no local header at byte ", local));
    uint64_t begin = local + 30 + le(&lh[26], 2) + le(&lh[28], 2);
    if (begin > a.size() || packed > a.size() - begin)
      throw damaged(str("record '", name, "' (", packed, " bytes at byte ", begin, ") runs past the file's end (",
                        a.size(), " bytes)"));
    uint32_t got = a.crc_of(begin, packed);
    if (got != crc)
      throw damaged(str("record '", name, "' does not match its CRC-32 (recorded ", crc, ", its bytes' ", got, ")"));
  }
}

}  // namespace pt::model
