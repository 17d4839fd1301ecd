// `pipetrain plan` as issues 12 and 32 ask: the plan it chooses is the fastest of the search's
// best in simulation, its predicted time is the simulator's steady state (one timing model), and
// no figure beats the physical limit.
#include <gtest/gtest.h>

#include <cmath>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <regex>
#include <map>
#include <set>
#include <sstream>

#include "core/files.h"
#include "core/json_doc.h"
#include "core/units.h"
#include "plan/plan.h"
#include "profile/profile.h"
#include "schedule/generators.h"
#include "schedule/given_order.h"
#include "schedule/schedule_file.h"
#include "schedule/memory.h"
#include "pt_paths.h"
#include "tests/apps/shell_run.h"

namespace pt {
namespace {

// `pipetrain plan --json` on a shorthand cluster.
json plan_json(const std::string& profile_path, const std::string& workers, const std::string& gbps) {
  auto r = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --json --profile " + profile_path +
                                  " --workers " + workers + " --bandwidth-gbps " + gbps + " 2>/dev/null",
                              false);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.exit_code == 0 ? parse_json(r.output, "plan output") : json::object();
}

TEST(PlanReferee, Vgg16On4x4PredictsWhatTheSimulatorMeasures) {
  std::string path = std::string(PT_SOURCE_DIR) + "/data/profiles/vgg16.json";
  profile::Profile prof = profile::read_profile_json(path);
  struct Cluster {
    std::string workers, gbps;
    int n;
  };
  for (const Cluster& c : {Cluster{"4,4", "96,10", 16}, Cluster{"8", "10", 8}, Cluster{"2,8", "96,10", 16},
                           Cluster{"8,2", "96,10", 16}, Cluster{"4,4", "96,25", 16}, Cluster{"4,4", "96,1", 16},
                           Cluster{"8", "1", 8}}) {
    SCOPED_TRACE(c.workers + " at " + c.gbps);
    json plan;
    ASSERT_NO_FATAL_FAILURE(plan = plan_json(path, c.workers, c.gbps));
    double predicted = plan["predicted"]["pipeline_ms_per_minibatch"].get<double>();
    double simulated = plan["predicted"]["simulated_ms_per_minibatch"].get<double>();
    double dp = plan["predicted"]["data_parallel_ms_per_minibatch"].get<double>();
    EXPECT_EQ(plan["predicted"]["simulated_schedule"], "pipedream");
    // No plan runs faster than every worker computing all the time.
    EXPECT_GE(simulated, prof.total_compute_ms() / c.n * (1 - 1e-9));
    EXPECT_GE(predicted, prof.total_compute_ms() / c.n * (1 - 1e-9));
    EXPECT_NEAR(simulated / predicted, 1.0, 0.01) << "predicted " << predicted << " simulated " << simulated;
    // Data parallelism is a candidate the referee replays: its figure is simulated too.
    EXPECT_LE(simulated, dp * (1 + 1e-9)) << "the chosen plan is slower than data parallelism";
  }
}

// Issue 32's one timing model, on every profile of data/profiles and ten clusters (the clusters
// of bench_plan_vs_enumerated): the plan's predicted time is its simulated steady state within 1%
// in all 50, and none beats the physical limit.
// Plain `plan` referees the uniform plans (d stages of r replicas) too, apart from the search's
// candidates, as `plan --schedule pipedream` weighs them: on PipeDream's GNMT over 2x2x4 at
// 200/50/5 Gbit/s it chose a 14-stage plan at 15.874 ms per minibatch where pinned to pipedream
// it found 12.471, and slower than its own best on 2x2x3 (13.991).
TEST(PlanReferee, PlainPlanIsNoSlowerPinnedToPipedreamOrOnFewerWorkers) {
  std::string path = std::string(PT_SHARED_DIR) + "/data/pipedream-profiles/gnmt.json";
  auto simulated = [](const json& plan) { return plan["predicted"]["simulated_ms_per_minibatch"].get<double>(); };
  json plain, fewer;
  ASSERT_NO_FATAL_FAILURE(plain = plan_json(path, "2,2,4", "200,50,5 --time-limit 0"));
  ASSERT_NO_FATAL_FAILURE(fewer = plan_json(path, "2,2,3", "200,50,5 --time-limit 0"));
  auto pinned = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --json --schedule pipedream --profile " +
                                       path + " --workers 2,2,4 --bandwidth-gbps 200,50,5 --time-limit 0 2>/dev/null",
                                   false);
  ASSERT_EQ(pinned.exit_code, 0) << pinned.output;
  EXPECT_LE(simulated(plain), simulated(parse_json(pinned.output, "plan")) * (1 + 1e-9));
  EXPECT_LE(simulated(plain), simulated(fewer) * (1 + 1e-9));
  EXPECT_LT(simulated(plain), 13.0);
}

// The other way round: pinned to pipedream (the joint search), `plan` chooses among what plain
// `plan` chooses from, the uniform plans refereed apart included. It did not: GNMT-16 on 4x4 at
// 96/10 Gbit/s got 1-1-1-1-1-1-2-4-4 at 24.767 ms per minibatch where plain `plan` found 4-4-4-4
// at 22.483, and `compare` printed the slower as pipedream's best.
TEST(PlanReferee, PinnedToPipedreamIsNoSlowerThanPlainPlan) {
  auto simulated = [](const json& plan) { return plan["predicted"]["simulated_ms_per_minibatch"].get<double>(); };
  for (const char* model : {"gnmt16", "vgg16"})
    for (const auto& [workers, gbps] : std::vector<std::pair<std::string, std::string>>{
             {"4,4", "96,10"}, {"2,8", "96,25"}, {"8", "10"}}) {
      SCOPED_TRACE(std::string(model) + " on " + workers + " at " + gbps);
      std::string path = std::string(PT_SOURCE_DIR) + "/data/profiles/" + model + ".json";
      json plain;
      ASSERT_NO_FATAL_FAILURE(plain = plan_json(path, workers, gbps));
      auto pinned = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --json --schedule pipedream --profile " +
                                           path + " --workers " + workers + " --bandwidth-gbps " + gbps + " 2>/dev/null",
                                       false);
      ASSERT_EQ(pinned.exit_code, 0) << pinned.output;
      EXPECT_LE(simulated(parse_json(pinned.output, "plan")), simulated(plain) * (1 + 1e-9));
    }
}

TEST(PlanReferee, EveryProfileOnTenClustersPredictsTheSimulator) {
  struct Cluster {
    std::string workers, gbps;
    int n;
  };
  int cases = 0;
  for (const char* model : {"vgg16", "resnet50", "gnmt16", "awd-lm", "gpt-2048"}) {
    std::string path = std::string(PT_SOURCE_DIR) + "/data/profiles/" + model + ".json";
    profile::Profile prof = profile::read_profile_json(path);
    for (const Cluster& c : {Cluster{"4,4", "96,10", 16}, Cluster{"4,4", "96,25", 16}, Cluster{"4,4", "96,1", 16},
                             Cluster{"2,8", "96,10", 16}, Cluster{"2,8", "96,25", 16}, Cluster{"8,2", "96,10", 16},
                             Cluster{"8,2", "96,1", 16}, Cluster{"8", "10", 8}, Cluster{"8", "1", 8},
                             Cluster{"8", "25", 8}}) {
      SCOPED_TRACE(std::string(model) + " on " + c.workers + " at " + c.gbps);
      json plan;
      ASSERT_NO_FATAL_FAILURE(plan = plan_json(path, c.workers, c.gbps));
      double predicted = plan["predicted"]["pipeline_ms_per_minibatch"].get<double>();
      double simulated = plan["predicted"]["simulated_ms_per_minibatch"].get<double>();
      EXPECT_GE(simulated, prof.total_compute_ms() / c.n * (1 - 1e-9));
      EXPECT_GE(predicted, prof.total_compute_ms() / c.n * (1 - 1e-9));
      EXPECT_NEAR(simulated / predicted, 1.0, 0.01) << "predicted " << predicted << " simulated " << simulated;
      ++cases;
    }
  }
  EXPECT_EQ(cases, 50);
}

// Microbatches that compute faster per sample than the whole minibatch (here 16 samples take an
// eighth of 64's time: half as long per sample) do not beat the compute limit: it takes each
// layer at its fastest. A limit at the whole minibatch (24 ms) was reached at 160% by a 1f1b plan of 15 ms.
TEST(PlanReferee, TheComputeLimitHoldsForMicrobatchesFasterPerSample) {
  std::string path = ::testing::TempDir() + "fast_microbatches_" + std::to_string(::getpid()) + ".json";
  json layers = json::array();
  for (int l = 0; l < 4; ++l)
    layers.push_back({{"name", "l" + std::to_string(l)}, {"forward_ms", 4.0}, {"backward_ms", 8.0}, {"activation_bytes", 1024},
                      {"parameter_bytes", 1024}, {"inputs", l == 0 ? json::array() : json::array({l - 1})},
                      {"timings", json::array({{{"batch", 16}, {"forward_ms", 0.5}, {"backward_ms", 1.0}},
                                               {{"batch", 64}, {"forward_ms", 4.0}, {"backward_ms", 8.0}}})}});
  std::ofstream(path) << json{{"format", "pipetrain.profile/1"}, {"model", "fast"}, {"batch_size", 64},
                              {"layers", layers}}.dump();
  auto r = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + path +
                                  " --workers 2 --bandwidth-gbps 100 --schedule 1f1b --microbatches 4 2>&1",
                              false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch limit;
  ASSERT_TRUE(std::regex_search(r.output, limit,
                                std::regex("each layer at its fastest batch size per sample, / 2 workers\\): ([0-9.]+) ms "
                                           "per minibatch; the plan reaches ([0-9.]+)% of it")))
      << r.output;
  EXPECT_NEAR(std::stod(limit[1]), 12.0, 1e-3) << r.output;
  EXPECT_LE(std::stod(limit[2]), 100.0) << r.output;
  std::filesystem::remove(path);
}

