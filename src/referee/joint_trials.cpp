// The joint search's configurations (joint_trials.h): uniform plans of every stage count and
// placement under each kind, the V and interleaved splits, data parallelism, and the referee's
// pipedream candidates.
#include "referee/joint_trials.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "core/error.h"
#include "plan/split_ties.h"
#include "referee/referee.h"

namespace pt::referee::detail {
namespace {

// The most microbatches per step searched (beyond, a step's bubble is already small).
constexpr int kMostMicrobatches = 128;

// The splits of the layers into d stages tried: the even split, and the link-aware one where its
// largest stage counting the links is smaller (planner.h), at the links of the level holding all
// `workers` (the slowest a stage may cross): which runs faster, only the simulator tells. Where
// the links do not set the largest stage, the even split alone (each split doubles the replays).
std::vector<plan::Plan> splits(const profile::Profile& p, int d, const plan::Cluster& c, int workers) {
  std::vector<plan::Plan> out{plan::even_split(p, d)};
  if (d < 2 || workers < 2) return out;
  double ms_per_byte = c.transfer_ms(c.range_level(0, workers - 1), 1.0);
  plan::Plan linked = plan::link_aware_split(p, d, ms_per_byte);
  if (plan::largest_linked_stage_ms(p, linked, ms_per_byte) < plan::largest_linked_stage_ms(p, out[0], ms_per_byte) * (1 - 1e-9))
    out.push_back(std::move(linked));
  return out;
}

// d stages of `split`, r replicas each: stage-major placement puts a stage's replicas side by
// side, pipeline-major a copy's stages.
plan::Plan uniform_plan(const plan::Plan& split, int r, bool stage_major) {
  plan::Plan u = split;
  int d = u.num_stages();
  for (auto& st : u.stages) st.replicas = r;
  if (stage_major) {
    plan::assign_workers(u);
    return u;
  }
  for (int s = 0; s < d; ++s) {
    u.stages[s].workers.clear();
    for (int k = 0; k < r; ++k) u.stages[s].workers.push_back(k * d + s);
  }
  u.workers = d * r;
  return u;
}

}  // namespace

void for_each_uniform_plan(const profile::Profile& p, const plan::Cluster& cluster, const plan::PlanOptions& plan_options,
                           const std::function<void(const plan::Plan& u, const plan::Cluster& c)>& visit,
                           const std::function<void(const plan::Cluster& c)>& done) {
  // Each smaller cluster's workers are ids 0..k-1 of this one, with the same links.
  std::vector<plan::Cluster> clusters{cluster};
  if (plan_options.fewer_workers)
    for (const plan::Cluster& sub : plan::smaller_clusters(cluster)) clusters.push_back(sub);
  for (const plan::Cluster& c : clusters) {
    int w = c.workers();
    for (int d = 1; d <= std::min(w, p.num_layers()); ++d) {
      if (w % d != 0) continue;
      int r = w / d;
      for (bool stage_major : {true, false})
        for (const plan::Plan& split : splits(p, d, c, w)) {
          // The same placement, or (one level) the same links.
          if (!stage_major && (r == 1 || d == 1 || c.levels.size() < 2)) continue;
          visit(uniform_plan(split, r, stage_major), c);
        }
    }
    if (done) done(c);
  }
}

Refereed choose_pipedream(const std::vector<plan::Plan>& candidates, const profile::Profile& p,
                          const plan::Cluster& cluster, const plan::PlanOptions& plan_options, bool own_buckets,
                          bool with_uniform) {
  Refereed r = choose(candidates, p, cluster, plan_options, "pipedream", own_buckets);
  if (r.ranked.empty() || !with_uniform) return r;
  // The uniform plans refereed apart, where they end faster: from the search's candidates alone
  // GNMT on 2x2x4 at 200/50/5 Gbit/s got a 14-stage plan at 15.874 ms per minibatch, slower than
  // its best on 12 of those workers (13.991). Apart, not among them: the referee's climbs start
  // from the fastest it has replayed, and with them all it ended GNMT on 2x2x3 at 14.639 where
  // the search's alone reach 13.991. Those pipedream can run: not splitting a tie (its stages
  // step apart), none replicated under --straight.
  std::vector<plan::Plan> uniform;
  for_each_uniform_plan(p, cluster, plan_options, [&](const plan::Plan& u, const plan::Cluster&) {
    bool replicated = std::any_of(u.stages.begin(), u.stages.end(), [](const plan::Stage& st) { return st.replicas > 1; });
    if (u.num_stages() > 1 && !(plan_options.straight && replicated) && plan::split_ties(u, p).empty())
      uniform.push_back(u);
  });
  try {
    if (!uniform.empty()) {
      Refereed u = choose(uniform, p, cluster, plan_options, "pipedream", own_buckets);
      if (!u.ranked.empty() && ranks_before(u.ranked.front(), r.ranked.front())) {
        u.uniform = true;
        r = std::move(u);
      }
    }
  } catch (const ConfigError&) {  // none can run pipedream's schedule: the search's stand
  }
  return r;
}

std::string trial_key(const Trial& t) {
  std::string key = str(t.kind, " m", t.microbatches, " v", t.chunks, " B", t.batch,
                        t.plan.deferred_step ? " ds" : "");
  for (const auto& st : t.plan.stages) {
    key += str(" | f", st.in_flight, st.recompute ? " rc" : "", " l");
    for (int l : st.layers) key += str(",", l);
    key += " w";
    for (int w : st.workers) key += str(",", w);
  }
  return key;
}

namespace {

// Each trial once: the referee's pipedream candidates include the uniform plans tried beside
// them (GNMT-16 on 4x4 listed 4-4-4-4 twice in `plan --top`, rows alike but for their rank).
std::vector<Trial> each_once(std::vector<Trial> all) {
  std::set<std::string> seen;
  std::vector<Trial> out;
  for (Trial& t : all)
    if (seen.insert(trial_key(t)).second) out.push_back(std::move(t));
  return out;
}

}  // namespace

std::vector<Trial> trials(const profile::Profile& p, const plan::Cluster& cluster,
                          const plan::PlanOptions& plan_options, const JointOptions& joint, int* ungrouped) {
  int n = cluster.workers(), layers = p.num_layers();
  int64_t B = p.batch_size;
  auto wanted = [&](const std::string& kind) {
    return joint.schedules.empty() ||
           std::find(joint.schedules.begin(), joint.schedules.end(), kind) != joint.schedules.end();
  };
  // Microbatches per copy of the pipeline: 1, 2, 4, ... while a microbatch keeps whole samples.
  auto per_copy = [&](int copies) {
    std::vector<int> ms;
    if (joint.microbatches > 0) {
      // Pinned: each copy's share, where it keeps whole samples (train refuses the others).
      int m = joint.microbatches / copies;
      if (joint.microbatches % copies == 0 && B % m == 0) ms.push_back(m);
      return ms;
    }
    for (int m = 1; m <= 64 && m <= B && copies * m <= kMostMicrobatches; m *= 2)
      if (B % m == 0) ms.push_back(m);
    return ms;
  };
  std::vector<Trial> out;
  // The uniform plans on every worker, and (fewer_workers) on each smaller cluster's.
  auto visit = [&](const plan::Plan& u, const plan::Cluster&) {
    int d = u.num_stages(), r = u.stages.front().replicas;
    if (d > 1) {
      for (const char* kind : {"1f1b", "gpipe", "2bw"})
        if (wanted(kind))
          // 2BW over the minibatches `simulate` starts from (default_minibatches), lengthened as
          // it lengthens them: from a few dozen of its own, whose window could look repeating
          // while the pace still drifted, the split climb chose VGG-16 8-8 on 4x4 at 96/10 Gbit/s
          // for its 690.511 ms a minibatch over 24, where it runs at 698.187 from 96 on (the
          // search took 3.3 s either way).
          for (int m : per_copy(r)) out.push_back({kind, u, r * m, 1, B * r});
      if (wanted("pipedream")) out.push_back({"pipedream", u, 1, 1, B});
    }
    if (r == 1 && d > 1) {
      // mp runs one microbatch at a time: splitting the minibatch only shrinks its memory, so
      // it is split only where the microbatches are pinned.
      if (wanted("mp")) {
        for (int m : joint.microbatches > 0 ? per_copy(1) : std::vector<int>{1}) {
          std::vector<plan::Plan> mp_splits = {u, plan::fewest_bytes_split(p, d)};
          // Each split on u's workers, once: the even and the link-aware u share the others.
          for (plan::Plan& split : mp_splits) {
            split.workers = u.workers;
            for (int k = 0; k < d; ++k) split.stages[k].workers = u.stages[k].workers;
            auto same = [&](const Trial& t) {
              if (t.kind != "mp" || t.microbatches != m || !t.plan.same_split(split)) return false;
              for (int k = 0; k < d; ++k)
                if (t.plan.stages[k].workers != split.stages[k].workers) return false;
              return true;
            };
            if (std::none_of(out.begin(), out.end(), same))
              out.push_back({"mp", split, m, 1, B});
          }
        }
      }
      if (wanted("zb-h1"))
        for (int m : per_copy(1)) out.push_back({"zb-h1", u, m, 1, B});
      // The V schedules, two chunks per worker in a V: the even split into 2d chunks, and the
      // V split where it differs (planner.h: the simulator tells which runs faster).
      std::vector<plan::Plan> v_splits;
      if (2 * d <= layers) {
        v_splits = {plan::even_split(p, 2 * d), plan::v_split(p, d)};
        if (v_splits[0].same_split(v_splits[1])) v_splits.pop_back();
      }
      for (const char* kind : {"zb-v", "v-half", "v-min", "dualpipev"})
        if (wanted(kind))
          for (int m : per_copy(1))
            if (m >= 2 * d || kind != std::string("dualpipev"))  // dualpipev: 2 x workers or more
              for (const plan::Plan& v : v_splits) out.push_back({kind, v, m, 1, B});
    }
  };
  // Data parallelism on fewer workers: where the all-reduce outweighs their compute.
  auto fewer = [&](const plan::Cluster& c) {
    int w = c.workers();
    if (w < n && w > 1 && wanted("dp") && (joint.microbatches == 0 || joint.microbatches == w))
      out.push_back({"dp", plan::data_parallel_plan(layers, w), w, 1, B * w});
  };
  for_each_uniform_plan(p, cluster, plan_options, visit, fewer);
  // The interleaved schedules on every worker and (fewer_workers) on each smaller cluster's, as
  // the uniform plans are: on a 2x2 cluster all 4 workers took 10,301.6 ms a minibatch over the
  // slow link, where one server's 2 took 532.2, and only all 4 were tried.
  std::vector<int> sizes{n};
  if (plan_options.fewer_workers)
    for (const plan::Cluster& sub : plan::smaller_clusters(cluster)) sizes.push_back(sub.workers());
  for (const char* kind : {"interleaved", "interleaved-zb"})
    if (wanted(kind))
      for (int v : joint.chunks > 0 ? std::vector<int>{joint.chunks} : std::vector<int>{2, 4}) {
        std::set<int> tried;  // worker counts already looked at
        for (int size : sizes) {
          // Where the layers are too few for v chunks on each worker, on as many as have them
          // (workers 0..w-1): GPT-2048's 26 layers on 16 workers had no interleaved plan at all.
          // Interleaved runs Megatron's groups of w microbatches: the most workers that divide
          // some microbatch count searched.
          size_t before = out.size();
          for (int w = plan_options.fewer_workers ? std::min(size, layers / v) : size; w > 1 && out.size() == before; --w) {
            if (w * v > layers || !tried.insert(w).second) break;  // too few layers, or looked at below
            const std::vector<int> counts = per_copy(1);
            for (int m : counts)
              if (m % w == 0 || kind != std::string("interleaved")) out.push_back({kind, plan::even_split(p, w * v), m, v, B});
            if (ungrouped && !counts.empty() && out.size() == before) ++*ungrouped;  // counts there, none in groups of w
          }
        }
      }
  // PipeDream's baseline: every worker a minibatch of B, one step for all (weak scaling).
  if (wanted("dp") && (joint.microbatches == 0 || joint.microbatches == n))
    out.push_back({"dp", plan::data_parallel_plan(layers, n), n, 1, B * n});
  if (wanted("pipedream")) {
    // What `plan` itself chooses among and from (choose_pipedream), with the referee's local
    // search and in-flight and deferred-step variants: the uniform plans above alone, unrefereed,
    // left GNMT-16 on 4x4 at 24.767 ms per minibatch where `plan` found 22.483. A deferred variant
    // the referee turned down (gaining under what pays for its staleness) stays out.
    try {
      Refereed rf = choose_pipedream(plan::plan_candidates(p, cluster, plan_options), p, cluster, plan_options,
                                     /*own_buckets=*/false, /*with_uniform=*/true);
      for (size_t i = 0; i < rf.ranked.size(); ++i)
        if (i == 0 || !rf.ranked[i].plan.deferred_step) out.push_back({"pipedream", rf.ranked[i].plan, 1, 1, B});
    } catch (const ConfigError&) {
      // no candidate schedules under pipedream: the uniform plans above remain
    }
  }
  return each_once(std::move(out));
}

}  // namespace pt::referee::detail
