// Bad plan, cluster and profile files (issue 7, item 4): each is a FormatError or ConfigError
// whose message names the file, the field and the offending value, never a narrowing to a
// wrong value or an allocation the file's numbers ask for.
#include <gtest/gtest.h>

#include "core/error.h"
#include "plan/cluster.h"
#include "plan/realised_cost.h"
#include "plan/plan.h"
#include "plan/planner.h"
#include "profile/pipedream_graph.h"

namespace pt::plan {
namespace {

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const InternalError& e) {
    return std::string("internal: ") + e.what();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string plan_error(const std::string& text) {
  return error_of([&] { plan_from_json(parse_json(text, "p.json"), "p.json"); });
}

std::string cluster_error(const std::string& text) {
  return error_of([&] { cluster_from_json(parse_json(text, "c.json"), "c.json"); });
}

std::string profile_error(const std::string& text, const std::string& source) {
  return error_of([&] { profile::parse_any_profile(text, source); });
}

TEST(BadPlanFile, NamesFieldAndValue) {
  const std::string head = R"({"format": "pipetrain.plan/1", )";
  EXPECT_EQ(plan_error(head + R"("workers": 4294967297, "stages": [{"layers": [0], "replicas": 1}]})"),
            "p.json: field 'workers' must be in 1..1000000, got 4294967297");
  EXPECT_EQ(plan_error(head + R"("workers": 1, "stages": [{"layers": [0], "replicas": -2}]})"),
            "p.json: field 'stages[0].replicas' must be in 1..1000000, got -2");
  EXPECT_EQ(plan_error(head + R"("workers": 1, "stages": [{"layers": [4294967296], "replicas": 1}]})"),
            "p.json: field 'stages[0].layers' has layer index 4294967296, too large");
  EXPECT_EQ(plan_error(head + R"("workers": 1, "stages": [{"layers": [-1], "replicas": 1}]})"),
            "p.json: field 'stages[0].layers' has a negative layer index -1");
  EXPECT_EQ(plan_error(head + R"("workers": 1, "stages": [{"layers": [], "replicas": 1}]})"),
            "p.json: field 'stages[0].layers' must hold at least one layer");
  // Another order than the profile's was simulated as written (2% apart) and refused by train's
  // workers only once training began.
  EXPECT_EQ(plan_error(head + R"("workers": 1, "stages": [{"layers": [1, 0], "replicas": 1}]})"),
            "p.json: field 'stages[0].layers' must list layers in ascending order, each once, got 1 then 0");
  EXPECT_EQ(plan_error(head + R"("workers": 1, "stages": [{"layers": [0, 0], "replicas": 1}]})"),
            "p.json: field 'stages[0].layers' must list layers in ascending order, each once, got 0 then 0");
  EXPECT_EQ(plan_error(head + R"("workers": 3, "stages": [{"layers": [0], "replicas": 1}, {"layers": [1], "replicas": 1}]})"),
            "p.json: field 'workers' is 3 but the stages' replicas add up to 2");
  EXPECT_EQ(plan_error(head + R"("workers": 2, "stages": [{"layers": [0], "replicas": 2, "workers": [1, 1]}]})"),
            "p.json: field 'stages[0].workers' has worker id 1 twice (a replica is a worker of its own)");
  // Stages share a worker under the schedule that places them (schedule/generator_util.h).
  const std::string shared = R"("stages": [{"layers": [0], "replicas": 1, "workers": [0]},
      {"layers": [1], "replicas": 1, "workers": [1]}, {"layers": [2], "replicas": 1, "workers": [0]}]})";
  EXPECT_EQ(plan_error(head + R"("workers": 2, )" + shared),
            "p.json: field 'stages[2].workers' has worker id 0 which stage 0 uses too: stages share a worker only "
            "under the schedule that places them (field 'schedule': interleaved, interleaved-zb or a V schedule)");
  EXPECT_EQ(plan_error(head + R"("workers": 3, "schedule": "zb-v", )" + shared),
            "p.json: field 'workers' is 3 but the stages are placed on 2 workers");
  EXPECT_EQ(plan_error(head + R"("workers": 2, "schedule": "zb-v", )" + shared), "(no error)");
  // Ids that give each stage a worker contradict a schedule that places several on each: 2 stages
  // on workers 0 and 1, interleaved over 2 chunks, ran on worker 0 alone, exit 0.
  const std::string own = R"("stages": [{"layers": [0], "replicas": 1, "workers": [0]},
      {"layers": [1], "replicas": 1, "workers": [1]}]})";
  EXPECT_EQ(plan_error(head + R"("workers": 2, "schedule": "interleaved", "chunks": 2, )" + own),
            "p.json: field 'stages' gives each of its 2 stages a worker of its own, but interleaved over 2 chunks runs "
            "2 on each (stage s on worker s mod 1): list each worker on its stages, as `pipetrain plan` writes them, "
            "or leave the workers out");
  // Chunks that do not divide the stages (it read "stage s on worker s mod 0").
  EXPECT_EQ(plan_error(head + R"("workers": 2, "schedule": "interleaved", "chunks": 3, )" + own),
            "p.json: field 'stages' gives each of its 2 stages a worker of its own, but interleaved over 3 chunks runs "
            "3 on each worker, and 2 stages are no whole number of chunks a worker: list each worker on its stages, "
            "as `pipetrain plan` writes them, or leave the workers out");
  EXPECT_NE(plan_error(head + R"("workers": 2, "schedule": "dualpipev", )" + own)
                .find("but dualpipev runs two stages on each worker (in a V)"),
            std::string::npos);
  EXPECT_EQ(plan_error(head + R"("workers": 2, "schedule": "interleaved", "chunks": 1, )" + own), "(no error)");
  EXPECT_EQ(plan_error(head + R"("workers": 2, "stages": [{"layers": [0], "replicas": 2, "workers": [0, 7]}]})"),
            "p.json: field 'stages[0].workers' has worker id 7 which is out of range 0..1");
  EXPECT_EQ(plan_error(head + R"("workers": 1, "stages": [{"layers": [0], "replicas": 1, "compute_ms": 1e999}]})"),
            "p.json: not valid JSON (number overflow parsing '1e999')");
  EXPECT_EQ(plan_error(head + R"("workers": 1, "stages": [{"layers": [0], "replicas": 1, "in_flight": 0}]})"),
            "p.json: field 'stages[0].in_flight' must be in 1..4096, got 0");
  // An empty schedule ran the default (1f1b) in place of the plan's.
  EXPECT_EQ(plan_error(head + R"("workers": 1, "schedule": "", "stages": [{"layers": [0], "replicas": 1}]})"),
            "p.json: field 'schedule' must name a schedule, or be left out");
  // Data parallelism over several stages: train's refusal named a --schedule dp never given.
  EXPECT_EQ(plan_error(head + R"("workers": 2, "schedule": "dp", "stages": [{"layers": [0], "replicas": 1}, )" +
                       R"({"layers": [1], "replicas": 1}]})"),
            "p.json: field 'schedule' is dp, which runs one stage on every worker, but the plan has 2 stages: name a "
            "pipeline schedule, or leave it out");
  // PipeDream runs each minibatch whole: the plan's 4 microbatches were ignored without a word.
  EXPECT_EQ(plan_error(head + R"("workers": 1, "schedule": "pipedream", "microbatches": 4, "stages": [{"layers": [0], "replicas": 1}]})"),
            "p.json: field 'microbatches' is 4 but the pipedream schedule runs each minibatch whole: leave it out, or "
            "name a schedule that splits it");
  EXPECT_EQ(plan_error(head + R"("workers": 1, "schedule": "1f1b", "chunks": 3, "stages": [{"layers": [0], "replicas": 1}]})"),
            "p.json: field 'chunks' is 3 but the 1f1b schedule runs one chunk a stage (chunks are for interleaved and "
            "interleaved-zb)");
  EXPECT_EQ(plan_from_json(parse_json(head + R"("workers": 1, "schedule": "pipedream", "microbatches": 1, "stages": [{"layers": [0], "replicas": 1}]})",
                                      "p.json"),
                           "p.json")
                .microbatches,
            1);
  EXPECT_EQ(plan_from_json(parse_json(head + R"("workers": 1, "stages": [{"layers": [0], "replicas": 1, "in_flight": 3}]})",
                                      "p.json"),
                           "p.json")
                .stages[0]
                .in_flight,
            3);
  // A misspelled optional field is named with the field it was likely meant to be, not ignored
  // (a "shedule" ran the default schedule, a "recomputed" stage stored every activation).
  EXPECT_EQ(plan_error(head + R"("workers": 1, "shedule": "gpipe", "stages": [{"layers": [0], "replicas": 1}]})"),
            "p.json: unknown field 'shedule' in the top level; did you mean 'schedule'?");
  EXPECT_EQ(plan_error(head + R"("workers": 1, "stages": [{"layers": [0], "replicas": 1, "recomputed": true}]})"),
            "p.json: unknown field 'recomputed' in 'stages[0]'; did you mean 'recompute'?");
  EXPECT_EQ(plan_error(head + R"("workers": 1, "zzz": 1, "stages": [{"layers": [0], "replicas": 1}]})")
                .rfind("p.json: unknown field 'zzz' in the top level (known: format, workers, stages", 0),
            0u);
  EXPECT_EQ(plan_error(R"({"format": "pipetrain.plan/2"})"),
            "p.json: field 'format' is \"pipetrain.plan/2\", expected \"pipetrain.plan/1\"");
  EXPECT_EQ(plan_error(R"({"format": "pipetrain.plan/1", "workers": 1, "stages": [{"layers": )"),
            "p.json: not valid JSON (byte 68)");
}