TEST(PlanReferee, TopListsCandidatesFastestFirstAndSaysWhyEachLost) {
  std::string path = std::string(PT_SOURCE_DIR) + "/data/profiles/vgg16.json";
  auto r = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + path +
                                  " --workers 4,4 --bandwidth-gbps 96,10 --top 4 --explain 2>&1",
                              false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("predicted ms per minibatch (the simulator's steady state, pipedream)"), std::string::npos)
      << r.output;
  // The compute limit, one worker's forward, backward and step (352.799 + 5.904 ms) / 16, and
  // the plan's share of it: under 100%.
  std::smatch limit;
  ASSERT_TRUE(std::regex_search(r.output, limit,
                                std::regex("compute limit \\(one worker's time / 16 workers\\): 22\\.419 ms per "
                                           "minibatch; the plan reaches ([0-9.]+)% of it\n")))
      << r.output;
  EXPECT_LT(std::stod(limit[1]), 100.0);
  // The paper's 15-1 (fc6..fc8 on one worker): with the runtime's all-reduce buckets its larger
  // first stage's all-reduce hides behind the backward (without them a smaller first stage wins:
  // 15-1 @conv5_3, with @fc6 0.4% behind at 29.0 ms).
  EXPECT_NE(r.output.find("1  15-1 @fc6"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("% slower in simulation; stage"), std::string::npos) << r.output;
  // More were replayed than --top shows: the header says which it lists (it said "best 12
  // candidates" over 4 rows).
  EXPECT_NE(r.output.find("as train checks it); the fastest 4:\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("links (each worker has a full-duplex link per level)"), std::string::npos) << r.output;
  // A candidate simulated well over the search's estimate says where the time went (the closed
  // form's bottleneck does not explain it: 15-1 @conv5_3, "compute 22.50 ms", simulates at 28.9).
  auto top = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + path +
                                    " --workers 4,4 --bandwidth-gbps 96,10 --top 12 2>&1",
                                false);
  std::regex row("^ +([0-9]+) +[0-9x-]+ @\\S+ +\\S.*?  +([0-9.]+) +([0-9.]+) +[0-9.]+ [KMG]?i?B  .*$");
  int beyond = 0, rows = 0;
  std::istringstream lines(top.output);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, row) || m[1] == "1") continue;
    ++rows;
    bool over = std::stod(m[3]) / std::stod(m[2]) - 1 > 0.05;
    beyond += over;
    EXPECT_EQ(over, line.find("over the search's estimate: stage ") != std::string::npos) << line;
  }
  EXPECT_EQ(rows, 11) << top.output;
  EXPECT_GE(beyond, 3) << top.output;
  // What tells apart plans of one shape and split is said: the chosen 15-1 defers its step
  // ("ds"), the same split without it is the next candidate.
  EXPECT_NE(top.output.find("   1  15-1 @fc6                       ds "), std::string::npos) << top.output;
  EXPECT_NE(top.output.find("   2  15-1 @fc6                       -  "), std::string::npos) << top.output;
  auto unbucketed = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + path +
                                           " --workers 4,4 --bandwidth-gbps 96,10 --top 4 --bucket-mb 0 2>&1",
                                       false);
  EXPECT_NE(unbucketed.output.find("1  15-1 @conv5_3"), std::string::npos) << unbucketed.output;
  auto bad = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + path +
                                    " --workers 4 --bandwidth-gbps 10 --top 3 --cost-model pipedream 2>&1",
                                false);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--top and --explain use the pipetrain cost model"), std::string::npos) << bad.output;
}

// All workers are used, so on slow links the chosen plan can lose to one worker alone: AWD-LM on
// 8 workers at 1 Gbit/s (7-1, 103 ms per minibatch in simulation against 88.5 on one worker).
// `plan` says so; where the plan is faster (VGG-16 on 4x4), it says nothing.
// AWD-LM on 8 workers at 1 Gbit/s: every plan on all 8 simulates slower than one worker alone.
// The planner then leaves workers idle and says so; with --all-workers (PipeDream's optimizer's
// way) it plans on all 8 and warns that one worker would be faster.
TEST(PlanReferee, LeavesWorkersIdleWhereUsingThemIsSlower) {
  auto run = [](const std::string& model, const std::string& workers, const std::string& gbps,
                const std::string& flags) {
    return testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + PT_SOURCE_DIR +
                                  "/data/profiles/" + model + ".json --workers " + workers + " --bandwidth-gbps " +
                                  gbps + " " + flags + " 2>&1",
                              false);
  };
  auto all = run("awd-lm", "8", "1", "--all-workers");
  ASSERT_EQ(all.exit_code, 0) << all.output;
  EXPECT_NE(all.output.find("warning: this plan is slower than one worker"), std::string::npos) << all.output;
  EXPECT_EQ(all.output.find("note: fewer workers"), std::string::npos) << all.output;

  std::string path = std::string(PT_SOURCE_DIR) + "/data/profiles/awd-lm.json";
  profile::Profile prof = profile::read_profile_json(path);
  json fewer;
  ASSERT_NO_FATAL_FAILURE(fewer = plan_json(path, "8", "1"));
  int used = fewer.value("workers", 0);
  EXPECT_GE(used, 1);
  EXPECT_LT(used, 8);
  double simulated = fewer["predicted"].value("simulated_ms_per_minibatch", 0.0);
  EXPECT_GT(simulated, 0);
  EXPECT_LE(simulated, (prof.total_compute_ms() + prof.total_step_ms()) * (1 + 1e-9));  // never slower than one worker
  auto text = run("awd-lm", "8", "1", "");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("on " + std::to_string(used) + " of 8 workers"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("note: fewer workers: the plan uses " + std::to_string(used) + " of the cluster's 8"),
            std::string::npos)
      << text.output;
  EXPECT_EQ(text.output.find("slower than one worker"), std::string::npos) << text.output;

  auto fast = run("vgg16", "4,4", "96,10", "");
  ASSERT_EQ(fast.exit_code, 0) << fast.output;
  EXPECT_EQ(fast.output.find("slower than one worker"), std::string::npos) << fast.output;
  EXPECT_EQ(fast.output.find("note: fewer workers"), std::string::npos) << fast.output;
}

// Issue 12's headline case in simulation: VGG-16 on 4x4 (96/10 Gbit/s). The paper's 15-1 loses
// 2.4 ms per minibatch to the first stage's all-reduce tail; deferring its step past the next
// forward hides it, and the plan reaches 95% of the compute limit. --no-deferred-step with DDP's
// 25 MiB bucket plans as before; with the bucket the planner picks (4 MiB: the ring starts
// earlier in the backward) it comes within 1% of the deferred step, without its staleness.
TEST(PlanReferee, DeferredStepReachesTheComputeBoundOnVgg16) {
  std::string path = std::string(PT_SOURCE_DIR) + "/data/profiles/vgg16.json";
  profile::Profile prof = profile::read_profile_json(path);
  double limit = (prof.total_compute_ms() + prof.total_step_ms()) / 16;
  json deferred;
  ASSERT_NO_FATAL_FAILURE(deferred = plan_json(path, "4,4", "96,10"));
  EXPECT_EQ(deferred.value("deferred_step", false), true);
  double with = deferred["predicted"]["simulated_ms_per_minibatch"].get<double>();
  EXPECT_GE(with, limit * (1 - 1e-9));
  EXPECT_LE(with, limit / 0.95) << "below 95% of the compute limit";
  auto plain = [&](const std::string& flags) {
    auto r = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --json --no-deferred-step --profile " +
                                    path + " --workers 4,4 --bandwidth-gbps 96,10 " + flags + " 2>/dev/null",
                                false);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    json j = r.exit_code == 0 ? parse_json(r.output, "plan output") : json::object();
    EXPECT_FALSE(j.contains("deferred_step"));
    return j.contains("predicted") ? j["predicted"]["simulated_ms_per_minibatch"].get<double>() : 0.0;
  };
  EXPECT_GT(plain("--bucket-mb 25"), with * 1.05);
  double chosen_bucket = plain("");
  EXPECT_LT(chosen_bucket, with * 1.01);
  EXPECT_GE(chosen_bucket, limit * (1 - 1e-9));
}

}  // namespace
}  // namespace pt

