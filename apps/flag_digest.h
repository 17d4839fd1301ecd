#pragma once
// The command line as every worker of a job must have it (issue 35): each option of the
// command, as the command read it, so that a flag added tomorrow is compared across workers the
// day it is added. job/job_digest.h puts it beside the settings the command resolved.
#include <set>
#include <string>

#include <CLI/CLI.hpp>

#include "core/json_doc.h"

namespace pt::app {

// flag -> value for every option of `app` except those in `per_worker` (outputs, verbosity,
// waits: what may differ between workers). A value is the one given, else the default; numbers
// compare as numbers (0.1 and 0.10 agree), a flag as the times it was given. The value of an
// option in `files` that names a regular file is its SHA-256 ("sha256:..."): workers may see
// one file at different paths, and two files at one path. An option in `read` may name what the
// command reads and digests itself (the data, by its tensors' CRC-32): a path given to it
// stands as "a path", so that it may differ between workers and gigabytes are not hashed twice
// (a name such as "synthetic" is compared as text).
json flag_digest(const CLI::App& app, const std::set<std::string>& per_worker, const std::set<std::string>& files,
                 const std::set<std::string>& read);

}  // namespace pt::app
