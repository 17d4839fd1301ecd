#pragma once
// A model file is code (docs/runtime.md, what pipetrain trusts): its SHA-256 is what train and
// profile print and checkpoints record, and `pipetrain export` writes it beside the file
// (FILE.sha256, in sha256sum's format), which a load checks.
#include <sys/stat.h>

#include <string>

namespace pt::model {

// The SHA-256 of the file at `path` (hex), whose stat is `st`.
std::string file_digest(const std::string& path, const struct stat& st);
// ConfigError where `path`.sha256 exists and records another digest than `digest`.
void check_digest(const std::string& path, const std::string& digest);

}  // namespace pt::model