// Data parallelism that does not fit (`plan --memory`) is written null, not 0 ms (instant), and
// read back as not known.
TEST(PlanFile, DataParallelismThatDoesNotFitIsNull) {
  Plan p = plan_from_json(parse_json(R"({"format": "pipetrain.plan/1", "workers": 1, "stages": [{"layers": [0], "replicas": 1}],
                                         "predicted": {"pipeline_ms_per_minibatch": 2.5, "data_parallel_ms_per_minibatch": null}})",
                                     "p.json"),
                          "p.json");
  EXPECT_EQ(p.data_parallel_ms_per_minibatch, 0);
  EXPECT_TRUE(to_json(p)["predicted"]["data_parallel_ms_per_minibatch"].is_null());
  p.data_parallel_ms_per_minibatch = 3.5;
  EXPECT_EQ(to_json(p)["predicted"]["data_parallel_ms_per_minibatch"].get<double>(), 3.5);
}

// The memory cap a plan was made for goes to the file and back; absent is none, and a cap of
// no bytes is refused by name.
TEST(PlanFile, TheMemoryCapItWasPlannedForRoundTrips) {
  const std::string head = R"({"format": "pipetrain.plan/1", "workers": 1, "stages": [{"layers": [0], "replicas": 1}])";
  Plan p = plan_from_json(parse_json(head + "}", "p.json"), "p.json");
  EXPECT_EQ(p.memory_cap_bytes, 0);
  EXPECT_FALSE(to_json(p).contains("memory_cap_bytes"));
  p.memory_cap_bytes = 241172480;
  p.memory_cap_process_bytes = 104857600;
  Plan back = plan_from_json(to_json(p), "p.json");
  EXPECT_EQ(back.memory_cap_bytes, 241172480);
  EXPECT_EQ(back.memory_cap_process_bytes, 104857600);
  EXPECT_EQ(plan_error(head + R"(, "memory_cap_bytes": 0})"), "p.json: field 'memory_cap_bytes' must be >= 1, got 0");
  EXPECT_EQ(plan_error(head + R"(, "memory_cap_process_bytes": 5})"),
            "p.json: field 'memory_cap_process_bytes' is a share of memory_cap_bytes, which is absent");
  EXPECT_NE(plan_error(head + R"(, "memory_cap_bytes": 100, "memory_cap_process_bytes": 100})")
                .find("field 'memory_cap_process_bytes' must be in"),
            std::string::npos);
}

