#pragma once
// Files in and out: whole files read with a bound, outputs written atomically and checked before
// any work (a folder that takes them, not one of the command's own inputs).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pt {

// Where writing `path` writes: `path`, or the file a symbolic link at it names, followed however
// many links deep (up to 16) and whether or not that file exists yet. Outputs follow links: a
// link stays a link and its target is written (created if missing).
std::string output_target(const std::string& path);
// The open descriptor an output names through /proc's links (/dev/stdout -> /proc/self/fd/1,
// /dev/fd/N), else -1. It is written where it stands, never replaced nor reopened: `-o /dev/stdout
// >> log` had the log replaced by the output (followed to the file, then renamed over it).
int output_descriptor(const std::string& path);
// Writes a regular file atomically (temp file + rename) so a crash never leaves half a file; a
// link (even a dangling one) has its target written and stays a link. A device, a FIFO, a socket or
// an open descriptor (output_descriptor) is written through, never replaced (`-o /dev/stdout` works;
// /dev/null stays a device).
void write_text_file_atomic(const std::string& path, const std::string& text);
// The same, of `pieces` one after the other, written from where they lie: a file of gigabytes
// (a checkpoint's layer) is never joined into one string first.
void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces);
// The most bytes read from one file: any pipetrain artifact (JSON), and any other input.
inline constexpr int64_t kMaxJsonFileBytes = int64_t(1) << 28;
inline constexpr int64_t kMaxInputFileBytes = int64_t(1) << 32;
// Reads a whole file of at most max_bytes (a regular file's size is checked before reading; a
// pipe or a device is read up to the bound), with an error naming it otherwise.
std::string read_text_file(const std::string& path, int64_t max_bytes = kMaxInputFileBytes);
// Checks, before any work, that `path` can be written as an output (UsageError naming `flag`):
// not a directory, in an existing directory this process may write, or an existing writable
// file or device. Nothing to check when path is empty.
void check_output_path(const std::string& path, const std::string& flag);
// 0 where this process can create a file in `dir`, else the errno creating one gave: tried, not
// asked of access(), which grants root any folder (--metrics /proc/x.csv passed it and failed once
// training had started).
int create_error_in(const std::string& dir);
// A flag's path, for check_outputs_apart.
struct FlagPath {
  std::string flag, path;
};
// Refuses (UsageError naming both flags) an output that is, by any path, one of the command's
// inputs that exist, a file inside an input folder, or another of its outputs: `--metrics` given
// the --data file's path wrote its rows over the data, exit 0. Empty paths are skipped.
void check_outputs_apart(const std::vector<FlagPath>& inputs, const std::vector<FlagPath>& outputs);
// Reads a regular file of at most max_bytes, checking both before reading anything: a device,
// a FIFO or a file that is too large is refused with an error naming it.
std::string read_regular_file(const std::string& path, int64_t max_bytes);

}  // namespace pt
