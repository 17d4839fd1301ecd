#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

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

// A difference deep in a value is named where it is, with both values (not a cut-off dump of
// the whole).
TEST(JsonDoc, DifferencesNameTheInnermostField) {
  json a = {{"sgd", {{"lr", 0.1}, {"momentum", 0.9}}}, {"plan", {{"stages", {{{"workers", {0}}}, {{"workers", {1}}}}}}},
            {"seed", 1}};
  json b = a;
  EXPECT_TRUE(json_differences(a, b).empty());
  b["sgd"]["momentum"] = 0;
  b["plan"]["stages"][1]["workers"][0] = 2;
  b.erase("seed");
  b["extra"] = "x";
  auto d = json_differences(a, b);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0].path, "plan.stages[1].workers[0]");
  EXPECT_EQ(d[0].a, "1");
  EXPECT_EQ(d[0].b, "2");
  EXPECT_EQ(d[1].path, "seed");
  EXPECT_EQ(d[1].b, "nothing");
  EXPECT_EQ(d[2].path, "sgd.momentum");
  EXPECT_EQ(d[2].a, "0.9");
  EXPECT_EQ(d[2].b, "0");
  EXPECT_EQ(d[3].path, "extra");
  EXPECT_EQ(d[3].a, "nothing");
  // Arrays of different lengths differ as a whole.
  EXPECT_EQ(json_differences(json{{"x", {1, 2}}}, json{{"x", {1}}})[0].path, "x");
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

// A key given twice in one object is ambiguous input: nlohmann kept the last silently (a
// profile's second "forward_ms" planned on, exit 0). The error names the path to it; keys that
// repeat across objects, inside strings, or escaped quotes in a key are no repeat.
TEST(JsonDoc, AKeyGivenTwiceInOneObjectIsRefusedByItsPath) {
  EXPECT_EQ(error_of([] { parse_json(R"({"a": [1, {"b": 2, "c": [3, {"d": 1, "d": 2}]}]})", "f.json"); }),
            "f.json: field 'a[1].c[1].d' is given twice (a JSON object's keys must differ)");
  EXPECT_EQ(error_of([] { parse_json(R"({"x": 1, "y": {"z": 1}, "x": 2})", "g.json"); }),
            "g.json: field 'x' is given twice (a JSON object's keys must differ)");
  EXPECT_EQ(error_of([] {
              json j = parse_json(R"({"a": {"k": 1}, "b": {"k": 2}, "s": "{\"k\": 1, \"k\": 2}", "q\"": [{"k": 1}, {"k": 2}]})",
                                  "ok.json");
              EXPECT_EQ(j["b"]["k"], 2);
            }),
            "");
}

TEST(JsonDoc, FractionalIntIsRejected) {
  json doc = json::parse(R"({"n": 2.5})");
  EXPECT_EQ(error_of([&] { JsonField(doc, "x", "")["n"].as_int(); }),
            "x: field 'n' must be a whole number, got 2.5");
}

}  // namespace
}  // namespace pt

namespace pt {
namespace {

// Outputs (issue 17): a regular file is replaced atomically; a link to one keeps being a link
// to the new content; a FIFO is written through, not replaced by a regular file.
TEST(WriteFile, ReplacesOnlyRegularFiles) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("pt_write_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string file = (dir / "out.json").string(), link = (dir / "link.json").string();
  write_text_file_atomic(file, "one");
  EXPECT_EQ(read_text_file(file), "one");
  fs::create_symlink(file, link);
  write_text_file_atomic(link, "two");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read_text_file(file), "two");
  // One rule for links (issue 35): followed, dangling or not. A dangling link's target is
  // created and the link stays a link; check_output_path looks where the link points.
  std::string dangling = (dir / "dangling.json").string(), target = (dir / "sub" / "made.json").string();
  fs::create_symlink("sub/made.json", dangling);
  EXPECT_THROW(check_output_path(dangling, "--out"), UsageError);  // sub/ does not exist yet
  fs::create_directories(dir / "sub");
  check_output_path(dangling, "--out");
  write_text_file_atomic(dangling, "three");
  EXPECT_TRUE(fs::is_symlink(dangling));
  EXPECT_EQ(read_text_file(target), "three");
  EXPECT_EQ(output_target(dangling), (dir / "sub/made.json").string());

  std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = read_text_file(fifo); });
  write_text_file_atomic(fifo, "through");
  reader.join();
  EXPECT_EQ(got, "through");
  struct stat st;
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_THROW(write_text_file_atomic(dir.string(), "x"), Error);

  // A pipe through /proc's links, as `-o /dev/stdout | cat` gives it (/dev/stdout ->
  // /proc/self/fd/1 -> "pipe:[N]"): it was refused as "cannot write in '/proc/self/fd'".
  int ends[2];
  ASSERT_EQ(::pipe(ends), 0);
  std::string through_proc = "/proc/self/fd/" + std::to_string(ends[1]), stdout_like = (dir / "stdout").string();
  fs::create_symlink(through_proc, stdout_like);
  for (const std::string& path : {through_proc, stdout_like}) {
    EXPECT_EQ(output_target(path), path);
    EXPECT_NO_THROW(check_output_path(path, "-o"));
    write_text_file_atomic(path, "piped");
    char buf[8] = {};
    ASSERT_EQ(::read(ends[0], buf, 5), 5);
    EXPECT_EQ(std::string(buf), "piped");
  }
  ::close(ends[0]), ::close(ends[1]);
  // `-o /dev/stdout >> log`: written where the descriptor stands. It was followed to the log and
  // renamed over it, the log's earlier lines lost, exit 0.
  std::string log = (dir / "log").string();
  write_text_file_atomic(log, "earlier\n");
  int appending = ::open(log.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(appending, 0);
  std::string as_stdout = (dir / "stdout2").string();
  fs::create_symlink("/proc/self/fd/" + std::to_string(appending), as_stdout);
  EXPECT_EQ(output_descriptor(as_stdout), appending);
  EXPECT_EQ(output_descriptor("/dev/fd/" + std::to_string(appending)), appending);
  EXPECT_EQ(output_descriptor(log), -1);
  EXPECT_NO_THROW(check_output_path(as_stdout, "-o"));
  write_text_file_atomic(as_stdout, "output\n");
  write_text_file_atomic("/dev/fd/" + std::to_string(appending), "more\n");
  ::close(appending);
  EXPECT_EQ(read_text_file(log), "earlier\noutput\nmore\n");
  int reading = ::open(log.c_str(), O_RDONLY);
  EXPECT_THROW(check_output_path("/proc/self/fd/" + std::to_string(reading), "-o"), UsageError);
  ::close(reading);
  fs::remove_all(dir);
}

// A folder is tried, not asked of access(), which grants root any: --metrics /proc/x.csv passed the
// checks before the run and failed once training had started.
TEST(WriteFile, AFolderNoFileCanBeMadeInIsRefusedUpFront) {
  try {
    check_output_path("/proc/x.csv", "--metrics");
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--metrics: cannot write in '/proc' ("), std::string::npos) << e.what();
  }
  EXPECT_NE(create_error_in("/proc"), 0);
  EXPECT_EQ(create_error_in(std::filesystem::temp_directory_path().string()), 0);
}

}  // namespace
}  // namespace pt