// A plan records the precision and optimizer of the profile it was planned from: a bf16 AdamW
// plan trained in fp32 with SGD said nothing, where the same profile given as --profile did.
TEST(PlanFile, ThePrecisionAndOptimizerItWasPlannedForRoundTrip) {
  const std::string head = R"({"format": "pipetrain.plan/1", "workers": 1, "stages": [{"layers": [0], "replicas": 1}])";
  Plan p = plan_from_json(parse_json(head + "}", "p.json"), "p.json");
  EXPECT_EQ(p.precision, "");
  EXPECT_FALSE(to_json(p).contains("precision"));
  p.precision = "bf16", p.optimizer = "adamw";
  Plan back = plan_from_json(to_json(p), "p.json");
  EXPECT_EQ(back.precision, "bf16");
  EXPECT_EQ(back.optimizer, "adamw");
  EXPECT_EQ(plan_error(head + R"(, "precision": "fp16"})"), "p.json: field 'precision' must be fp32 or bf16, got 'fp16'");
  EXPECT_EQ(plan_error(head + R"(, "optimizer": "lamb"})"), "p.json: field 'optimizer' must be sgd, adam or adamw, got 'lamb'");
}

// The planner's compute order (Plan::order) round-trips; its actions are the schedule's to check
// (schedule/given_order.h), and an order with no schedule to order is refused here.
TEST(PlanFile, TheOrderItWasPlannedWithRoundTrips) {
  const std::string head = R"({"format": "pipetrain.plan/1", "workers": 1, "stages": [{"layers": [0], "replicas": 1}])";
  Plan p = plan_from_json(parse_json(head + "}", "p.json"), "p.json");
  EXPECT_FALSE(to_json(p).contains("order"));
  p.schedule = "zb-h1", p.order = {"0F0 0B0 0W0"};
  Plan back = plan_from_json(to_json(p), "p.json");
  EXPECT_EQ(back.order, p.order);
  EXPECT_EQ(plan_error(head + R"(, "order": ["0F0 0B0 0W0"]})"),
            "p.json: field 'order' orders a schedule, but the plan names none (field 'schedule')");
  EXPECT_EQ(plan_error(head + R"(, "schedule": "zb-h1", "order": []})"),
            "p.json: field 'order' must list 1..1000000 workers' orders, got 0");
  EXPECT_NE(plan_error(head + R"(, "schedule": "zb-h1", "order": [3]})").find("p.json: field 'order[0]'"),
            std::string::npos);
}

