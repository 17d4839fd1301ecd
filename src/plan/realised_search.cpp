// The pipetrain model's search. g(k, w, λ[, q]) is the smallest slowest-stage time (estimate_plan)
// for the layers after state k on workers w..W-1, where λ is the innermost level holding the
// previous stage and worker w (for contiguous ranges, a stage's input crosses the level holding
// both whole stages, and that level is the larger of λ and the stage's own reach back to w-1),
// with exactly q stages when memory is limited, since a stage's stash depth is the number of
// stages from it to the end:
//   g(k, w, λ, q) = min over states j ⊋ k and replicas n of
//                   max(stage(k→j on workers w..w+n-1 after λ, depth q), g(j, w+n, λ', q-1)),
//   λ' = the level holding workers w..w+n,  g(all, W, ·, 0) = 0.
// It is solved from the last state backwards, so each stage knows its depth. Lower bounds
// (a stage is never faster than its compute C/n) prune most of the (j, n) pairs.
// Each stage's time also takes its in-flight bound (in_flight_bound, realised_cost.h): the
// round trip from it to the end over the minibatches it keeps in flight, where the round trip
// is the one of the continuation each cell keeps, carried up the table. The minimum over stage
// times is exact; the round trip rides along with it, so a cell can keep a continuation whose
// round trip is longer than another's it passed over (3 of 490 random brute-force cases, by
// 3.5% at most). Without it, the closed form could not tell GNMT's splits that send the most
// across links from those that send the least (GNMT on 16 workers at 10 Gbit/s: 24.9 -> 20.8 ms
// per minibatch in simulation). Every choice
// of the first stage keeps its best continuation: those are the alternatives the planner ranks.
// The first stage may also start at any worker w > 0 (λ = 0: nothing before it): that plans the
// smaller cluster of workers w..W-1 in the same tables (SearchResult::suffixes).
// A DAG's space is searched after a chain of its states (search.h, bounding_chain): the chain's
// `candidates`-th best plan from each start bounds the space's, and a boundary (k, w) whose
// compute before it over the workers before it, or after it over those after it, exceeds the
// bound of every start before w is on no plan the search returns: it is not searched (ResNet-101
// on 4x4 workers: ~80% of them). (With the round trip riding along, a cell of the space may keep
// a continuation the chain's would not, so the bound holds for the stage times and, as
// SearchBound's random DAGs and published profiles check, for what the search returns.)
#include <algorithm>
#include <queue>
#include <set>

#include "core/error.h"
#include "core/fingerprint.h"
#include "plan/realised_cost.h"
#include "plan/realised_dp.h"
#include "plan/search.h"

