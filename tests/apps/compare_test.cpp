// `pipetrain compare` prints figures that can be true: no row beats the physical limit (every
// worker busy with compute all the time: workers x batch / total compute), and "vs dp" is
// measured against data parallelism as PipeDream and users run it, every worker a minibatch of
// the profile's batch (issue 12: it used to split one minibatch over 16 workers and print 20x).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/json_doc.h"
#include "profile/profile.h"
#include "referee/comparison.h"
#include "pt_paths.h"
#include "tests/apps/shell_run.h"

namespace pt {
namespace {

json compare_json(const std::string& args) {
  auto r = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain compare --json " + args + " 2>/dev/null", false);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  return parse_json(r.output, "compare output");
}

TEST(Compare, FiguresStayWithinThePhysicalLimitAndDpIsPerWorkerBatches) {
  std::string path = std::string(PT_SOURCE_DIR) + "/data/profiles/vgg16.json";
  profile::Profile prof = profile::read_profile_json(path);
  struct Cluster {
    std::string workers, gbps;
    int n;
  };
  for (const Cluster& c : {Cluster{"4,4", "96,10", 16}, Cluster{"8", "10", 8}, Cluster{"4", "1", 4}}) {
    SCOPED_TRACE(c.workers);
    json doc = compare_json("--profile " + path + " --workers " + c.workers + " --bandwidth-gbps " + c.gbps +
                            " --microbatches 16");
    double limit = c.n * prof.batch_size * 1000.0 / prof.total_compute_ms();
    double dp = 0, dp_split = 0, best = 0;
    for (const auto& r : doc["rows"]) {
      std::string row = r["row"].get<std::string>();
      double rate = r["samples_per_s"].get<double>();
      EXPECT_LE(rate, limit * (1 + 1e-9)) << row << " beats the limit of " << c.n << " workers always computing";
      if (row == "dp") {
        dp = rate;
        EXPECT_EQ(r["scaling"], "weak");
      }
      if (row == "dp-split") {
        dp_split = rate;
        EXPECT_EQ(r["scaling"], "strong");
      }
      if (row != "dp" && row != "dp-split") best = std::max(best, rate);
    }
    ASSERT_GT(dp, 0);
    EXPECT_GE(dp, dp_split);  // a whole minibatch per worker computes no less per all-reduce
    for (const auto& r : doc["rows"])
      EXPECT_NEAR(r["speedup_over_dp"].get<double>(), r["samples_per_s"].get<double>() / dp, 1e-9);
    EXPECT_GT(best, 0);
  }
}

// dp-split runs what its label says: one microbatch a worker, as a user splits a batch over
// data-parallel workers (it ran 8 on 4 workers under "1 batch / 4": ResNet-18 102.02 ms a
// minibatch, where 4 take 83.00), and a pinned --microbatches is shown in the label.
TEST(Compare, DataParallelSplitRunsOneMicrobatchAWorker) {
  std::string path = std::string(PT_SHARED_DIR) + "/data/pipedream-profiles/resnet18.json";
  std::string cluster = " --workers 4 --bandwidth-gbps 10";
  auto split_row = [&](const std::string& more) {
    json doc = compare_json("--profile " + path + cluster + more);
    for (const auto& r : doc["rows"])
      if (r["row"] == "dp-split") return r;
    ADD_FAILURE() << "no dp-split row" << more;
    return json();
  };
  json own = split_row("");
  std::string label = own["plan"].get<std::string>();
  EXPECT_EQ(label.rfind("1 batch / 4 b", 0), 0u) << label;
  auto simulated = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain simulate --json --profile " + path +
                                          cluster + " --schedule dp --microbatches 4 --bucket-mb " +
                                          label.substr(label.rfind(" b") + 2) + " 2>/dev/null",
                                      false);
  ASSERT_EQ(simulated.exit_code, 0) << simulated.output;
  double ms = parse_json(simulated.output, "simulate output")["ms_per_minibatch"].get<double>();
  EXPECT_NEAR(own["ms_per_minibatch"].get<double>(), ms, 1e-6 * ms);
  std::string pinned = split_row(" --microbatches 8")["plan"].get<std::string>();
  EXPECT_EQ(pinned.rfind("1 batch / 4 m8 b", 0), 0u) << pinned;
}

// Under --memory the baselines are shown fit or not, and marked: PipeDream's VGG-16 on 4 workers
// under 8 GB printed a dp row of 15.6 GiB unmarked, where `plan` says data parallelism does not
// fit. Every row the planner made stays within the cap.
TEST(Compare, RowsOverTheMemoryCapAreMarked) {
  std::string path = std::string(PT_SHARED_DIR) + "/data/pipedream-profiles/vgg16.json";
  const double cap = 8.0 * (int64_t{1} << 30);
  json doc = compare_json("--profile " + path + " --workers 4 --bandwidth-gbps 10 --memory 8GB");
  int over = 0;
  for (const auto& r : doc["rows"]) {
    bool marked = r["over_memory_cap"].get<bool>();
    EXPECT_EQ(marked, r["modelled_peak_memory_bytes"].get<double>() > cap) << r["row"];
    // The peak a row names is the modelled one (it was the trace's stashes and weights alone).
    EXPECT_EQ(r["peak_memory_bytes"], r["modelled_peak_memory_bytes"]) << r["row"];
    std::string row = r["row"].get<std::string>();
    if (row != "dp" && row != "dp-split") {
      EXPECT_FALSE(marked) << row;
    }
    over += marked;
  }
  EXPECT_GT(over, 0) << "no baseline over the cap: the case no longer shows the marking";
  auto text = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain compare --profile " + path +
                                 " --workers 4 --bandwidth-gbps 10 --memory 8GB 2>/dev/null", false);
  EXPECT_NE(text.output.find("over the cap"), std::string::npos) << text.output;
  // Each figure is for workers of their own processes, which train on threads holds less than:
  // said here, as plan --explain says it.
  EXPECT_NE(text.output.find("fullest worker: each worker a process or device of its own; on threads"),
            std::string::npos)
      << text.output;
  // simulate of a plan over a cluster's own cap says so (it printed the peak alone).
  std::string capped = ::testing::TempDir() + "capped_cluster.json";
  { std::ofstream(capped) << R"({"format": "pipetrain.cluster/1", "memory_bytes_per_worker": 6442450944,
                               "levels": [{"fan_out": 4, "bandwidth_gbps": 10}]})"; }
  std::string simulate = std::string(PT_BINARY_DIR) + "/pipetrain simulate --profile " + path + " --cluster " + capped;
  auto over_cap = testing::shell_run(simulate + " --schedule 1f1b");  // 6.75 GiB
  EXPECT_EQ(over_cap.exit_code, 0) << over_cap.output;
  EXPECT_NE(over_cap.output.find("over the 6.00 GiB of the cluster's memory_bytes_per_worker: this plan does not fit"),
            std::string::npos) << over_cap.output;
  auto within = testing::shell_run(simulate + " --schedule dp");  // 5.36 GiB
  EXPECT_EQ(within.output.find("does not fit"), std::string::npos) << within.output;
}