TEST(BadPlanFile, MoreStagesThanLayersNamesBoth) {
  profile::Profile prof;
  prof.model = "tiny";
  for (int i = 0; i < 3; ++i) prof.layers.push_back({str("l", i), 1, 1, 0, 0, i ? std::vector<int>{i - 1} : std::vector<int>{}});
  Plan p = plan_from_json(parse_json(R"({"format": "pipetrain.plan/1", "workers": 4, "stages": [
      {"layers": [0], "replicas": 1}, {"layers": [1], "replicas": 1}, {"layers": [2], "replicas": 1},
      {"layers": [3], "replicas": 1}]})", "p.json"), "p.json");
  EXPECT_EQ(error_of([&] { check_plan_fits(p, prof, "p.json"); }),
            "p.json: stage 3 holds layer 3 but the profile of 'tiny' has 3 layers (0..2)");
}

TEST(BadClusterFile, NamesFieldAndValue) {
  const std::string head = R"({"format": "pipetrain.cluster/1", "levels": )";
  EXPECT_EQ(cluster_error(head + R"([{"fan_out": 4294967297, "bandwidth_gbps": 1}]})"),
            "c.json: field 'levels[0].fan_out' must be in 1..1000000, got 4294967297");
  EXPECT_EQ(cluster_error(head + R"([{"fan_out": 0, "bandwidth_gbps": 1}]})"),
            "c.json: field 'levels[0].fan_out' must be in 1..1000000, got 0");
  EXPECT_EQ(cluster_error(head + R"([{"fan_out": 1000, "bandwidth_gbps": 1}, {"fan_out": 1001, "bandwidth_gbps": 1}]})"),
            "c.json: 1.001e+06 workers is more than pipetrain supports (1000000)");
  EXPECT_EQ(cluster_error(head + R"([{"fan_out": 2, "bandwidth_gbps": -10}]})"),
            "c.json: field 'levels[0].bandwidth_gbps' must be in 1e-06..1e+09 Gbit/s, got -10");
  EXPECT_EQ(cluster_error(head + R"([{"fan_out": 2, "bandwidth_gbps": 1e-300}]})"),
            "c.json: field 'levels[0].bandwidth_gbps' must be in 1e-06..1e+09 Gbit/s, got 1e-300");
  EXPECT_EQ(cluster_error(head + R"([]})"), "c.json: field 'levels' must list at least one level");
  EXPECT_EQ(cluster_error(head + R"([{"fan_out": 2, "bandwidth_gbps": 1}], "memory_bytes_per_worker": -1})"),
            "c.json: field 'memory_bytes_per_worker' must be >= 0, got -1");
  EXPECT_EQ(cluster_error(head + R"([{"fan_out": 2, "bandwidth_gbps": 1}], "allreduce": "tree"})"),
            "c.json: field 'allreduce' must be \"ring\" or \"hierarchical\", got \"tree\"");
  // And a good one round-trips.
  Cluster c = cluster_from_json(parse_json(head + R"([{"fan_out": 2, "bandwidth_gbps": 1}], "allreduce": "hierarchical"})",
                                           "c.json"),
                                "c.json");
  EXPECT_EQ(c.allreduce, Cluster::Allreduce::kHierarchical);
  EXPECT_EQ(cluster_from_json(to_json(c), "again").allreduce, Cluster::Allreduce::kHierarchical);
  // A latency per message (issue 33): bounded, named, and round-tripped.
  EXPECT_EQ(cluster_error(head + R"([{"fan_out": 2, "bandwidth_gbps": 1, "latency_us": -3}]})"),
            "c.json: field 'levels[0].latency_us' must be in 0..1e7 microseconds, got -3");
  EXPECT_EQ(cluster_error(head + R"([{"fan_out": 2, "bandwidth_gbps": 1, "latency_us": "fast"}]})").rfind(
                "c.json: field 'levels[0].latency_us'", 0),
            0u);
  Cluster timed = cluster_from_json(
      parse_json(head + R"([{"fan_out": 2, "bandwidth_gbps": 96, "latency_us": 12.5}, {"fan_out": 2, "bandwidth_gbps": 10}]})",
                 "c.json"),
      "c.json");
  Cluster again = cluster_from_json(to_json(timed), "again");
  // A typo is not a latency of 0.
  EXPECT_EQ(cluster_error(head + R"([{"fan_out": 2, "bandwidth_gbps": 1, "latency_usec": 500}]})"),
            "c.json: unknown field 'latency_usec' in 'levels[0]'; did you mean 'latency_us'?");
  EXPECT_EQ(cluster_error(head + R"([{"fan_out": 2, "bandwidth_gbps": 1}], "action_usec": 20})"),
            "c.json: unknown field 'action_usec' in the top level; did you mean 'action_us'?");
  EXPECT_EQ(again.levels[0].latency_us, 12.5);
  EXPECT_EQ(again.levels[1].latency_us, 0);
  EXPECT_NE(again.describe().find("96 Gbps 12.5 us"), std::string::npos) << again.describe();
  // What a worker process holds besides its tensors (calibrate): bounded, round-tripped, and
  // taken off a memory cap, which bounds the process's peak RSS.
  EXPECT_EQ(cluster_error(head + R"([{"fan_out": 2, "bandwidth_gbps": 1}], "process_bytes": -5})"),
            "c.json: field 'process_bytes' must be in 0..1125899906842624, got -5");
  EXPECT_EQ(cluster_error(head + R"([{"name": "", "fan_out": 2, "bandwidth_gbps": 1}]})"),
            "c.json: field 'levels[0].name' must name the level (a blank read \"2x2 ( 10 Gbps\"), or be left out");
  EXPECT_EQ(cluster_error(head + R"([{"fan_out": 2, "bandwidth_gbps": 1}], "core_rates": [1, 0]})"),
            "c.json: field 'core_rates[1]' must be a rate in (0, 1] of one compute alone, got 0");
  EXPECT_EQ(cluster_error(head + R"([{"fan_out": 2, "bandwidth_gbps": 1}], "core_rates": [1, 1.9]})"),
            "c.json: field 'core_rates[1]' must be a rate in (0, 1] of one compute alone, got 1.9 (calibrate caps its "
            "medians at 1: calibrate again, or write 1)");
  EXPECT_EQ(cluster_error(head + R"([{"fan_out": 2, "bandwidth_gbps": 1}], "core_rates": [0.5, 0.4]})"),
            "c.json: field 'core_rates[0]' must be 1: the rate of one compute alone against itself, got 0.5");
  {
    plan::Cluster c = plan::cluster_from_json(
        parse_json(head + R"([{"fan_out": 2, "bandwidth_gbps": 1}], "core_rates": [1, 0.9]})", "c.json"), "c.json");
    EXPECT_EQ(c.core_rates, (std::vector<double>{1, 0.9}));
    EXPECT_EQ(plan::cluster_from_json(plan::to_json(c), "d.json").core_rates, c.core_rates);
    EXPECT_DOUBLE_EQ(c.core_rate(2, 2), 0.9);
    EXPECT_DOUBLE_EQ(c.core_rate(3, 2), 0.6);  // past the measured: 0.9 x 2 / 3
    // A list shorter than the cores keeps its last rate while the cores go round, then shares it
    // (a hand-edited [1] on 2 cores halved 2 workers' rate).
    c.core_rates = {1};
    EXPECT_DOUBLE_EQ(c.core_rate(2, 2), 1);
    EXPECT_DOUBLE_EQ(c.core_rate(4, 2), 0.5);
    // Measured on the host's 2 cores, the rates say nothing of 4 (simulate --cores 4 ran 2
    // workers at 0.9 and 4 at 0.45, as on 2).
    c.core_rates = {1, 0.9}, c.host_cores = 2;
    EXPECT_DOUBLE_EQ(c.core_rate(2, 2), 0.9);
    EXPECT_DOUBLE_EQ(c.core_rate(2, 4), 1);
    EXPECT_DOUBLE_EQ(c.core_rate(4, 4), 1);
    c.core_rates.clear();
    EXPECT_DOUBLE_EQ(c.core_rate(3, 2), 2.0 / 3);  // unmeasured: time-slicing alone
  }
  // What one core gives the workers pinned to it together (calibrate): a share in (0, 1],
  // round-tripped, 1 when absent.
  EXPECT_EQ(cluster_error(head + R"([{"fan_out": 2, "bandwidth_gbps": 1}], "core_share": 1.5})"),
            "c.json: field 'core_share' must be a share in (0, 1] of one core alone, got 1.5");
  EXPECT_EQ(cluster_error(head + R"([{"fan_out": 2, "bandwidth_gbps": 1}], "core_share": 0})"),
            "c.json: field 'core_share' must be a share in (0, 1] of one core alone, got 0");
  {
    plan::Cluster c = plan::cluster_from_json(
        parse_json(head + R"([{"fan_out": 2, "bandwidth_gbps": 1}], "core_share": 0.89})", "c.json"), "c.json");
    EXPECT_DOUBLE_EQ(c.core_share, 0.89);
    EXPECT_DOUBLE_EQ(plan::cluster_from_json(plan::to_json(c), "d.json").core_share, 0.89);
    EXPECT_DOUBLE_EQ(plan::Cluster::flat(2, 1).core_share, 1);
  }
  // Workers sharing one host's cores (calibrate on one machine): bounded and round-tripped.
  EXPECT_EQ(cluster_error(head + R"([{"fan_out": 2, "bandwidth_gbps": 1}], "host_cores": -2})"),
            "c.json: field 'host_cores' must be in 0..1000000, got -2");
  EXPECT_EQ(cluster_from_json(to_json(cluster_from_json(parse_json(head + R"([{"fan_out": 2, "bandwidth_gbps": 1}], "host_cores": 2})",
                                                                   "c.json"),
                                                        "c.json")),
                              "d.json")
                .host_cores,
            2);
  Cluster measured = cluster_from_json(
      parse_json(head + R"([{"fan_out": 2, "bandwidth_gbps": 1}], "process_bytes": 100000000, "memory_bytes_per_worker": 1000000000})",
                 "c.json"),
      "c.json");
  EXPECT_EQ(cluster_from_json(to_json(measured), "again").process_bytes, 100000000);
  PlanOptions none;
  EXPECT_EQ(memory_limit(measured, none), 900000000);
  PlanOptions cap;
  cap.memory_bytes = 50000000;  // below the process itself: nothing fits, and it is said
  EXPECT_EQ(error_of([&] { memory_limit(measured, cap); }),
            "--memory 47.7 MiB is no more than the 95.4 MiB a worker process holds besides its tensors (the cluster's "
            "process_bytes, as calibrate measured it): no plan fits");
  measured.memory_bytes_per_worker = 0;
  EXPECT_EQ(memory_limit(measured, none), 0);  // no cap
  // A file's own memory the process alone fills is refused naming the file (plan named neither)
  // where it is the cap: --memory overrides it, and simulate and train do not plan under it.
  Cluster small = cluster_from_json(
      parse_json(head + R"([{"fan_out": 2, "bandwidth_gbps": 1}], "process_bytes": 100000000, "memory_bytes_per_worker": 90000000})",
                 "c.json"),
      "c.json");
  EXPECT_EQ(error_of([&] { memory_limit(small, none); }),
            "c.json: field 'memory_bytes_per_worker' 85.8 MiB is no more than the 95.4 MiB a worker process holds besides its "
            "tensors (the cluster's process_bytes, as calibrate measured it): no plan fits");
  PlanOptions more;
  more.memory_bytes = 200000000;
  EXPECT_EQ(memory_limit(small, more), 100000000);
}

