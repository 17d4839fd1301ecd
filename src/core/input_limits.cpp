#include "core/input_limits.h"

#include <sys/stat.h>

#include "core/error.h"
#include "core/json_doc.h"
#include "core/units.h"

namespace pt {

namespace {

struct Limit {
  InputKind kind;
  const char* name;
  int64_t bytes;
};

// A 1,000-layer profile or plan is well under a MiB; a trace of a long run a few hundred; one
// layer's weights or one data shard can be gigabytes.
Limit g_limits[] = {
    {InputKind::plan, "plan", int64_t(16) << 20},
    {InputKind::profile, "profile", int64_t(16) << 20},
    {InputKind::cluster, "cluster", int64_t(1) << 20},
    {InputKind::trace, "trace", int64_t(256) << 20},
    {InputKind::manifest, "manifest", int64_t(16) << 20},
    {InputKind::layer_file, "layer-file", int64_t(4) << 30},
    {InputKind::data, "data", int64_t(4) << 30},
    {InputKind::schedule, "schedule", int64_t(64) << 20},
};

Limit& limit_of(InputKind kind) {
  for (auto& l : g_limits)
    if (l.kind == kind) return l;
  throw Error("unknown input kind");
}

[[noreturn]] void too_large(const std::string& path, InputKind kind, const std::string& size) {
  const Limit& l = limit_of(kind);
  throw Error(str(path, ": ", size.empty() ? "" : size + ", ", "more than the ", human_bytes(static_cast<double>(l.bytes)), " pipetrain reads from a ",
                  l.name, " file (raise it with --max-input ", l.name, "=SIZE)"));
}

}  // namespace

int64_t input_limit(InputKind kind) { return limit_of(kind).bytes; }
const char* input_kind_name(InputKind kind) { return limit_of(kind).name; }

std::string input_limits_text() {
  std::string out;
  for (const auto& l : g_limits) out += str(out.empty() ? "" : ", ", l.name, "=", human_bytes(static_cast<double>(l.bytes)));
  return out;
}

void set_input_limit(const std::string& spec) {
  size_t eq = spec.find('=');
  std::string name = spec.substr(0, eq);
  for (auto& l : g_limits)
    if (l.name == name && eq != std::string::npos) {
      l.bytes = parse_bytes(spec.substr(eq + 1), "--max-input " + name);
      if (l.bytes <= 0) throw UsageError(str("--max-input ", spec, ": the size must be positive"));
      return;
    }
  throw UsageError(str("--max-input '", spec, "': give KIND=SIZE, KIND one of ", input_limits_text()));
}

void check_input_size(const std::string& path, InputKind kind) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > input_limit(kind))
    too_large(path, kind, human_bytes(static_cast<double>(st.st_size)));
}

std::string read_input(const std::string& path, InputKind kind) {
  check_input_size(path, kind);
  try {
    return read_text_file(path, input_limit(kind));
  } catch (const Error& e) {
    // A pipe or a device that kept going past the cap.
    if (std::string(e.what()).find("bytes pipetrain reads from one file") != std::string::npos)
      too_large(path, kind, "");
    throw;
  }
}

}  // namespace pt
