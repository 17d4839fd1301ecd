#include "runtime/checkpoint_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "core/error.h"

namespace pt::runtime {

CheckpointLock::CheckpointLock(const std::string& dir) {
  std::string path = dir + "/" + kCheckpointLockFile;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0) throw UsageError(str("--checkpoint-dir: cannot open '", path, "' (", std::strerror(errno), ")"));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    char holder[256] = {0};
    ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
    std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "";
    while (!who.empty() && (who.back() == '\n' || who.back() == '\0')) who.pop_back();
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK)
      throw UsageError(str("--checkpoint-dir: cannot lock '", path, "' (", std::strerror(err), ")"));
    throw ConfigError(str("--checkpoint-dir '", dir, "' is in use by another run (", who.empty() ? "unknown" : who,
                          "); one run writes a folder at a time: wait for it to end, or give another folder"));
  }
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  std::time_t now = std::time(nullptr);
  char when[32] = {0};
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  std::string me = str("pid ", ::getpid(), " on host ", host, ", since ", when, "\n");
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    // The lock holds without the note; the message of a run refused would say "unknown".
  }
}

CheckpointLock::~CheckpointLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (removing it would race)
}

}  // namespace pt::runtime