TEST(BadClusterShorthand, NamesFlagAndValue) {
  EXPECT_EQ(error_of([] { cluster_from_shorthand("0", "1"); }), "--workers: level 0 fan-out must be in 1..100000, got 0");
  EXPECT_EQ(error_of([] { cluster_from_shorthand("-4", "1"); }), "--workers: level 0 fan-out must be in 1..100000, got -4");
  EXPECT_EQ(error_of([] { cluster_from_shorthand("1000,1001", "1,1"); }),
            "--workers: 1.001e+06 workers is more than pipetrain supports (1000000)");
  EXPECT_THROW(cluster_from_shorthand("1000,1001", "1,1"), UsageError);  // a flag's error: exit 2, not 1
  EXPECT_EQ(error_of([] { cluster_from_shorthand("4", "0"); }), "--bandwidth-gbps: level 0 must be in 1e-06..1e+09 Gbit/s, got 0");
  EXPECT_EQ(error_of([] { cluster_from_shorthand("4", "1e-300"); }),
            "--bandwidth-gbps: level 0 must be in 1e-06..1e+09 Gbit/s, got 1e-300");
  EXPECT_EQ(error_of([] { cluster_from_shorthand("4,4", "1"); }),
            "--workers '4,4' has 2 levels but --bandwidth-gbps '1' has 1");
  EXPECT_EQ(error_of([] { cluster_from_flags({"", "4,4", "96,10", "", "5", ""}); }),
            "--latency-us '5' has 1 levels but the cluster has 2");
  EXPECT_EQ(error_of([] { cluster_from_flags({"", "4", "10", "", "-1", ""}); }),
            "--latency-us: level 0 must be in 0..1e7 microseconds, got -1");
  EXPECT_EQ(cluster_from_flags({"", "4,4", "96,10", "", "5,40", ""}).levels[1].latency_us, 40);
  EXPECT_EQ(error_of([] { cluster_from_flags({"", "4", "10", "", "", "nan"}); }),
            "--action-us: 'nan' in 'nan' is not a number");
  for (const char* bad : {"-1", "1e8", "5,5"})
    EXPECT_EQ(error_of([bad] { cluster_from_flags({"", "4", "10", "", "", bad}); }),
              str("--action-us: must be one number in 0..1e7 microseconds, got '", bad, "'"))
        << bad;
  Cluster host = cluster_from_flags({"", "4", "10", "", "", "25"});
  EXPECT_EQ(host.action_us, 25);
  EXPECT_NE(host.describe().find("25 us per action"), std::string::npos) << host.describe();
}

