#include "core/error.h"

#include <unistd.h>

namespace pt {

void print_line_to_stderr(const std::string& line) {
  std::string s = line + "\n";
  for (size_t done = 0; done < s.size();) {
    ssize_t n = ::write(2, s.data() + done, s.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace pt

namespace pt::detail {

void check_failed(const char* file, int line, const char* expr, const std::string& msg) {
  throw InternalError(str("internal check failed at ", file, ":", line, ": ", expr,
                          msg.empty() ? "" : " (", msg, msg.empty() ? "" : ")"));
}

}  // namespace pt::detail
