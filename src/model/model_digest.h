#pragma once
// A model file is code (docs/runtime.md, what pipetrain trusts): its SHA-256 is what train and
// profile print and checkpoints record, and `pipetrain export` writes it beside the file
// (FILE.sha256, in sha256sum's format), which a load checks.
#include <sys/stat.h>

#include <string>

namespace pt::model {

// The SHA-256 of the file at `path` (hex), whose stat is `st`, checked: ConfigError where
// `path`.sha256 exists and records another digest; without one, FormatError where a record of the
// archive does not match its CRC-32 (zip_records.h).
std::string verified_digest(const std::string& path, const struct stat& st);

}  // namespace pt::model