TEST(BadProfileFile, GraphTxtAndJsonFiguresNameLineFieldAndValue) {
  auto line = [](const std::string& name, const std::string& act) {
    return "a -- " + name + " -- forward_compute_time=1, backward_compute_time=1, activation_size=" + act +
           ", parameter_size=1\n";
  };
  EXPECT_EQ(profile_error(line("A", "1e300"), "g.txt"),
            "g.txt line 1 activation_size: 1e+300 bytes is more than pipetrain accepts for one layer (1125899906842624)");
  EXPECT_EQ(profile_error(line("A\xb0", "1"), "g.txt"), "g.txt line 1: the description is not valid UTF-8");
  EXPECT_EQ(profile_error(line("A", "-5"), "g.txt"), "g.txt line 1 activation_size: must be >= 0, got -5");
  EXPECT_EQ(profile_error("", "g.txt"),
            "g.txt: is empty (a profile is pipetrain's JSON, PipeDream's JSON figures or a graph.txt)");
  // A field given twice was read as its last value.
  EXPECT_EQ(profile_error("a -- A -- forward_compute_time=1, backward_compute_time=1, activation_size=1, "
                          "parameter_size=1, forward_compute_time=99999\n",
                          "g.txt"),
            "g.txt line 1: field 'forward_compute_time' is given twice");
  EXPECT_EQ(profile_error(R"({"layers": [{"id": "a", "forward_ms": 1, "backward_ms": 1, "activation_bytes_list": [1e300],
      "parameter_bytes": 1}], "edges": []})", "f.json"),
            "f.json: field 'layers[0].activation_bytes_list': 1e+300 bytes is more than pipetrain accepts for one layer "
            "(1125899906842624)");
  // A profile of its Input alone is named where it is read (plan said "profile of 'pipedream' has
  // no layer to plan", simulate that 4 microbatches do not divide a batch of 1, compare printed rows).
  EXPECT_EQ(profile_error(R"({"layers": [{"id": "n1", "name": "Input", "forward_ms": 1, "backward_ms": 0,
      "activation_bytes": 10, "parameter_bytes": 0}], "edges": []})", "f.json"),
            "f.json: no layer besides its Input source(s) (and unread outputs): nothing to train or plan; a profile "
            "of the whole model has them");
  // A JSON array is JSON, not a graph.txt line it was parsed as.
  EXPECT_EQ(profile_error("[]", "f.json").rfind("f.json: a JSON document that is neither a pipetrain profile", 0), 0u);
  // A layer's outputs and their sum beside them must agree: [1, 2] beside 9437184 planned on 3 bytes.
  EXPECT_EQ(profile_error(R"({"layers": [{"id": "a", "forward_ms": 1, "backward_ms": 1, "activation_bytes_list": [1, 2],
      "activation_bytes": 9437184, "parameter_bytes": 1}], "edges": []})", "f.json"),
            "f.json: field 'layers[0].activation_bytes_list' sums to 3 bytes, but field 'activation_bytes' beside it is "
            "9437184 (the list is the layer's outputs, their sum its bytes)");
  EXPECT_EQ(profile_error(R"({"format": "pipetrain.profile/1", "model": "m", "batch_size": 1, "layers": [{"name": "a",
      "forward_ms": 1, "backward_ms": 1, "activation_bytes": 2e15, "parameter_bytes": 1}]})", "p.json"),
            "p.json: field 'layers[0].activation_bytes' must be in 0..1125899906842624, got 2000000000000000");
  EXPECT_EQ(profile_error(R"({"format": "pipetrain.profile/1", "model": "m", "batch_size": 1, "layers": [{"name": "a",
      "forward_ms": 1, "backward_ms": 1, "activation_bytes": 1, "parameter_bytes": 1e18}]})", "p.json"),
            "p.json: field 'layers[0].parameter_bytes' must be a whole number of magnitude at most 9e15, got 1e+18");
  EXPECT_EQ(profile_error(R"({"format": "pipetrain.profile/1", "batch_size": 1e400})", "p.json"),
            "p.json: not valid JSON (number overflow parsing '1e400')");
  EXPECT_EQ(profile_error(R"({"something": "else"})", "x.json"),
            "x.json: a JSON document that is neither a pipetrain profile (no \"format\") nor PipeDream's JSON figures "
            "(no \"layers\" and \"edges\")");
}