namespace pt {
namespace {

// Clusters of hundreds of workers (issue 35): where the candidates' replica counts repeat too
// rarely to replay (VGG-16 on 250: on 256 a 240-15-1 now replays), plan still answers, instead of "no candidate plan can run": data
// parallelism by its closed form (exact for it), and a note naming a faster prediction it could
// not simulate.
TEST(PlanReferee, LargeClusterWithoutReplayablePlansStillPlans) {
  std::string path = std::string(PT_SHARED_DIR) + "/data/pipedream-profiles/vgg16.json";
  auto r = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --all-workers --profile " + path +
                                  " --workers 250 --bandwidth-gbps 10 2>&1",
                              false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("on 250 workers"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("note: data parallelism on 250 workers: its steady state is the cost engine's closed form"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("note: not simulated: [0-9-]+ predicts [0-9.]+ ms per minibatch, "
                                                     "faster than this plan")))
      << r.output;
  // A search of a tenth of a second is not announced; from 512 workers (about a second each) it is,
  // and its time given, on stderr.
  EXPECT_EQ(r.output.find("plan: search"), std::string::npos) << r.output;
  auto big = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --all-workers --profile " + path +
                                    " --workers 512 --bandwidth-gbps 10 2>&1",
                                false);
  ASSERT_EQ(big.exit_code, 0) << big.output;
  EXPECT_NE(big.output.find("plan: searching splits of 41 layers over 512 workers (all-reduce after each bucket, and "
                            "after the backward, side by side)"),
            std::string::npos) << big.output;
  // 39 of them: its Size, View and Dropouts cost nothing and share their producers' nodes.
  EXPECT_TRUE(std::regex_search(big.output, std::regex("plan: searched 39 states in [0-9.]+ s"))) << big.output;
}

}  // namespace
}  // namespace pt

namespace pt {
namespace {

// PipeDream's optimizer under a memory cap (issue 32's regression): --cost-model pipedream
// --memory plans again, and the cap binds as in PipeDream's reference: VGG-16 on 4 workers is
// 3-1 with 16 GB each, and data parallelism (whose stash the reference counts as 0) with 8 GB.
TEST(PlanReferee, PipedreamModelPlansUnderAMemoryCap) {
  std::string path = std::string(PT_SHARED_DIR) + "/data/pipedream-profiles/vgg16.json";
  std::string base = std::string(PT_BINARY_DIR) + "/pipetrain plan --cost-model pipedream --profile " + path +
                     " --workers 4 --bandwidth-gbps 10";
  auto roomy = testing::shell_run(base + " --memory 16GB");
  ASSERT_EQ(roomy.exit_code, 0) << roomy.output;
  EXPECT_NE(roomy.output.find("cost model pipedream: 2 stages, shape 3-1"), std::string::npos) << roomy.output;
  // PipeDream's prediction stays PipeDream's; the simulator's time for the plan is beside it.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(roomy.output, m, std::regex("predicted ms per minibatch: pipeline ([0-9.]+)")))
      << roomy.output;
  double predicted = std::stod(m[1]);
  ASSERT_TRUE(std::regex_search(roomy.output, m,
                                std::regex("simulated ms per minibatch \\(pipedream, steady state\\): ([0-9.]+) "
                                           "\\(([-+0-9.]+)% from the prediction\\)")))
      << roomy.output;
  EXPECT_NEAR(std::stod(m[2]), 100 * (std::stod(m[1]) / predicted - 1), 0.1);
  // Its speed-up says which figure it is, and gives the simulation's too (ResNet-50 on 8 workers
  // at 1 Gbit/s printed 1.35x alone, where it simulates at 0.37x).
  double simulated = std::stod(m[1]);
  ASSERT_TRUE(std::regex_search(roomy.output, m, std::regex("one worker ([0-9.]+)\n"))) << roomy.output;
  double single = std::stod(m[1]);
  ASSERT_TRUE(std::regex_search(roomy.output, m, std::regex("by the prediction; ([0-9.]+)x over one worker in simulation")))
      << roomy.output;
  EXPECT_NEAR(std::stod(m[1]), single / simulated, 0.006);
  auto tight = testing::shell_run(base + " --memory 8GB");
  ASSERT_EQ(tight.exit_code, 0) << tight.output;
  EXPECT_NE(tight.output.find("cost model pipedream: 1 stage, shape 4"), std::string::npos) << tight.output;
  // PipeDream's formula counts data parallelism's stash as nothing; the memory model, which train
  // checks, does not, and the plan says it is over the cap by it.
  ASSERT_TRUE(std::regex_search(tight.output, m,
                                std::regex("keeps the 8\\.00 GiB cap by its own formula .* puts this plan at ([0-9.]+) GiB")))
      << tight.output;
  EXPECT_GT(std::stod(m[1]), 8.0);
  EXPECT_EQ(testing::shell_run(base + " --memory 80GB").output.find("note: memory"), std::string::npos);
  auto joint = testing::shell_run(base + " --schedule auto");
  EXPECT_EQ(joint.exit_code, 2) << joint.output;
  EXPECT_NE(joint.output.find("needs --cost-model pipetrain"), std::string::npos) << joint.output;
}

}  // namespace
}  // namespace pt

namespace pt {
namespace {

// The planner picks the all-reduce bucket (issue 33): each bucket's ring pays its steps'
// latency, so the choice follows the cluster's latency per message. ResNet-50 on 8 workers at 1
// Gbit/s: 1 MiB buckets start the ring early in the backward and win without latency; at 200 us
// a message their many steps lose to 25 MiB. The plan's time is its simulation with the bucket
// it names, the fastest of those tried; --bucket-mb pins it; train --plan follows it.
TEST(PlanReferee, ChoosesTheBucketTheLatencyFavours) {
  std::string path = std::string(PT_SOURCE_DIR) + "/data/profiles/resnet50.json";
  auto plan_with = [&](const std::string& flags) {
    auto r = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --json --profile " + path +
                                    " --workers 8 --bandwidth-gbps 1 " + flags + " 2>/dev/null",
                                false);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.exit_code == 0 ? parse_json(r.output, "plan output") : json::object();
  };
  auto note_times = [&](const std::string& flags) {
    auto r = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + path +
                                    " --workers 8 --bandwidth-gbps 1 " + flags + " 2>&1",
                                false);
    std::smatch m;
    EXPECT_TRUE(std::regex_search(r.output, m, std::regex("all-reduce bucket [0-9.]+ MiB, the fastest in simulation "
                                                          "\\(ms per minibatch: ([^)]*)\\)")))
        << r.output;
    std::vector<std::pair<double, double>> tried;
    std::string list = m.size() > 1 ? m[1].str() : "";
    std::regex item("([0-9.]+) MiB ([0-9.]+)");
    for (auto it = std::sregex_iterator(list.begin(), list.end(), item); it != std::sregex_iterator(); ++it)
      tried.push_back({std::stod((*it)[1]), std::stod((*it)[2])});
    return tried;
  };
  for (const std::string latency : {"", "--latency-us 200"}) {
    SCOPED_TRACE(latency);
    json plan = plan_with(latency);
    double bucket = plan.value("bucket_mb", -1.0), ms = plan["predicted"]["pipeline_ms_per_minibatch"].get<double>();
    EXPECT_EQ(bucket, latency.empty() ? 1.0 : 25.0);
    auto tried = note_times(latency);
    ASSERT_EQ(tried.size(), 5u);
    for (const auto& [mb, t] : tried) {
      EXPECT_GE(t, ms * (1 - 1e-4)) << mb << " MiB";
      if (mb == bucket) {
        EXPECT_NEAR(t, ms, 1e-3);
      }
    }
  }
  EXPECT_EQ(plan_with("--latency-us 200 --bucket-mb 4").value("bucket_mb", -1.0), 4.0);
#ifdef PT_WITH_TORCH_BUILD
  // train --plan takes the plan's bucket unless --bucket-mb says.
  std::string file = ::testing::TempDir() + "bucket_plan.json";
  auto written = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + path +
                                    " --workers 8 --bandwidth-gbps 1 -o " + file + " > /dev/null 2>&1");
  ASSERT_EQ(written.exit_code, 0) << written.output;
  auto job = [&](const std::string& flags) {
    auto r = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain-torch train --compute emulated --profile " + path + " --plan " + file + " --print-job " + flags + " 2>&1",
                                false);
    std::smatch m;
    EXPECT_TRUE(std::regex_search(r.output, m, std::regex("\"bucket_bytes\": ([0-9]+)"))) << r.output;
    return m.size() > 1 ? std::stoll(m[1]) : int64_t{-1};
  };
  EXPECT_EQ(job(""), int64_t{1} << 20);
  EXPECT_EQ(job("--bucket-mb 8"), int64_t{8} << 20);
#endif
}

// The bucket note claims a fastest size only where the sizes' times differ: GNMT-Large on 12
// workers replicates its first stage, whose all-reduce no size brings into the steady state.
TEST(PlanReferee, TheBucketNoteSaysWhenEverySizeIsTheSame) {
  int same = 0;
  for (auto [model, workers] : {std::pair{"gnmt_large", "12"}, {"gnmt_large", "16"}, {"alexnet", "16"}, {"vgg16", "16"}}) {
    SCOPED_TRACE(std::string(model) + " on " + workers);
    std::string path = std::string(PT_SHARED_DIR) + "/data/pipedream-profiles/" + model + ".json";
    auto r = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + path + " --workers " +
                                    workers + " --bandwidth-gbps 10 2>&1",
                                false);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::smatch m;
    if (std::regex_search(r.output, m, std::regex("the fastest in simulation \\(ms per minibatch: ([^)]*)\\)"))) {
      std::set<std::string> times;
      std::string list = m[1].str();
      std::regex item("MiB ([0-9.]+)");
      for (auto it = std::sregex_iterator(list.begin(), list.end(), item); it != std::sregex_iterator(); ++it)
        times.insert((*it)[1].str());
      EXPECT_GT(times.size(), 1u) << r.output;
    } else if (r.output.find("every size tried simulates the same") != std::string::npos) {
      ++same;
    }
  }
  EXPECT_GE(same, 1) << "no case with nothing to all-reduce: the test no longer covers the note";
}

}  // namespace
}  // namespace pt

