#include "referee/splits_under_cap.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "core/error.h"
#include "plan/planner.h"
#include "schedule/generators.h"
#include "schedule/memory.h"
#include "sim/weigh_schedule.h"

namespace pt::referee::detail {

bool splits_under_cap(const Trial& t) {
  return t.plan.num_stages() > 1 && t.kind != "dp" &&
         (!held_in_chunks(t) || std::all_of(t.plan.stages.begin(), t.plan.stages.end(),
                                            [](const plan::Stage& st) { return st.replicas == 1; }));
}

bool held_in_chunks(const Trial& t) { return t.chunks > 1 || schedule::is_v_schedule(t.kind); }

SplitsUnderCap::SplitsUnderCap(const profile::Profile& p, const Trial& shape, const plan::Cluster& cluster,
                               const JointOptions& joint)
    : p_(profile::with_batch_size(p, shape.batch)), trial_(shape), cluster_(cluster), joint_(joint),
      memory_(joint.memory), n_(p.num_layers()), parameters_(n_ + 1, 0) {
  for (int l = 0; l < n_; ++l) parameters_[l + 1] = parameters_[l] + p.layers[l].parameter_bytes;
  if (memory_.optimizer_copies < 0) memory_.optimizer_copies = schedule::optimizer_copies(p);
}

double SplitsUnderCap::ms_per_byte(const plan::Plan& tried) {
  // A chunked plan's `workers` counts its chunks: its schedule's are the workers it runs on.
  const int w = held_in_chunks(trial_) ? probe(tried.num_stages()).num_workers() : tried.workers;
  return w > 1 ? cluster_.transfer_ms(cluster_.range_level(0, w - 1), 1.0) : 0;
}

std::vector<plan::Plan> SplitsUnderCap::splits(const plan::Plan& tried) {
  if (held_in_chunks(trial_)) {
    // Weighing the links or not: which runs faster only the simulator tells (VGG-16 on 4 workers
    // at 10 Gbit/s under 2 GB: zb-v 20.2 ms a sample by compute alone, 25.9 by the links;
    // interleaved fits by compute alone only).
    std::vector<plan::Plan> out;
    for (double link : {0.0, ms_per_byte(tried)})
      if (auto s = split_chunks(tried, link); s && (out.empty() || !out[0].same_split(*s))) out.push_back(*s);
    return out;
  }
  if (longest_.empty()) {
    const int d = trial_.plan.num_stages();
    const bool pipeline = !anywhere();
    longest_.assign(pipeline ? d : 1, std::vector<int>(n_, 0));
    // A pipeline's stage at a place starts where the one before may end: the sweep covers those
    // first layers alone, and stops where no stage reaches on (under a tight cap, most).
    int reach = 0;  // the latest layer a stage at this place may start at
    for (int place = 0; place < static_cast<int>(longest_.size()); ++place) {
      // Where a stage at this place may start and end: in a pipeline, the stages before and after
      // it each need a layer, its first stage starts at the first layer, its last ends at the last.
      int end_to = pipeline ? n_ - (d - 1 - place) : n_;
      int first_from = pipeline ? place : 0, first_to = pipeline ? std::min(reach + 1, end_to) : end_to;
      if (pipeline && place == d - 1) {
        int lo = first_from, hi = first_to;  // the earliest first layer whose stage to the end fits: in [lo, hi], hi none
        while (lo < hi) {
          int mid = (lo + hi) / 2;
          if (fits(place, mid, n_)) hi = mid; else lo = mid + 1;
        }
        for (int first = lo; first < first_to; ++first) longest_[place][first] = n_;
        break;
      }
      reach = -1;
      for (int first = first_from, end = first; first < first_to; ++first) {
        // From the last first layer's end, where the stage from here still fits it; else anew.
        if (end <= first || !fits(place, first, end)) end = first;
        while (end < end_to && fits(place, first, end + 1)) ++end;
        longest_[place][first] = end;
        if (end > first) reach = std::max(reach, end);
      }
      if (pipeline && reach < 0) break;  // no stage here fits: no split does
    }
  }
  auto fitting = [&](int place, int first, int end) { return end <= longest_[anywhere() ? 0 : place][first]; };
  try {
    const int d = tried.num_stages();
    plan::Plan s = anywhere() ? plan::fewest_bytes_split(p_, d, fitting)
                              : plan::balanced_split_fitting(p_, d, ms_per_byte(tried), fitting);
    plan::Plan out = tried;
    for (int k = 0; k < d; ++k) {
      out.stages[k].layers = s.stages[k].layers;
      out.stages[k].compute_ms = s.stages[k].compute_ms;
    }
    return {out};
  } catch (const ConfigError&) {
    return {};  // no split into that many stages fits
  }
}

std::optional<plan::Plan> SplitsUnderCap::split_chunks(const plan::Plan& tried, double ms_per_byte) {
  const int d = tried.num_stages();
  schedule::Schedule& s = probe(d);
  if (static_cast<int>(s.recompute.size()) < d) s.recompute.resize(d, false);
  std::vector<int> cuts(d + 1, n_), worker_of_chunk(d);
  for (int c = 0; c < d; ++c) cuts[c] = tried.stages[c].layers.front(), worker_of_chunk[c] = s.stage_workers[c][0];
  // Without recomputation, else with it on the worker's chunks, as the joint search adds it.
  auto over = [&](int w, const std::vector<int>& at) {
    for (int c = 0; c < d; ++c) {
      s.stage_layers[c].clear();
      for (int l = at[c]; l < at[c + 1]; ++l) s.stage_layers[c].push_back(l);
    }
    auto kept = kept_.try_emplace({d, w});
    if (kept.second) kept.first->second = schedule::weight_versions_kept(s, w, p_, memory_);
    int64_t least = std::numeric_limits<int64_t>::max();
    for (bool recompute : {false, true}) {
      for (int c = 0; c < d; ++c) s.recompute[c] = recompute && worker_of_chunk[c] == w;
      least = std::min(least, schedule::memory_of_worker(s, w, p_, memory_, &kept.first->second).total());
    }
    std::fill(s.recompute.begin(), s.recompute.end(), false);
    return std::max<int64_t>(0, least - joint_.memory_cap);
  };
  cuts = plan::rebalance_chunks(p_, std::move(cuts), worker_of_chunk, ms_per_byte, over);
  for (int w = 0; w < s.num_workers(); ++w)
    if (over(w, cuts) > 0) return std::nullopt;
  plan::Plan out = tried;
  plan::cut_at(out, p_, cuts);
  return out;
}

schedule::Schedule& SplitsUnderCap::probe(int stages) {
  auto it = probes_.find(stages);
  if (it != probes_.end()) return it->second;
  // The trial's own plan; model parallelism's, any split into so many stages.
  plan::Plan plan = anywhere() ? plan::even_split(p_, stages) : trial_.plan;
  schedule::ScheduleOptions options;
  options.microbatches = trial_.microbatches;
  options.chunks = trial_.chunks;
  options = sim::weigh_schedule(trial_.kind, plan, options, p_, cluster_);
  schedule::Schedule s = schedule::make_unvalidated_schedule(trial_.kind, plan, options);
  // As long a run as memory_over_long_run weighs.
  int longer = schedule::memory_minibatches(s, memory_);
  if (longer > s.minibatches) {
    options.minibatches = longer;
    s = schedule::make_unvalidated_schedule(trial_.kind, plan, options);
  }
  return probes_.emplace(stages, std::move(s)).first->second;
}

bool SplitsUnderCap::fits(int place, int first, int end) {
  // Its weights, gradients and optimizer state at least (a tie's copies the memory model counts once).
  if (p_.ties.empty() && (2 + memory_.optimizer_copies) * (parameters_[end] - parameters_[first]) > joint_.memory_cap)
    return false;
  // The layers before the stage over `before` stages, those after over `after`, a layer each but
  // the last of each side's, which holds the rest.
  const int d = trial_.plan.num_stages();
  int before = anywhere() ? (first > 0) : place, after = anywhere() ? (end < n_) : d - 1 - place;
  std::vector<std::pair<int, int>> ranges;
  for (int k = 0; k < before; ++k) ranges.emplace_back(k, k + 1 < before ? k + 1 : first);
  ranges.emplace_back(first, end);
  for (int k = 0; k < after; ++k) ranges.emplace_back(end + k, k + 1 < after ? end + k + 1 : n_);
  schedule::Schedule& s = probe(static_cast<int>(ranges.size()));
  for (size_t k = 0; k < ranges.size(); ++k) {
    s.stage_layers[k].clear();
    for (int l = ranges[k].first; l < ranges[k].second; ++l) s.stage_layers[k].push_back(l);
  }
  // Without recomputation, else with it, as the joint search adds it where a stage is over (its
  // lists are the same either way): GNMT-8 on 2 workers under 1.43 GiB, 1F1B, was refused where a
  // cut fits recomputing.
  if (s.recompute.size() < ranges.size()) s.recompute.resize(ranges.size(), false);
  for (bool recompute : {false, true}) {
    s.recompute[before] = recompute;
    bool all = true;
    for (int w : s.stage_workers[before]) {  // each replica
      auto kept = kept_.try_emplace({static_cast<int>(ranges.size()), w});
      if (kept.second) kept.first->second = schedule::weight_versions_kept(s, w, p_, memory_);
      all = all && schedule::memory_of_worker(s, w, p_, memory_, &kept.first->second).total() <= joint_.memory_cap;
    }
    s.recompute[before] = false;
    if (all) return true;
  }
  return false;
}

}  // namespace pt::referee::detail