// Limits (issue 17, item 7): a layer's time, the number of layers, the size of a file and the
// workers of a plan are bounded with an error that names them, before the work they would cost.
TEST(BadProfileFile, LimitsAreNamed) {
  EXPECT_EQ(profile_error(R"({"format": "pipetrain.profile/1", "model": "m", "batch_size": 1, "layers": [{"name": "a",
      "forward_ms": 1e308, "backward_ms": 1, "activation_bytes": 1, "parameter_bytes": 1}]})", "p.json"),
            "p.json: field 'layers[0].forward_ms': 1e+308 ms, more than the 1e+09 ms pipetrain accepts for one layer");
  EXPECT_EQ(profile_error("a -- A -- forward_compute_time=1, backward_compute_time=2e9, activation_size=1, "
                          "parameter_size=1\n", "g.txt"),
            "g.txt: layer 'a' backward time: 2e+09 ms, more than the 1e+09 ms pipetrain accepts for one layer");
  std::string many = R"({"format": "pipetrain.profile/1", "model": "m", "batch_size": 1, "layers": [)";
  for (int i = 0; i <= profile::kMaxLayers; ++i)
    many += std::string(i ? "," : "") + R"({"name":"l","forward_ms":1,"backward_ms":1,"activation_bytes":1,"parameter_bytes":1})";
  EXPECT_EQ(profile_error(many + "]}", "many.json"),
            "many.json: field 'layers': 100001 layers, more than the 100000 pipetrain accepts");
  EXPECT_EQ(error_of([] { profile::read_any_profile("/dev/zero"); }),
            "/dev/zero: more than the 16.0 MiB pipetrain reads from a profile file (raise it with --max-input "
            "profile=SIZE)");
  profile::Profile two;
  two.model = "two";
  two.layers = {{"a", 1, 1, 1, 1, {}}, {"b", 1, 1, 1, 1, {0}}};
  EXPECT_EQ(error_of([&] { make_plan(two, Cluster::flat(2048, 10), {}); }),
            "the cluster 2048 (network 10 Gbps) has 2048 workers; the planner handles at most 1024 (its search grows "
            "with the square of the workers)");
  Cluster wide = cluster_from_json(parse_json(R"({"format": "pipetrain.cluster/1", "levels": [{"fan_out": 4, )"
                                              R"("bandwidth_gbps": 96}, {"fan_out": 512, "bandwidth_gbps": 10}]})",
                                              "wide.json"), "wide.json");
  EXPECT_EQ(error_of([&] { make_plan(two, wide, {}); }),
            "the cluster 4x512 (level0 96 Gbps, level1 10 Gbps) of 'wide.json' has 2048 workers; the planner handles "
            "at most 1024 (its search grows with the square of the workers)");
}

