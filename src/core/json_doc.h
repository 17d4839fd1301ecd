#pragma once
// Reading JSON artifacts with errors that name the file, the field path and the value.
// Every artifact carries "format": "pipetrain.<kind>/<version>" (docs/design.md).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/files.h"  // read_json_file reads through it; its users write artifacts with it

namespace pt {

using json = nlohmann::json;

// A view of one JSON value inside a document: knows its source (file name) and field path,
// so every error it raises says where the problem is.
class JsonField {
 public:
  JsonField(const json& value, std::string source, std::string path)
      : value_(&value), source_(std::make_shared<const std::string>(std::move(source))), path_(std::move(path)) {}

  const json& raw() const { return *value_; }
  const std::string& source() const { return *source_; }
  const std::string& path() const { return path_; }

  bool has(const std::string& key) const;
  JsonField operator[](const std::string& key) const;  // required member
  JsonField operator[](size_t index) const;            // array element
  size_t size() const;                                 // array length (must be an array)

  std::string as_string() const;
  double as_number() const;
  double as_non_negative() const;
  int64_t as_int() const;  // a number with no fractional part
  int64_t as_int_at_least(int64_t min) const;
  // A whole number in [min, max]: for counts and indices held in an int, so that 4294967297
  // is an error rather than 1 after narrowing.
  int64_t as_int_in(int64_t min, int64_t max) const;
  bool as_bool() const;
  std::vector<int64_t> as_int_list() const;

  [[noreturn]] void fail(const std::string& what) const;
  // An object whose every member is one of `known`: a misspelled optional field ("latency_usec")
  // is an error naming it and the nearest known one, not a default silently taken.
  void only_fields(const std::vector<std::string>& known) const;

 private:
  JsonField(const json& value, std::shared_ptr<const std::string> source, std::string path)
      : value_(&value), source_(std::move(source)), path_(std::move(path)) {}
  void expect_object() const;
  const json* value_;
  // Shared by a document's fields, whose paths are built as they are read: a profile of 400
  // layers reads thousands (copying the file name into each, and formatting each path through
  // a stream, took half of reading DenseNet-121's PipeDream figures).
  std::shared_ptr<const std::string> source_;
  std::string path_;
};

// Parses text as JSON; a syntax error names the source and the byte offset.
json parse_json(const std::string& text, const std::string& source);
json read_json_file(const std::string& path);

// Checks doc["format"] == "pipetrain.<kind>/<version>", with a clear error otherwise.
void expect_format(const JsonField& doc, const std::string& kind, int version);
std::string format_tag(const std::string& kind, int version);

// Short form of a value for error messages (long values are cut).
std::string brief(const json& value);

// Where two JSON values differ, at the innermost level: the path of each differing value
// ("sgd.momentum", "plan.stages[1].workers") with both sides' brief() forms ("nothing" where a
// side lacks it). Empty when they are equal.
struct JsonDifference {
  std::string path;
  std::string a, b;
};
std::vector<JsonDifference> json_differences(const json& a, const json& b, const std::string& path = "");

}  // namespace pt
