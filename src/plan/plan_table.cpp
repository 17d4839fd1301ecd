#include "plan/plan_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "core/units.h"
#include "plan/state_space.h"

namespace pt::plan {

std::string format_id_ranges(std::vector<int> ids) {
  std::sort(ids.begin(), ids.end());
  std::ostringstream os;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    os << (i ? "," : "") << ids[i];
    if (j > i) os << "-" << ids[j];
    i = j + 1;
  }
  return os.str();
}

namespace {

std::string layer_summary(const Stage& st, const profile::Profile& profile) {
  const auto& first = profile.layers[st.layers.front()].name;
  const auto& last = profile.layers[st.layers.back()].name;
  std::string s = st.layers.size() == 1 ? first : first + " .. " + last;
  if (s.size() > 44) s = s.substr(0, 41) + "...";
  return s;
}

}  // namespace

std::string format_plan_table(const Plan& plan, const profile::Profile& profile, const Cluster& cluster,
                              bool one_worker_fits) {
  std::ostringstream os;
  os << "plan for '" << plan.model << "' (batch " << plan.batch_size << ") on "
     << (plan.workers < cluster.workers() ? std::to_string(plan.workers) + " of " : "") << counted(cluster.workers(), "worker")
     << ", " << cluster.describe() << ", cost model " << plan.cost_model << ": " << counted(plan.num_stages(), "stage")
     << ", shape "
     << plan.shape() << "\n";
  char line[512];
  // stage_ms is what the bottleneck is chosen by: compute and communication as they overlap, with
  // what else the cost model charges (the all-reduce, the host's actions, the in-flight limit).
  // Without it the bottleneck printed did not follow from the columns shown.
  std::snprintf(line, sizeof line, "%5s  %-6s  %-44s  %8s  %-14s  %11s  %11s  %11s\n", "stage", "layers", "names",
                "replicas", "workers", "compute_ms", "comm_ms", "stage_ms");
  os << line;
  int bottleneck = 0;
  for (int s = 0; s < plan.num_stages(); ++s) {
    const Stage& st = plan.stages[s];
    if (st.stage_time_ms() > plan.stages[bottleneck].stage_time_ms()) bottleneck = s;
    std::string ids = format_id_ranges(st.workers);
    if (ids.size() > 14) ids = ids.substr(0, 11) + "...";
    std::snprintf(line, sizeof line, "%5d  %-6zu  %-44s  %8d  %-14s  %11s  %11s  %11s\n", s, st.layers.size(),
                  layer_summary(st, profile).c_str(), st.replicas, ids.c_str(), fixed(st.compute_ms, 3).c_str(),
                  fixed(st.comm_ms, 3).c_str(), fixed(st.stage_time_ms(), 3).c_str());
    os << line;
  }
  // One worker's time is per minibatch of the profile's batch; a joint search's step may take
  // several (a pipeline copied r times takes r): compare like with like. Both predictions are
  // per minibatch of the plan's batch.
  double per_step = plan.batch_size > 0 && profile.batch_size > 0
                        ? static_cast<double>(plan.batch_size) / static_cast<double>(profile.batch_size)
                        : 1.0;
  // One worker computes every minibatch of a step and steps every layer once; the host's time
  // per action (--action-us) is a forward and a backward a minibatch and the step, as the plan's
  // stages are charged it (with 100 ms an action, one worker's own plan printed 0.60x over one
  // worker).
  // `fastest`: each layer at its fastest per sample, where microbatches compute faster than
  // the whole minibatch (profile::layer_share_floor).
  double forward_backward = 0, fastest = 0, step = 0;
  for (int l = 0; l < profile.num_layers(); ++l)
    if (!is_outside_search(profile, l)) {
      const auto& layer = profile.layers[l];
      forward_backward += layer.forward_ms + layer.backward_ms;
      fastest += layer.forward_ms * profile::layer_share_floor(layer, profile.batch_size, false) +
                 layer.backward_ms * profile::layer_share_floor(layer, profile.batch_size, true);
      step += profile::compute_step_ms(profile, l, /*stashes=*/false);  // one worker keeps no stash
    }
  double single = forward_backward * per_step + step + cluster.action_ms() * (2 * per_step + 1);
  double pipe = plan.pipeline_ms_per_minibatch, dp = plan.data_parallel_ms_per_minibatch;
  // Stages within a microsecond of the largest are named together (an interleaved gpt's 1 and 7-14
  // tie at 935.769 ms, and the last of them, 14, was named alone).
  std::vector<int> tied;
  for (int s = 0; s < plan.num_stages(); ++s)
    if (plan.stages[s].stage_time_ms() >= plan.stages[bottleneck].stage_time_ms() - 1e-3) tied.push_back(s);
  os << "bottleneck: " << (tied.size() > 1 ? "stages " + format_id_ranges(tied) : str("stage ", bottleneck))
     << " (the largest stage_ms)\n";
  // A refereed plan's prediction is its simulated steady state (docs/design.md: one timing model);
  // PipeDream's optimizer's is its own formula, and the simulation follows on a line of its own.
  bool simulated = plan.simulated_ms_per_minibatch > 0 && pipe > 0 &&
                   std::abs(plan.simulated_ms_per_minibatch / pipe - 1) <= 1e-9;
  os << "predicted ms per minibatch" << (per_step != 1.0 ? str(" of ", plan.batch_size) : std::string())
     << (simulated ? str(" (the simulator's steady state, ", plan.simulated_schedule, ")") : std::string())
     << ": pipeline " << fixed(pipe, 3) << ", data parallel " << (dp > 0 ? fixed(dp, 3) : std::string("(does not fit)"))
     << ", one worker " << fixed(single, 3) << "\n";
  // PipeDream's formula beside its simulation: each figure says which it is (ResNet-50 on 8
  // workers at 1 Gbit/s printed "1.35x over one worker" alone, where the plan simulates at 0.37x).
  double sim = !simulated && pipe > 0 ? plan.simulated_ms_per_minibatch : 0;
  if (pipe > 0) {
    os << "speed-up: " << fixed(single / pipe, 2) << "x over one worker";
    if (dp > 0) os << ", " << fixed(dp / pipe, 2) << "x over data parallelism";
    if (sim > 0) os << " by the prediction; " << fixed(single / sim, 2) << "x over one worker in simulation";
    os << "\n";
  }
  if (sim > 0)
    os << "simulated ms per minibatch (" << plan.simulated_schedule << ", steady state): " << fixed(sim, 3) << " ("
       << fixed(100 * (sim / pipe - 1), 1) << "% from the prediction)\n";
  // No plan beats every worker computing all the time: how close this one comes.
  if (pipe > 0 && cluster.workers() > 0) {
    // Workers sharing a host's cores compute at most what those cores give them all at once.
    double at_once = cluster.workers();
    if (cluster.host_cores > 0) {
      at_once = 0;
      for (int n = 1; n <= cluster.workers(); ++n) at_once = std::max(at_once, n * cluster.core_rate(n, cluster.host_cores));
    }
    // Microbatches may compute faster per sample than the whole minibatch one worker's time
    // takes: the limit takes each layer at its fastest, so it stays a bound (a 2bw plan in
    // microbatches of 16 reached 127.9% of a limit at the whole batch).
    double limit = (single - (forward_backward - fastest) * per_step) / at_once;
    std::string whose = fastest < forward_backward * (1 - 1e-12)
                            ? std::string("one worker's time, each layer at its fastest batch size per sample,")
                            : std::string("one worker's time");
    if (cluster.host_cores > 0)
      os << "compute limit (" << whose << " / " << fixed(at_once, 2) << ", what this host's " << cluster.host_cores
         << " cores give " << counted(cluster.workers(), "worker") << " at once): " << fixed(limit, 3) << " ms per minibatch; ";
    else
      os << "compute limit (" << whose << " / " << counted(cluster.workers(), "worker") << "): " << fixed(limit, 3) << " ms per minibatch; ";
    if (sim > 0) os << "in simulation the plan reaches " << fixed(100 * limit / sim, 1) << "% of it, by the prediction ";
    else os << "the plan reaches ";
    os << fixed(100 * limit / pipe, 1) << "% of it\n";
  }
  // All workers are used, so on slow links the best plan can lose to one worker alone.
  double slowest = std::max(pipe, plan.simulated_ms_per_minibatch);
  if (slowest > single * (1 + 1e-9))
    os << "warning: this plan is slower than one worker (" << fixed(slowest, 3) << " against " << fixed(single, 3)
       << " ms per minibatch): on this cluster its transfers and all-reduces cost more than splitting the model "
       << (one_worker_fits ? "saves; train on one worker, or on fewer workers with faster links\n"
                           : "saves, and one worker does not fit the memory cap, even a sample a microbatch: more "
                             "memory per worker, or faster links\n");
  for (const auto& n : plan.notes) os << "note: " << n << "\n";
  if (cluster.process_bytes > 0)
    os << "note: memory: a worker process holds " << human_bytes(static_cast<double>(cluster.process_bytes))
       << " besides its tensors (the cluster's process_bytes, as calibrate measured it): a memory cap bounds that "
       << "and the tensors, not the training data each process loads nor, for gloo workers on one host, the shared "
       << "memory of their transfers (8 MiB a channel, and the all-reduce slots), which `train --profile P --cluster "
       << "C` adds to its modelled peak RSS\n";
  return os.str();
}

std::string replica_rounds_note(const Plan& plan, int64_t batch, bool sum) {
  int fewest = plan.stages[0].replicas, most = fewest;
  for (const auto& st : plan.stages) fewest = std::min(fewest, st.replicas), most = std::max(most, st.replicas);
  if (most < 2) return "";
  std::string who = plan.num_stages() == 1 ? str("the stage's ", fewest, " replicas") : "a replicated stage's replicas";
  std::string out = str("under pipedream ", who, " take a minibatch each and step once a round with their gradients' ",
                        sum ? "sum" : "mean", ", on ", most == fewest ? str(most) : "r", " x ", batch, " samples",
                        sum ? " at r times the rate (train --replica-gradients mean: their mean, as PipeDream and DDP)"
                            : ", as PipeDream and DDP do (train --replica-gradients sum: r times the rate)");
  if (fewest > 1)
    out += str("; with every stage replicated, a step trains on ", fewest * batch, " samples or more, where `train "
               "--schedule dp` splits each minibatch of ", batch, " over the replicas and steps as one worker does");
  return out;
}

}  // namespace pt::plan
