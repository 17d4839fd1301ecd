#include "core/json_doc.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string_view>

#include "core/error.h"

namespace pt {

namespace {

// Writes at most about `budget` characters of `value`, visiting no more of it than that: a
// hostile file's value can be nested millions deep, and json::dump recurses once per level.
void brief_into(const json& value, std::string& out, size_t budget) {
  if (out.size() >= budget) return;
  if (value.is_array() || value.is_object()) {
    bool object = value.is_object();
    out += object ? '{' : '[';
    bool first = true;
    for (auto it = value.begin(); it != value.end() && out.size() < budget; ++it, first = false) {
      if (!first) out += ',';
      if (object) out += json(it.key()).dump() + ':';
      brief_into(it.value(), out, budget);
    }
    out += object ? '}' : ']';
    return;
  }
  // Strings are dumped with invalid UTF-8 replaced: the point is the message, not a throw.
  out += value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::string brief(const json& value) {
  constexpr size_t kMax = 60;
  std::string s;
  brief_into(value, s, kMax);
  if (s.size() > kMax) s = s.substr(0, kMax - 3) + "...";
  return s;
}

std::vector<JsonDifference> json_differences(const json& a, const json& b, const std::string& path) {
  std::vector<JsonDifference> out;
  auto append = [&out](std::vector<JsonDifference> more) { out.insert(out.end(), more.begin(), more.end()); };
  if (a.is_object() && b.is_object()) {
    auto member = [&path](const std::string& key) { return path.empty() ? key : path + "." + key; };
    for (const auto& [key, value] : a.items())
      if (!b.contains(key)) out.push_back({member(key), brief(value), "nothing"});
      else append(json_differences(value, b[key], member(key)));
    for (const auto& [key, value] : b.items())
      if (!a.contains(key)) out.push_back({member(key), "nothing", brief(value)});
    return out;
  }
  if (a.is_array() && b.is_array() && a.size() == b.size()) {
    for (size_t i = 0; i < a.size(); ++i) append(json_differences(a[i], b[i], str(path, "[", i, "]")));
    return out;
  }
  if (a != b) out.push_back({path, brief(a), brief(b)});
  return out;
}

void JsonField::fail(const std::string& what) const {
  throw FormatError(str(*source_, ": field '", path_, "' ", what));
}

namespace {
// Edits (insert, delete, replace) from a to b.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}
}  // namespace

void JsonField::only_fields(const std::vector<std::string>& known) const {
  expect_object();
  for (const auto& [key, value] : value_->items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string nearest;  // within a third of the name's edits ("latency_usec": latency_us)
    size_t best = std::max<size_t>(2, key.size() / 3) + 1;
    for (const auto& k : known)
      if (size_t d = edit_distance(key, k); d < best) best = d, nearest = k;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    std::string where = path_.empty() ? "the top level" : str("'", path_, "'");
    throw FormatError(str(*source_, ": unknown field '", printable(key), "' in ", where,
                          nearest.empty() ? str(" (known: ", list, ")") : str("; did you mean '", nearest, "'?")));
  }
}

void JsonField::expect_object() const {
  if (!value_->is_object()) fail("must be an object, got " + brief(*value_));
}

bool JsonField::has(const std::string& key) const {
  expect_object();
  return value_->contains(key);
}

JsonField JsonField::operator[](const std::string& key) const {
  expect_object();
  std::string child = path_.empty() ? key : path_ + "." + key;
  auto it = value_->find(key);
  if (it == value_->end()) throw FormatError(str(*source_, ": missing field '", child, "'"));
  return JsonField(*it, source_, std::move(child));
}

JsonField JsonField::operator[](size_t index) const {
  size_t n = size();
  if (index >= n) fail(str("has no element ", index, " (size ", n, ")"));
  return JsonField((*value_)[index], source_, path_ + "[" + std::to_string(index) + "]");
}

size_t JsonField::size() const {
  if (!value_->is_array()) fail("must be a list, got " + brief(*value_));
  return value_->size();
}

std::string JsonField::as_string() const {
  if (!value_->is_string()) fail("must be a string, got " + brief(*value_));
  return value_->get<std::string>();
}

double JsonField::as_number() const {
  if (!value_->is_number()) fail("must be a number, got " + brief(*value_));
  double v = value_->get<double>();
  if (!std::isfinite(v)) fail("must be finite, got " + brief(*value_));
  return v;
}

double JsonField::as_non_negative() const {
  double v = as_number();
  if (v < 0) fail("must be >= 0, got " + brief(*value_));
  return v;
}

int64_t JsonField::as_int() const {
  double v = as_number();
  if (std::floor(v) != v) fail("must be a whole number, got " + brief(*value_));
  // Beyond 2^53 a double no longer holds every whole number, so the file's value is not exact.
  if (std::fabs(v) > 9.0e15) fail("must be a whole number of magnitude at most 9e15, got " + brief(*value_));
  return static_cast<int64_t>(v);
}

int64_t JsonField::as_int_at_least(int64_t min) const {
  int64_t v = as_int();
  if (v < min) fail(str("must be >= ", min, ", got ", v));
  return v;
}

int64_t JsonField::as_int_in(int64_t min, int64_t max) const {
  int64_t v = as_int();
  if (v < min || v > max) fail(str("must be in ", min, "..", max, ", got ", v));
  return v;
}

bool JsonField::as_bool() const {
  if (!value_->is_boolean()) fail("must be true or false, got " + brief(*value_));
  return value_->get<bool>();
}

std::vector<int64_t> JsonField::as_int_list() const {
  std::vector<int64_t> out;
  size_t n = size();
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back((*this)[i].as_int());
  return out;
}

namespace {

// Refuses a key given twice in one object of `text`, which json::parse has accepted, naming its
// path ("layers[3].forward_ms"): nlohmann keeps the last silently (a profile's second
// "forward_ms" of 99999 planned on, exit 0). A scan of the bytes: nlohmann's callback parser
// doubled the parse (DenseNet-121's profile 0.7 -> 1.2 ms).
void refuse_repeated_keys(const std::string& text, const std::string& source) {
  struct Frame {
    bool object;
    size_t first_key;   // in `keys`, where this object's start
    size_t commas = 0;  // an array's so far: the index of its current item
  };
  std::vector<Frame> frames;
  std::vector<std::string_view> keys;  // of the open objects, innermost last
  bool key_next = false;
  auto path_to = [&](std::string_view key) {
    std::string out;
    for (size_t i = 0; i + 1 < frames.size(); ++i)
      out += frames[i].object ? str(out.empty() ? "" : ".", keys[frames[i + 1].first_key - 1])
                              : str("[", frames[i].commas, "]");
    return str(out, out.empty() ? "" : ".", key);
  };
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"') {
      size_t start = ++i;
      for (; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\') ++i;
      if (key_next) keys.emplace_back(text.data() + start, i - start), key_next = false;
    } else if (c == '{' || c == '[') {
      frames.push_back({c == '{', keys.size()});
      key_next = c == '{';
    } else if ((c == '}' || c == ']') && !frames.empty()) {
      if (frames.back().object) {
        auto mine = keys.begin() + static_cast<std::ptrdiff_t>(frames.back().first_key);  // dropped below
        std::sort(mine, keys.end());
        auto twice = std::adjacent_find(mine, keys.end());
        if (twice != keys.end())
          throw FormatError(str(source, ": field '", path_to(*twice), "' is given twice (a JSON object's keys must differ)"));
        keys.resize(frames.back().first_key);
      }
      frames.pop_back();
    } else if (c == ',' && !frames.empty()) {
      if (frames.back().object) key_next = true;
      else ++frames.back().commas;
    }
  }
}

}  // namespace

json parse_json(const std::string& text, const std::string& source) {
  json out;
  try {
    out = json::parse(text);
  } catch (const json::parse_error& e) {
    throw FormatError(str(source, ": not valid JSON (byte ", e.byte, ")"));
  } catch (const json::exception& e) {
    // A number beyond double's range ("1e999") is an out_of_range error, not a parse_error.
    std::string why = e.what();
    size_t tag = why.find("] ");
    throw FormatError(str(source, ": not valid JSON (", tag == std::string::npos ? why : why.substr(tag + 2), ")"));
  }
  refuse_repeated_keys(text, source);
  return out;
}

json read_json_file(const std::string& path) { return parse_json(read_text_file(path, kMaxJsonFileBytes), path); }

std::string format_tag(const std::string& kind, int version) {
  return str("pipetrain.", kind, "/", version);
}

void expect_format(const JsonField& doc, const std::string& kind, int version) {
  if (!doc.raw().is_object())
    throw FormatError(str(doc.source(), ": expected a JSON object (", format_tag(kind, version), ")"));
  if (!doc.has("format"))
    throw FormatError(str(doc.source(), ": missing field 'format' (expected \"",
                          format_tag(kind, version), "\")"));
  std::string got = doc["format"].as_string();
  if (got != format_tag(kind, version))
    throw FormatError(str(doc.source(), ": field 'format' is \"", got, "\", expected \"",
                          format_tag(kind, version), "\""));
}

}  // namespace pt
