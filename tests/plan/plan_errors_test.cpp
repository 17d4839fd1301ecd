// Every bad input of `pipetrain plan` is a typed error whose message names the flag, file or
// field and the offending value (issue 3, item 6).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "plan/plan_command.h"
#include "plan/planner.h"
#include "plan/realised_cost.h"
#include "profile/pipedream_graph.h"

namespace pt::plan {
namespace {

namespace fs = std::filesystem;

// A folder of this process (ctest runs each test as its own process, several at once),
// removed when the process ends.
struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("pt_plan_errors_" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
};

std::string write(const std::string& name, const std::string& text) {
  static Scratch scratch;
  std::ofstream(scratch.dir / name) << text;
  return (scratch.dir / name).string();
}

const char* kChain3 = R"({"format": "pipetrain.profile/1", "model": "tiny", "batch_size": 8, "layers": [
  {"name": "a", "forward_ms": 1, "backward_ms": 2, "activation_bytes": 1000, "parameter_bytes": 4000},
  {"name": "b", "forward_ms": 1, "backward_ms": 2, "activation_bytes": 1000, "parameter_bytes": 4000},
  {"name": "c", "forward_ms": 1, "backward_ms": 2, "activation_bytes": 1000, "parameter_bytes": 4000}]})";

// Runs the command and returns "<type>: <message>".
std::string outcome(PlanFlags f) {
  try {
    run_plan_command(f);
    return "ok";
  } catch (const UsageError& e) {
    return std::string("usage: ") + e.what();
  } catch (const FormatError& e) {
    return std::string("format: ") + e.what();
  } catch (const ConfigError& e) {
    return std::string("config: ") + e.what();
  }
}

PlanFlags good() {
  PlanFlags f;
  f.profile = write("chain3.json", kChain3);
  f.cluster.workers = "2";
  f.cluster.bandwidth_gbps = "10";
  return f;
}

void expect_error(const PlanFlags& f, const std::string& kind, const std::vector<std::string>& words) {
  std::string got = outcome(f);
  EXPECT_EQ(got.rfind(kind + ": ", 0), 0u) << got;
  for (const auto& w : words) EXPECT_NE(got.find(w), std::string::npos) << "missing '" << w << "' in: " << got;
}

TEST(PlanErrors, GoodInputPlans) { EXPECT_EQ(outcome(good()), "ok"); }

TEST(PlanErrors, FlagsNameThemselvesAndTheirValue) {
  auto f = good();
  f.cost_model = "gpipe";
  expect_error(f, "usage", {"--cost-model", "gpipe"});
  f = good();
  f.memory = "lots";
  expect_error(f, "usage", {"--memory", "lots"});
  f = good();
  f.cluster.workers = "2,x";
  expect_error(f, "usage", {"--workers"});
  f = good();
  f.cluster.bandwidth_gbps = "10,10";
  expect_error(f, "usage", {"--workers", "--bandwidth-gbps"});
  f = good();
  f.cluster.file = "c.json";
  expect_error(f, "usage", {"--cluster"});
  f = good();
  f.cluster.workers.clear();
  f.cluster.bandwidth_gbps.clear();
  expect_error(f, "usage", {"--cluster", "--workers"});
  // NaN was taken as no limit; 1e300 overflowed the clock's nanoseconds into a deadline past.
  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity(), 1e300}) {
    f = good();
    f.time_limit_s = bad;
    expect_error(f, "usage", {"--time-limit", "must be seconds in 0..1e9", str(bad)});
  }
  plan::PlanOptions o;
  o.time_limit_s = 1e300;  // a caller's own options: no limit, not a deadline already past
  EXPECT_EQ(o.planning_deadline(std::chrono::steady_clock::now()), std::chrono::steady_clock::time_point::max());
}

TEST(PlanErrors, BadFilesNameTheFileAndField) {
  auto f = good();
  f.profile = write("badtag.json", R"({"format": "pipetrain.profile/9", "model": "x", "batch_size": 1, "layers": []})");
  expect_error(f, "format", {"badtag.json", "pipetrain.profile/9"});
  f.profile = write("missing.json", R"({"format": "pipetrain.profile/1", "model": "x", "batch_size": 1,
      "layers": [{"name": "a", "forward_ms": 1, "activation_bytes": 1, "parameter_bytes": 1}]})");
  expect_error(f, "format", {"missing.json", "backward_ms"});
  f.profile = write("negative.json", R"({"format": "pipetrain.profile/1", "model": "x", "batch_size": 1,
      "layers": [{"name": "a", "forward_ms": -3, "backward_ms": 1, "activation_bytes": 1, "parameter_bytes": 1}]})");
  expect_error(f, "format", {"negative.json", "forward_ms", "-3"});
  f.profile = write("cycle.txt",
                    "a -- A -- forward_compute_time=1, backward_compute_time=1, activation_size=1, parameter_size=1\n"
                    "b -- B -- forward_compute_time=1, backward_compute_time=1, activation_size=1, parameter_size=1\n"
                    "\ta -- b\n\tb -- a\n");
  expect_error(f, "format", {"cycle.txt", "cyclic"});
  f = good();
  f.cluster.workers.clear();
  f.cluster.bandwidth_gbps.clear();
  f.cluster.file = write("cluster.json", R"({"format": "pipetrain.cluster/1", "levels": [{"fan_out": 2}]})");
  expect_error(f, "format", {"cluster.json", "bandwidth_gbps"});
}

TEST(PlanErrors, ImpossiblePlansSayWhy) {
  auto f = good();
  f.cluster.workers = "4";
  f.straight = true;
  expect_error(f, "config", {"--straight", "4 workers", "3 layers"});
  f = good();
  f.memory = "1KB";
  // Under the pipetrain model a cap is the joint search's, whose refusal names it (the candidates
  // are searched without it: a cluster file's cap of 200 MiB was refused here as too small for any
  // plan, before the joint search could look).
  EXPECT_TRUE(run_plan_command(f).joint);
  PlanOptions capped;
  capped.memory_bytes = 1024;
  Cluster two = Cluster::flat(2, 10);
  try {
    plan_candidates(profile::read_any_profile(f.profile), two, capped);
    ADD_FAILURE() << "a 1 KiB cap planned";
  } catch (const ConfigError& e) {
    for (const char* w : {"memory of 1.0 KiB per worker (--memory) is too small", "tiny"})
      EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
  }
  f.cost_model = "pipedream";
  // PipeDream's stash is ceil((M−m)/m') copies of the stage: none for the last stage, so its
  // data-parallel plan always fits (an inconsistency kept by the compat model, docs/planner.md).
  EXPECT_EQ(outcome(f), "ok");
}

// A cap no bigger than what a worker process holds besides its tensors: said so (it searched
// under "1 B per worker" and named that).
TEST(PlanErrors, ACapTheProcessAloneFillsIsNamed) {
  Cluster cluster = Cluster::flat(4, 10);
  cluster.process_bytes = 100 << 20;
  PlanOptions options;
  options.memory_bytes = 50 << 20;
  try {
    memory_limit(cluster, options);
    ADD_FAILURE() << "a cap under the process passed";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "--memory 50.0 MiB is no more than the 100.0 MiB a worker process holds besides "
                                     "its tensors (the cluster's process_bytes, as calibrate measured it): no plan fits");
  }
  options.memory_bytes = 150 << 20;
  EXPECT_EQ(memory_limit(cluster, options), 50 << 20);
}

}  // namespace
}  // namespace pt::plan
