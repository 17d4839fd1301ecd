#include <algorithm>
#include <limits>
#include <utility>

#include "core/error.h"
#include "plan/planner.h"

namespace pt::plan {

namespace {

// Contiguous split of the layers (topological order) into `stages` single-replica stages that
// minimises the largest stage_ms(j, i) of a stage of layers [j, i), among those whose every stage
// `fits` where given.
template <class StageMs>
Plan balanced_split(const profile::Profile& profile, int stages, const std::vector<double>& prefix, StageMs stage_ms,
                    const StageFits& fits = nullptr) {
  int n = profile.num_layers();
  if (stages < 1 || stages > n)
    throw UsageError(str("--stages: ", stages, " stages is not possible for '", profile.model,
                         "' with ", n, " layers (use 1..", n, ")"));
  // best[k][i]: smallest max-stage time splitting layers [0, i) into k stages.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k)
    for (int i = k; i <= n; ++i)
      for (int j = k - 1; j < i; ++j) {
        if (best[k - 1][j] == inf || (fits && !fits(k - 1, j, i))) continue;
        double t = std::max(best[k - 1][j], stage_ms(j, i));
        // Ties go to the later cut so that equal-cost layers spread evenly.
        if (t <= best[k][i]) {
          best[k][i] = t;
          cut[k][i] = j;
        }
      }
  if (best[stages][n] == inf) throw ConfigError(str("no split of ", n, " layers into ", stages, " stages fits every stage"));
  Plan p;
  p.model = profile.model;
  for (const auto& t : profile.ties) p.ties.push_back(t.layers);
  p.batch_size = profile.batch_size;
  p.cost_model = "even";
  p.stages.resize(stages);
  for (int k = stages, i = n; k >= 1; --k) {
    int j = cut[k][i];
    for (int l = j; l < i; ++l) p.stages[k - 1].layers.push_back(l);
    p.stages[k - 1].compute_ms = prefix[i] - prefix[j];
    i = j;
  }
  assign_workers(p);
  p.pipeline_ms_per_minibatch = best[stages][n];
  p.data_parallel_ms_per_minibatch = prefix[n];
  return p;
}

// prefix[i] = compute (forward + backward) of layers [0, i), by the cost engine's rules: an Input
// layer's data loading is none (the raw figure, AlexNet's 636 ms against 85 ms for the rest, put
// the Input alone on a stage of every split, and the joint search chose such plans: 1f1b on 2
// workers at 10 Gbit/s 167.9 ms per minibatch where its own split without it runs at 69.9).
std::vector<double> compute_prefix(const profile::Profile& profile) {
  std::vector<double> prefix(profile.num_layers() + 1, 0);
  for (int i = 0; i < profile.num_layers(); ++i)
    prefix[i + 1] = prefix[i] + profile::compute_forward_ms(profile, i) + profile::compute_backward_ms(profile, i);
  return prefix;
}

}  // namespace

Plan even_split(const profile::Profile& profile, int stages) {
  std::vector<double> prefix = compute_prefix(profile);
  return balanced_split(profile, stages, prefix, [&](int j, int i) { return prefix[i] - prefix[j]; });
}

namespace {

// The time of a stage of layers [j, i) counting its link: its compute, or the bytes over its two
// cuts (crossing[c]: over the cut after layer c, each layer a stage of its own).
struct LinkedStageMs {
  LinkedStageMs(const profile::Profile& profile, double ms_per_byte)
      : prefix(compute_prefix(profile)), ms_per_byte(ms_per_byte), n(profile.num_layers()) {
    crossing = profile::bytes_after_each_layer(profile);
  }
  double operator()(int j, int i) const {
    double bytes = (j > 0 ? crossing[j - 1] : 0) + (i < n ? crossing[i - 1] : 0);
    return std::max(prefix[i] - prefix[j], bytes * ms_per_byte);
  }
  std::vector<double> prefix, crossing;
  double ms_per_byte;
  int n;
};

}  // namespace

Plan link_aware_split(const profile::Profile& profile, int stages, double ms_per_byte) {
  LinkedStageMs stage_ms(profile, ms_per_byte);
  return balanced_split(profile, stages, stage_ms.prefix, stage_ms);
}

Plan balanced_split_fitting(const profile::Profile& profile, int stages, double ms_per_byte, const StageFits& fits) {
  LinkedStageMs stage_ms(profile, ms_per_byte);
  return balanced_split(profile, stages, stage_ms.prefix, stage_ms, fits);
}

double largest_linked_stage_ms(const profile::Profile& profile, const Plan& split, double ms_per_byte) {
  LinkedStageMs stage_ms(profile, ms_per_byte);
  double most = 0;
  for (const auto& st : split.stages)
    if (!st.layers.empty()) most = std::max(most, stage_ms(st.layers.front(), st.layers.back() + 1));
  return most;
}

Plan fewest_bytes_split(const profile::Profile& profile, int stages, const StageFits& fits) {
  Plan p = even_split(profile, stages);  // checks the counts; its layers are replaced below
  const int n = profile.num_layers();
  std::vector<double> prefix = compute_prefix(profile);
  std::vector<double> crossing = profile::bytes_after_each_layer(profile);
  // best[k][i]: (bytes over the cuts, largest stage) splitting layers [0, i) into k stages, in
  // that order: the fewest bytes, and among those the most even split.
  using Cost = std::pair<double, double>;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<Cost>> best(stages + 1, std::vector<Cost>(n + 1, {inf, inf}));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = {0, 0};
  for (int k = 1; k <= stages; ++k)
    for (int i = k; i <= n; ++i)
      for (int j = k - 1; j < i; ++j) {
        if (best[k - 1][j].first == inf || (fits && !fits(k - 1, j, i))) continue;
        Cost t{best[k - 1][j].first + (j > 0 ? crossing[j - 1] : 0),
               std::max(best[k - 1][j].second, prefix[i] - prefix[j])};
        if (t < best[k][i]) best[k][i] = t, cut[k][i] = j;
      }
  if (best[stages][n].first == inf)
    throw ConfigError(str("no split of ", n, " layers into ", stages, " stages fits every stage"));
  for (int k = stages, i = n; k >= 1; --k) {
    int j = cut[k][i];
    p.stages[k - 1].layers.clear();
    for (int l = j; l < i; ++l) p.stages[k - 1].layers.push_back(l);
    p.stages[k - 1].compute_ms = prefix[i] - prefix[j];
    i = j;
  }
  p.pipeline_ms_per_minibatch = best[stages][n].second;
  return p;
}

std::vector<int> rebalance_chunks(const profile::Profile& profile, std::vector<int> cuts,
                                  const std::vector<int>& worker_of_chunk, double ms_per_byte, const WorkerOver& over) {
  const int chunks = static_cast<int>(worker_of_chunk.size());
  PT_CHECK(static_cast<int>(cuts.size()) == chunks + 1, "rebalance_chunks: ", cuts.size(), " cuts for ", chunks,
           " chunks");
  const int workers = *std::max_element(worker_of_chunk.begin(), worker_of_chunk.end()) + 1;
  LinkedStageMs chunk_ms(profile, ms_per_byte);
  // Each worker's bytes over, kept as the cuts move: a move changes its two chunks' workers' alone.
  std::vector<int64_t> over_of(workers, 0);
  if (over)
    for (int w = 0; w < workers; ++w) over_of[w] = over(w, cuts);
  struct Score {
    int64_t over;
    double most, squares;
  };
  auto score = [&](const std::vector<int>& b, const std::vector<int64_t>& by_worker) {
    std::vector<double> t(workers, 0);
    for (int c = 0; c < chunks; ++c) t[worker_of_chunk[c]] += chunk_ms(b[c], b[c + 1]);
    Score s{0, 0, 0};
    for (int w = 0; w < workers; ++w) s.over += by_worker[w], s.most = std::max(s.most, t[w]), s.squares += t[w] * t[w];
    return s;
  };
  // Each move lowers the score strictly, so the search ends; a layer per move bounds it too.
  Score best = score(cuts, over_of);
  for (bool moved = true; moved;) {
    moved = false;
    for (int c = 1; c < chunks; ++c)
      for (int d : {-1, 1}) {
        std::vector<int> next = cuts;
        next[c] += d;
        if (next[c] <= next[c - 1] || next[c] >= next[c + 1]) continue;
        std::vector<int64_t> next_over = over_of;
        if (over)
          for (int w : {worker_of_chunk[c - 1], worker_of_chunk[c]}) next_over[w] = over(w, next);
        Score s = score(next, next_over);
        if (s.over < best.over ||
            (s.over == best.over && (s.most < best.most - 1e-9 ||
                                     (s.most <= best.most + 1e-9 && s.squares < best.squares * (1 - 1e-12))))) {
          best = s, cuts = std::move(next), over_of = std::move(next_over), moved = true;
        }
      }
  }
  return cuts;
}

void cut_at(Plan& p, const profile::Profile& profile, const std::vector<int>& cuts) {
  PT_CHECK(cuts.size() == p.stages.size() + 1, "cut_at: ", cuts.size(), " cuts for ", p.stages.size(), " stages");
  std::vector<double> prefix = compute_prefix(profile);
  for (size_t c = 0; c < p.stages.size(); ++c) {
    p.stages[c].layers.clear();
    for (int l = cuts[c]; l < cuts[c + 1]; ++l) p.stages[c].layers.push_back(l);
    p.stages[c].compute_ms = prefix[cuts[c + 1]] - prefix[cuts[c]];
  }
}

Plan v_split(const profile::Profile& profile, int workers) {
  const int chunks = 2 * workers, n = profile.num_layers();
  Plan p = even_split(profile, chunks);  // checks the counts; its layers are replaced below
  if (workers < 2) return p;
  std::vector<double> prefix = compute_prefix(profile);
  // Start from cuts at equal shares of the time (each chunk at least one layer): unlike the even
  // split, which lowers the largest chunk first, this spreads the heavier and lighter chunks
  // along the V, and the search keeps them spread.
  std::vector<int> cut(chunks + 1, 0);
  cut[chunks] = n;
  for (int c = 1; c < chunks; ++c) {
    double share = prefix[n] * c / chunks;
    int at = static_cast<int>(std::lower_bound(prefix.begin(), prefix.end(), share) - prefix.begin());
    if (at > 0 && share - prefix[at - 1] < prefix[at] - share) --at;  // the nearer cut
    cut[c] = std::clamp(at, cut[c - 1] + 1, n - (chunks - c));
  }
  std::vector<int> worker_of_chunk(chunks);
  for (int c = 0; c < chunks; ++c) worker_of_chunk[c] = c < workers ? c : chunks - 1 - c;
  cut = rebalance_chunks(profile, std::move(cut), worker_of_chunk, 0);
  cut_at(p, profile, cut);
  double most = 0;  // the busiest worker's pair
  for (int w = 0; w < workers; ++w) most = std::max(most, p.stages[w].compute_ms + p.stages[chunks - 1 - w].compute_ms);
  p.pipeline_ms_per_minibatch = most;
  return p;
}

}  // namespace pt::plan
