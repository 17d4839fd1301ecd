// PipeDream's optimizer, reproduced equation for equation (SOSP'19 §3.1; the reference is
// optimizer/optimizer_graph_hierarchical.py of msr-fiddle/pipedream). docs/planner.md lists the
// places where the reference is inconsistent; this file keeps each of them on purpose.
//
// At level ℓ (M units, bandwidth B, w = units of the level below in one unit: the *previous
// level's fan-out*, 1 at the innermost level), for states a ⊊ b and m units:
//   single(a,b,m) = (T(a,b) + 4(m−1)·P(a,b)/(B·m)/w) / m,
//                   allowed when ceil((M−m)/m)·(Act+P) ≤ memory
//   split(a,b,m)  = min over a ⊊ k ⊊ b, 1 ≤ m' < m of
//                   max(A(a,k,m−m'), (T(k,b) + 4(m'−1)·P(k,b)/(B·m'))/m',      ← no /w here
//                       2·O_k/(B·m'), 2·O_b/(B·m') if b is not the last state)  ← with transfers
//                   allowed when ceil((M−m)/m')·(Act(k,b)+P(k,b)) ≤ memory
//   A(a,b,m)      = min(single, split)
// T at level 0 is Σ forward+backward; at level ℓ+1 it is A_ℓ(a,b,M_ℓ). Only a = ∅ is needed at
// the outermost level. `--straight` allows m = 1 singles and m' = 1 only.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "plan/realised_cost.h"
#include "plan/search.h"

namespace pt::plan {
namespace {

struct Choice {
  int k = -1;      // -1: one stage over all m units
  int units = 0;   // m' of the last stage
};

// One level's table A(a, b, m), for the rows a it was solved for.
struct LevelTable {
  int M = 1;
  bool all_rows = false;
  int S = 0;
  std::vector<double> value;
  std::vector<Choice> choice;
  size_t at(int a, int b, int m) const {
    return ((static_cast<size_t>(all_rows ? a : 0)) * S + b) * (M + 1) + m;
  }
};

struct Part {
  int from, to;
  std::vector<int> workers;  // ids local to one unit of the level the part was made at
};

class PipedreamSearch {
 public:
  PipedreamSearch(const StateSpace& s, const Cluster& c, const PlanOptions& plan_options)
      : s_(s), c_(c), o_(plan_options), S_(s.num_states()), mem_(memory_limit(c, plan_options)) {
    words_ = (S_ + 63) / 64;
    subset_bits_.assign(static_cast<size_t>(S_) * words_, 0);
    superset_bits_.assign(subset_bits_.size(), 0);
    supersets_.resize(S_);
    for (int j = 0; j < S_; ++j)
      for (int k : s.strict_subsets[j]) {
        subset_bits_[static_cast<size_t>(j) * words_ + k / 64] |= uint64_t{1} << (k % 64);
        superset_bits_[static_cast<size_t>(k) * words_ + j / 64] |= uint64_t{1} << (j % 64);
        supersets_[k].push_back(j);
      }
  }

  SearchResult run() {
    int L = static_cast<int>(c_.levels.size());
    for (int l = 0; l < L; ++l) solve_level(l, l + 1 == L);
    SearchResult r;
    const LevelTable& top = tables_.back();
    r.pipeline_ms = top.value[top.at(0, s_.last(), top.M)];
    r.data_parallel_ms = data_parallel();
    if (r.pipeline_ms == kInfinity) return r;
    for (auto& part : descend(L - 1, 0, s_.last())) {
      SearchStage st;
      st.from = part.from, st.to = part.to, st.workers = part.workers;
      describe(st);
      r.stages.push_back(st);
    }
    return r;
  }

