#include "schedule/schedule.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"

namespace pt::schedule {

int Schedule::worker_of(int stage, int mb) const {
  PT_CHECK(stage >= 0 && stage < num_stages, "stage ", stage, " of ", num_stages);
  const auto& ws = stage_workers[stage];
  return ws[mb % static_cast<int>(ws.size())];
}

int Schedule::chunk_of(int stage) const {
  int w = stage_workers[stage][0];
  int chunk = 0;
  for (int s = 0; s < stage; ++s)
    if (std::find(stage_workers[s].begin(), stage_workers[s].end(), w) != stage_workers[s].end()) ++chunk;
  return chunk;
}

std::vector<int> Schedule::worker_layers(int worker) const {
  std::vector<int> out;
  for (int st = 0; st < num_stages; ++st)
    if (std::count(stage_workers[st].begin(), stage_workers[st].end(), worker))
      out.insert(out.end(), stage_layers[st].begin(), stage_layers[st].end());
  std::sort(out.begin(), out.end());
  return out;
}

std::map<std::pair<int, int>, int> Schedule::steps_in_flight(int worker) const {
  return schedule::steps_in_flight(actions[worker]);
}

std::map<std::pair<int, int>, int> steps_in_flight(const std::vector<Action>& list) {
  std::map<std::pair<int, int>, int> at_forward, out;
  std::map<int, int> steps;  // the worker's Steps so far, per stage
  for (const Action& a : list) {
    if (a.kind == ActionKind::kStep) ++steps[a.stage];
    if (a.kind == ActionKind::kForward) at_forward[{a.stage, a.microbatch}] = steps[a.stage];
    if (a.kind == ActionKind::kBackward) {
      auto it = at_forward.find({a.stage, a.microbatch});
      if (it != at_forward.end()) out[it->first] = steps[a.stage] - it->second;
    }
  }
  return out;
}

int least_weight_delay(const std::vector<Action>& list, int microbatches) {
  int delay = 0;
  std::map<int, int> steps;               // stage -> its Steps so far
  std::set<std::pair<int, int>> begun;  // (stage, minibatch) forwarded
  for (const Action& a : list) {
    if (a.kind == ActionKind::kStep) ++steps[a.stage];
    if (a.kind == ActionKind::kForward && begun.insert({a.stage, a.microbatch / microbatches}).second)
      delay = std::max(delay, a.microbatch / microbatches - steps[a.stage]);
  }
  return delay;
}

std::map<int, int64_t> Schedule::vertical_sync_entries() const {
  std::map<int, int64_t> entry;
  if (!vertical_sync) return entry;
  for (int w : stage_workers[0]) {
    int64_t steps = 0;
    for (const Action& a : actions[w]) {
      if (a.stage != 0) continue;
      if (a.kind == ActionKind::kStep) ++steps;
      if (a.kind == ActionKind::kForward) entry[a.microbatch] = steps;
    }
  }
  return entry;
}

int Schedule::vertical_sync_history(int st) const {
  if (!vertical_sync) return 0;
  const std::map<int, int64_t> entry = vertical_sync_entries();
  const bool split = st < static_cast<int>(split_backward.size()) && split_backward[st];
  int64_t history = 1;
  for (int w : stage_workers[st]) {
    int64_t steps = 0;  // this stage's, on this worker: its version less the segment's first
    std::set<int> in_flight;
    for (const Action& a : actions[w]) {
      if (a.stage != st) continue;
      if (a.kind == ActionKind::kForward) {
        history = std::max(history, steps - entry.at(a.microbatch));
        in_flight.insert(a.microbatch);
      } else if ((a.kind == ActionKind::kBackward && !split) || a.kind == ActionKind::kBackwardWeight) {
        in_flight.erase(a.microbatch);
      } else if (a.kind == ActionKind::kStep) {
        ++steps;  // the step drops the versions older than its history: those in flight stay
        for (int mb : in_flight) history = std::max(history, steps - entry.at(mb));
      }
    }
  }
  return static_cast<int>(history);
}

std::vector<bool> Schedule::completes_gradients(int worker) const {
  const auto& list = actions[worker];
  std::vector<bool> out(list.size(), false);
  constexpr size_t kNone = static_cast<size_t>(-1);
  std::vector<size_t> last;  // [stage] -> its latest weight-gradient action so far (kNone: none)
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    if (a.stage < 0) continue;  // not a stage's action (the validator names it)
    if (static_cast<size_t>(a.stage) >= last.size()) last.resize(a.stage + 1, kNone);
    bool split = a.stage < static_cast<int>(split_backward.size()) && split_backward[a.stage];
    if ((a.kind == ActionKind::kBackward && !split) || a.kind == ActionKind::kBackwardWeight) last[a.stage] = i;
    if (a.kind == ActionKind::kAllReduce && last[a.stage] != kNone) out[last[a.stage]] = true, last[a.stage] = kNone;
  }
  return out;
}

void Schedule::add(int worker, ActionKind kind, int stage, int mb, int peer) {
  PT_CHECK(worker >= 0 && worker < num_workers(), "worker ", worker);
  Action a;
  a.worker = worker;
  a.kind = kind;
  a.stage = stage;
  a.microbatch = mb;
  a.chunk = chunks > 1 ? chunk_of(stage) : 0;
  a.peer = peer;
  actions[worker].push_back(a);
}

