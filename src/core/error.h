#pragma once
// Error types. Bad input at a step boundary throws a pt::Error subclass whose message carries
// the offending file/flag/field and value; broken internal invariants use PT_CHECK, which
// stays on in release builds and reports file, line and expression.
#include <sstream>
#include <stdexcept>
#include <string>

namespace pt {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A file or document that does not follow its format (names the file and the field).
struct FormatError : Error {
  using Error::Error;
};

// A command-line value or an option combination that cannot work (names the flag and value).
struct UsageError : Error {
  using Error::Error;
};

// Inputs that are well formed but inconsistent with each other (plan vs profile, ...).
struct ConfigError : Error {
  using Error::Error;
};

// A failure while running (a worker died, a peer timed out, ...).
struct RuntimeFailure : Error {
  using Error::Error;
};

struct InternalError : Error {
  using Error::Error;
};

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* expr, const std::string& msg);
}

// Concatenates any streamable values into a string: pt::str("stage ", i, " of ", n).
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// Writes `line` and a newline to stderr in one write(2), so that the lines of processes sharing
// a terminal or a pipe (a job's workers and its launcher) do not interleave mid-line.
void print_line_to_stderr(const std::string& line);

// Text as it may be shown on a terminal: control characters that a file or a flag carried into
// it (an escape sequence, a carriage return, a C1 control) and bytes that are not UTF-8 are
// written as \xNN; well-formed UTF-8 stays as it is.
std::string printable(const std::string& text);

}  // namespace pt

#define PT_CHECK(cond, ...)                                                              \
  do {                                                                                   \
    if (!(cond)) ::pt::detail::check_failed(__FILE__, __LINE__, #cond, ::pt::str("", ##__VA_ARGS__)); \
  } while (0)