 private:
  // Each k with a ⊊ k ⊊ b, nearest (highest) first: the words of b's strict subsets and a's
  // strict supersets, ANDed (walking the shorter of the two lists and looking up the other
  // took most of DenseNet-121's time on 4x4).
  template <class Visit>
  void between(int a, int b, const Visit& visit) const {
    const uint64_t* sub = subset_bits_.data() + static_cast<size_t>(b) * words_;
    const uint64_t* sup = superset_bits_.data() + static_cast<size_t>(a) * words_;
    for (int wi = words_ - 1; wi >= 0; --wi)
      for (uint64_t x = sub[wi] & sup[wi]; x != 0;) {
        int bit = 63 - __builtin_clzll(x);
        x &= ~(uint64_t{1} << bit);
        visit(wi * 64 + bit);
      }
  }
  double bandwidth(int level) const { return c_.levels[level].bandwidth_bytes_per_s() / 1000.0; }  // bytes/ms
  double param(int a, int b) const { return s_.parameter_bytes[b] - s_.parameter_bytes[a]; }
  double act(int a, int b) const { return s_.activation_bytes[b] - s_.activation_bytes[a]; }
  bool fits(double stash_copies, int a, int b) const {
    return mem_ <= 0 || stash_copies * (act(a, b) + param(a, b)) <= static_cast<double>(mem_);
  }
  // The time of the range a→b handed to level `level` as its compute time.
  double time(int level, int a, int b) const {
    if (level == 0) return s_.compute_ms[b] - s_.compute_ms[a];
    const LevelTable& below = tables_[level - 1];
    return below.value[below.at(a, b, below.M)];
  }

  void solve_level(int level, bool final_level) {
    LevelTable t;
    t.M = c_.levels[level].fan_out;
    t.all_rows = !final_level;
    t.S = S_;
    size_t rows = final_level ? 1 : S_;
    t.value.assign(rows * S_ * (t.M + 1), kInfinity);
    t.choice.assign(t.value.size(), Choice{});
    const int M = t.M;
    const double B = bandwidth(level);
    // Reference: num_machines_in_machine is the previous level's count, not the product.
    const double w = level == 0 ? 1.0 : c_.levels[level - 1].fan_out;
    const int last = s_.last();
    // Per (a, b), every m at once: the k that split a→b are walked once for all m, each m
    // weighing them in the same order (nearest first) with its own bound, as one m at a time
    // would (DenseNet-121 on 4x4: the all-rows level walked each k list 4 times).
    std::vector<double> best(M + 1), stage_on(M + 1);
    std::vector<Choice> pick(M + 1);
    for (int a = 0; a < static_cast<int>(rows); ++a)
      for (int b : supersets_[a]) {
        double tab = time(level, a, b);
        for (int m = 1; m <= M; ++m) {
          best[m] = kInfinity, pick[m] = Choice{};
          if ((!o_.straight || m == 1) && tab < kInfinity && fits(std::ceil(static_cast<double>(M - m) / m), a, b)) {
            best[m] = (tab + 4.0 * (m - 1) * param(a, b) / (B * m) / w) / m;
            pick[m] = Choice{-1, m};
          }
        }
        // k ranges over a ⊊ k ⊊ b, nearest first (small last stages find a good bound early);
        // a last stage on at most m−1 units never takes less than T(k,b)/(m−1), which prunes
        // the rest.
        if (M >= 2) between(a, b, [&](int k) {
          double tkb = time(level, k, b);
          if (tkb == kInfinity) return;
          // The last stage k→b on u units, its transfers with it: the same for every m, worked
          // out the first time an m needs it (most are pruned before).
          bool weighed = false;  // some m weighs this k
          for (int m = 2; m <= M; ++m) {
            if (tkb / (m - 1) >= best[m]) continue;
            if (!weighed) std::fill(stage_on.begin(), stage_on.end(), -1.0), weighed = true;
            int max_units = o_.straight ? 1 : m - 1;
            for (int u = 1; u <= max_units; ++u) {
              double prefix = t.value[t.at(a, k, m - u)];
              if (prefix >= best[m]) continue;
              if (!fits(std::ceil(static_cast<double>(M - m) / u), k, b)) continue;
              if (stage_on[u] < 0) {
                double v = (tkb + 4.0 * (u - 1) * param(k, b) / (B * u)) / u;
                if (o_.activation_transfer) {
                  v = std::max(v, 2.0 * s_.pipedream_output_bytes[k] / (B * u));
                  if (b != last) v = std::max(v, 2.0 * s_.pipedream_output_bytes[b] / (B * u));
                }
                stage_on[u] = v;
              }
              double v = std::max(prefix, stage_on[u]);
              if (v < best[m]) best[m] = v, pick[m] = Choice{k, u};
            }
          }
        });
        for (int m = 1; m <= M; ++m) t.value[t.at(a, b, m)] = best[m], t.choice[t.at(a, b, m)] = pick[m];
      }
    tables_.push_back(std::move(t));
  }

