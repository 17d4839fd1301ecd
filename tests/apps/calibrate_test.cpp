// `pipetrain calibrate` end to end (issue 33): on threads and on gloo processes it writes a
// cluster file whose levels carry a fitted latency and rate, the host's time per action, and
// the record of what was measured; plan and simulate take it; bad shapes are refused by name.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include "core/json_doc.h"
#include "plan/cluster.h"
#include "plan/link_fit.h"
#include "pt_paths.h"
#include "tests/apps/shell_run.h"

namespace pt {
namespace {

namespace fs = std::filesystem;
const std::string kBinary = std::string(PT_BINARY_DIR) + "/pipetrain";

std::string temp_file(const std::string& name) {
  return (fs::temp_directory_path() / ("pt_calibrate_" + name + "_" + std::to_string(::getpid()) + ".json")).string();
}

// The file's levels and record: every measured level has its points, a positive rate, a
// latency >= 0 and the fit's error; what plan::read_cluster reads back is what was written.
plan::Cluster check_file(const std::string& path, const std::string& transport, size_t levels, size_t points) {
  plan::Cluster c = plan::read_cluster(path);
  EXPECT_EQ(c.levels.size(), levels);
  EXPECT_EQ(c.calibration["transport"], transport);
  EXPECT_EQ(c.calibration["levels"].size(), levels);
  for (size_t k = 0; k < c.levels.size(); ++k) {
    SCOPED_TRACE("level " + std::to_string(k));
    EXPECT_GT(c.levels[k].bandwidth_gbps, 0);
    EXPECT_GE(c.levels[k].latency_us, 0);
    const json& rec = c.calibration["levels"][k];
    EXPECT_EQ(rec["points_bytes_ms"].size(), points);
    EXPECT_EQ(rec["latency_us"].get<double>(), c.levels[k].latency_us);
    EXPECT_GE(rec["max_error"].get<double>(), 0);
    for (const auto& p : rec["points_bytes_ms"]) EXPECT_GT(p[1].get<double>(), 0);
  }
  EXPECT_FALSE(c.calibration["allreduce"].empty());
  // The host's time per action: measured (a pipeline of layers that compute nothing runs some
  // microseconds per action here), and recorded with the rest.
  EXPECT_GT(c.action_us, 0);
  EXPECT_LT(c.action_us, 100000);
  EXPECT_EQ(c.calibration["action_us"].get<double>(), c.action_us);
  // What a worker process holds besides its tensors: LibTorch alone is tens of MiB resident.
  EXPECT_GT(c.process_bytes, int64_t{20} << 20);
  EXPECT_LT(c.process_bytes, int64_t{4} << 30);
  return c;
}

// Every all-reduce calibrate prints is within 10% of the fitted model, or a note names the sizes
// the model misses and why (issue 67); no note where nothing misses.
void check_misses_are_said(const std::string& output, bool threads) {
  std::regex line(R"(all-reduce of (\S+ \S+) over \d+ workers: measured [^(]+\(([-+0-9.e]+)%\))");
  std::string missed;
  int lines = 0;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line); it != std::sregex_iterator(); ++it, ++lines)
    if (std::abs(std::stod((*it)[2].str())) > 10) missed += (missed.empty() ? "" : ", ") + (*it)[1].str();
  EXPECT_GT(lines, 0) << output;
  size_t note = output.find("note: the all-reduce model misses by more than 10% at ");
  EXPECT_EQ(note != std::string::npos, !missed.empty()) << output;
  if (note != std::string::npos) EXPECT_NE(output.find("10% at " + missed + ": ", note), std::string::npos) << output;
  // So is every level's fit: a note says which level misses, and on threads why (no rate holds).
  std::regex level(R"(level (\d+) \([^)]*\): latency .* fit within ([-+0-9.e]+)% of every point)");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), level); it != std::sregex_iterator(); ++it) {
    bool misses = std::stod((*it)[2].str()) > 10;
    std::string said = "note: level " + (*it)[1].str() + "'s latency and rate miss a point by more than 10%: ";
    EXPECT_EQ(output.find(said) != std::string::npos, misses) << output;
    if (misses && threads)
      EXPECT_NE(output.find(said + "on threads a hand-over passes the tensor"), std::string::npos) << output;
  }
}

