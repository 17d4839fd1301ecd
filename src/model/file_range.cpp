#include "model/file_range.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace pt::model {

FileRange::FileRange(const std::string& path, uint64_t offset, uint64_t size) : offset_(offset), size_(size) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw Error(str(path, ": cannot open: ", std::strerror(errno)));
}

FileRange::~FileRange() { ::close(fd_); }

size_t FileRange::read(uint64_t pos, void* buf, size_t n, const char*) const {
  if (pos >= size_) return 0;
  n = std::min<uint64_t>(n, size_ - pos);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd_, static_cast<char*>(buf) + done, n - done, static_cast<off_t>(offset_ + pos + done));
    if (r <= 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

}  // namespace pt::model
