// Files in and out (files.h).
#include "core/files.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

namespace pt {

std::string read_text_file(const std::string& path, int64_t max_bytes) {
  // A directory opens like a file but reads as empty, which would pass for an empty file.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) throw Error(str(path, ": is a directory, not a file"));
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > max_bytes)
    throw Error(str(path, ": ", st.st_size, " bytes, more than the ", max_bytes, " pipetrain reads from one file"));
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(str(path, ": cannot open file (", std::strerror(errno), ")"));
  // Read in pieces up to the bound: a pipe or a device (/dev/zero) never gets to fill memory.
  std::string out;
  char buf[1 << 16];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      throw Error(str(path, ": read failed (", std::strerror(err), ")"));
    }
    if (static_cast<int64_t>(out.size()) + n > max_bytes) {
      ::close(fd);
      throw Error(str(path, ": more than the ", max_bytes, " bytes pipetrain reads from one file"));
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

std::string read_regular_file(const std::string& path, int64_t max_bytes) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw Error(str(path, ": cannot open file"));
  if (!S_ISREG(st.st_mode)) throw Error(str(path, ": not a regular file"));
  return read_text_file(path, max_bytes);
}

int output_descriptor(const std::string& path) {
  std::string target = path;
  const std::string own = "/proc/" + std::to_string(::getpid()) + "/fd/";
  for (int hops = 0; hops < 16; ++hops) {
    for (const std::string& dir : {std::string("/proc/self/fd/"), std::string("/dev/fd/"), own})
      if (target.size() > dir.size() && target.compare(0, dir.size(), dir) == 0 &&
          target.find_first_not_of("0123456789", dir.size()) == std::string::npos && target.size() - dir.size() < 9)
        return std::stoi(target.substr(dir.size()));
    struct stat st;
    char buf[4096];
    if (::lstat(target.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return -1;
    ssize_t n = ::readlink(target.c_str(), buf, sizeof buf - 1);
    if (n <= 0) return -1;
    std::string link(buf, static_cast<size_t>(n));
    size_t slash = target.find_last_of('/');
    target = link[0] == '/' || slash == std::string::npos ? link : target.substr(0, slash + 1) + link;
  }
  return -1;
}

std::string output_target(const std::string& path) {
  if (output_descriptor(path) >= 0) return path;  // written where the descriptor stands
  std::string target = path;
  struct stat st;
  for (int hops = 0; hops < 16 && ::lstat(target.c_str(), &st) == 0 && S_ISLNK(st.st_mode); ++hops) {
    // A pipe, a socket or a device behind /proc's links has no path to follow to (/dev/stdout ->
    // /proc/self/fd/1 -> "pipe:[N]"): the link opens it. `-o /dev/stdout | cat` was refused as
    // "cannot write in '/proc/self/fd'".
    struct stat real;
    if (::stat(target.c_str(), &real) == 0 && !S_ISREG(real.st_mode) && !S_ISDIR(real.st_mode)) break;
    char buf[4096];
    ssize_t n = ::readlink(target.c_str(), buf, sizeof buf - 1);
    if (n <= 0) break;
    std::string link(buf, static_cast<size_t>(n));
    size_t slash = target.find_last_of('/');
    target = link[0] == '/' || slash == std::string::npos ? link : target.substr(0, slash + 1) + link;
  }
  return target;
}

void check_output_path(const std::string& given, const std::string& flag) {
  if (given.empty()) return;
  if (int fd = output_descriptor(given); fd >= 0) {
    int mode = ::fcntl(fd, F_GETFL);
    if (mode < 0 || (mode & O_ACCMODE) == O_RDONLY)
      throw UsageError(str(flag, ": '", given, "' is descriptor ", fd, ", which is not open for writing"));
    return;
  }
  std::string path = output_target(given);  // a link is followed, dangling or not
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw UsageError(str(flag, ": '", path, "' is a directory"));
    if (::access(path.c_str(), W_OK) != 0)
      throw UsageError(str(flag, ": cannot write '", path, "' (", std::strerror(errno), ")"));
    if (!S_ISREG(st.st_mode)) return;  // written through (write_text_file_atomic)
  }
  size_t slash = path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw UsageError(str(flag, ": '", path, "' is in '", dir, "', which is not a directory"));
  if (int err = create_error_in(dir)) throw UsageError(str(flag, ": cannot write in '", dir, "' (", std::strerror(err), ")"));
}

int create_error_in(const std::string& dir) {
  std::string probe = dir + "/.pt-write-test-" + std::to_string(::getpid());
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return errno;
  ::close(fd);
  ::unlink(probe.c_str());
  return 0;
}

void check_outputs_apart(const std::vector<FlagPath>& inputs, const std::vector<FlagPath>& outputs) {
  namespace fs = std::filesystem;
  auto key = [](const std::string& path) {
    std::error_code ec;
    fs::path p = fs::weakly_canonical(fs::absolute(output_target(path)), ec);
    return ec ? fs::path(path).lexically_normal().string() : p.string();
  };
  for (size_t o = 0; o < outputs.size(); ++o) {
    const FlagPath& out = outputs[o];
    if (out.path.empty() || out.path == "-") continue;
    const std::string written = key(out.path);
    for (const FlagPath& in : inputs) {
      // Compared where the input does not exist yet too: a --checkpoint-dir a run is to make, named
      // by --metrics as well, failed after training began and left a folder by the metrics' name.
      std::error_code ec;
      if (in.path.empty()) continue;
      const std::string read = key(in.path);
      if (written == read)
        throw UsageError(str(out.flag, " '", out.path, "' is ", in.flag, " '", in.path,
                             "', which this command reads: writing it would destroy it; give another path"));
      if (fs::is_directory(in.path, ec) && written.compare(0, read.size() + 1, read + "/") == 0)
        throw UsageError(str(out.flag, " '", out.path, "' lies in ", in.flag, " '", in.path,
                             "', a folder the run reads or writes as a whole; give a path outside it"));
    }
    for (size_t k = 0; k < o; ++k)
      if (!outputs[k].path.empty() && key(outputs[k].path) == written)
        throw UsageError(str(out.flag, " '", out.path, "' is ", outputs[k].flag, " '", outputs[k].path,
                             "' too: one would overwrite the other; give each its own path"));
  }
}

namespace {

void write_all(int fd, const std::string& path, const std::vector<std::string_view>& pieces) {
  for (std::string_view text : pieces)
    for (size_t off = 0; off < text.size();) {
      ssize_t n = ::write(fd, text.data() + off, text.size() - off);
      if (n <= 0) throw Error(str(path, ": write failed (", n < 0 ? std::strerror(errno) : "disk full?", ")"));
      off += static_cast<size_t>(n);
    }
}

}  // namespace

void write_text_file_atomic(const std::string& path, const std::string& text) { write_file_atomic(path, {text}); }

void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces) {
  if (int fd = output_descriptor(path); fd >= 0) return write_all(fd, path, pieces);  // where it stands
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) throw Error(str(path, ": is a directory, not a file"));
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    // A device, a FIFO or a socket (or a link to one): written through, never replaced.
    int fd = ::open(path.c_str(), O_WRONLY);
    if (fd < 0) throw Error(str(path, ": cannot write (", std::strerror(errno), ")"));
    try {
      write_all(fd, path, pieces);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    return;
  }
  // A link to a regular file: its target is replaced, so the link stays a link.
  std::string target = output_target(path);
  std::string tmp = target + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw Error(str(path, ": cannot write file (", std::strerror(errno), ")"));
  try {
    write_all(fd, path, pieces);
  } catch (...) {
    ::close(fd);
    std::remove(tmp.c_str());
    throw;
  }
  ::fsync(fd);
  ::close(fd);
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error(str(path, ": cannot replace file"));
  }
}

}  // namespace pt