namespace pt::plan {

namespace detail {

void PipetrainDp::fill(const std::vector<double>& bound_from) {
  // A root's whole plan by what the search reads of it (StateSpace::add_stage_sums, and each
  // stage's workers). Roots alike in these are one plan to every model: GNMT's 48 best on 4x4
  // were 17 copies of one plan and 12 of another, whose first stage took a different share of
  // its free inputs and getitems, and they crowded out 4-4-4-4, which simulates 20% faster than
  // the plan chosen from them. Each start keeps the first offered of each.
  auto plan_key = [&](int q, int j, int n, int w) {
    Fingerprint f;
    for (int k = 0, lam = 0;;) {
      s.add_stage_sums(f, k, j);
      f.add(w), f.add(n);
      if (j == last) return f.key();
      lam = lam_after(w, n), k = j, w += n, q = Q ? q - 1 : 0;
      size_t i = at(q, k, w, lam);
      j = next_state[i], n = replicas[i];
      PT_CHECK(j >= 0, "broken choice at state ", k, " worker ", w);
    }
  };
  std::vector<std::set<Fingerprint::Key>> offered_from(W);  // plan_key of each start's roots

  // The first workers of the smaller clusters planned here (SearchResult::suffixes).
  std::vector<char> suffix_start(W, 0);
  if (options.fewer_workers)
    for (const Cluster& sub : smaller_clusters(cluster))
      if (sub.workers() >= options.fewest_workers) suffix_start[W - sub.workers()] = 1;
  // The starts with a bound, and whether a boundary at (k > 0, w) can be on a returned plan.
  std::vector<int> starts;
  for (int w = 0; w < W; ++w)
    if (w == 0 || suffix_start[w]) starts.push_back(w);
  auto out_of_bounds = [&](int k, int w) {
    double rest = (s.compute_ms[last] - s.compute_ms[k]) / (W - w);
    for (int from : starts) {
      if (from >= w) break;
      if (std::max(s.compute_ms[k] / (w - from), rest) <= bound_from[from] * (1 + 1e-9)) return false;
    }
    return true;
  };
  // The kept_from(w) best times of the first stages offered from worker w so far (max first).
  std::priority_queue<double> root_times;
  // A cell's best choice so far, per λ.
  struct Best {
    double t = kInfinity;
    int j = -1, n = 0;
    double trip = 0;  // its round trip
  };
  std::vector<Best> cell(Lv);
  for (int k = S - 2; k >= 0; --k)
    for (int w = W - 1; w >= (k > 0 ? 1 : 0); --w) {  // a later state needs an earlier stage
      // State 0 after worker 0 is only a smaller cluster's first stage (nothing before it).
      if (k == 0 && w > 0 && !suffix_start[w]) continue;
      if (k > 0 && out_of_bounds(k, w)) {
        for (int q = (Q ? 1 : 0); q <= std::min(Q, W - w); ++q) suffix[sat(q, k, w)] = suffix[sat(q, k, w + 1)];
        continue;
      }
      root_times = {};
      const bool root = k == 0;
      // The cells of every λ the previous stage may have reached (none before a first stage)
      // differ only in the stage's input link: one scan of the (j, n) pairs serves them all,
      // pruned against the slowest of their bests (2 of them on a 2-level cluster).
      // Not so --straight: a whole input on one replica makes the λ's bests too far apart.
      const int lam_first = root ? 0 : 1, lam_end = root ? 1 : Lv;
      const int lam_step = options.straight ? 1 : lam_end - lam_first;
      for (int q = (Q ? 1 : 0); q <= std::min(Q, W - w); ++q) {
        double best_any = kInfinity;
        for (int lam_lo = lam_first; lam_lo < lam_end; lam_lo += lam_step) {
          const int lam_hi = lam_lo + lam_step;
          double in_floor_min = kInfinity;  // the least a byte of input takes over those λ
          for (int lam = lam_lo; lam < lam_hi; ++lam)
            in_floor_min = std::min(in_floor_min, in_floor[static_cast<size_t>(w) * Lv + lam]);
          for (int lam = lam_lo; lam < lam_hi; ++lam) cell[lam] = Best{};
          // The stage k→j on w..w+n-1 then the continuation at rest_i: its value t with the
          // stage's in-flight bound, whose round trip is kept in trip (offer keeps the best's).
          double trip = 0;
          auto round_trip_of = [&](double compute, int j, int n, size_t rest_i) {
            if (j == last) return compute + host_ms;
            int level = reach(w, w + n);
            double out = level >= 0 ? latency_at[level] + s.frontier_bytes[j] * ms_per_byte_at[level] : 0;
            return compute + host_ms + 2 * out + round_trip[rest_i];
          };
          // The bound a pair must beat to matter: the slowest λ's best; the root keeps every
          // first stage's best that can be among the kept_from(w) best from worker w, so a choice
          // no faster than that many already offered cannot matter (ties are kept).
          double bound = kInfinity;
          auto offer = [&](int lam, double t, int j, int n) {
            if (root && t < kInfinity) {
              if (!offered_from[w].insert(plan_key(q, j, n, w)).second) return;
              roots.push_back({t, q, j, n, w});
              root_times.push(t);
              if (static_cast<int>(root_times.size()) > kept_from(w)) root_times.pop();
            }
            // Ties go to the one-stage option, then the smaller state index, then the most
            // replicas: the choice does not depend on the order the supersets are visited in.
            Best& b = cell[lam];
            bool one_stage = b.j == last && b.n == W - w;
            if (t < b.t || (t == b.t && !one_stage && (j < b.j || (j == b.j && n > b.n)))) b = {t, j, n, trip};
          };
          auto refresh_bound = [&] {
            if (root) {
              bound = static_cast<int>(root_times.size()) == kept_from(w) ? root_times.top() : kInfinity;
              return;
            }
            bound = 0;
            for (int lam = lam_lo; lam < lam_hi; ++lam) bound = std::max(bound, cell[lam].t);
          };
          // Start from the one-stage option (the rest on every free worker): a finite bound early
          // lets the compute bound below skip most pairs.
          if (!options.straight || w + 1 == W) {
            double bytes = s.activation_bytes[last] - s.activation_bytes[k] + s.parameter_bytes[last] -
                           s.parameter_bytes[k];
            if (q <= 1 && (!Q || bytes <= static_cast<double>(mem))) {
              // Its in-flight bound is its compute over its replicas (one in flight on each).
              trip = round_trip_of(s.compute_ms[last] - s.compute_ms[k], last, W - w, 0);
              for (int lam = lam_lo; lam < lam_hi; ++lam)
                offer(lam, stage(k, last, w, W - w, lam, 1).time_ms, last, W - w);
            }
          }
          refresh_bound();
          // The rest after a stage ending at j runs the compute left on at most W - w - 1 workers,
          // so it is no faster than that shared evenly (a stage is never faster than its compute
          // over its replicas): the supersets too small for that are skipped, the first of them
          // by bisection (Inception-v3's states have many supersets of nearly equal compute, which
          // the other bounds pass).
          const int* ups_begin = s.supersets.data() + s.superset_begin[k];
          const int* ups_end = s.supersets.data() + s.superset_begin[k + 1];
          // (The bound, summed in another order than the rest's time, may differ in its last
          // bits: it prunes only what it exceeds by more.)
          auto rest_too_slow = [&](int j) {
            return (s.compute_ms[last] - s.compute_ms[j]) > (W - w - 1) * bound * (1 + 1e-9);
          };
          // One superset j and its replica counts; false once no later superset can be faster.
          // (Inlined: as a call, the searches on ResNet-101 took a third longer.)
          auto try_superset = [&](int j) __attribute__((always_inline)) {
            double compute = s.compute_ms[j] - s.compute_ms[k];
            // On at most W - w replicas (one, --straight): no faster than compute / that.
            if (compute / (options.straight ? 1 : W - w) > bound) return false;  // and so for every later superset
            if (rest_too_slow(j)) return true;
            // Nor is it faster than its transfers at the fastest level they can cross, shared
            // over its replicas, which grows as they fall: where links outweigh compute
            // (Inception's one-worker stages, the 4x4 cluster's outer level) many replica counts
            // the compute leaves are past it, and the tables below need not be read. (Summed in
            // another order than the stage's time: it prunes only what it exceeds by more.)
            double links_ms = s.frontier_bytes[k] * in_floor_min + (j != last ? s.frontier_bytes[j] * out_floor[w] : 0);
            auto links_too_slow = [&](int n) { return links_ms / n > bound * (1 + 1e-9); };
            if (links_too_slow(options.straight ? 1 : W - w)) return true;
            double state_bytes = s.activation_bytes[j] - s.activation_bytes[k] + s.parameter_bytes[j] -
                                 s.parameter_bytes[k];
            if (Q && q * state_bytes > static_cast<double>(mem)) return true;
            if (suffix[sat(Q ? q - 1 : 0, j, w + 1)] > bound) return true;
            // The last stage takes every worker left; any other leaves one for the rest.
            int n_max = options.straight ? 1 : j == last ? W - w : W - w - 1;
            int n_min = j == last ? W - w : 1;
            // The rest's bound suffix(j, w + n) grows with n (fewer workers after): skip at once
            // the replica counts that leave the rest no chance (on 1,024 workers, most of them).
            if (n_max > n_min) {
              size_t row = sat(Q ? q - 1 : 0, j, 0);
              int lo = n_min, hi = n_max;  // the largest n with suffix <= bound is in [lo - 1, hi]
              while (lo <= hi) {
                int mid = lo + (hi - lo) / 2;
                if (suffix[row + w + mid] > bound) hi = mid - 1;
                else lo = mid + 1;
              }
              n_max = hi;
            }
            // Replicated, it is no faster than its compute and the all-reduce of its weights (or
            // of one bucket of them, the last) at its own ring, shared over its replicas
            // (realised_stage), nor on fewer replicas than its compute over these and the
            // fastest such all-reduce on 2..n of them: where weights outweigh compute (the blind
            // bound's all-reduce of ResNet-101's later stages) most replica counts are past it,
            // and n = 1 is left.
            double weights = s.parameter_bytes[j] - s.parameter_bytes[k];
            if (options.bucket_bytes > 0) weights = std::min(weights, static_cast<double>(options.bucket_bytes));
            const double* below = allreduce_below.data() + static_cast<size_t>(w) * (W + 1);
            for (int n = n_max; n >= n_min; --n) {
              if (compute / n > bound || links_too_slow(n)) break;
              if (n > 1 && compute / n + weights * below[n] > bound * (1 + 1e-9)) {
                n = 2;  // so for every count down to 2 (the loop goes on to 1, if allowed)
                continue;
              }
              if (n > 1 && compute / n + weights * links_at(w, n, 0).allreduce_ms_per_byte > bound * (1 + 1e-9)) continue;
              size_t rest_i = rest_at(Q ? q - 1 : 0, j, w, n);
              double rest = g[rest_i];
              if (rest > bound) continue;
              if (j == last && n == W - w && (!options.straight || w + 1 == W) && q <= 1) continue;  // offered
              // Its in-flight bound first: where it alone passes the bound, the stage's other
              // terms are not worked out (most pairs, over ResNet's and GNMT's links).
              trip = round_trip_of(compute, j, n, rest_i);
              double slots = slots_at[static_cast<size_t>(w) * (W + 1) + n];
              if (trip > bound * (1 + 1e-9) * slots) continue;
              for (int lam = lam_lo; lam < lam_hi; ++lam)
                offer(lam, std::max({stage(k, j, w, n, lam, q).time_ms, rest, trip / slots}), j, n);
              refresh_bound();
            }
            return true;
          };
          // A non-root cell first tries the superset nearest an even share of the compute left
          // over its free workers: from a finite bound the scan below skips most supersets.
          if (!root && bound == kInfinity) {
            double share = (s.compute_ms[last] - s.compute_ms[k]) / (W - w);
            const int* near = std::partition_point(ups_begin, ups_end,
                                                   [&](int j) { return s.compute_ms[j] - s.compute_ms[k] < share; });
            if (near != ups_end) try_superset(*near);
            if (near != ups_begin) try_superset(*(near - 1));
          }
          const int* first = std::partition_point(ups_begin, ups_end, rest_too_slow);
          for (const int* it = first; it != ups_end && try_superset(*it); ++it) {
          }
          for (int lam = lam_lo; lam < lam_hi; ++lam) {
            size_t i = at(q, k, w, lam);
            g[i] = cell[lam].t, next_state[i] = cell[lam].j, replicas[i] = cell[lam].n;
            round_trip[i] = cell[lam].trip;
            best_any = std::min(best_any, cell[lam].t);
          }
        }
        suffix[sat(q, k, w)] = std::min(best_any, suffix[sat(q, k, w + 1)]);
      }
    }
}

}  // namespace detail

namespace {

// The search on `s`. bound_from[w]: a time no lower than the `candidates`-th best first stage of
// the plans starting at worker w (kInfinity: none known). A plan through a stage boundary at
// state k and worker w is no faster than the compute before it shared over the workers before
// it, nor than the compute after it over the workers after it; where that exceeds the bound of
// every start before w, no plan the search returns passes there, and (k, w) is not searched.
// kth_from, if given, receives each start's `candidates`-th best first stage (kInfinity: fewer).
SearchResult search_within(const StateSpace& s, const Cluster& cluster, const PlanOptions& options,
                           const std::vector<double>& bound_from, std::vector<double>* kth_from) {
  detail::PipetrainDp dp(s, cluster, options);
  dp.fill(bound_from);
  return dp.result(kth_from);
}

std::vector<double> kth_from(const StateSpace& s, const Cluster& cluster, const PlanOptions& options,
                             int bounding_chain);

// The bounds for searching `s` (kInfinity: none) where it has more than bounding_chain states:
// each start's `candidates`-th best first stage on a chain of its states, itself bounded so:
// the whole chain where it is under a fourth of the states (Inception-v3: 92 of 1,345, whose
// bounds are tighter than 64's), else bounding_chain of them (ResNet-101: 347 of 411, whose
// search takes longer than it saves).
std::vector<double> bounds_for(const StateSpace& s, const Cluster& cluster, const PlanOptions& options,
                               int bounding_chain) {
  if (bounding_chain < 2 || s.num_states() <= bounding_chain) return std::vector<double>(cluster.workers(), kInfinity);
  StateSpace chain = chain_within(s, s.num_states());
  if (4 * chain.num_states() > s.num_states()) chain = chain_within(chain, bounding_chain);
  return kth_from(chain, cluster, options, bounding_chain);
}

// Each start's `candidates`-th best first stage on `s`.
std::vector<double> kth_from(const StateSpace& s, const Cluster& cluster, const PlanOptions& options,
                             int bounding_chain) {
  std::vector<double> kth;
  search_within(s, cluster, options, bounds_for(s, cluster, options, bounding_chain), &kth);
  return kth;
}

}  // namespace

SearchResult search_pipetrain(const StateSpace& s, const Cluster& cluster, const PlanOptions& options,
                              int bounding_chain) {
  return search_within(s, cluster, options, bounds_for(s, cluster, options, bounding_chain), nullptr);
}

}  // namespace pt::plan