#pragma once
// The most bytes pipetrain reads from one input file of each kind (issue 35): checked on the
// file's real size before anything is read (a pipe or a device is read up to the cap), so no
// file, however it lies about itself, makes a command hold more than its kind's cap plus the
// parsed form of that many bytes. `--max-input KIND=SIZE` (every command) raises one.
// docs/runtime.md lists the caps.
#include <cstdint>
#include <string>

namespace pt {

enum class InputKind { plan, profile, cluster, trace, manifest, layer_file, data, schedule };

// The cap of a kind, and its name on the command line ("plan", "layer-file", ...).
int64_t input_limit(InputKind kind);
const char* input_kind_name(InputKind kind);
// Every kind with its cap, for --help: "plan=16 MiB, profile=64 MiB, ...".
std::string input_limits_text();
// From --max-input KIND=SIZE ("profile=1GB"); UsageError naming the flag and the value.
void set_input_limit(const std::string& spec);

// Reads a whole input file of `kind` within its cap; an Error names the file, its size, the
// cap and the flag that raises it.
std::string read_input(const std::string& path, InputKind kind);
// Refuses (Error, as read_input) a file of `kind` that is larger than its cap; for readers that
// stream a file rather than hold it.
void check_input_size(const std::string& path, InputKind kind);

}  // namespace pt
