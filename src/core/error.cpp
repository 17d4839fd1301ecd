#include "core/error.h"

#include <unistd.h>

#include <cstdio>

namespace pt {

void print_line_to_stderr(const std::string& line) {
  std::string s = line + "\n";
  for (size_t done = 0; done < s.size();) {
    ssize_t n = ::write(2, s.data() + done, s.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

std::string printable(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace pt

namespace pt::detail {

void check_failed(const char* file, int line, const char* expr, const std::string& msg) {
  throw InternalError(str("internal check failed at ", file, ":", line, ": ", expr,
                          msg.empty() ? "" : " (", msg, msg.empty() ? "" : ")"));
}

}  // namespace pt::detail