// What the user pins, every row it applies to keeps: --chunks the interleaved rows (they showed
// 4 chunks for --chunks 2 and 3), --microbatches the mp row too (it stayed at 1).
TEST(Compare, PinnedChunksAndMicrobatchesReachEveryRow) {
  std::string path = std::string(PT_SOURCE_DIR) + "/data/profiles/vgg16.json";
  for (std::string chunks : {"2", "3"}) {
    SCOPED_TRACE(chunks);
    json doc = compare_json("--profile " + path + " --workers 4 --bandwidth-gbps 10 --microbatches 4 --chunks " + chunks);
    int interleaved = 0, mp = 0;
    for (const auto& r : doc["rows"]) {
      std::string row = r["row"].get<std::string>(), plan = r["plan"].get<std::string>();
      if (row == "interleaved" || row == "interleaved-zb") {
        ++interleaved;
        EXPECT_NE(plan.find(" x" + chunks + " "), std::string::npos) << row << ": " << plan;
      }
      if (row == "mp") {
        ++mp;
        EXPECT_NE(plan.find(" m4"), std::string::npos) << plan;
      }
      if (row != "dp" && row != "dp-split" && row != "pipedream") {
        EXPECT_NE(plan.find(" m4"), std::string::npos) << row << ": " << plan;
      }
    }
    EXPECT_EQ(interleaved, 2);
    EXPECT_EQ(mp, 1);
  }
  auto bad = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain compare --profile " + path +
                                " --workers 4 --bandwidth-gbps 10 --chunks 1 2>&1", false);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--chunks: must be in 2.."), std::string::npos) << bad.output;
}

// The table's "x" is chunks alone: a long plan's replicas were shortened to "16 stages x1", and
// interleaved's cell read "16 stages x1 x2", 1 chunk and 2.
TEST(Compare, TheTableSaysXOfChunksAlone) {
  std::string path = std::string(PT_SOURCE_DIR) + "/data/profiles/gpt-2048.json";
  auto r = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain compare --profile " + path +
                                  " --workers 8 --bandwidth-gbps 100 2>&1",
                              false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(r.output);
  int rows = 0, long_plans = 0;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string kind;
    fields >> kind;
    if (kind.empty() || kind == "dp" || kind == "dp-split" || kind == "schedule" ||
        std::find(referee::compared_schedules().begin(), referee::compared_schedules().end(), kind) ==
            referee::compared_schedules().end())
      continue;
    ++rows;
    const std::string cell = line.substr(15, 24);
    const size_t xs = std::count(cell.begin(), cell.end(), 'x');
    EXPECT_EQ(xs, kind.rfind("interleaved", 0) == 0 ? 1u : 0u) << line;
    if (cell.find("..") != std::string::npos) ++long_plans;
  }
  EXPECT_EQ(rows, static_cast<int>(referee::compared_schedules().size()));
  EXPECT_GT(long_plans, 0);  // the case shortened
}

}  // namespace
}  // namespace pt
