#pragma once
// One run per checkpoint folder (issue 35): two runs writing one folder interleave their
// checkpoints and delete each other's. The run that writes a folder holds an exclusive lock on
// the folder itself for as long as it runs; the kernel releases it on any exit, kill -9 included,
// so a crashed run never leaves the folder locked. Its `.pipetrain.lock` file only says who holds
// it: deleting the file does not unlock the folder (it did, when the lock was the file's, and a
// second --resume then ran beside the first).
#include <string>

namespace pt::runtime {

class CheckpointLock {
 public:
  // Takes the lock of `dir` (which must exist) and writes this process's pid, host and start
  // time into the lock file. ConfigError naming the holder's pid, host and start time when
  // another run holds it.
  explicit CheckpointLock(const std::string& dir);
  ~CheckpointLock();
  CheckpointLock(const CheckpointLock&) = delete;
  CheckpointLock& operator=(const CheckpointLock&) = delete;

 private:
  int fd_ = -1;  // the folder's
};

// The lock file's name inside a checkpoint folder.
inline constexpr const char* kCheckpointLockFile = ".pipetrain.lock";

}  // namespace pt::runtime