TEST(Calibrate, ThreadsWriteAClusterFileThatPlanTakes) {
  std::string out = temp_file("threads");
  auto r = testing::shell_run(kBinary + " calibrate --workers 2 --transport threads --max-mb 1 -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("calibrate: workers 0-1: 1.0 MiB"), std::string::npos) << r.output;
  plan::Cluster c = check_file(out, "threads", 1, 6);  // 1 KiB .. 1 MiB, x4
  check_misses_are_said(r.output, true);
  // Each core alone against the fastest: one figure per core this process may use, the fastest's
  // 1, and a note exactly where one is under 0.9; no line on one core.
  cpu_set_t cpus;
  ASSERT_EQ(sched_getaffinity(0, sizeof cpus, &cpus), 0);
  std::smatch speeds;
  std::regex speeds_line("each core alone, of the fastest one's rate \\(by CPU number\\):([^\n]*)");
  bool listed = std::regex_search(r.output, speeds, speeds_line);
  ASSERT_EQ(listed, CPU_COUNT(&cpus) > 1) << r.output;
  if (listed) {
    std::string list = speeds[1].str();
    std::regex entry(R"( (\d+): ([0-9.]+))");
    std::vector<double> seen;
    for (auto it = std::sregex_iterator(list.begin(), list.end(), entry); it != std::sregex_iterator(); ++it)
      seen.push_back(std::stod((*it)[2].str()));
    ASSERT_EQ(seen.size(), static_cast<size_t>(CPU_COUNT(&cpus))) << list;
    EXPECT_EQ(*std::max_element(seen.begin(), seen.end()), 1.0) << list;
    double slowest = *std::min_element(seen.begin(), seen.end());
    EXPECT_GT(slowest, 0) << list;
    // Printed rounded down to 3 digits, so that the figure shown says whether the note is due.
    EXPECT_EQ(r.output.find("note: this host's cores do not run alike") != std::string::npos, slowest < 0.9)
        << r.output;
  }
  auto plan = testing::shell_run(kBinary + " plan --profile " + PT_SOURCE_DIR + "/data/profiles/vgg16.json --cluster " + out);
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
  // --refit: the file's own measurements fitted again, nothing measured; the same fit here.
  std::string again = temp_file("refit");
  auto refit = testing::shell_run(kBinary + " calibrate --refit " + out + " -o " + again);
  ASSERT_EQ(refit.exit_code, 0) << refit.output;
  EXPECT_EQ(refit.output.find("calibrate: workers"), std::string::npos) << refit.output;
  plan::Cluster refitted = plan::read_cluster(again);
  EXPECT_NEAR(refitted.levels[0].bandwidth_gbps, c.levels[0].bandwidth_gbps, 1e-9 * c.levels[0].bandwidth_gbps);
  EXPECT_NEAR(refitted.allreduce_step_us, c.allreduce_step_us, 1e-6 * (1 + c.allreduce_step_us));
  EXPECT_EQ(refitted.calibration["refitted"], true);
  auto both = testing::shell_run(kBinary + " calibrate --refit " + out + " --workers 2");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.output.find("--refit takes the shape from its file"), std::string::npos) << both.output;
  // Flags of a measurement, which --refit makes none of: they were ignored without a word.
  for (const auto& [flag, says] : {std::pair<std::string, std::string>{"--transport gloo", "drop --transport"},
                                   {"--max-mb 1", "drop --max-mb"}}) {
    auto measuring = testing::shell_run(kBinary + " calibrate --refit " + out + " " + flag);
    EXPECT_NE(measuring.exit_code, 0) << flag;
    EXPECT_NE(measuring.output.find(says), std::string::npos) << measuring.output;
  }
  std::string typed_file = temp_file("typed");
  std::ofstream(typed_file) << R"({"format": "pipetrain.cluster/1", "levels": [{"fan_out": 2, "bandwidth_gbps": 1}]})";
  auto typed = testing::shell_run(kBinary + " calibrate --refit " + typed_file);
  EXPECT_NE(typed.exit_code, 0);
  EXPECT_NE(typed.output.find(typed_file + ": no field 'calibration'"), std::string::npos) << typed.output;
  fs::remove(out), fs::remove(again), fs::remove(typed_file);
}

