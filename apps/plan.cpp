// pipetrain plan: PipeDream's partitioner (stages, replicas, workers) over a profile and a
// cluster, its best candidates refereed by the simulator; prints a table, or the plan JSON with
// --json, and writes it with -o.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <set>
#include <sstream>

#include "apps/command.h"
#include "core/host_allocator.h"
#include "plan/split_ties.h"
#include "referee/joint_search.h"
#include "referee/referee.h"
#include "referee/replay_ahead.h"
#include "apps/planning_flags.h"
#include "core/error.h"
#include "core/json_doc.h"
#include "core/units.h"
#include "plan/plan_command.h"
#include "plan/plan_table.h"
#include "schedule/generators.h"
#include "schedule/memory.h"

namespace pt::app {
namespace {

using namespace referee;  // the referee and the joint search (src/referee)

struct Flags {
  plan::PlanFlags plan;
  std::string output;
  bool json = false, explain = false;
  int top = 0;
  std::string schedule = "pipedream", objective = "throughput";
  int microbatches = 0;
  CLI::Option *schedule_flag = nullptr, *microbatches_flag = nullptr, *objective_flag = nullptr, *bucket_flag = nullptr;
};

// The joint search (src/referee/joint_search.h) runs when asked for a schedule choice, microbatches or
// an objective, or under a memory cap; without them `plan` plans for pipedream as before.
bool joint_wanted(const Flags& f) {
  // A memory cap is joint under the pipetrain model; PipeDream's optimizer has its own.
  return f.schedule_flag->count() > 0 || f.microbatches_flag->count() > 0 || f.objective_flag->count() > 0 ||
         (!f.plan.memory.empty() && f.plan.cost_model == "pipetrain");
}

std::string fixed2(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// The plan to a file, and the table (or JSON) with `extra` below it.
int emit(const Flags& f, const plan::PlanOutcome& out, const std::string& extra) {
  if (!f.output.empty()) {
    write_text_file_atomic(f.output, out.json);
    std::cerr << "wrote " << f.output << "\n";
  }
  if (f.json) {
    std::cout << out.json;
    std::cerr << out.table << extra;
  } else {
    std::cout << out.table << extra;
  }
  return 0;
}

// No candidate can be replayed (hundreds of workers: replica counts whose rounds run to
// thousands of minibatches): the search's best by its prediction, and a note that says so.
int print_unsimulated(const Flags& f, plan::PlanOutcome& out, const Refereed& r) {
  out.plan = out.candidates.front();
  out.plan.notes.push_back(str("not simulated: the replica counts of all ", r.unschedulable.size(),
                               " candidates repeat only every 240 or more minibatches, too long to replay; this plan "
                               "is the search's best by its prediction alone"));
  out.table = plan::format_plan_table(out.plan, out.profile, out.cluster);
  out.json = to_json(out.plan).dump(1) + "\n";
  return emit(f, out, "");
}

// Where the chosen plan's replicas all-reduce, the bucket it runs fastest with (the referee's
// choice between it and data parallelism, each at its own bucket, unless --bucket-mb says or
// it ran out of --time-limit), and a note naming the other buckets' times.
// The sizes whose floor ruled them out (BucketChoice::ruled_out), for the bucket's note.
std::string ruled_out_of(const BucketChoice& b) {
  if (b.ruled_out.empty()) return "";
  std::string sizes;
  for (const auto& [mb, floor] : b.ruled_out)
    sizes += str(sizes.empty() ? "" : ", ", mb, " MiB ", std::round(floor * 1000) / 1000);
  return str("; not simulated, their floors above the first's time: ", sizes);
}

void note_plan_bucket(const Flags& f, plan::PlanOutcome& out, const Refereed& r) {
  bool replicated = false;
  for (const auto& st : out.plan.stages) replicated = replicated || st.replicas > 1;
  if (!replicated) return;
  if (!r.buckets_chosen) {
    out.plan.bucket_mb = f.plan.bucket_mb;
    if (f.bucket_flag->count() == 0)
      out.plan.notes.push_back(str("all-reduce bucket ", f.plan.bucket_mb, " MiB: --time-limit left no time to "
                                   "simulate the others"));
    return;
  }
  const BucketChoice& b = r.ranked.front().bucket;
  std::string tried;
  bool all_equal = true;  // e.g. replicas of layers without weights: nothing to all-reduce
  for (const auto& [mb, ms] : b.tried) {
    tried += str(tried.empty() ? "" : ", ", mb, " MiB ", std::round(ms * 1000) / 1000);
    all_equal = all_equal && std::abs(ms - b.ms_per_minibatch) <= 1e-9 * b.ms_per_minibatch;
  }
  if (b.at_limit)
    out.plan.notes.push_back(str("all-reduce bucket ", b.bucket_mb, " MiB: it runs the plan at its physical limit (",
                                 std::round(b.ms_per_minibatch * 1000) / 1000, " ms per minibatch in simulation), "
                                 "which no bucket size beats"));
  else if (all_equal && b.tried.size() > 1)
    out.plan.notes.push_back(str("all-reduce bucket ", b.bucket_mb, " MiB: every size tried simulates the same (",
                                 std::round(b.ms_per_minibatch * 1000) / 1000, " ms per minibatch)", ruled_out_of(b)));
  else
    out.plan.notes.push_back(str("all-reduce bucket ", b.bucket_mb, " MiB, the fastest in simulation (ms per minibatch: ",
                                 tried, ")", ruled_out_of(b), "; train --plan uses it unless --bucket-mb says"));
}

// The plan as its schedule runs it, for the table: interleaved and V schedules run several of
// its stages on one worker, where the file numbers a worker per stage (a zb-v plan of 4 stages
// on 2 workers read "on 4 workers", stage 3 on worker 3).
plan::Plan as_run(const plan::Plan& p) {
  if (!schedule::is_interleaved(p.schedule) && !schedule::is_v_schedule(p.schedule)) return p;
  schedule::ScheduleOptions so;
  so.microbatches = std::max(1, p.microbatches);
  so.chunks = std::max(1, p.chunks);
  schedule::Schedule s = schedule::make_unvalidated_schedule(p.schedule, p, so);
  plan::Plan shown = p;
  std::set<int> used;
  for (int st = 0; st < p.num_stages(); ++st) {
    shown.stages[st].workers = s.stage_workers[st];
    used.insert(s.stage_workers[st].begin(), s.stage_workers[st].end());
  }
  shown.workers = static_cast<int>(used.size());
  return shown;
}

int run_joint(Flags& f, plan::PlanOutcome& out) {
  JointOptions jo;
  if (f.schedule_flag->count() > 0 && f.schedule != "auto") jo.schedules = {f.schedule};
  if (f.microbatches_flag->count() > 0 && (f.microbatches < 1 || f.microbatches > schedule::kMaxMicrobatches))
    throw UsageError(str("--microbatches: must be in 1..", schedule::kMaxMicrobatches, ", got ", f.microbatches));
  jo.microbatches = f.microbatches;
  jo.objective = f.objective;
  jo.memory_cap = out.memory_cap;
  jo.own_buckets = f.bucket_flag->count() == 0;
  JointResult r = joint_search(out.profile, out.cluster, out.options, jo);
  const Configuration& c = chosen(r, jo, out.profile, out.cluster);
  out.plan = c.plan;
  if (!out.profile.ties.empty()) {  // as the schedule places the stages (a V puts two on a worker)
    schedule::Schedule s = schedule::make_unvalidated_schedule(c.plan.schedule, c.plan, c.run);
    for (const auto& note : plan::split_tie_notes(out.profile, s.stage_layers, s.stage_workers, out.cluster))
      out.plan.notes.push_back(note);
  }
  std::ostringstream summary;
  // One worker at its leanest (a sample a microbatch), under the cap or not: whether the table may
  // advise it (VGG-16 under 2 GB was told to train on one worker, which needs 15 GB).
  bool one_worker_fits = true;
  if (jo.memory_cap > 0) {
    schedule::ScheduleOptions lean;
    lean.microbatches = static_cast<int>(std::min<int64_t>(out.profile.batch_size, schedule::kMaxMicrobatches));
    plan::Plan one = plan::data_parallel_plan(out.profile.num_layers(), 1);
    one.batch_size = out.profile.batch_size;
    one_worker_fits = schedule::peak_memory(schedule::memory_per_worker(
                          schedule::make_unvalidated_schedule("1f1b", one, lean), out.profile)) <= jo.memory_cap;
  }
  summary << plan::format_plan_table(as_run(out.plan), out.profile, out.cluster, one_worker_fits) << "joint search (" << f.objective
          << "): schedule " << c.plan.schedule;
  if (c.plan.microbatches > 0) summary << ", " << c.plan.microbatches << " microbatches";
  if (c.plan.chunks > 0) summary << ", " << c.plan.chunks << " chunks";
  int recomputed = 0;
  for (const auto& st : c.plan.stages) recomputed += st.recompute;
  summary << ", recomputation on " << recomputed << " of " << c.plan.num_stages() << " stages, batch "
          << c.plan.batch_size << " per step\n  simulated " << c.ms_per_sample << " ms per sample ("
          << static_cast<int64_t>(1000.0 / c.ms_per_sample) << " samples/s), peak memory per worker "
          << human_bytes(static_cast<double>(c.peak_memory));
  if (jo.memory_cap > 0 && out.cluster.process_bytes > 0)
    summary << " (the tensors' share of the " << human_bytes(static_cast<double>(jo.memory_cap + out.cluster.process_bytes))
            << " cap: " << human_bytes(static_cast<double>(jo.memory_cap)) << ")";
  else if (jo.memory_cap > 0)
    summary << " (cap " << human_bytes(static_cast<double>(jo.memory_cap)) << ")";
  summary << "\n";
  if (c.staleness > 0)
    summary << "  asynchronous: a stage's weights lag up to " << c.staleness
            << " updates (--objective time-to-accuracy weighs it)\n";
  // PipeDream-2BW's double buffer (a lag of one) holds where a replica's microbatches of one
  // minibatch cover its warm-up (schedule::two_bw): VGG-16 4-4 with 4 microbatches keeps 3.
  if (c.plan.schedule == "2bw" && c.staleness > 1)
    summary << "  2bw keeps " << c.staleness + 1 << " weight versions on a stage here, not PipeDream-2BW's 2: a "
            << "replica's microbatches of one minibatch do not cover its warm-up (more microbatches per minibatch, "
               "or fewer replicas a stage, bring it to 2)\n";
  out.table = summary.str();
  out.json = to_json(out.plan).dump(1) + "\n";
  std::string extra;
  if (f.top > 0) extra += "\n" + format_configurations(r, f.top);
  if (f.explain) {
    extra += "\nmemory per worker (modelled):\n";
    for (size_t w = 0; w < c.memory.size(); ++w)
      extra += str("  w", w, ": ", schedule::describe(c.memory[w]), "\n");
  }
  return emit(f, out, extra);
}

int run_plan(Flags& f) {
  keep_freed_host_memory();
  if (f.top < 0 || f.top > plan::kMaxCandidates)
    throw UsageError(str("--top: must be in 0..", plan::kMaxCandidates, ", got ", f.top));
  // Every candidate --top lists is refereed (a bad --candidates is left for its own message).
  if (f.plan.candidates >= 1 && f.top > f.plan.candidates) f.plan.candidates = f.top;
  f.plan.joint = joint_wanted(f);
  // A search of many workers takes seconds: a line every few, on stderr.
  f.plan.progress = [](const std::string& line) { std::cerr << "plan: " << line << "\n"; };
  plan::PlanOutcome out = plan::run_plan_command(f.plan);
  // PipeDream's optimizer keeps its own memory constraint (12 of its 111 published settings);
  // the pipetrain model plans under a cap jointly, with the memory model of each schedule.
  bool pipedream = out.options.cost_model != plan::CostModel::kPipetrain;
  if (f.plan.joint && pipedream)
    throw UsageError("--schedule, --microbatches and --objective use the joint search, which needs --cost-model "
                     "pipetrain");
  if (f.plan.joint || (out.memory_cap > 0 && !pipedream)) {
    if (!f.plan.joint) {  // a cluster file's cap: search jointly too
      f.plan.joint = true;
      out = plan::run_plan_command(f.plan);
    }
    return run_joint(f, out);
  }
  std::string extra;
  if (out.options.cost_model == plan::CostModel::kPipetrain) {
    Refereed r = choose(out.candidates, out.profile, out.cluster, out.options, "pipedream",
                        /*own_buckets=*/f.bucket_flag->count() == 0);
    if (r.ranked.empty()) return print_unsimulated(f, out, r);
    const Candidate& chosen = r.ranked.front();
    out.plan = chosen.plan;
    // The plan's predicted time is its simulated steady state, the quantity it was ranked by.
    out.plan.pipeline_ms_per_minibatch = chosen.simulated.ms_per_minibatch;
    out.plan.data_parallel_ms_per_minibatch = r.data_parallel_ms;
    // Data parallelism on hundreds of workers repeats too rarely to replay: its prediction,
    // said so (the table printed "does not fit" where no memory cap was given).
    for (const auto& p : r.unschedulable)
      if (r.data_parallel_ms == 0 && p.num_stages() == 1 && p.workers == out.cluster.workers() &&
          p.pipeline_ms_per_minibatch > 0) {
        out.plan.data_parallel_ms_per_minibatch = p.pipeline_ms_per_minibatch;
        out.plan.notes.push_back(str("data parallelism's ", std::round(p.pipeline_ms_per_minibatch * 1000) / 1000,
                                     " ms per minibatch is the search's prediction, not simulated: its ", p.workers,
                                     " replicas repeat only every ", p.workers, " minibatches, too long to replay"));
        break;
      }
    out.plan.simulated_ms_per_minibatch = chosen.simulated.ms_per_minibatch;
    out.plan.simulated_schedule = r.schedule;
    // (One worker alone is no data parallelism to explain.)
    if (steady_state_in_closed_form(out.plan, r.schedule) && out.plan.workers > 1)
      out.plan.notes.push_back(str("data parallelism on ", out.plan.workers, " workers: its steady state is the cost "
                                   "engine's closed form, which for data parallelism is the simulator's figure exactly "
                                   "(its replicas are alike), so it is not replayed"));
    out.plan.schedule = r.schedule;  // what `train --plan` runs
    note_plan_bucket(f, out, r);
    // A candidate the simulator could not replay is not chosen; where it predicts faster than
    // the choice, the plan says so rather than hide it.
    for (const auto& p : r.unschedulable)
      if (p.pipeline_ms_per_minibatch > 0 && p.pipeline_ms_per_minibatch < chosen.simulated.ms_per_minibatch) {
        out.plan.notes.push_back(str("not simulated: ", p.shape(), " predicts ", std::round(p.pipeline_ms_per_minibatch * 1000) / 1000,
                                     " ms per minibatch, faster than this plan, but its replica counts repeat only "
                                     "every 240 or more minibatches, too long to replay; this plan is the fastest "
                                     "simulated"));
        break;
      }
    if (r.timed_out)
      out.plan.notes.push_back(str("time limit: the simulator stopped refereeing at ", out.options.time_limit_s,
                                   " s of planning (--time-limit), ", r.unreplayed,
                                   " candidate plans and the rest of the local search not simulated; the plan is the "
                                   "best of the ", r.ranked.size(), " that were",
                                   r.choice_unrepeated ? "; its replay's window did not yet repeat, and simulate replays "
                                                         "it longer, to another figure"
                                                       : ""));
    // Statistical efficiency (issue 12): what the pipedream schedule trades for speed.
    bool deferred = out.plan.deferred_step && out.plan.stages[0].replicas > 1;
    if (out.plan.num_stages() > 1)
      out.plan.notes.push_back(str("pipedream is asynchronous: the first stage's gradients use weights up to ",
                                   plan::in_flight(out.plan, 0) - 1 + (deferred ? 1 : 0),
                                   " updates old (one per minibatch it keeps in flight after the first",
                                   deferred ? ", and one for the deferred step" : "",
                                   "), the last stage's none (weight stashing "
                                   "keeps each minibatch's forward and backward consistent); 1f1b and gpipe run this "
                                   "plan synchronously"));
    if (out.plan.deferred_step) {
      double plain = 0;  // the same plan stepping before its next forward, if replayed
      auto same = [](const plan::Plan& a, const plan::Plan& b) {
        if (a.num_stages() != b.num_stages()) return false;
        for (int s = 0; s < a.num_stages(); ++s)
          if (a.stages[s].layers != b.stages[s].layers || a.stages[s].workers != b.stages[s].workers ||
              a.stages[s].in_flight != b.stages[s].in_flight)
            return false;
        return true;
      };
      for (const auto& c : r.ranked)
        if (!c.plan.deferred_step && same(c.plan, out.plan) && c.plan.bucket_mb == out.plan.bucket_mb)
          plain = plain > 0 ? std::min(plain, c.simulated.ms_per_minibatch) : c.simulated.ms_per_minibatch;
      out.plan.notes.push_back(str("deferred step: the replicated first stage steps after its next forward, which hides "
                                   "the rest of its all-reduce",
                                   plain > 0 ? str(" (", std::round(plain * 10) / 10, " -> ",
                                                   std::round(chosen.simulated.ms_per_minibatch * 10) / 10,
                                                   " ms per minibatch in simulation)")
                                             : std::string(),
                                   "; its weights lag one update more; --no-deferred-step plans without it"));
    }
    if (out.plan.workers < out.cluster.workers()) {
      double all = 0;  // the best plan on every worker, as replayed
      for (const auto& c : r.ranked)
        if (c.plan.workers == out.cluster.workers()) {
          all = c.simulated.ms_per_minibatch;
          break;
        }
      out.plan.notes.push_back(str("fewer workers: the plan uses ", out.plan.workers, " of the cluster's ",
                                   out.cluster.workers(), "; on these links no simulated plan on more is faster",
                                   all > 0 ? str(" (the best on all ", out.cluster.workers(), ": ",
                                                 std::round(all * 10) / 10, " ms per minibatch in simulation)")
                                           : std::string(),
                                   "; --all-workers plans on all of them"));
    }
    // A baseline a user can have: data parallelism all-reducing inside servers first, then across
    // (on one level there are no servers to go inside: it was advised on 8 flat workers).
    if (out.cluster.allreduce == plan::Cluster::Allreduce::kRing && out.cluster.levels.size() > 1 &&
        out.plan.data_parallel_ms_per_minibatch > 0) {
      plan::Cluster hier = out.cluster;
      hier.allreduce = plan::Cluster::Allreduce::kHierarchical;
      // At its own bucket, as data parallelism with the ring is weighed (Refereed::buckets_chosen).
      double dp = simulate_data_parallel(out.profile, hier, out.options, r.schedule);
      if (dp > 0 && r.buckets_chosen)
        dp = choose_bucket(plan::data_parallel_plan(out.profile.num_layers(), hier.workers()), out.profile, hier,
                           out.options, r.schedule, dp)
                 .ms_per_minibatch;
      if (dp > 0 && dp < out.plan.data_parallel_ms_per_minibatch)
        out.plan.notes.push_back(str("data parallelism with --allreduce hierarchical (inside each server, then across "
                                     "servers a shard each; train runs it with --cluster FILE --allreduce hierarchical) "
                                     "takes ", std::round(dp * 1000) / 1000, " ms per minibatch in simulation, not ",
                                     std::round(out.plan.data_parallel_ms_per_minibatch * 1000) / 1000,
                                     ": ",
                                     dp < chosen.simulated.ms_per_minibatch
                                         ? str("it runs ", fixed2(chosen.simulated.ms_per_minibatch / dp),
                                               "x as fast as this plan")
                                         : str("this plan runs ", fixed2(dp / chosen.simulated.ms_per_minibatch),
                                               "x as fast as it"),
                                     "; --allreduce hierarchical plans for it"));
    }
    if (out.plan.num_stages() > 1)
      out.plan.notes.push_back("staleness costs accuracy per epoch, most where the largest stage is the first and "
                               "unreplicated (mnist-cnn, 2 epochs: one worker 89.5%; pipedream 3-1 88.8-89.0%, 1-3 "
                               "85.9%); 1f1b on this plan computes one worker's gradients");
    out.table = plan::format_plan_table(out.plan, out.profile, out.cluster);
    out.json = to_json(out.plan).dump(1) + "\n";
    // The exact model's figures are the options' bucket's; the plan runs with its own.
    std::string bucket_note =
        out.plan.bucket_mb >= 0 && std::abs(out.plan.bucket_mb - f.plan.bucket_mb) > 1e-9
            ? str("(the exact model's figures above are with the ", f.plan.bucket_mb, " MiB bucket; the plan runs with its ",
                  out.plan.bucket_mb, " MiB bucket: ", std::round(out.plan.simulated_ms_per_minibatch * 1000) / 1000,
                  " ms per minibatch in simulation)\n")
            : std::string();
    if (f.top > 0) extra += "\n" + format_top(r, out.profile, f.top);
    if (f.explain) extra += "\n" + format_explain(chosen, out.profile, out.cluster) + bucket_note;
  } else if (f.top > 0 || f.explain) {
    throw UsageError("--top and --explain use the pipetrain cost model's exact evaluation and the simulator; "
                     "--cost-model pipedream gives PipeDream's one plan");
  } else {
    // PipeDream's optimizer keeps its own prediction; the simulator says what the plan runs at.
    // Its plans are for PipeDream's schedule (1F1B-RR): `simulate --plan` and `train --plan` run
    // that, as `plan` simulated it (without it they ran 1f1b, which a stage of more replicas than
    // its 4 microbatches cannot run: VGG-16's 7-1 on 8 workers).
    out.plan.schedule = "pipedream";
    double simulated = simulate_plan(out.plan, out.profile, out.cluster, out.options);
    if (simulated > 0) {
      out.plan.simulated_ms_per_minibatch = simulated;
      out.plan.simulated_schedule = "pipedream";
    }
    // PipeDream's cap is its formula's; where the memory model (what train checks) puts the
    // plan over it, the plan says so (VGG-16 on 8 workers at 10 Gbit/s under 8 GB: 4-3-1 at 24.2 GiB, unsaid).
    if (out.memory_cap > 0) {
      auto over = [&](int minibatches) {
        schedule::ScheduleOptions o;
        o.minibatches = minibatches;
        return schedule::make_unvalidated_schedule("pipedream", out.plan, o);
      };
      int64_t peak = schedule::peak_memory(schedule::memory_per_worker(over(0), over, out.profile));
      if (peak > out.memory_cap)
        out.plan.notes.push_back(str("memory: PipeDream's optimizer keeps the ", human_bytes(static_cast<double>(out.memory_cap)),
                                     " cap by its own formula (a stage's minibatches in flight x its activations and "
                                     "weights); the memory model, which train checks, puts this plan at ",
                                     human_bytes(static_cast<double>(peak)),
                                     " per worker (weights, gradients, momentum, stashed versions and activations), over "
                                     "the cap; --cost-model pipetrain plans under the cap by the memory model"));
    }
    out.table = plan::format_plan_table(out.plan, out.profile, out.cluster);
    out.json = to_json(out.plan).dump(1) + "\n";
  }
  return emit(f, out, extra);
}

Register reg({"plan", "Split a profiled model into replicated pipeline stages for a cluster (PipeDream's planner)",
              [](CLI::App& app) -> std::function<int()> {
  auto f = std::make_shared<Flags>();
  app.add_option("--profile", f->plan.profile, "Profile: pipetrain JSON, PipeDream JSON figures, or graph.txt")->required();
  add_cluster_flags(app, f->plan.cluster);
  app.add_option("--memory", f->plan.memory, "Memory per worker, e.g. 16GB (default: the cluster's, or unlimited)");
  app.add_option("--cost-model", f->plan.cost_model, "pipetrain (default) or pipedream (PipeDream's optimizer)")
      ->capture_default_str();
  app.add_flag("--straight", f->plan.straight, "One worker per stage, no replication");
  app.add_flag("--no-activation-transfer", f->plan.no_activation_transfer,
               "PipeDream model: leave activation transfers out (its optimizer's default)");
  app.add_option("--candidates", f->plan.candidates,
                 "How many of the search's best plans the simulator replays to choose among")
      ->capture_default_str();
  f->bucket_flag = app.add_option("--bucket-mb", f->plan.bucket_mb,
                                  "The all-reduce bucket train will use, MiB (0: all after the backward; default: the "
                                  "planner tries 0, 1, 4, 25 and 100 for the chosen plan and keeps the fastest, 25 "
                                  "unless another is faster)")
                       ->check(bucket_mb_range())
                       ->capture_default_str();
  app.add_flag("--no-deferred-step", f->plan.no_deferred_step,
               "Never defer a replicated first stage's step past its next forward (which hides its all-reduce "
               "at the cost of one more update of staleness)");
  app.add_flag("--all-workers", f->plan.all_workers,
               "Use every worker of the cluster, as PipeDream's optimizer does, even where a plan on fewer of them "
               "(the rest idle) is faster");
  app.add_option("--time-limit", f->plan.time_limit_s,
                 "Seconds planning may take: past them the simulator replays no further candidate or bucket size "
                 "and the best of those replayed is chosen, with a note saying so (the search itself always "
                 "completes; 0: no limit)")
      ->capture_default_str();
  app.add_option("--top", f->top, "Print the K best candidates: predicted and simulated time, memory, why each lost");
  app.add_flag("--explain", f->explain, "Print the chosen plan's per-stage compute, links, all-reduce and memory");
  std::string kinds;
  for (const auto& k : schedule::schedule_kinds()) kinds += ", " + k;
  f->schedule_flag = app.add_option("--schedule", f->schedule,
                                    "Joint search over schedules (auto), or pinned to one: auto" + kinds +
                                        " (default: pipedream's planner alone)");
  f->microbatches_flag = app.add_option("--microbatches", f->microbatches,
                                        "Joint search with the microbatches per step pinned");
  f->objective_flag = app.add_option("--objective", f->objective,
                                     "Joint search objective: throughput, or time-to-accuracy (staleness weighed)");
  app.add_option("-o,--output", f->output, "Write the plan JSON here");
  app.add_flag("--json", f->json, "Print the plan JSON on standard output (the table goes to standard error)");
  return [f] { return run_plan(*f); };
}});

}  // namespace
}  // namespace pt::app
