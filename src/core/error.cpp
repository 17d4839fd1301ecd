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

namespace {
// The length of the well-formed UTF-8 sequence at p (RFC 3629: no overlong forms, no surrogates,
// nothing past U+10FFFF), or 0 where the bytes there are not one.
size_t utf8_sequence(const unsigned char* p, size_t left) {
  unsigned char c = p[0];
  size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (n == 0 || n > left) return 0;
  for (size_t i = 1; i < n; ++i)
    if ((p[i] & 0xC0) != 0x80) return 0;
  if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] >= 0xA0) || (c == 0xF0 && p[1] < 0x90) ||
      (c == 0xF4 && p[1] >= 0x90))
    return 0;
  // C1 controls (U+0080..U+009F) act on a terminal as the C0 ones do.
  if (c == 0xC2 && p[1] < 0xA0) return 0;
  return n;
}
}  // namespace

std::string printable(const std::string& text) {
  std::string out;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    unsigned char c = p[i];
    size_t n = c < 0x80 ? ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f ? 0 : 1) : utf8_sequence(p + i, text.size() - i);
    if (n == 0) {  // a control byte, or one that is not UTF-8 (sent raw, it garbled the terminal)
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
      n = 1;
    } else {
      out.append(text, i, n);
    }
    i += n;
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
