#include "schedule/memory.h"

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "core/units.h"
#include "schedule/generators.h"
#include "schedule/stage_bytes.h"
#include "schedule/stash_tracker.h"

namespace pt::schedule {

namespace {

MemoryOptions resolved(const MemoryOptions& given, const profile::Profile& p) {
  MemoryOptions options = given;
  if (options.optimizer_copies < 0) options.optimizer_copies = optimizer_copies(p);
  return options;
}

}  // namespace

std::vector<int> weight_versions_kept(const Schedule& s, int w, const profile::Profile& p, const MemoryOptions& given) {
  const MemoryOptions options = resolved(given, p);
  StashTracker versions;
  bool predicting = predicts_copies(s, options);
  if (predicting && s.weight_delay > 0) versions.share_predictions(s.microbatches);
  else versions.delay_weights(s.weight_delay, s.microbatches);
  if (predicting)
    for (const auto& [key, steps] : s.steps_in_flight(w))
      if (steps > 0) versions.predicted(key.first, key.second, steps);
  for (const Action& a : s.actions[w]) versions.on(a, s.split_backward[a.stage]);
  std::vector<int> kept(s.num_stages, 0);
  for (const Action& a : s.actions[w])
    if (kept[a.stage] == 0)
      // Vertical sync keeps its history and the newest: counted by the stashes alone, pipedream's
      // 3-stage mlp was modelled at 46.5 / 24.0 / 19.4 MiB of tensors and measured 95.1 / 52.3 / 51.2.
      kept[a.stage] = std::max(versions.weight_versions(a.stage),
                               s.vertical_sync_history(a.stage) + (s.vertical_sync ? 1 : 0));
  return kept;
}

namespace {

// Worker w's memory: `kept` its weight versions per stage (weight_versions_kept).
WorkerMemory worker_memory(const Schedule& s, int w, const profile::Profile& p, const LayerBytes& lb,
                           const std::vector<int>& kept, const MemoryOptions& options) {
  const std::vector<StageBytes>& bytes = lb.bytes;
  const double scale = lb.scale;
  const std::vector<double>&busy = lb.busy, &split_busy = lb.split_busy, &weight_busy = lb.weight_busy;
  WorkerMemory m;
  const auto& list = s.actions[w];
  // The stages this worker holds, in order, and per (stage, microbatch) the bytes held until
  // its last backward and the received gradients: flat arrays (maps were a sixth of the joint
  // search's time).
  std::vector<int> local(s.num_stages, -1), stages;
  int microbatches = 1;
  for (const Action& a : list) {
    if (local[a.stage] < 0) local[a.stage] = 0, stages.push_back(a.stage);
    microbatches = std::max(microbatches, a.microbatch + 1);
  }
  std::sort(stages.begin(), stages.end());
  for (size_t i = 0; i < stages.size(); ++i) local[stages[i]] = static_cast<int>(i);
  // A stage whose gradient this worker makes itself (the V's and interleaved's chunks on one
  // worker): no receive holds it, its B hands it over, and it stays until that stage's last
  // backward. Uncounted, zb-v's second worker on VGG-16 (2 workers, 4 microbatches) was modelled
  // at 622.6 MiB and held 720.6, a microbatch's gradient more.
  std::vector<bool> handed(s.num_stages, false);
  for (int st : stages) handed[st] = st + 1 < s.num_stages && local[st + 1] >= 0;
  for (const Action& a : list)
    if (a.kind == ActionKind::kRecvGradient) handed[a.stage] = false;
  std::vector<double> held(stages.size() * microbatches, 0.0), grads(held.size(), 0.0);
  auto slot = [&](int stage, int mb) { return static_cast<size_t>(local[stage]) * microbatches + mb; };
  double now = 0, peak = 0;
  int in_flight = 0;
  bool measuring = true;
  auto at = [&](double v, int k) {
    if (measuring && v > peak) peak = v, m.peak_in_flight = k;
  };
  // Receives posted ahead as the runtime posts them (Worker::run): a received tensor is held
  // from its post.
  size_t next_receive = 0;
  int outstanding = 0;
  // Gradient sends not yet waited for hold their input gradients (Worker::send): the last
  // sends_ahead to each peer, and a run's last ones until the next run's first receive. (An
  // activation's send is waited for at its backward: the output is in the stash until then.)
  std::map<int, std::deque<double>> sending;
  double earlier = 0;  // the previous run's
  // Within one process what a worker receives is its sender's tensor, and a split backward's
  // stage keeps its input and its output's gradient to its W: the sender's for as many more of
  // its microbatches as the receiver runs Bs of that stage between a microbatch's B and its W.
  // Counted to the receiver's B, zb-h1's third of 4 workers on VGG-16 (threads, 4 microbatches)
  // was modelled at 390.3 MiB and held 439.3, a microbatch's gradient more.
  std::map<std::pair<int, int>, int> lags;  // by peer and the receiving stage
  auto lag_of = [&](int peer, int stage) {
    if (options.receives_ahead > 0 || stage < 0 || stage >= s.num_stages || !s.split_backward[stage]) return 0;
    auto [it, fresh] = lags.try_emplace({peer, stage}, 0);
    if (!fresh) return it->second;
    std::map<int, int> b_at;  // microbatch -> how many of the stage's Bs ran before its own
    int done = 0;
    for (const Action& a : s.actions[peer]) {
      if (a.stage != stage) continue;
      if (a.kind == ActionKind::kBackward) b_at[a.microbatch] = done++;
      if (a.kind == ActionKind::kBackwardWeight && b_at.count(a.microbatch))
        it->second = std::max(it->second, done - 1 - b_at[a.microbatch]);
    }
    return it->second;
  };
  // The outputs a stage's B let go of that its receiver still holds to its W (by receiver).
  std::map<std::pair<int, int>, int> output_to;  // (stage, microbatch) -> the worker its output went to
  for (const Action& a : list)
    if (a.kind == ActionKind::kSendActivation) output_to[{a.stage, a.microbatch}] = a.peer;
  std::map<int, std::deque<double>> lingering;
  auto sent = [&](int peer, int stage, double bytes) {
    const int most = options.sends_ahead + lag_of(peer, stage);
    if (most <= 0) return;
    auto& q = sending[peer];
    q.push_back(bytes);
    now += bytes;
    if (static_cast<int>(q.size()) > most) {
      now -= q.front();
      q.pop_front();
    }
  };
  auto post_ahead = [&] {
    for (; next_receive < list.size() && outstanding < options.receives_ahead; ++next_receive) {
      const Action& r = list[next_receive];
      if (r.kind != ActionKind::kRecvActivation && r.kind != ActionKind::kRecvGradient) continue;
      ++outstanding;
      bool activation = r.kind == ActionKind::kRecvActivation;
      double b = (activation ? bytes[r.stage].input : bytes[r.stage].output) * scale;
      (activation ? held : grads)[slot(r.stage, r.microbatch)] += b;
      now += b;
    }
  };
  auto release = [&](int stage, int mb) {
    size_t i = slot(stage, mb);
    now -= held[i] + grads[i];
    held[i] = grads[i] = 0;
    --in_flight;
  };
  // A synchronous list is one minibatch, run again and again: a first pass leaves the sends
  // a run ends with, and the second is measured.
  for (int pass = s.flush ? 0 : 1; pass < 2; ++pass) {
    measuring = pass == 1;
    next_receive = 0;
    outstanding = 0;
    if (pass == 1)
      for (auto& [peer, q] : sending) {
        for (double b : q) earlier += b;
        q.clear();
      }
    for (const Action& a : list) {
      post_ahead();
      at(now, in_flight);
      bool split = s.split_backward[a.stage];
      const StageBytes& b = bytes[a.stage];
      bool recompute = s.recomputes(a.stage);
      switch (a.kind) {
        case ActionKind::kRecvActivation:
        case ActionKind::kRecvGradient:
          if (outstanding > 0) --outstanding;  // reached: its place in the window frees
          now -= earlier;                      // the previous run's sends are done
          earlier = 0;
          break;
        case ActionKind::kSendGradient: sent(a.peer, a.stage - 1, b.input * scale); break;
        case ActionKind::kForward: {
          // Recomputing, it keeps only its input, and the output it sent until its backward
          // (held by the send; within one process, by the receiver until about then). The last
          // stage sends none: its output is the loss.
          double kept = !recompute ? b.stash_at(scale) : a.stage == s.num_stages - 1 ? 0 : b.output * scale;
          if (a.stage == 0) kept += b.input * scale;  // the data, held until its backward
          held[slot(a.stage, a.microbatch)] += kept;
          now += kept;
          ++in_flight;
          at(now + busy[a.stage], in_flight);
          break;
        }
        case ActionKind::kBackward: {
          at(now + std::max(split ? split_busy[a.stage] : busy[a.stage], a.stage > 0 ? b.input * scale : 0) +
                 (recompute ? b.stash_at(scale) : 0),
             in_flight);
          if (a.stage > 0 && handed[a.stage - 1]) {
            grads[slot(a.stage - 1, a.microbatch)] += b.input * scale;
            now += b.input * scale;
          }
          // Where the sender keeps its output to its own W too (its stash whole, or recomputing),
          // the two counts overlap: over, never under (real layers' zb-v read 15.6 MiB against
          // 20.7 held, counted only to the sender's W).
          if (auto to = output_to.find({a.stage, a.microbatch}); to != output_to.end()) {
            if (int lag = lag_of(to->second, a.stage + 1); lag > 0) {
              auto& q = lingering[to->second];
              q.push_back(b.output * scale);
              now += b.output * scale;
              if (static_cast<int>(q.size()) > lag) now -= q.front(), q.pop_front();
            }
          }
          if (!split) {
            release(a.stage, a.microbatch);
          } else if (b.split >= 0) {
            // B frees what only the input gradient needed and keeps what W needs.
            double kept = b.split_at(scale) - (recompute ? 0 : b.stash_at(scale));
            held[slot(a.stage, a.microbatch)] += kept;
            now += kept;
          } else if (recompute) {
            // Its W needs what the recomputed forward saved: held until then. Counted freed at
            // B, a zb-h1 last stage's recomputation saved 0.3 MiB in the model and nothing in
            // a run, and `plan --memory` chose it to fit a cap the run then exceeded.
            held[slot(a.stage, a.microbatch)] += b.stash_at(scale);
            now += b.stash_at(scale);
          }
          break;
        }
        case ActionKind::kBackwardWeight:
          // While it runs it holds its stash and its weight gradient's workspace, then frees them.
          at(now + weight_busy[a.stage], in_flight);
          release(a.stage, a.microbatch);
          break;
        default: break;
      }
    }
  }
  std::vector<int> layers_held;  // the layers of all its stages
  for (int st : stages) {
    double params = bytes[st].params;
    m.weights += static_cast<int64_t>(params * kept[st] + bytes[st].buffers);
    m.gradients += static_cast<int64_t>(params);
    m.optimizer += options.optimizer_copies * static_cast<int64_t>(params);
    layers_held.insert(layers_held.end(), bytes[st].layers.begin(), bytes[st].layers.end());
  }
  // A tie whose layers lie in two of its stages (a V's first and last chunk on worker 0) is one
  // tensor there, one gradient and one optimizer state: counted per stage, a Llama's embedding
  // read twice (939 MiB modelled for 547 measured) and `plan --memory` refused a V that fit.
  // A frozen tie likewise, among the buffers (profile::buffer_bytes counts it once in a set).
  if (stages.size() > 1) {
    int64_t across = profile::tied_duplicate_bytes(p, layers_held), frozen = -profile::buffer_bytes(p, layers_held);
    for (int st : stages) {
      across -= profile::tied_duplicate_bytes(p, bytes[st].layers);
      frozen += profile::buffer_bytes(p, bytes[st].layers);
    }
    m.weights -= across + frozen;
    m.gradients -= across;
    m.optimizer -= options.optimizer_copies * across;
  }
  m.activations = static_cast<int64_t>(peak);
  m.process = options.process_bytes;
  return m;
}

}  // namespace

std::vector<WorkerMemory> memory_per_worker(const Schedule& s, const profile::Profile& p, const MemoryOptions& given) {
  const MemoryOptions options = resolved(given, p);
  const LayerBytes lb = layer_bytes(s, p);
  std::vector<WorkerMemory> out(s.num_workers());
  for (int w = 0; w < s.num_workers(); ++w) out[w] = worker_memory(s, w, p, lb, weight_versions_kept(s, w, p, options), options);
  return out;
}

WorkerMemory memory_of_worker(const Schedule& s, int worker, const profile::Profile& p, const MemoryOptions& given,
                              const std::vector<int>* kept) {
  const MemoryOptions options = resolved(given, p);
  return worker_memory(s, worker, p, layer_bytes(s, p), kept ? *kept : weight_versions_kept(s, worker, p, options), options);
}

int memory_minibatches(const Schedule& s, const MemoryOptions& options) {
  if (s.flush) return s.minibatches;
  int64_t items = s.num_workers() + std::max(0, options.receives_ahead) + 2, needed = s.minibatches, lcm = 1;
  for (int st = 0; st < s.num_stages; ++st) {
    int64_t r = s.replicas(st);
    lcm = std::lcm(lcm, r);
    needed = std::max(needed, (r * items + s.microbatches - 1) / s.microbatches);
  }
  needed = (needed + lcm - 1) / lcm * lcm;
  // No longer than the generators make.
  if (needed > kMaxMinibatches) needed = std::max<int64_t>(s.minibatches, kMaxMinibatches / lcm * lcm);
  return static_cast<int>(needed);
}

std::vector<WorkerMemory> memory_per_worker(const Schedule& s, const std::function<Schedule(int minibatches)>& longer,
                                            const profile::Profile& p, const MemoryOptions& options) {
  int n = memory_minibatches(s, options);
  return n > s.minibatches ? memory_per_worker(longer(n), p, options) : memory_per_worker(s, p, options);
}

std::vector<WorkerMemory> memory_over_long_run(const std::string& kind, const plan::Plan& plan,
                                               const ScheduleOptions& options, const profile::Profile& p,
                                               const MemoryOptions& memory, const Schedule* built) {
  auto over = [&](int minibatches) {
    ScheduleOptions longer = options;
    longer.minibatches = minibatches;
    return make_unvalidated_schedule(kind, plan, longer);
  };
  if (built) return memory_per_worker(*built, over, p, memory);
  return memory_per_worker(make_unvalidated_schedule(kind, plan, options), over, p, memory);
}

int optimizer_copies(const profile::Profile& p) { return p.optimizer == "adam" || p.optimizer == "adamw" ? 2 : 1; }

int64_t peak_memory(const std::vector<WorkerMemory>& workers) {
  int64_t most = 0;
  for (const auto& m : workers) most = std::max(most, m.total());
  return most;
}

std::string describe(const WorkerMemory& m) {
  std::ostringstream os;
  os << "weights " << human_bytes(static_cast<double>(m.weights)) << " + gradients "
     << human_bytes(static_cast<double>(m.gradients)) << " + optimizer " << human_bytes(static_cast<double>(m.optimizer))
     // The peak of the stashes and what a pass needs while it runs (a layer's weight gradient before
     // it is added in, scratch): "activations" alone read 36.7 MiB where a 3072x3072 layer's
     // activations at batch 8 are under 1 MiB.
     << " + activations and workspace " << human_bytes(static_cast<double>(m.activations)) << " ("
     << m.peak_in_flight << " in flight)";
  if (m.process > 0) os << " + the process " << human_bytes(static_cast<double>(m.process));
  os << " = " << human_bytes(static_cast<double>(m.total()));
  return os.str();
}

}  // namespace pt::schedule