namespace pt {
namespace {

// One timing model end to end (issue 32): what `plan` predicts for its plan is what `simulate`
// gives the plan file, the bucket and deferred step the plan names included, on typed clusters
// and one with a latency per message.
// A plan made with --allreduce hierarchical records it: simulated from its file without the
// flag, VGG-16's data parallelism on 4x2 had replayed rings, 126.2 ms against the 84.1 predicted.
TEST(PlanReferee, SimulateOfThePlanFileGivesThePrediction) {
  struct Case {
    std::string model, cluster, plan_only = "";  // plan_only: flags simulate is not given
  };
  std::string file = ::testing::TempDir() + "predicted_plan.json";
  // PipeDream's own profile files too: simulate reads what plan reads.
  for (const Case& c : {Case{"vgg16", "--workers 4,4 --bandwidth-gbps 96,10"},
                        Case{"vgg16", "--workers 4,4 --bandwidth-gbps 96,10", " --no-deferred-step"},
                        Case{"vgg16", "--workers 4,2 --bandwidth-gbps 96,10", " --allreduce hierarchical"},
                        // the joint search's plans (a --schedule) recorded none: 356.3 ms against 297.6
                        Case{"resnet50", "--workers 4,4 --bandwidth-gbps 96,10", " --allreduce hierarchical --schedule 1f1b"},
                        Case{"vgg16", "--workers 4,4 --bandwidth-gbps 96,10", " --allreduce hierarchical --schedule dp"},
                        // and PipeDream's cost model's: 34.361 ms from the file against its 32.567
                        Case{"vgg16", "--workers 4,4 --bandwidth-gbps 100,10", " --allreduce hierarchical --cost-model pipedream"},
                        Case{"resnet50", "--workers 8 --bandwidth-gbps 1 --latency-us 200"},
                        Case{"gnmt16", "--workers 2,8 --bandwidth-gbps 96,25"},
                        Case{"pipedream-profiles/gnmt", "--workers 8 --bandwidth-gbps 10 --action-us 50"}}) {
    SCOPED_TRACE(c.model + " " + c.cluster + c.plan_only);
    std::string path = c.model.rfind("pipedream-profiles/", 0) == 0
                           ? std::string(PT_SHARED_DIR) + "/data/" + c.model + ".json"
                           : std::string(PT_SOURCE_DIR) + "/data/profiles/" + c.model + ".json";
    auto planned = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --json --profile " + path + " " +
                                          c.cluster + c.plan_only + " -o " + file + " 2>/dev/null",
                                      false);
    ASSERT_EQ(planned.exit_code, 0) << planned.output;
    json plan = parse_json(planned.output, "plan");
    // (PipeDream's cost model keeps its own prediction beside the simulated figure.)
    double predicted = plan["predicted"].value("simulated_ms_per_minibatch", plan["predicted"]["pipeline_ms_per_minibatch"].get<double>());
    if (!c.plan_only.empty())
      EXPECT_EQ(plan.value("allreduce", ""), c.plan_only.find("hierarchical") != std::string::npos ? "hierarchical" : "ring");
    const std::string& cluster = c.cluster;
    // No --schedule: simulate runs the plan's (pipedream), as train --plan does.
    auto sim = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain simulate --profile " + path + " --plan " +
                                  file + " " + cluster);
    ASSERT_EQ(sim.exit_code, 0) << sim.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(sim.output, m, std::regex("time per minibatch +([0-9.]+) ms"))) << sim.output;
    EXPECT_NEAR(std::stod(m[1]) / predicted, 1.0, 0.01) << sim.output;
  }
}

// `plan --json FLAGS -o FILE` on `path`, then `simulate --plan FILE` with `cluster`: the plan, and
// simulate's time per minibatch (0 where a command failed, which the test has then reported).
std::pair<json, double> plan_then_simulate(const std::string& path, const std::string& flags,
                                           const std::string& cluster, const std::string& file) {
  auto planned = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --json " + flags + " --profile " +
                                        path + cluster + " -o " + file + " 2>/dev/null",
                                    false);
  EXPECT_EQ(planned.exit_code, 0) << planned.output;
  if (planned.exit_code != 0) return {json::object(), 0};
  auto sim = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain simulate --profile " + path + " --plan " + file +
                                cluster);
  EXPECT_EQ(sim.exit_code, 0) << sim.output;
  std::smatch m;
  bool found = std::regex_search(sim.output, m, std::regex("time per minibatch +([0-9.]+) ms"));
  EXPECT_TRUE(found) << sim.output;
  return {parse_json(planned.output, "plan"), found ? std::stod(m[1]) : 0};
}

// An asynchronous schedule's steps copy the weights they stash (the profile's stash_copy_ms, in
// its optimizer_ms); the flushing ones' make no copy. The referee replayed pipedream's plans
// without the copy: mnist-cnn's 2 straight stages read 9.804 ms a minibatch in `plan` and 9.936
// in `simulate --plan` (stage 1's copy, 0.132 ms), below that stage's own compute. Here VGG-16
// with a copy of a third of each layer's forward: plan and simulate agree to rounding.
TEST(PlanReferee, AnAsynchronousPlansStepsCopyTheStashAsSimulateCharges) {
  json prof = parse_json(read_text_file(std::string(PT_SOURCE_DIR) + "/data/profiles/vgg16.json"), "vgg16");
  for (auto& l : prof["layers"]) {
    double copy = l["forward_ms"].get<double>() / 3;
    l["stash_copy_ms"] = copy;
    l["optimizer_ms"] = l["optimizer_ms"].get<double>() + copy;
  }
  std::string path = ::testing::TempDir() + "vgg16_stash_copy.json", file = ::testing::TempDir() + "copy_plan.json";
  write_text_file_atomic(path, prof.dump());
  for (std::string cluster : {" --workers 2 --bandwidth-gbps 10", " --workers 4,4 --bandwidth-gbps 96,10"})
    for (std::string flags : {"--straight", "", "--schedule 2bw"}) {
      SCOPED_TRACE(cluster + " " + flags);
      auto [plan, simulated] = plan_then_simulate(path, flags, cluster, file);
      ASSERT_GT(simulated, 0);
      double predicted = plan["predicted"]["pipeline_ms_per_minibatch"].get<double>();
      EXPECT_NEAR(predicted / simulated, 1.0, 2e-4) << plan.dump();
    }
}

// Workers that share one host's cores (a cluster calibrate measured on one machine writes
// host_cores) are planned as they will run there: every candidate replayed on the shared cores,
// data parallelism too (its closed form gives each worker a core of its own), so the plan's
// figure is what `simulate --plan` replays on that cluster, and slower than on a core each. (One
// of these replays spun forever on a compute that rounding left 1e-11 ms from its end: Replay::
// finish_running now ends the first to end whatever is left of it.)
TEST(PlanReferee, WorkersSharingAHostsCoresArePlannedOnThem) {
  std::string path = std::string(PT_SOURCE_DIR) + "/data/profiles/vgg16.json";
  std::string own = ::testing::TempDir() + "own_cores.cluster.json", shared = ::testing::TempDir() + "shared_cores.cluster.json";
  // Links so fast that VGG-16's all-reduce costs little: its time is its compute.
  std::string levels = R"({"format": "pipetrain.cluster/1", "levels": [{"name": "host", "fan_out": 4, "bandwidth_gbps": 10000}])";
  std::ofstream(own) << levels << "}";
  std::ofstream(shared) << levels << R"(, "host_cores": 2})";
  auto [own_plan, own_ms] = plan_then_simulate(path, "", " --cluster " + own, ::testing::TempDir() + "own_cores.plan.json");
  auto [shared_plan, shared_ms] =
      plan_then_simulate(path, "", " --cluster " + shared, ::testing::TempDir() + "shared_cores.plan.json");
  ASSERT_TRUE(own_plan.contains("predicted") && shared_plan.contains("predicted"));
  EXPECT_NEAR(shared_ms / shared_plan["predicted"]["pipeline_ms_per_minibatch"].get<double>(), 1.0, 0.01);
  EXPECT_NEAR(own_ms / own_plan["predicted"]["pipeline_ms_per_minibatch"].get<double>(), 1.0, 0.01);
  // 4 workers computing on 2 cores take nearly twice as long.
  EXPECT_GT(shared_ms, 1.5 * own_ms);
  double own_dp = own_plan["predicted"]["data_parallel_ms_per_minibatch"].get<double>();
  double shared_dp = shared_plan["predicted"]["data_parallel_ms_per_minibatch"].get<double>();
  EXPECT_GT(shared_dp, 1.5 * own_dp) << "data parallelism replayed on the shared cores, not its closed form";
  // At 1 Gbit/s a pipeline whose stages share the cores unevenly: simulate pins them as plan
  // replayed them (it replayed one pool: 230.7 ms against the plan's 265.9).
  std::string slow = ::testing::TempDir() + "shared_cores_slow.cluster.json";
  std::ofstream(slow) << R"({"format": "pipetrain.cluster/1", "levels": [{"name": "host", "fan_out": 4, "bandwidth_gbps": 1}],
                             "host_cores": 2})";
  auto [slow_plan, slow_ms] = plan_then_simulate(path, "", " --cluster " + slow, ::testing::TempDir() + "shared_slow.plan.json");
  ASSERT_TRUE(slow_plan.contains("predicted"));
  EXPECT_NEAR(slow_ms / slow_plan["predicted"]["pipeline_ms_per_minibatch"].get<double>(), 1.0, 1e-6);
}