// A profile that times no layer plans and simulates at 0 ms per minibatch (`plan` chose one
// worker, `simulate` printed 0 samples/s): what times a profile refuses it, naming the file.
TEST(BadProfileFile, OneThatTimesNoLayerIsRefused) {
  profile::Profile zero;
  zero.model = "zero";
  zero.layers = {{"a", 0, 0, 1, 1, {}}, {"b", 0, 0, 1, 1, {0}}};
  EXPECT_EQ(error_of([&] { profile::require_timed(zero, "z.json"); }),
            "z.json: every layer's forward_ms and backward_ms is 0 (2 layers): a profile to plan, simulate or train by "
            "times at least one layer");
  zero.layers[1].backward_ms = 0.5;
  EXPECT_EQ(error_of([&] { profile::require_timed(zero, "z.json"); }), "(no error)");
}

// The pipetrain search's work is bounded for any number of layers: a long chain is planned as
// blocks of consecutive layers of about equal compute, and says so.
TEST(LongChains, AreCoarsenedIntoBlocks) {
  profile::Profile p;
  p.model = "chain";
  p.batch_size = 1;
  for (int i = 0; i < 20000; ++i)
    p.layers.push_back({str("l", i), 1, 2, 1000, 1000, i ? std::vector<int>{i - 1} : std::vector<int>{}});
  Plan plan = make_plan(p, Cluster::flat(16, 10), {});
  std::string notes;
  for (const auto& n : plan.notes) notes += n + "\n";
  EXPECT_NE(notes.find("blocks of consecutive layers"), std::string::npos) << notes;
  int covered = 0;
  for (const auto& st : plan.stages) covered += static_cast<int>(st.layers.size());
  EXPECT_EQ(covered, 20000);
  // Balanced to within a block: 16 workers, 60000 ms of compute.
  EXPECT_LT(plan.pipeline_ms_per_minibatch, 60000.0 / 16 * 1.05);
}

TEST(BadProfileFile, DeeplyNestedValuesAreNamedNotRecursedInto) {
  // A million nested lists where a string belongs: the error message must not dump it.
  std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  std::string e = profile_error(R"({"format": )" + deep + "}", "deep.json");
  EXPECT_EQ(e.rfind("deep.json: field 'format' must be a string, got [[[[", 0), 0u) << e.substr(0, 200);
  EXPECT_LT(e.size(), 200u);
}

}  // namespace
}  // namespace pt::plan