std::string to_text(const Schedule& s, bool compute_only) {
  std::ostringstream os;
  for (int w = 0; w < s.num_workers(); ++w) {
    os << "w" << w << ":";
    for (const auto& a : s.actions[w])
      if (!compute_only || !is_p2p(a.kind)) os << " " << to_string(a);
    os << "\n";
  }
  return os.str();
}

json to_json(const Schedule& s) {
  json stages = json::array();
  for (int st = 0; st < s.num_stages; ++st) {
    stages.push_back({{"workers", s.stage_workers[st]},
                      {"layers", s.stage_layers[st]},
                      {"weight_versions", s.weight_versions[st]},
                      {"split_backward", static_cast<bool>(s.split_backward[st])}});
    if (s.recomputes(st)) stages.back()["recompute"] = true;
  }
  json workers = json::array();
  for (const auto& list : s.actions) {
    json row = json::array();
    for (const auto& a : list) row.push_back(to_string(a));
    workers.push_back(row);
  }
  return {{"format", format_tag("schedule", kScheduleVersion)},
          {"kind", s.kind},
          {"microbatches", s.microbatches},
          {"minibatches", s.minibatches},
          {"chunks", s.chunks},
          {"flush", s.flush},
          {"vertical_sync", s.vertical_sync},
          {"weight_delay", s.weight_delay},
          {"stages", stages},
          {"workers", workers}};
}

Schedule schedule_from_json(const json& doc, const std::string& source) {
  JsonField root(doc, source, "");
  expect_format(root, "schedule", kScheduleVersion);
  Schedule s;
  s.kind = root["kind"].as_string();
  // Counts held in an int: 4294967297 is an error, not 1 after narrowing.
  constexpr int64_t kMostInt = std::numeric_limits<int>::max();
  s.microbatches = static_cast<int>(root["microbatches"].as_int_in(1, kMostInt));
  s.minibatches = static_cast<int>(root["minibatches"].as_int_in(1, kMostInt));
  s.chunks = static_cast<int>(root["chunks"].as_int_in(1, kMostInt));
  s.flush = root["flush"].as_bool();
  s.vertical_sync = root.has("vertical_sync") && root["vertical_sync"].as_bool();
  if (root.has("weight_delay")) s.weight_delay = static_cast<int>(root["weight_delay"].as_int_in(0, kMostInt));
  JsonField stages = root["stages"];
  s.num_stages = static_cast<int>(stages.size());
  if (s.num_stages == 0) stages.fail("must list at least one stage");
  JsonField workers = root["workers"];
  int n = static_cast<int>(workers.size());
  for (int st = 0; st < s.num_stages; ++st) {
    JsonField f = stages[st];
    std::vector<int> ws, ls;
    for (int64_t w : f["workers"].as_int_list()) {
      if (w < 0 || w >= n) f["workers"].fail(str("has worker ", w, " but there are ", n, " workers"));
      ws.push_back(static_cast<int>(w));
    }
    if (ws.empty()) f["workers"].fail("must name at least one worker");
    for (int64_t l : f["layers"].as_int_list()) {
      if (l < 0 || l > kMostInt) f["layers"].fail(str("has layer ", l, ", not a layer index"));
      // As a plan file's: [3, 2] was taken, and the workers failed building "layers 3..2".
      if (!ls.empty() && l <= ls.back())
        f["layers"].fail(str("must list layers in ascending order, each once, got ", ls.back(), " then ", l));
      ls.push_back(static_cast<int>(l));
    }
    s.stage_workers.push_back(ws);
    s.stage_layers.push_back(ls);
    // A version per minibatch in flight at most, and the newest: the runtime sizes a stage's stash
    // and pipedream's stale-weight warm-up by it (1e9 kept the learning rate near 0 throughout).
    int64_t runs = static_cast<int64_t>(s.microbatches) * s.minibatches, versions = f["weight_versions"].as_int_at_least(1);
    if (versions > runs + 1)
      f["weight_versions"].fail(str("is ", versions, ": more than one for each of the ", runs,
                                    " microbatches the schedule runs and the newest"));
    s.weight_versions.push_back(static_cast<int>(versions));
    s.split_backward.push_back(f["split_backward"].as_bool());
    s.recompute.push_back(f.has("recompute") && f["recompute"].as_bool());
  }
  // The chunks are the most stages a worker holds (interleaved, the V schedules): an action's
  // chunk is its stage's place among its worker's (Schedule::chunk_of).
  std::vector<int> held(n, 0);
  for (const auto& ws : s.stage_workers)
    for (int w : ws) ++held[w];
  int most = *std::max_element(held.begin(), held.end());
  if (s.chunks != most)
    root["chunks"].fail(str("is ", s.chunks, " but worker ", std::max_element(held.begin(), held.end()) - held.begin(),
                            " holds ", most, " of the stages and none holds more"));
  s.actions.resize(n);
  for (int w = 0; w < n; ++w) {
    JsonField row = workers[w];
    for (size_t i = 0; i < row.size(); ++i) {
      Action a;
      std::string text = row[i].as_string();  // its own error names the field: not caught below
      try {
        a = parse_action(text, w);
      } catch (const FormatError& e) {
        row[i].fail(e.what());
      }
      if (a.stage >= s.num_stages) row[i].fail(str("names stage ", a.stage, " of ", s.num_stages));
      if (a.peer >= n) row[i].fail(str("names worker ", a.peer, " of ", n));
      a.chunk = s.chunks > 1 ? s.chunk_of(a.stage) : 0;
      s.actions[w].push_back(a);
    }
  }
  return s;
}

}  // namespace pt::schedule
