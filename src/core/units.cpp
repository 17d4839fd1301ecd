#include "core/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace pt {

namespace {

// Decimal notation only: strtod also reads hexadecimal ("0x10" as 16), "inf" and "nan".
bool parse_double(const std::string& s, double* out) {
  if (s.empty() || s.find_first_not_of("0123456789+-.eE") != std::string::npos) return false;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : text) {
    if (c == sep) {
      parts.push_back(cur);
      cur.clear();
    } else if (!std::isspace(static_cast<unsigned char>(c))) {
      cur += c;
    }
  }
  parts.push_back(cur);
  return parts;
}

}  // namespace

int64_t parse_bytes(const std::string& text, const std::string& what) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  double number = 0;
  std::string unit = text.substr(i);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") scale = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TIB") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "P" || unit == "PB" || unit == "PIB") scale = 1024.0 * 1024 * 1024 * 1024 * 1024;
  if (!parse_double(text.substr(0, i), &number) || scale == 0 || number <= 0)
    throw UsageError(str(what, ": '", text, "' is not a positive size (examples: 16GB, 512MiB, 1048576)"));
  // The most a JSON artifact holds exactly (JsonField::as_int): a size must survive being
  // written into a cluster or plan file and read back.
  if (number * scale > 9.0e15) throw UsageError(str(what, ": '", text, "' is more than 9e15 bytes (about 7.99 PiB)"));
  // A fraction of a byte (1.5 was taken as 2 B): the unit left out, most likely. (1.3GB rounds.)
  if (scale == 1 && number != std::floor(number))
    throw UsageError(str(what, ": '", text, "' is not a whole number of bytes",
                         unit.empty() ? " (did it leave out a unit? 1.5GB)" : ""));
  return static_cast<int64_t>(std::llround(number * scale));
}

std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  for (const auto& part : split(text, ',')) {
    // Digits alone: a count written 1e3 or 16.0 is a typo more often than a count.
    size_t digits = part.size() > 1 && (part[0] == '-' || part[0] == '+') ? 1 : 0;
    double v = 0;
    if (part.find_first_not_of("0123456789", digits) != std::string::npos || !parse_double(part, &v) ||
        std::fabs(v) > 1e15)
      throw UsageError(str(what, ": '", part, "' in '", text, "' is not a whole number"));
    out.push_back(static_cast<int64_t>(v));
  }
  return out;
}

std::vector<double> parse_double_list(const std::string& text, const std::string& what) {
  std::vector<double> out;
  for (const auto& part : split(text, ',')) {
    double v = 0;
    if (!parse_double(part, &v)) throw UsageError(str(what, ": '", part, "' in '", text, "' is not a number"));
    out.push_back(v);
  }
  return out;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  // Two decimals from GiB up: one left "1.1 GiB" covering 51 MiB either way, past what the memory
  // model's figures are checked to.
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : u < 3 ? "%.1f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string counted(int64_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many.empty() ? one + "s" : many);
}

}  // namespace pt
