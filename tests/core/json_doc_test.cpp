#include <gtest/gtest.h>

#include "core/error.h"
#include "core/json_doc.h"

namespace pt {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JsonDoc, NamesFileFieldAndValue) {
  json doc = json::parse(R"({"a": {"b": [1, -2, "x"]}})");
  JsonField root(doc, "f.json", "");
  EXPECT_EQ(root["a"]["b"][0].as_int(), 1);
  EXPECT_EQ(error_of([&] { root["a"]["b"][1].as_non_negative(); }),
            "f.json: field 'a.b[1]' must be >= 0, got -2");
  EXPECT_EQ(error_of([&] { root["a"]["b"][2].as_number(); }),
            "f.json: field 'a.b[2]' must be a number, got \"x\"");
  EXPECT_EQ(error_of([&] { root["a"]["c"]; }), "f.json: missing field 'a.c'");
  EXPECT_EQ(error_of([&] { root["a"]["b"][3]; }), "f.json: field 'a.b' has no element 3 (size 3)");
}

TEST(JsonDoc, FormatTag) {
  json doc = json::parse(R"({"format": "pipetrain.plan/1"})");
  JsonField root(doc, "p.json", "");
  EXPECT_NO_THROW(expect_format(root, "plan", 1));
  EXPECT_EQ(error_of([&] { expect_format(root, "profile", 1); }),
            "p.json: field 'format' is \"pipetrain.plan/1\", expected \"pipetrain.profile/1\"");
  json none = json::parse("{}");
  EXPECT_NE(error_of([&] { expect_format(JsonField(none, "n.json", ""), "plan", 1); }).find("missing field 'format'"),
            std::string::npos);
}

TEST(JsonDoc, SyntaxErrorNamesSource) {
  EXPECT_NE(error_of([] { parse_json("{\"a\": ", "bad.json"); }).find("bad.json: not valid JSON"),
            std::string::npos);
}

TEST(JsonDoc, FractionalIntIsRejected) {
  json doc = json::parse(R"({"n": 2.5})");
  EXPECT_EQ(error_of([&] { JsonField(doc, "x", "")["n"].as_int(); }),
            "x: field 'n' must be a whole number, got 2.5");
}

}  // namespace
}  // namespace pt