  // The stages of range a→b at `level` over all its units, with worker ids local to one unit
  // of `level` (a unit of level ℓ holds Π fan_out[0..ℓ] workers).
  std::vector<Part> descend(int level, int a, int b) const {
    const LevelTable& t = tables_[level];
    std::vector<std::pair<std::pair<int, int>, int>> ranges;  // ((from, to), units), last first
    for (int to = b, m = t.M; m > 0;) {
      Choice ch = t.choice[t.at(a, to, m)];
      PT_CHECK(ch.units > 0, "no choice at level ", level, " for ", a, "->", to, " on ", m);
      int from = ch.k < 0 ? a : ch.k;
      ranges.push_back({{from, to}, ch.units});
      if (ch.k < 0) break;
      to = ch.k, m -= ch.units;
    }
    std::reverse(ranges.begin(), ranges.end());
    int block = c_.workers_per_unit_below(level);  // workers in one unit of the level below
    std::vector<Part> parts;
    int unit = 0;
    for (auto& [range, units] : ranges) {
      std::vector<Part> inner = level == 0
                                    ? std::vector<Part>{Part{range.first, range.second, {0}}}
                                    : descend(level - 1, range.first, range.second);
      for (auto& in : inner) {
        Part p{in.from, in.to, {}};
        for (int u = unit; u < unit + units; ++u)
          for (int x : in.workers) p.workers.push_back(u * block + x);
        parts.push_back(std::move(p));
      }
      unit += units;
    }
    return parts;
  }

  // PipeDream's data-parallel time: T ← (T + 4(M−1)·P/(B·M)/w) / M, innermost level first.
  double data_parallel() const {
    double t = s_.compute_ms[s_.last()], p = s_.parameter_bytes[s_.last()];
    for (size_t l = 0; l < c_.levels.size(); ++l) {
      double M = c_.levels[l].fan_out, w = l == 0 ? 1.0 : c_.levels[l - 1].fan_out;
      t = (t + 4.0 * (M - 1) * p / (bandwidth(static_cast<int>(l)) * M) / w) / M;
    }
    return t;
  }

  // Indicative per-stage figures for the table: compute share and the stage's all-reduce and
  // transfers at the innermost level (the reference prints these per level only).
  void describe(SearchStage& st) const {
    double r = static_cast<double>(st.workers.size());
    double B = bandwidth(0);
    st.compute_ms = (s_.compute_ms[st.to] - s_.compute_ms[st.from]) / r;
    const double allreduce = 4.0 * (r - 1) * param(st.from, st.to) / (B * r) / r;
    double transfers = 0;
    if (o_.activation_transfer) {
      double in = st.from > 0 ? s_.pipedream_output_bytes[st.from] : 0;
      double out = st.to != s_.last() ? s_.pipedream_output_bytes[st.to] : 0;
      // The reference takes transfers as separate terms of a max, not added to the all-reduce.
      transfers = 2.0 * std::max(in, out) / (B * r);
    }
    st.comm_ms = std::max(allreduce, transfers);
    // The stage's time by the search's terms: the all-reduce adds to the compute, the transfers do
    // not, and the first stage has none (its output is the next stage's term): the table's
    // bottleneck, which max(compute, comm) put at VGG-16's stage 1 of 2-1-1 on 4 workers (112.8
    // ms of compute) where stage 0's 112.6 + 5.6 set the plan's 118.1. Exact on one level.
    st.time_ms = std::max(st.compute_ms + allreduce, st.from > 0 ? transfers : 0.0);
  }

  const StateSpace& s_;
  const Cluster& c_;
  const PlanOptions& o_;
  int S_;
  int64_t mem_;
  int words_ = 0;                                    // 64-bit words per state's bit set
  std::vector<uint64_t> subset_bits_, superset_bits_;  // [state][word]: its strict subsets, supersets
  std::vector<std::vector<int>> supersets_;
  std::vector<LevelTable> tables_;
};

}  // namespace

SearchResult search_pipedream(const StateSpace& space, const Cluster& cluster, const PlanOptions& options) {
  return PipedreamSearch(space, cluster, options).run();
}

}  // namespace pt::plan
