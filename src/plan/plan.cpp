#include "plan/plan.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/input_limits.h"
#include "plan/cluster.h"

namespace pt::plan {

int Plan::stage_of_worker(int worker) const {
  for (int s = 0; s < num_stages(); ++s)
    for (int w : stages[s].workers)
      if (w == worker) return s;
  return -1;
}

int Plan::replica_index(int worker) const {
  for (const auto& st : stages)
    for (int r = 0; r < static_cast<int>(st.workers.size()); ++r)
      if (st.workers[r] == worker) return r;
  return -1;
}

std::string Plan::shape() const {
  std::ostringstream os;
  for (int s = 0; s < num_stages(); ++s) os << (s ? "-" : "") << stages[s].replicas;
  return os.str();
}

std::string Plan::split() const {
  std::string layers;
  for (const auto& st : stages)
    layers += str(layers.empty() ? "" : " | ", st.layers.front(), st.layers.size() > 1 ? str("-", st.layers.back()) : std::string());
  return layers;
}

namespace {
// PipeDream's NOAM from the workers of stage s and the stages after it and s's replicas.
int noam(int downstream, int r) { return std::max(1, (downstream + r - 1) / r); }
}  // namespace

int paper_in_flight(const std::vector<int>& replicas, int s) {
  int downstream = 0;
  for (size_t t = s; t < replicas.size(); ++t) downstream += replicas[t];
  return noam(downstream, replicas[s]);
}

int in_flight(const Plan& p, int s) {
  if (p.stages[s].in_flight > 0) return p.stages[s].in_flight;
  int downstream = 0;  // called per stage of every plan evaluated: no copy of the counts
  for (size_t t = s; t < p.stages.size(); ++t) downstream += p.stages[t].replicas;
  return noam(downstream, p.stages[s].replicas);
}

int pipedream_weight_versions(const Plan& p, int s, bool deferred_step) {
  return in_flight(p, s) + (deferred_step && s == 0 && p.stages[s].replicas > 1 ? 1 : 0);
}

int least_in_flight(const std::vector<int>& replicas, int s, int next) {
  int r = replicas[s];
  return ((next - 1) * replicas[s + 1] + r - 1) / r + 1;
}

void assign_workers(Plan& p) {
  int next = 0;
  for (auto& st : p.stages) {
    st.workers.clear();
    for (int r = 0; r < st.replicas; ++r) st.workers.push_back(next++);
  }
  p.workers = next;
}

Plan data_parallel_plan(int layers, int replicas) {
  Plan p;
  p.stages.resize(1);
  for (int i = 0; i < layers; ++i) p.stages[0].layers.push_back(i);
  p.stages[0].replicas = replicas;
  assign_workers(p);
  return p;
}

json to_json(const Plan& p) {
  // A plan read with its stages sharing workers is written as read (plan_from_json numbers its
  // stages a worker each and keeps the placement aside): the gloo launcher hands each worker the
  // plan so, and every interleaved and V plan file was refused by the workers it started.
  const bool shared = !p.shared_workers.empty();
  std::set<int> placed;
  for (const auto& on : p.shared_workers) placed.insert(on.begin(), on.end());
  json stages = json::array();
  for (size_t s = 0; s < p.stages.size(); ++s) {
    const Stage& st = p.stages[s];
    stages.push_back({{"layers", st.layers},
                      {"replicas", st.replicas},
                      {"workers", shared ? p.shared_workers[s] : st.workers},
                      {"compute_ms", st.compute_ms},
                      {"comm_ms", st.comm_ms}});
    if (st.time_ms > 0) stages.back()["time_ms"] = st.time_ms;
    if (st.recompute) stages.back()["recompute"] = true;
    if (st.in_flight > 0) stages.back()["in_flight"] = st.in_flight;
  }
  json doc = {{"format", format_tag("plan", kPlanVersion)},
              {"workers", shared ? static_cast<int>(placed.size()) : p.workers},
              {"stages", stages},
              {"predicted",
               {{"pipeline_ms_per_minibatch", p.pipeline_ms_per_minibatch},
                // null where one worker cannot hold the model (`plan --memory`): 0 read as instant
                {"data_parallel_ms_per_minibatch",
                 p.data_parallel_ms_per_minibatch > 0 ? json(p.data_parallel_ms_per_minibatch) : json(nullptr)}}}};
  if (p.simulated_ms_per_minibatch > 0) {
    doc["predicted"]["simulated_ms_per_minibatch"] = p.simulated_ms_per_minibatch;
    doc["predicted"]["simulated_schedule"] = p.simulated_schedule;
  }
  if (!p.model.empty()) doc["model"] = p.model;
  if (!p.ties.empty()) doc["ties"] = p.ties;
  if (p.batch_size > 0) doc["batch_size"] = p.batch_size;
  if (!p.cost_model.empty()) doc["cost_model"] = p.cost_model;
  if (!p.schedule.empty()) doc["schedule"] = p.schedule;
  if (p.microbatches > 0) doc["microbatches"] = p.microbatches;
  if (p.chunks > 0) doc["chunks"] = p.chunks;
  if (p.deferred_step) doc["deferred_step"] = true;
  if (p.bucket_mb >= 0) doc["bucket_mb"] = p.bucket_mb;
  if (!p.allreduce.empty()) doc["allreduce"] = p.allreduce;
  if (p.memory_cap_bytes > 0) {
    doc["memory_cap_bytes"] = p.memory_cap_bytes;
    doc["memory_cap_process_bytes"] = p.memory_cap_process_bytes;
  }
  if (!p.precision.empty()) doc["precision"] = p.precision;
  if (!p.optimizer.empty()) doc["optimizer"] = p.optimizer;
  if (!p.order.empty()) doc["order"] = p.order;
  return doc;
}

Plan plan_from_json(const json& doc, const std::string& source) {
  JsonField root(doc, source, "");
  expect_format(root, "plan", kPlanVersion);
  root.only_fields({"format", "workers", "stages", "predicted", "model", "ties", "batch_size", "cost_model", "schedule",
                    "microbatches", "chunks", "deferred_step", "bucket_mb", "allreduce", "memory_cap_bytes", "memory_cap_process_bytes",
                    "precision", "optimizer", "order"});
  Plan p;
  // Bounded before narrowing to int, so 4294967297 is an error rather than 1.
  p.workers = static_cast<int>(root["workers"].as_int_in(1, kMaxWorkers));
  if (root.has("model")) p.model = root["model"].as_string();
  if (root.has("ties"))
    for (size_t t = 0; t < root["ties"].size(); ++t) {
      JsonField tie = root["ties"][t];
      std::vector<int> layers;
      for (int64_t l : tie.as_int_list()) {
        if (l < 0 || l > std::numeric_limits<int>::max() || (!layers.empty() && l <= layers.back()))
          tie.fail(str("must list layer indices in ascending order, got ", l));
        layers.push_back(static_cast<int>(l));
      }
      if (layers.size() < 2) tie.fail(str("a tie joins two or more layers, got ", layers.size()));
      p.ties.push_back(std::move(layers));
    }
  if (root.has("batch_size")) p.batch_size = root["batch_size"].as_int_at_least(1);
  if (root.has("cost_model")) p.cost_model = root["cost_model"].as_string();  // who made it: any name ("hand")
  if (root.has("schedule")) {  // a name the schedule's reader checks; "" ran the default silently
    p.schedule = root["schedule"].as_string();
    if (p.schedule.empty()) root["schedule"].fail("must name a schedule, or be left out");
  }
  if (root.has("microbatches")) p.microbatches = static_cast<int>(root["microbatches"].as_int_in(1, kMaxMicrobatches));
  // PipeDream's unit is the minibatch: more microbatches than one were run as one, unsaid.
  if (p.schedule == "pipedream" && p.microbatches > 1)
    root["microbatches"].fail(str("is ", p.microbatches, " but the pipedream schedule runs each minibatch whole: "
                                  "leave it out, or name a schedule that splits it"));
  if (root.has("chunks")) p.chunks = static_cast<int>(root["chunks"].as_int_in(1, kMaxChunks));
  // Only the interleaved schedules take chunks; the others' refusal named a flag (--chunks) the
  // user never gave.
  if (p.chunks > 1 && !p.schedule.empty() && p.schedule != "interleaved" && p.schedule != "interleaved-zb")
    root["chunks"].fail(str("is ", p.chunks, " but the ", p.schedule, " schedule runs one chunk a stage "
                            "(chunks are for interleaved and interleaved-zb)"));
  if (root.has("deferred_step")) p.deferred_step = root["deferred_step"].as_bool();
  if (root.has("bucket_mb")) {
    p.bucket_mb = root["bucket_mb"].as_non_negative();
    if (p.bucket_mb > kMaxBucketMb) root["bucket_mb"].fail(str("must be at most ", kMaxBucketMb, " MiB, got ", p.bucket_mb));
  }
  if (root.has("allreduce")) {
    p.allreduce = root["allreduce"].as_string();
    if (p.allreduce != "ring" && p.allreduce != "hierarchical")
      root["allreduce"].fail(str("must be ring or hierarchical, got '", printable(p.allreduce), "'"));
  }
  if (root.has("memory_cap_bytes")) p.memory_cap_bytes = root["memory_cap_bytes"].as_int_at_least(1);
  if (root.has("memory_cap_process_bytes")) {
    if (p.memory_cap_bytes == 0) root["memory_cap_process_bytes"].fail("is a share of memory_cap_bytes, which is absent");
    p.memory_cap_process_bytes = root["memory_cap_process_bytes"].as_int_in(0, p.memory_cap_bytes - 1);
  }
  if (root.has("precision")) {
    p.precision = root["precision"].as_string();
    if (p.precision != "fp32" && p.precision != "bf16")
      root["precision"].fail(str("must be fp32 or bf16, got '", printable(p.precision), "'"));
  }
  if (root.has("optimizer")) {
    p.optimizer = root["optimizer"].as_string();
    if (p.optimizer != "sgd" && p.optimizer != "adam" && p.optimizer != "adamw")
      root["optimizer"].fail(str("must be sgd, adam or adamw, got '", printable(p.optimizer), "'"));
  }
  if (root.has("order")) {  // its actions are checked against the schedule it orders (given_order.h)
    JsonField order = root["order"];
    if (p.schedule.empty()) order.fail("orders a schedule, but the plan names none (field 'schedule')");
    if (order.size() == 0 || order.size() > static_cast<size_t>(kMaxWorkers))
      order.fail(str("must list 1..", kMaxWorkers, " workers' orders, got ", order.size()));
    for (size_t w = 0; w < order.size(); ++w) p.order.push_back(order[w].as_string());
  }
  JsonField stages = root["stages"];
  if (stages.size() == 0) stages.fail("must list at least one stage");
  bool all_ids = true;
  int64_t replicas = 0;
  for (size_t s = 0; s < stages.size(); ++s) {
    JsonField f = stages[s];
    f.only_fields({"layers", "replicas", "workers", "compute_ms", "comm_ms", "time_ms", "recompute", "in_flight"});
    Stage st;
    for (int64_t l : f["layers"].as_int_list()) {
      if (l < 0) f["layers"].fail(str("has a negative layer index ", l));
      if (l > std::numeric_limits<int>::max()) f["layers"].fail(str("has layer index ", l, ", too large"));
      st.layers.push_back(static_cast<int>(l));
    }
    if (st.layers.empty()) f["layers"].fail("must hold at least one layer");
    // In the profile's order, as a stage runs them: another order was simulated as written (a
    // stage of [4,3,2,1] 2% slower than [1,2,3,4]) and refused by train's workers.
    for (size_t i = 1; i < st.layers.size(); ++i)
      if (st.layers[i] <= st.layers[i - 1])
        f["layers"].fail(str("must list layers in ascending order, each once, got ", st.layers[i - 1], " then ",
                             st.layers[i]));
    st.replicas = static_cast<int>(f["replicas"].as_int_in(1, kMaxWorkers));
    replicas += st.replicas;
    if (f.has("workers")) {
      for (int64_t w : f["workers"].as_int_list()) {
        if (w < 0 || w >= p.workers)
          f["workers"].fail(str("has worker id ", w, " which is out of range 0..", p.workers - 1));
        st.workers.push_back(static_cast<int>(w));
      }
      if (static_cast<int>(st.workers.size()) != st.replicas)
        f["workers"].fail(str("lists ", st.workers.size(), " workers but replicas is ", st.replicas));
    } else {
      all_ids = false;
    }
    if (f.has("compute_ms")) st.compute_ms = f["compute_ms"].as_non_negative();
    if (f.has("comm_ms")) st.comm_ms = f["comm_ms"].as_non_negative();
    if (f.has("time_ms")) st.time_ms = f["time_ms"].as_non_negative();
    if (f.has("recompute")) st.recompute = f["recompute"].as_bool();
    if (f.has("in_flight")) st.in_flight = static_cast<int>(f["in_flight"].as_int_in(1, kMaxMicrobatches));
    p.stages.push_back(std::move(st));
  }
  // Said here, of the file: train's refusal named a --schedule dp the user never gave.
  if (p.schedule == "dp" && p.stages.size() > 1)
    root["schedule"].fail(str("is dp, which runs one stage on every worker, but the plan has ", p.stages.size(),
                              " stages: name a pipeline schedule, or leave it out"));
  // An interleaved or V plan as it runs (what `plan` writes) lists a worker on several stages:
  // read as one worker a stage, its placement kept for the schedule to check (shared_workers).
  std::map<int, size_t> stage_of;  // worker -> the first stage listing it
  bool shared = false;
  for (size_t s = 0; s < p.stages.size() && all_ids; ++s) {
    std::set<int> own;
    for (int w : p.stages[s].workers) {
      if (!own.insert(w).second)
        root["stages"][s]["workers"].fail(str("has worker id ", w, " twice (a replica is a worker of its own)"));
      auto [first, fresh] = stage_of.emplace(w, s);
      if (!fresh && p.schedule.empty())
        root["stages"][s]["workers"].fail(str("has worker id ", w, " which stage ", first->second, " uses too: stages "
                                              "share a worker only under the schedule that places them (field "
                                              "'schedule': interleaved, interleaved-zb or a V schedule)"));
      shared = shared || !fresh;
    }
  }
  if (shared) {
    if (static_cast<int>(stage_of.size()) != p.workers)
      root["workers"].fail(str("is ", p.workers, " but the stages are placed on ", stage_of.size(), " workers"));
    for (const auto& st : p.stages) p.shared_workers.push_back(st.workers);
    p.shared_workers_source = source + ": field 'stages'";
    assign_workers(p);
  } else {
    // Worker ids that give each stage its own worker contradict a schedule that runs several
    // stages on each (interleaved over chunks; a V, two), which the file names: 2 stages on workers
    // 0 and 1, interleaved over 2 chunks, ran on worker 0 alone, exit 0. (Without ids, `workers`
    // counts the chunks, and the schedule places them.)
    bool v = p.schedule == "zb-v" || p.schedule == "v-half" || p.schedule == "v-min" || p.schedule == "dualpipev";
    if (all_ids && p.stages.size() > 1 && (p.chunks > 1 || v))
      root["stages"].fail(str("gives each of its ", p.stages.size(), " stages a worker of its own, but ", p.schedule,
                              v ? " runs two stages on each worker (in a V)"
                                : p.stages.size() % p.chunks != 0  // (it read "on worker s mod 0")
                                    ? str(" over ", p.chunks, " chunks runs ", p.chunks, " on each worker, and ",
                                          p.stages.size(), " stages are no whole number of chunks a worker")
                                    : str(" over ", p.chunks, " chunks runs ", p.chunks, " on each (stage s on worker s mod ",
                                          p.stages.size() / p.chunks, ")"),
                              ": list each worker on its stages, as `pipetrain plan` writes them, or leave the workers "
                              "out"));
    // Checked before assign_workers, which would otherwise number every claimed replica.
    if (replicas != p.workers)
      root["workers"].fail(str("is ", p.workers, " but the stages' replicas add up to ", replicas));
    if (!all_ids) assign_workers(p);
  }
  if (root.has("predicted")) {
    JsonField pred = root["predicted"];
    pred.only_fields({"pipeline_ms_per_minibatch", "data_parallel_ms_per_minibatch", "simulated_ms_per_minibatch",
                      "simulated_schedule"});
    if (pred.has("pipeline_ms_per_minibatch"))
      p.pipeline_ms_per_minibatch = pred["pipeline_ms_per_minibatch"].as_non_negative();
    if (pred.has("data_parallel_ms_per_minibatch") && !pred["data_parallel_ms_per_minibatch"].raw().is_null())
      p.data_parallel_ms_per_minibatch = pred["data_parallel_ms_per_minibatch"].as_non_negative();
    if (pred.has("simulated_ms_per_minibatch")) {
      p.simulated_ms_per_minibatch = pred["simulated_ms_per_minibatch"].as_non_negative();
      if (pred.has("simulated_schedule")) p.simulated_schedule = pred["simulated_schedule"].as_string();
    }
  }
  return p;
}

Cluster cluster_for_plan(Cluster cluster, const Plan& plan, bool allreduce_given) {
  if (!allreduce_given && !plan.allreduce.empty()) cluster.allreduce = parse_allreduce(plan.allreduce, "plan");
  return cluster;
}

Plan read_plan(const std::string& path) {
  return plan_from_json(parse_json(read_input(path, InputKind::plan), path), path);
}

void write_plan(const Plan& p, const std::string& path) {
  write_text_file_atomic(path, to_json(p).dump(1) + "\n");
}

void check_plan_fits(const Plan& p, const profile::Profile& prof, const std::string& plan_source) {
  int n = prof.num_layers();
  std::vector<int> stage_of(n, -1);
  for (int s = 0; s < p.num_stages(); ++s)
    for (int l : p.stages[s].layers) {
      if (l >= n)
        throw ConfigError(str(plan_source, ": stage ", s, " holds layer ", l, " but the profile of '",
                              prof.model, "' has ", n, " layers (0..", n - 1, ")"));
      if (stage_of[l] != -1)
        throw ConfigError(str(plan_source, ": layer ", l, " (", prof.layers[l].name,
                              ") is in both stage ", stage_of[l], " and stage ", s));
      stage_of[l] = s;
    }
  // A model without ties (an emulated one, built from a profile) trains any plan right.
  if (!p.ties.empty() && !prof.ties.empty()) {
    std::vector<std::vector<int>> model_ties;
    for (const auto& t : prof.ties) model_ties.push_back(t.layers);
    auto text = [](const std::vector<std::vector<int>>& ties) {
      std::string out;
      for (const auto& t : ties) {
        out += out.empty() ? "" : ", ";
        for (size_t i = 0; i < t.size(); ++i) out += str(i ? "=" : "", t[i]);
      }
      return out.empty() ? std::string("none") : out;
    };
    if (p.ties != model_ties)
      throw ConfigError(str(plan_source, ": the plan was made for layers sharing parameters ", text(p.ties),
                            " but in '", prof.model, "' the layers sharing parameters are ", text(model_ties)));
  }
  // Layers past the plan's last: a plan (or schedule file) made for a shorter model.
  int planned = 0;
  for (const auto& st : p.stages)
    for (int l : st.layers) planned = std::max(planned, l + 1);
  if (std::find(stage_of.begin(), stage_of.begin() + std::min(planned, n), -1) == stage_of.begin() + std::min(planned, n) &&
      planned < n)
    throw ConfigError(str(plan_source, ": its stages hold layers 0..", planned - 1, " but the profile of '", prof.model,
                          "' has ", n, " layers (0..", n - 1, "): ",
                          p.model == prof.model ? str("layers ", planned, "..", n - 1, " are in no stage, though the plan "
                                                      "names this model")
                                                : std::string("it was made for another model")));
  for (int l = 0; l < n; ++l) {
    if (stage_of[l] == -1)
      throw ConfigError(str(plan_source, ": layer ", l, " (", prof.layers[l].name, ") is in no stage"));
    for (int in : prof.layers[l].inputs)
      if (stage_of[in] > stage_of[l])
        throw ConfigError(str(plan_source, ": layer ", l, " (", prof.layers[l].name, ") in stage ",
                              stage_of[l], " reads layer ", in, " of a later stage ", stage_of[in]));
  }
}

}  // namespace pt::plan
