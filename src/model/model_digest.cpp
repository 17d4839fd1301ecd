// A model file's SHA-256 (model_digest.h).
#include "model/model_digest.h"

#include <fstream>
#include <map>
#include <mutex>
#include <tuple>

#include "core/error.h"
#include "core/sha256.h"
#include "model/zip_records.h"

namespace pt::model {

namespace {

bool has_recorded_digest(const std::string& path) { return std::ifstream(path + ".sha256").good(); }

void check_digest(const std::string& path, const std::string& digest) {
  std::ifstream recorded{path + ".sha256"};
  if (!recorded) return;
  std::string expected;
  recorded >> expected;
  if (expected != digest)
    throw ConfigError(str(path, ": its SHA-256 is ", digest, " but ", path, ".sha256 (written by pipetrain export) ",
                          "says ", expected.substr(0, 64), ": the file changed since it was exported; export it again, ",
                          "or remove the .sha256 file if the change is yours"));
}

}  // namespace

// Read once a process for each version of the file (its device, inode, size and modification
// time): the job's description and every worker load the file, and hashing a model of gigabytes
// takes seconds each time.
std::string verified_digest(const std::string& path, const struct stat& st) {
  static std::mutex mutex;
  static std::map<std::tuple<dev_t, ino_t, off_t, int64_t, int64_t>, std::string> known;
  auto key = std::make_tuple(st.st_dev, st.st_ino, st.st_size, static_cast<int64_t>(st.st_mtim.tv_sec),
                             static_cast<int64_t>(st.st_mtim.tv_nsec));
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = known.find(key);
    if (it != known.end()) {
      check_digest(path, it->second);
      return it->second;
    }
  }
  std::string digest = to_hex(sha256_of_file(path));
  check_digest(path, digest);
  if (!has_recorded_digest(path)) check_zip_records(path);  // copied without it: its records' own CRC-32s
  std::lock_guard<std::mutex> lock(mutex);
  known[key] = digest;
  return digest;
}

}  // namespace pt::model