TEST(Calibrate, GlooProcessesMeasureEachLevel) {
  std::string out = temp_file("gloo");
  auto r = testing::shell_run(kBinary + " calibrate --workers 2,2 --transport gloo --max-mb 4 -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  plan::Cluster c = check_file(out, "gloo", 2, 7);  // 1 KiB .. 4 MiB
  check_misses_are_said(r.output, false);
  // What the fit reads off loopback depends on the load beside it (under ctest -j 2 a 1 KiB
  // round trip on these 2 cores took 4 ms, longer than 4 MiB's); the fit itself is tested in
  // LinkFit.*, and against tc-shaped links in testbed_smoke. Here: each level's fit is the
  // one plan::fit_alpha_beta makes of the points the file records.
  for (size_t k = 0; k < c.levels.size(); ++k) {
    const json& rec = c.calibration["levels"][k];
    std::vector<plan::LinkPoint> points;
    for (const auto& p : rec["points_bytes_ms"]) points.push_back({p[0].get<double>(), p[1].get<double>()});
    plan::AlphaBeta fit = plan::fit_alpha_beta(points);
    EXPECT_NEAR(fit.latency_us, c.levels[k].latency_us, 1e-9 * (1 + fit.latency_us));
    EXPECT_NEAR(fit.bandwidth_gbps, c.levels[k].bandwidth_gbps, 1e-9 * fit.bandwidth_gbps);
  }
  EXPECT_EQ(c.calibration["levels"][1]["workers"], json::array({0, 2}));  // across the inner units
  auto sim = testing::shell_run(kBinary + " simulate --profile " + PT_SOURCE_DIR +
                                "/data/profiles/vgg16.json --schedule 1f1b --cluster " + out);
  EXPECT_EQ(sim.exit_code, 0) << sim.output;
  fs::remove(out);
}

TEST(Calibrate, ShapesThatCannotBeMeasuredAreNamed) {
  auto one = testing::shell_run(kBinary + " calibrate --workers 1");
  EXPECT_NE(one.exit_code, 0);
  EXPECT_NE(one.output.find("level 0 has fan-out 1"), std::string::npos) << one.output;
  auto inner = testing::shell_run(kBinary + " calibrate --workers 4,1");
  EXPECT_NE(inner.exit_code, 0);
  EXPECT_NE(inner.output.find("--workers '4,1': level 1 has fan-out 1"), std::string::npos) << inner.output;
  auto transport = testing::shell_run(kBinary + " calibrate --workers 2 --transport tcp");
  EXPECT_NE(transport.exit_code, 0);
  EXPECT_NE(transport.output.find("--transport: must be threads or gloo, got 'tcp'"), std::string::npos)
      << transport.output;
  // A folder that is not there is named before anything is measured.
  auto nowhere = testing::shell_run(kBinary + " calibrate --workers 2 -o /nonexistent-pt/cluster.json");
  EXPECT_NE(nowhere.exit_code, 0);
  EXPECT_NE(nowhere.output.find("-o: '/nonexistent-pt/cluster.json' is in '/nonexistent-pt', which is not a directory"),
            std::string::npos) << nowhere.output;
  EXPECT_EQ(nowhere.output.find("calibrate: workers"), std::string::npos) << nowhere.output;
  // So is a folder given as the file (-o /tmp measured everything, then failed on it).
  auto folder = testing::shell_run(kBinary + " calibrate --workers 2 -o /tmp");
  EXPECT_EQ(folder.exit_code, 2);
  EXPECT_NE(folder.output.find("-o: '/tmp' is a directory"), std::string::npos) << folder.output;
  EXPECT_EQ(folder.output.find("level 0"), std::string::npos) << folder.output;
  // A thread each: 100,000 of them aborted the process.
  auto many = testing::shell_run(kBinary + " calibrate --workers 100000 --max-mb 0.01");
  EXPECT_EQ(many.exit_code, 2);
  EXPECT_NE(many.output.find("100000 workers on this machine (a thread each); at most 256"), std::string::npos)
      << many.output;
  auto small = testing::shell_run(kBinary + " calibrate --workers 2 --max-mb 0.001");
  EXPECT_NE(small.exit_code, 0);
  EXPECT_NE(small.output.find("--max-mb"), std::string::npos) << small.output;
  // Above the largest size it sends: it was capped at 64 MiB without a word.
  auto large = testing::shell_run(kBinary + " calibrate --workers 2 --max-mb 100");
  EXPECT_EQ(large.exit_code, 2);
  EXPECT_NE(large.output.find("--max-mb: at most 64 (calibrate's sizes are 1 KiB x 4^k up to 64 MiB), got 100"),
            std::string::npos) << large.output;
  auto forever = testing::shell_run(kBinary + " calibrate --workers 2 --timeout inf");
  EXPECT_EQ(forever.exit_code, 2);
  EXPECT_NE(forever.output.find("--timeout: must be a finite number > 0, got 'inf'"), std::string::npos) << forever.output;
  // A deadline past the clock's range failed the first all-reduce at once, "waited 1e+10 s".
  auto ages = testing::shell_run(kBinary + " calibrate --workers 2 --timeout 1e10");
  EXPECT_EQ(ages.exit_code, 2);
  EXPECT_NE(ages.output.find("--timeout: must be in (0, 604800] seconds, got 1e+10"), std::string::npos) << ages.output;
}

}  // namespace
}  // namespace pt