// On one core, 4 workers compute no faster than one, and pay the all-reduce besides: the plan
// is one worker's. The search's bound ruled one worker out unreplayed (its estimates count a
// device a worker), and plan chose 4 at 358.837 ms per minibatch over one at 358.702, warning.
TEST(PlanReferee, WorkersOutnumberingTheCoresNeverPlanSlowerThanOne) {
  std::string path = std::string(PT_SOURCE_DIR) + "/data/profiles/vgg16.json";
  std::string cluster = ::testing::TempDir() + "one_core.cluster.json", out = ::testing::TempDir() + "one_core.plan.json";
  std::ofstream(cluster) << R"({"format": "pipetrain.cluster/1", "levels": [{"name": "host", "fan_out": 4,
                               "bandwidth_gbps": 10}], "host_cores": 1})";
  auto planned = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + path + " --cluster " +
                                    cluster + " -o " + out);
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  EXPECT_EQ(planned.output.find("slower than one worker"), std::string::npos) << planned.output;
  EXPECT_NE(planned.output.find("fewer workers: the plan uses 1 of the cluster's 4; on these links and the host's 1 "
                                "core no simulated plan on more is faster"),
            std::string::npos)
      << planned.output;
  json p = parse_json(read_text_file(out), out);
  EXPECT_EQ(p["workers"].get<int>(), 1) << p.dump();
}

// `plan FLAGS --top 4 --save-top DIR` on `model` and `cluster`: the 4 best are written as plan
// files, the first the chosen plan itself, each replayed by `simulate --plan` at the time it was
// ranked by (within 0.1%: runner-ups were shown from a window settled but not yet repeating,
// awd-lm's 4-4-4 on 4x4 at 14.741 ms where its file simulates at 15.170), fastest a sample first.
void expect_top_plans_replay_as_ranked(const std::string& flags, const std::string& cluster, const std::string& name,
                                       const std::string& model = "vgg16") {
  std::string dir = ::testing::TempDir() + name + "_" + std::to_string(::getpid());  // made by plan, as -o's file is
  std::filesystem::remove_all(dir);
  std::string path = std::string(PT_SOURCE_DIR) + "/data/profiles/" + model + ".json";
  auto [chosen, chosen_ms] = plan_then_simulate(path, flags + " --top 4 --save-top " + dir, cluster, dir + "/chosen.json");
  ASSERT_TRUE(chosen.contains("predicted"));
  double before = 0;
  for (int k = 1; k <= 4; ++k) {
    SCOPED_TRACE("rank " + std::to_string(k));
    std::string file = dir + "/top-" + std::to_string(k) + ".plan.json";
    ASSERT_TRUE(std::filesystem::exists(file));
    json p = parse_json(read_text_file(file), file);
    if (k == 1) EXPECT_EQ(p, chosen);
    double ranked = p["predicted"]["simulated_ms_per_minibatch"].get<double>();
    double per_sample = ranked / p["batch_size"].get<double>();
    EXPECT_GE(per_sample, before * (1 - 1e-9));
    before = per_sample;
    auto sim = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain simulate --profile " + path + " --plan " +
                                  file + cluster);
    ASSERT_EQ(sim.exit_code, 0) << sim.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(sim.output, m, std::regex("time per minibatch +([0-9.]+) ms"))) << sim.output;
    EXPECT_NEAR(std::stod(m[1]) / ranked, 1.0, 1e-3) << p.dump() << "\n" << sim.output;
  }
  std::filesystem::remove_all(dir);
}

TEST(PlanReferee, TheTopCandidatesAreWrittenAsPlansThatReplayAsRanked) {
  expect_top_plans_replay_as_ranked("", " --workers 4,4 --bandwidth-gbps 96,10", "save_top");
  expect_top_plans_replay_as_ranked("", " --workers 4,4 --bandwidth-gbps 96,10", "save_top_awd", "awd-lm");
}

// `plan --top`'s memory of a runner-up is what `simulate --plan` of its file models: ResNet-50's
// 13-3 on 4x4 was shown at 11.74 GiB, over fewer minibatches than its time was replayed over
// (12.02 GiB, simulate's).
TEST(PlanReferee, TheTopRowsMemoryIsSimulatesOfTheirFiles) {
  std::string dir = ::testing::TempDir() + "top_memory_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::string path = std::string(PT_SOURCE_DIR) + "/data/profiles/resnet50.json", cluster = " --workers 4,4 --bandwidth-gbps 96,10";
  auto planned = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + path + cluster +
                                    " --top 3 --save-top " + dir);
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  for (int k = 1; k <= 3; ++k) {
    SCOPED_TRACE("rank " + std::to_string(k));
    std::smatch row;
    // "   3  13-3 @block3_6  -  28.750  42.463  12.02 GiB  51.4% slower ..."
    ASSERT_TRUE(std::regex_search(planned.output, row, std::regex("\n +" + std::to_string(k) + "  [^\n]*?  ([0-9.]+ [KMG]iB)  ")))
        << planned.output;
    std::string shown = row[1];
    auto sim = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain simulate --profile " + path + " --plan " + dir +
                                  "/top-" + std::to_string(k) + ".plan.json" + cluster);
    ASSERT_EQ(sim.exit_code, 0) << sim.output;
    EXPECT_NE(sim.output.find("peak " + shown), std::string::npos) << shown << "\n" << sim.output;
  }
  std::filesystem::remove_all(dir);
}

// The joint search's configurations too (it refused --save-top), interleaved and V ones placed as
// they run.
TEST(PlanReferee, TheJointSearchsTopConfigurationsAreWrittenAsPlans) {
  expect_top_plans_replay_as_ranked("--schedule auto", " --workers 4 --bandwidth-gbps 10", "save_top_joint");
}

// A pinned count is spread over a pipeline's copies (256 on ResNet-50's batch of 128: 8 copies of
// 32), so it is no refusal where the profile's batch alone does not take it; where it splits no
// configuration and the search is left pipedream, which runs minibatches whole, plan says so.
// simulate --plan of a plan made from a profile of another precision or optimizer than the one
// given replays the given one's times, and says so (train notes it alike); nothing where they agree.
TEST(PlanReferee, SimulateNotesAPlanFromAProfileOfOtherSettings) {
  const std::string dir = ::testing::TempDir(), original = std::string(PT_SOURCE_DIR) + "/data/profiles/gpt-2048.json";
  json bf16 = json::parse(read_text_file(original));
  bf16["precision"] = "bf16", bf16["optimizer"] = "adamw";
  write_text_file_atomic(dir + "gpt-bf16.json", bf16.dump());
  const std::string cluster = " --workers 4 --bandwidth-gbps 10", plan = dir + "gpt-bf16-plan.json";
  auto planned = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + dir + "gpt-bf16.json" +
                                    cluster + " -o " + plan);
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  auto other = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain simulate --profile " + original + " --plan " +
                                  plan + cluster);
  EXPECT_EQ(other.exit_code, 0) << other.output;
  for (const std::string& said : {"of precision bf16 and " + original + " is of fp32: simulated with " + original +
                                      "'s times and memory",
                                  "of optimizer adamw and " + original + " is of sgd"})
    EXPECT_NE(other.output.find("note: " + plan + " was planned from a profile " + said), std::string::npos)
        << other.output;
  auto same = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain simulate --profile " + dir + "gpt-bf16.json" +
                                 " --plan " + plan + cluster);
  EXPECT_EQ(same.exit_code, 0) << same.output;
  EXPECT_EQ(same.output.find("was planned from a profile"), std::string::npos) << same.output;
}

TEST(PlanReferee, PinnedMicrobatchesThatSplitNoBatchAreSaid) {
  std::string path = std::string(PT_SOURCE_DIR) + "/data/profiles/";
  auto copies = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + path +
                                   "resnet50.json --workers 4,4 --bandwidth-gbps 100,10 --microbatches 256 --schedule 1f1b");
  EXPECT_EQ(copies.exit_code, 0) << copies.output;
  auto three = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + path +
                                  "vgg16.json --workers 4 --bandwidth-gbps 10 --microbatches 3");
  EXPECT_EQ(three.exit_code, 0) << three.output;
  EXPECT_NE(three.output.find("note: --microbatches 3 does not divide the batch of 64: the joint search chose pipedream, "
                              "which runs each minibatch whole, so the count is not used"),
            std::string::npos)
      << three.output;
}

// PipeDream's optimizer plans for its own schedule: the plan file names it, so `simulate --plan`
// (and `train --plan`) run the pipedream schedule `plan` simulated, not 1f1b, which VGG-16's
// 7-1 on 8 workers cannot run (7 replicas, 4 microbatches).
TEST(PlanReferee, APipedreamModelPlanFileRunsPipedreamsSchedule) {
  auto [p, simulated] = plan_then_simulate(std::string(PT_SHARED_DIR) + "/data/pipedream-profiles/vgg16.json",
                                           "--cost-model pipedream", " --workers 8 --bandwidth-gbps 10",
                                           ::testing::TempDir() + "pipedream_model_plan.json");
  ASSERT_TRUE(p.contains("predicted"));
  EXPECT_EQ(p.value("schedule", ""), "pipedream");
  EXPECT_NEAR(simulated, p["predicted"]["simulated_ms_per_minibatch"].get<double>(), 1e-3);
}

