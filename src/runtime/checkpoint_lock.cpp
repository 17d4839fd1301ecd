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
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) throw UsageError(str("--checkpoint-dir: cannot open '", dir, "' (", std::strerror(errno), ")"));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK)
      throw UsageError(str("--checkpoint-dir: cannot lock '", dir, "' (", std::strerror(err), ")"));
    std::string who;
    int note = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (note >= 0) {
      char holder[256] = {0};
      ssize_t n = ::pread(note, holder, sizeof holder - 1, 0);
      if (n > 0) who.assign(holder, static_cast<size_t>(n));
      ::close(note);
    }
    while (!who.empty() && (who.back() == '\n' || who.back() == '\0')) who.pop_back();
    throw ConfigError(str("--checkpoint-dir '", dir, "' is in use by another run (", who.empty() ? "unknown" : who,
                          "); one run writes a folder at a time: wait for it to end, or give another folder"));
  }
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  std::time_t now = std::time(nullptr);
  char when[32] = {0};
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  std::string me = str("pid ", ::getpid(), " on host ", host, ", since ", when, "\n");
  int note = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (note >= 0) {
    // The lock holds without the note; the message of a run refused would say "unknown".
    if (::pwrite(note, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    }
    ::close(note);
  }
}

CheckpointLock::~CheckpointLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the note stays (removing it would race)
}

}  // namespace pt::runtime