// One worker's time, the speed-ups' base, pays the host's time per action as the plan's stages
// do: with 100 ms an action, one worker's own plan printed 0.60x over one worker and 59.6% of
// the compute limit, and 8 workers 4.77x.
TEST(PlanReferee, OneWorkersTimePaysTheActionsToo) {
  std::string path = std::string(PT_SHARED_DIR) + "/data/pipedream-profiles/resnet50.json";
  for (const std::string workers : {"1", "8"}) {
    auto r = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + path + " --workers " +
                                workers + " --bandwidth-gbps 10 --action-us 100000");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.output, m, std::regex("speed-up: ([0-9.]+)x over one worker"))) << r.output;
    EXPECT_GE(std::stod(m[1]), workers == "1" ? 0.999 : 7.9) << r.output;
    EXPECT_LE(std::stod(m[1]), std::stod(workers) + 1e-9) << r.output;
    ASSERT_TRUE(std::regex_search(r.output, m, std::regex("the plan reaches ([0-9.]+)% of it"))) << r.output;
    EXPECT_GE(std::stod(m[1]), 99.0) << r.output;
  }
}

// The joint search settles a 2BW replay as simulate does: it replayed 24 minibatches, whose
// window had not begun to repeat, and printed GNMT's 2BW plan on 4 workers at 33.95 ms a
// minibatch where simulate of the plan file gives 34.83 (GNMT-Large on 16: 95.0 and 97.7, and
// the search ranked it ahead of a plan that runs faster).
TEST(PlanReferee, AJoint2bwPlanPredictsWhatSimulateGives) {
  auto [p, simulated] = plan_then_simulate(std::string(PT_SHARED_DIR) + "/data/pipedream-profiles/gnmt.json",
                                           "--schedule 2bw", " --workers 4 --bandwidth-gbps 10",
                                           ::testing::TempDir() + "plan_2bw.json");
  ASSERT_TRUE(p.contains("predicted"));
  EXPECT_EQ(p.value("schedule", ""), "2bw");
  EXPECT_NEAR(simulated / p["predicted"]["pipeline_ms_per_minibatch"].get<double>(), 1.0, 1e-3);
  // A window over 24 minibatches that looked repeating while the pace still drifted: VGG-16 8-8
  // on 4x4, which the split climb chose for it, was put at 690.511 ms a minibatch, simulate 698.187.
  auto [q, vgg] = plan_then_simulate(std::string(PT_SHARED_DIR) + "/data/pipedream-profiles/vgg16.json",
                                     "--schedule 2bw", " --workers 4,4 --bandwidth-gbps 96,10",
                                     ::testing::TempDir() + "plan_2bw_vgg.json");
  ASSERT_TRUE(q.contains("predicted"));
  EXPECT_NEAR(vgg / q["predicted"]["pipeline_ms_per_minibatch"].get<double>(), 1.0, 1e-3);
}

// A 2bw plan whose replicas' microbatches of a minibatch do not cover their warm-up keeps more
// than 2BW's two weight versions, and says so (it printed only the lag): 2-2-2 with 2.
TEST(PlanReferee, A2bwPlanBeyondTheDoubleBufferSaysHowManyVersions) {
  auto r = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + PT_SHARED_DIR +
                              "/data/pipedream-profiles/vgg16.json --workers 8 --bandwidth-gbps 10 --schedule 2bw "
                              "--microbatches 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch lag;
  ASSERT_TRUE(std::regex_search(r.output, lag, std::regex("weights lag up to ([0-9]+) updates"))) << r.output;
  int versions = std::stoi(lag[1]) + 1;
  ASSERT_GT(versions, 2) << "VGG-16 on 8 workers no longer chooses a 2bw plan past the double buffer:\n" << r.output;
  EXPECT_NE(r.output.find("2bw's weights lag " + std::string(lag[1]) + " updates here, not PipeDream-2BW's 1"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("with --no-weight-prediction on the version that far behind, keeping " +
                          std::to_string(versions) + " on a stage"),
            std::string::npos)
      << r.output;
}

// plan, simulate and compare model a run of `train --no-weight-prediction` where told: 2bw keeps
// the paper's two weight versions on every stage, where train's default predicts one copy per
// minibatch, up to 3 on a stage and 1 on the last. They modelled only the default, so a plan held
// to a memory cap for a run without prediction under-stated its last stage by a weight copy.
TEST(PlanReferee, NoWeightPredictionModelsTheRunWithoutIt) {
  const std::string bin = std::string(PT_BINARY_DIR) + "/pipetrain ";
  const std::string vgg = std::string(PT_SHARED_DIR) + "/data/pipedream-profiles/vgg16.json";
  const std::string on4 = " --workers 4 --bandwidth-gbps 10 --schedule 2bw";
  // plan --explain: each worker's weights by the memory model (VGG-16's 2bw: 2 stages of 2).
  auto weights = [&](const std::string& extra) {
    auto r = testing::shell_run(bin + "plan --profile " + vgg + on4 + " --explain" + extra + " 2>/dev/null", false);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::vector<double> bytes;
    std::regex line(R"(  w[0-9]+: weights ([0-9.]+) (B|KiB|MiB|GiB))");
    for (std::sregex_iterator it(r.output.begin(), r.output.end(), line), end; it != end; ++it)
      bytes.push_back(parse_bytes((*it)[1].str() + (*it)[2].str(), "weights"));
    return bytes;
  };
  std::vector<double> predicted = weights(""), paper = weights(" --no-weight-prediction");
  ASSERT_EQ(predicted.size(), 4u);
  ASSERT_EQ(paper.size(), 4u);
  EXPECT_NEAR(paper[0] / predicted[0], 2.0 / 3.0, 0.01);  // the first stage: 3 copies, the paper's 2
  EXPECT_NEAR(paper[3] / predicted[3], 2.0, 0.1);         // the last: 1 copy, the paper's 2 (printed 1.0 GiB)

  // simulate: the trace's versions per worker, and whether it says the run predicts.
  std::string trace = ::testing::TempDir() + "no_prediction_trace.json";
  auto sim = testing::shell_run(bin + "simulate --profile " + vgg + on4 + " --no-weight-prediction --save-trace " + trace);
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  std::smatch row;
  for (int w = 0; w < 4; ++w) {
    ASSERT_TRUE(std::regex_search(sim.output, row, std::regex("\n +" + std::to_string(w) + " +[0-9.]+ +[0-9]+ +([0-9]+) ")))
        << sim.output;
    EXPECT_EQ(row[1], "2") << "worker " << w << "\n" << sim.output;
  }
  EXPECT_FALSE(read_json_file(trace).value("predicted_weights", false));  // written where true
  auto by_default = testing::shell_run(bin + "simulate --profile " + vgg + on4 + " --save-trace " + trace);
  ASSERT_EQ(by_default.exit_code, 0) << by_default.output;
  EXPECT_TRUE(read_json_file(trace).value("predicted_weights", false));

  // compare: the asynchronous rows' memory follows the flag; the synchronous rows' does not.
  auto peaks = [&](const std::string& extra) {
    auto r = testing::shell_run(bin + "compare --json --profile " + vgg + " --workers 4 --bandwidth-gbps 10" + extra +
                                " 2>/dev/null", false);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::map<std::string, int64_t> by_row;
    json doc = parse_json(r.output, "compare output");
    for (const auto& j : doc["rows"])
      by_row[j["row"].get<std::string>()] = j["modelled_peak_memory_bytes"].get<int64_t>();
    return by_row;
  };
  auto with = peaks(""), without = peaks(" --no-weight-prediction");
  ASSERT_TRUE(with.count("2bw") && with.count("1f1b") && with.count("gpipe")) << "rows changed";
  EXPECT_NE(with["2bw"], without["2bw"]);
  EXPECT_EQ(with["1f1b"], without["1f1b"]);
  EXPECT_EQ(with["gpipe"], without["gpipe"]);
}

// A plan simulated with another model's profile is refused by its `model` field, as train --plan
// refuses it: where the layer counts allowed, simulate replayed the plan's stages over the other
// model's layers.
TEST(PlanReferee, SimulateRefusesAnotherModelsPlan) {
  std::string file = ::testing::TempDir() + "vgg16_plan.json";
  std::string dir = std::string(PT_SHARED_DIR) + "/data/pipedream-profiles/";
  auto planned = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + dir +
                                    "vgg16.json --workers 4 --bandwidth-gbps 10 -o " + file + " > /dev/null 2>&1");
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  auto sim = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain simulate --profile " + dir +
                                "alexnet.json --plan " + file + " --workers 4 --bandwidth-gbps 10");
  EXPECT_EQ(sim.exit_code, 1) << sim.output;
  EXPECT_NE(sim.output.find(file + ": field 'model' is 'vgg16' but " + dir + "alexnet.json profiles 'alexnet'"),
            std::string::npos)
      << sim.output;
}

// A joint plan names its schedule, microbatches and a batch per step other than the profile's
// (GPT-2048 under a 16 GB cap: 1f1b, 32 microbatches, batch 32 from a profile at 16); simulate
// of the file runs that, as train --plan does, and gives the plan's time.
TEST(PlanReferee, SimulateOfAJointPlanFileRunsItsScheduleAndBatch) {
  std::string file = ::testing::TempDir() + "joint_sim_plan.json";
  std::string path = std::string(PT_SOURCE_DIR) + "/data/profiles/gpt-2048.json";
  std::string cluster = " --workers 8 --bandwidth-gbps 10";
  auto planned = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + path + cluster +
                                    " --schedule 1f1b --memory 16GB -o " + file);
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  plan::Plan p = plan::read_plan(file);
  ASSERT_EQ(p.schedule, "1f1b");
  ASSERT_GT(p.microbatches, 4);
  ASSERT_NE(p.batch_size, profile::read_profile_json(path).batch_size);
  EXPECT_EQ(p.memory_cap_bytes, int64_t{16} << 30);  // what train holds its workers' peaks against
  EXPECT_EQ(p.memory_cap_process_bytes, 0);          // no calibrated cluster: the cap is the tensors'
  auto sim = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain simulate --profile " + path + cluster +
                                " --plan " + file);
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(sim.output, m, std::regex("time per minibatch +([0-9.]+) ms"))) << sim.output;
  EXPECT_NEAR(std::stod(m[1]) / p.pipeline_ms_per_minibatch, 1.0, 0.01) << sim.output;
  EXPECT_NE(sim.output.find("1f1b on 8"), std::string::npos) << sim.output;
}

// A plan slower than one worker advises one worker only where one fits the cap: PipeDream's
// VGG-16 on 8 workers at 10 Gbit/s under 2 GB (zb-v pinned) was told to train on one worker,
// which needs more than 2 GB even a sample a microbatch (1.7 GB of weights, gradients and
// momentum before any activation); under 40 GB one fits (zb-v at 1 Gbit/s, 1317 ms a minibatch
// against one worker's 673; 1f1b there, the case before, now finds a cut between the last pooling
// and the classifier that runs at 662).
TEST(PlanReferee, SlowerThanOneWorkerAdvisesItOnlyWhereItFits) {
  std::string base = std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + PT_SHARED_DIR +
                     "/data/pipedream-profiles/vgg16.json --workers 8 ";
  auto tight = testing::shell_run(base + "--bandwidth-gbps 10 --memory 2GB --schedule zb-v");
  ASSERT_EQ(tight.exit_code, 0) << tight.output;
  EXPECT_NE(tight.output.find("warning: this plan is slower than one worker"), std::string::npos) << tight.output;
  EXPECT_NE(tight.output.find("one worker does not fit the memory cap"), std::string::npos) << tight.output;
  EXPECT_EQ(tight.output.find("train on one worker"), std::string::npos) << tight.output;
  auto roomy = testing::shell_run(base + "--bandwidth-gbps 1 --memory 40GB --schedule zb-v");
  ASSERT_EQ(roomy.exit_code, 0) << roomy.output;
  EXPECT_NE(roomy.output.find("train on one worker"), std::string::npos) << roomy.output;
}

// The joint search's 2bw figures are steady states, as simulate gives them for the plan file
// however long it runs: from 6 minibatches a step, VGG-16's 4-4 on 4x4 was "186.7 ms per
// minibatch" and simulates at 341.1 (2BW's double buffering alternates two gaps; the short
// run measured the shorter one and its warm-up).
TEST(PlanReferee, AJointTwoBwPlanPredictsItsSteadyState) {
  std::string file = ::testing::TempDir() + "joint_2bw_plan.json";
  std::string path = std::string(PT_SOURCE_DIR) + "/data/profiles/vgg16.json";
  std::string cluster = " --workers 4,4 --bandwidth-gbps 96,10";
  auto planned = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + path + cluster +
                                    " --schedule 2bw -o " + file);
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  plan::Plan p = plan::read_plan(file);
  ASSERT_EQ(p.schedule, "2bw");
  for (const char* minibatches : {"", " --minibatches 200"}) {
    auto sim = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain simulate --profile " + path + cluster +
                                  " --plan " + file + minibatches);
    ASSERT_EQ(sim.exit_code, 0) << sim.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(sim.output, m, std::regex("time per minibatch +([0-9.]+) ms"))) << sim.output;
    EXPECT_NEAR(std::stod(m[1]) / p.pipeline_ms_per_minibatch, 1.0, 0.01) << p.shape() << minibatches << "\n" << sim.output;
  }
}

// Data parallelism on 256 workers repeats every 256 minibatches, too long to replay: it is
// ranked by the closed form, its replay's figure exactly (Referee.DataParallelismsClosedFormIsItsReplay),
// and chosen where it is the fastest (it lost to 240 replicas that could be replayed, 0.911 ms
// per minibatch against 0.854), with a note. And where the chosen plan runs with another bucket
// than the exact model's figures, --explain says both.
TEST(PlanReferee, UnreplayableDataParallelismIsRankedByItsExactClosedForm) {
  std::string file = ::testing::TempDir() + "dp256_plan.json";
  auto r = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + PT_SOURCE_DIR +
                              "/data/profiles/awd-lm.json --workers 256 --bandwidth-gbps 10 -o " + file);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("does not fit"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("data parallelism on 256 workers: its steady state is the cost engine's closed form"),
            std::string::npos)
      << r.output;
  plan::Plan p = plan::read_plan(file);
  EXPECT_EQ(p.shape(), "256");
  // The table's headline is the chosen bucket's; the recorded baseline is data parallelism's at
  // its own bucket, never faster.
  EXPECT_GT(p.data_parallel_ms_per_minibatch, 0);
  EXPECT_LE(p.pipeline_ms_per_minibatch, p.data_parallel_ms_per_minibatch * (1 + 1e-9));
  auto e = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + PT_SHARED_DIR +
                              "/data/pipedream-profiles/resnet50.json --workers 8 --bandwidth-gbps 10 --explain");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NE(e.output.find("(the exact model's figures above are with the 25 MiB bucket; the plan runs with its 4 MiB "
                          "bucket: 55.524"),
            std::string::npos)
      << e.output;
}

// A joint search pinned to one schedule weighs no data parallelism, but without a memory cap
// the plan still records its time, the same as `plan` without the joint search (the table said
// "does not fit" and the file 0).
TEST(PlanReferee, APinnedScheduleStillRecordsDataParallelism) {
  std::string base = std::string(PT_BINARY_DIR) + "/pipetrain plan --json --profile " + PT_SOURCE_DIR +
                     "/data/profiles/vgg16.json --workers 4 --bandwidth-gbps 10";
  auto plain = testing::shell_run(base + " 2>/dev/null", false);
  auto pinned = testing::shell_run(base + " --schedule pipedream 2>/dev/null", false);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ASSERT_EQ(pinned.exit_code, 0) << pinned.output;
  double want = parse_json(plain.output, "plan")["predicted"]["data_parallel_ms_per_minibatch"].get<double>();
  ASSERT_GT(want, 0);
  EXPECT_NEAR(parse_json(pinned.output, "plan")["predicted"]["data_parallel_ms_per_minibatch"].get<double>(), want,
              1e-9 * want);
}

// plan --top, plan --explain and simulate print the memory model's figure (schedule/memory.h),
// the one train checks: for the chosen plan, the same bytes as the model computes here.
TEST(PlanReferee, PlanAndSimulateShowTheMemoryModelsPeak) {
  std::string file = ::testing::TempDir() + "memory_plan.json";
  std::string path = std::string(PT_SOURCE_DIR) + "/data/profiles/vgg16.json";
  std::string cluster = " --workers 4,4 --bandwidth-gbps 96,10";
  auto planned = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + path + cluster +
                                    " --top 1 --explain -o " + file);
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  plan::Plan p = plan::read_plan(file);
  auto prof = profile::read_profile_json(path);
  // Over a long run (schedule::memory_minibatches), as every command reads it.
  auto memory = schedule::memory_over_long_run("pipedream", p, {}, prof);
  int64_t peak = schedule::peak_memory(memory);
  EXPECT_NE(planned.output.find("  " + human_bytes(static_cast<double>(peak)) + "  chosen"), std::string::npos)
      << human_bytes(static_cast<double>(peak)) << "\n" << planned.output;
  auto sim = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain simulate --json --schedule pipedream --profile " +
                                    path + cluster + " --plan " + file,
                                false);
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  json doc = parse_json(sim.output, "simulate");
  EXPECT_EQ(doc["memory_model_peak_bytes"].get<int64_t>(), peak);
  // peak_memory_bytes is that peak too, each worker's its total: it held the trace's stashes
  // and weight versions alone, 46 of pipedream 3-1's 91 MiB, which peak_stash_weights_bytes names.
  EXPECT_EQ(doc["peak_memory_bytes"].get<int64_t>(), peak);
  int64_t workers_peak = 0;
  for (size_t w = 0; w < memory.size(); ++w) {
    EXPECT_EQ(doc["workers"][w]["peak_memory_bytes"].get<int64_t>(), memory[w].total()) << w;
    workers_peak = std::max(workers_peak, doc["workers"][w]["peak_memory_bytes"].get<int64_t>());
  }
  EXPECT_EQ(workers_peak, peak);
  EXPECT_GT(peak, doc["peak_stash_weights_bytes"].get<int64_t>());
}

// A zero-bubble plan's order is the planner's, weighed by the profile's times and the cluster's
// links: simulate (and train, train_cli_test) runs that order wherever it runs. Weighed again
// on another cluster, or on the unit clock (train on threads), regnet's interleaved-zb ran an
// order whose worker held 37.3 MiB where the plan said 33.8.
TEST(PlanReferee, AZeroBubblePlanRunsItsOwnOrderOnAnyCluster) {
  std::string file = ::testing::TempDir() + "order_plan.json", emitted = ::testing::TempDir() + "order_sched.json";
  std::string path = std::string(PT_SOURCE_DIR) + "/data/profiles/vgg16.json";
  auto planned = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + path +
                                    " --workers 2 --bandwidth-gbps 10 --schedule interleaved-zb --microbatches 8 -o " + file);
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  plan::Plan p = plan::read_plan(file);
  ASSERT_EQ(p.order.size(), 2u);
  plan::Plan unordered = p;
  unordered.order.clear();
  schedule::ScheduleOptions o{p.microbatches, p.chunks};
  // The links' order is not the unit clock's here, or this would show nothing.
  ASSERT_NE(schedule::compute_order(schedule::make_schedule(p.schedule, unordered, o)), p.order);
  auto sim = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain simulate --profile " + path +
                                " --workers 2 --bandwidth-gbps 100000 --plan " + file + " --emit-schedule " + emitted);
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  EXPECT_EQ(schedule::compute_order(schedule::read_schedule_file(emitted)), p.order);
}

// An interleaved or V plan's file lists the workers its chunks run on: an interleaved plan of 4
// chunks on 2 workers read "workers": 4, a worker a chunk, where its table said 2. simulate runs
// the file at the plan's time, and another --schedule on it no longer meets the plan's chunks.
TEST(PlanReferee, AnInterleavedOrVPlansFileListsTheWorkersItRunsOn) {
  std::string path = std::string(PT_SOURCE_DIR) + "/data/profiles/vgg16.json", cluster = " --workers 2 --bandwidth-gbps 10";
  for (const std::string kind : {"interleaved", "zb-v"}) {
    std::string file = ::testing::TempDir() + kind + "_placed_plan.json";
    auto [doc, ms] = plan_then_simulate(path, "--schedule " + kind, cluster, file);
    ASSERT_GT(ms, 0);
    std::set<int> used;
    for (const auto& st : doc["stages"]) used.insert(st["workers"][0].get<int>());
    EXPECT_EQ(doc["workers"].get<size_t>(), used.size()) << doc.dump();
    EXPECT_EQ(doc["stages"].size(), 2 * used.size()) << doc.dump();
    EXPECT_NEAR(ms, doc["predicted"]["simulated_ms_per_minibatch"].get<double>(), 1e-3);
    auto other = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain simulate --profile " + path + " --plan " +
                                    file + " --workers 4 --bandwidth-gbps 10 --schedule 1f1b");  // a worker a chunk
    EXPECT_EQ(other.exit_code, 0) << other.output;
  }
}

// A BatchNorm model's plan split into microbatches of fewer than 8 samples says so: pinned to zb-h1
// under a cap, regnet_y_400mf's was 16 microbatches of 2, which diverged where one of 32 trained.
TEST(PlanReferee, MicrobatchesOfFewSamplesForBatchNormsAreNoted) {
  std::string path = ::testing::TempDir() + "batch_norm_profile.json";
  json prof = parse_json(read_text_file(std::string(PT_SOURCE_DIR) + "/data/profiles/vgg16.json"), "vgg16.json");
  prof["batch_norms"] = 13;
  std::ofstream(path) << prof.dump();
  const int64_t batch = prof["batch_size"].get<int64_t>();
  ASSERT_EQ(batch, 64);
  for (int microbatches : {16, 4}) {
    auto planned = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + path +
                                      " --workers 4 --bandwidth-gbps 10 --schedule 1f1b --microbatches " +
                                      std::to_string(microbatches));
    ASSERT_EQ(planned.exit_code, 0) << planned.output;
    EXPECT_EQ(planned.output.find("13 BatchNorms normalise each of the 16 microbatches over its own 4 samples, not "
                                  "the batch of 64") != std::string::npos,
              microbatches == 16)
        << planned.output;
  }
}

// Unpinned, the search ranks a BatchNorm model's microbatches of fewer than 8 samples after every
// other split, and says how many faster ones it set back: vgg16's 1f1b plan is 64 microbatches of
// one sample; given BatchNorms, it is a split of 8 samples or more.
TEST(PlanReferee, TheSearchSetsBackMicrobatchesOfFewSamplesForBatchNorms) {
  std::string path = ::testing::TempDir() + "batch_norm_search_profile.json";
  std::string vgg = std::string(PT_SOURCE_DIR) + "/data/profiles/vgg16.json";
  json prof = parse_json(read_text_file(vgg), "vgg16.json");
  prof["batch_norms"] = 13;
  std::ofstream(path) << prof.dump();
  for (const std::string& profile : {vgg, path}) {
    auto planned = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --json --profile " + profile +
                                          " --workers 4 --bandwidth-gbps 10 --schedule 1f1b 2>&1 >/dev/null",
                                      false);
    ASSERT_EQ(planned.exit_code, 0) << planned.output;
    auto json_out = testing::shell_run(std::string(PT_BINARY_DIR) + "/pipetrain plan --json --profile " + profile +
                                           " --workers 4 --bandwidth-gbps 10 --schedule 1f1b 2>/dev/null",
                                       false);
    json doc = parse_json(json_out.output, "plan");
    const int64_t samples = doc["batch_size"].get<int64_t>() / doc["microbatches"].get<int64_t>();
    if (profile == vgg) {
      EXPECT_LT(samples, 8) << doc.dump();  // or this test shows nothing
      EXPECT_EQ(planned.output.find("BatchNorm"), std::string::npos) << planned.output;
    } else {
      EXPECT_GE(samples, 8) << doc.dump();
      EXPECT_NE(planned.output.find("faster configurations split the batch into microbatches of fewer than 8 samples, "
                                    "which vgg16's 13 BatchNorms would normalise over"),
                std::string::npos)
          << planned.output;
    }
  }
}

// pipedream's replicated stages step once a round with their gradients' mean (runtime/worker.h):
// the plan says on how many samples, and where every stage is replicated, what --schedule dp does
// instead. The staleness note cites the steps the time-to-accuracy objective weighs: it cited a
// run whose replicated stage summed its round (1-3 at 85.9%), the default until 2026-12-05.
TEST(PlanReferee, PipedreamsReplicaRoundsAndStalenessAreNoted) {
  std::string base = std::string(PT_BINARY_DIR) + "/pipetrain plan --profile " + PT_SOURCE_DIR + "/data/profiles/";
  auto dp = testing::shell_run(base + "resnet50.json --workers 4 --bandwidth-gbps 100");
  ASSERT_EQ(dp.exit_code, 0) << dp.output;
  ASSERT_NE(dp.output.find("1 stage, shape 4"), std::string::npos) << dp.output;
  EXPECT_NE(dp.output.find("under pipedream the stage's 4 replicas take a minibatch each and step once a round with "
                           "their gradients' mean, on 4 x 128 samples"),
            std::string::npos)
      << dp.output;
  EXPECT_NE(dp.output.find("with every stage replicated, a step trains on 512 samples or more, where `train "
                           "--schedule dp` splits each minibatch of 128"),
            std::string::npos)
      << dp.output;
  EXPECT_EQ(dp.output.find("staleness costs"), std::string::npos) << dp.output;
  auto mixed = testing::shell_run(base + "vgg16.json --workers 4,4 --bandwidth-gbps 96,10");
  ASSERT_EQ(mixed.exit_code, 0) << mixed.output;
  ASSERT_NE(mixed.output.find("shape 15-1"), std::string::npos) << mixed.output;
  EXPECT_NE(mixed.output.find("under pipedream a replicated stage's replicas take a minibatch each and step once a "
                              "round with their gradients' mean, on r x 64 samples"),
            std::string::npos)
      << mixed.output;
  EXPECT_EQ(mixed.output.find("with every stage replicated"), std::string::npos) << mixed.output;
  EXPECT_NE(mixed.output.find("staleness costs steps to an accuracy: mnist-cnn needed 1.00x one worker's steps where "
                              "its weights lagged 1 update, 1.44x where 3"),
            std::string::npos)
      << mixed.output;
}

// Past --time-limit the referee replays nothing more (the first candidate always), stops its
// local search, keeps the 25 MiB bucket, and the plan says so; with time, none of these notes.
TEST(PlanReferee, TheTimeLimitStopsTheRefereeAndThePlanSaysSo) {
  std::string file = ::testing::TempDir() + "time_limited_plan.json";
  std::string base = std::string(PT_BINARY_DIR) + "/pipetrain plan -o " + file + " --profile " + PT_SOURCE_DIR +
                     "/data/profiles/gnmt16.json --workers 4,4 --bandwidth-gbps 96,10";
  auto cut = testing::shell_run(base + " --time-limit 0.000001");
  ASSERT_EQ(cut.exit_code, 0) << cut.output;
  EXPECT_NE(cut.output.find("time limit: the simulator stopped refereeing at 1e-06 s of planning (--time-limit)"),
            std::string::npos) << cut.output;
  EXPECT_NE(cut.output.find("the plan is the best of the 1 that were"), std::string::npos) << cut.output;
  EXPECT_NE(cut.output.find("--time-limit left no time"), std::string::npos) << cut.output;
  json doc = parse_json(read_text_file(file), file);
  EXPECT_EQ(doc["bucket_mb"].get<double>(), 25.0);
  auto full = testing::shell_run(base);
  ASSERT_EQ(full.exit_code, 0) << full.output;
  EXPECT_EQ(full.output.find("time limit"), std::string::npos) << full.output;
  // The cut plan is a real candidate, never faster than the one refereed in full.
  json whole = parse_json(read_text_file(file), file);
  EXPECT_GE(doc["predicted"]["pipeline_ms_per_minibatch"].get<double>(),
            whole["predicted"]["pipeline_ms_per_minibatch"].get<double>() * (1 - 1e-9));
}

}  // namespace
}  // namespace pt
