#include "schedule/trace.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/input_limits.h"
#include "schedule/generators.h"

namespace pt::schedule {

double Trace::start_ms() const {
  double t = std::numeric_limits<double>::infinity();
  for (const auto& w : workers)
    for (const auto& e : w) t = std::min(t, e.start_ms);
  return t == std::numeric_limits<double>::infinity() ? 0 : t;
}

double Trace::end_ms() const {
  double t = 0;
  for (const auto& w : workers)
    for (const auto& e : w) t = std::max(t, e.end_ms);
  return t;
}

json to_json(const Trace& t) {
  json workers = json::array();
  for (const auto& list : t.workers) {
    json row = json::array();
    for (const auto& e : list) {
      json ev = {{"action", to_string(e.action)}, {"start_ms", e.start_ms}, {"end_ms", e.end_ms}};
      if (e.bytes) ev["bytes"] = e.bytes;
      if (e.action.chunk) ev["chunk"] = e.action.chunk;
      row.push_back(ev);
    }
    workers.push_back(row);
  }
  json doc = {{"format", format_tag("trace", kTraceVersion)},
              {"source", t.source},
              {"schedule", t.schedule},
              {"stages", t.num_stages},
              {"microbatches", t.microbatches},
              {"batch_size", t.batch_size},
              {"workers", workers}};
  if (!t.stage_parameter_bytes.empty()) doc["stage_parameter_bytes"] = t.stage_parameter_bytes;
  if (t.weight_delay > 0) doc["weight_delay"] = t.weight_delay;
  if (t.predicted_weights) doc["predicted_weights"] = true;
  if (!t.pauses.empty()) {
    json pauses = json::array();
    for (const auto& [start, end] : t.pauses) pauses.push_back(json::array({start, end}));
    doc["pauses"] = pauses;
  }
  return doc;
}

namespace {

// A time of the trace, ms: finite and within 10^12 of 0 either way.
double time_of(const JsonField& f) {
  constexpr double kMost = 1e12;
  double t = f.as_number();
  if (!(std::abs(t) <= kMost)) f.fail(str("must be within ", kMost, " ms of 0, got ", t));
  return t;
}

// A worker runs one compute at a time, each once: a compute given twice, or overlapping another
// of its worker's, counted twice in the metrics (a duplicated forward: 5 stashed where 1F1B
// keeps 4, 5.7 GiB where it holds 4.6).
void check_computes(const std::vector<TraceEvent>& list, const JsonField& row) {
  std::vector<size_t> computes;
  for (size_t i = 0; i < list.size(); ++i)
    if (is_compute(list[i].action.kind)) computes.push_back(i);
  std::stable_sort(computes.begin(), computes.end(), [&](size_t a, size_t b) { return list[a].start_ms < list[b].start_ms; });
  std::set<std::tuple<int, int, int>> seen;
  for (size_t k = 0; k < computes.size(); ++k) {
    const TraceEvent& e = list[computes[k]];
    if (!seen.insert({static_cast<int>(e.action.kind), e.action.stage, e.action.microbatch}).second)
      row[computes[k]]["action"].fail(str("repeats '", to_string(e.action), "', given before on this worker"));
    if (k > 0) {
      const TraceEvent& before = list[computes[k - 1]];
      if (e.start_ms < before.end_ms - 1e-9 * std::max(1.0, std::abs(before.end_ms)))
        row[computes[k]]["start_ms"].fail(str("is ", e.start_ms, ", inside '", to_string(before.action), "' (",
                                              before.start_ms, " to ", before.end_ms,
                                              "): a worker runs one compute at a time"));
    }
  }
}

// Every backward (and weight gradient) follows its microbatch's forward of that stage: there is
// one, and on the worker that ran it (one clock) it ended before the backward starts (a backward
// moved before its forward was read as a longer run, 29.6 ms a minibatch where it took 19.6).
void check_forwards(const Trace& t, const JsonField& workers) {
  std::map<std::pair<int, int>, std::pair<size_t, double>> forwards;  // (stage, mb) -> worker, end
  for (size_t w = 0; w < t.workers.size(); ++w)
    for (const auto& e : t.workers[w])
      if (e.action.kind == ActionKind::kForward) forwards[{e.action.stage, e.action.microbatch}] = {w, e.end_ms};
  for (size_t w = 0; w < t.workers.size(); ++w)
    for (size_t i = 0; i < t.workers[w].size(); ++i) {
      const TraceEvent& e = t.workers[w][i];
      const Action& a = e.action;
      if (a.kind != ActionKind::kBackward && a.kind != ActionKind::kBackwardWeight) continue;
      auto f = forwards.find({a.stage, a.microbatch});
      if (f == forwards.end())
        workers[w][i]["action"].fail(str("is '", to_string(a), "', with no forward of stage ", a.stage, " microbatch ",
                                         a.microbatch, " in the trace"));
      const auto [fw, ends] = f->second;
      if (fw == w && e.start_ms < ends - 1e-9 * std::max(1.0, std::abs(ends)))
        workers[w][i]["start_ms"].fail(str("is ", e.start_ms, ": '", to_string(a), "' starts before its forward ends, at ",
                                           ends, " on this worker"));
    }
}

// A transfer's peer is another worker of the trace ("0SA0>7" in a trace of 2 printed a link 0 -> 7).
void check_peer(const Action& a, size_t worker, size_t workers, const JsonField& f) {
  if (!is_p2p(a.kind)) return;
  if (a.peer < 0 || static_cast<size_t>(a.peer) >= workers || static_cast<size_t>(a.peer) == worker)
    f.fail(str("is '", to_string(a), "', whose peer ", a.peer, " is not another of the trace's ", workers, " workers"));
}

// The header against the steps. The built-in schedules step each stage once per minibatch a
// worker forwards (pipedream once per minibatch of one microbatch): "microbatches": 2 on a run of
// 4 read each minibatch as two and printed twice its throughput. And 2bw's forwards run on the
// weights weight_delay steps behind, which its memory figure counts: a header with fewer
// versions than the events need understated it.
void check_steps(const Trace& t, const std::string& source) {
  const bool two_bw = t.schedule == "2bw";
  if (!schedule_flushes(t.schedule) && !two_bw && t.schedule != "pipedream") return;  // a file's own kind
  // A resumed run's trace numbers its minibatches from the checkpoint's step, where its steps
  // count from 0: the delay is counted from the trace's first minibatch.
  int first = std::numeric_limits<int>::max();
  for (const auto& list : t.workers)
    for (const auto& e : list)
      if (e.action.kind == ActionKind::kForward) first = std::min(first, e.action.microbatch / t.microbatches);
  for (size_t w = 0; w < t.workers.size(); ++w) {
    std::map<int, std::set<int>> minibatches;  // stage -> the minibatches this worker forwards
    std::map<int, int> steps;                  // stage -> its steps here
    std::vector<Action> order;
    for (const auto& e : t.workers[w]) {
      if (e.action.kind == ActionKind::kForward) minibatches[e.action.stage].insert(e.action.microbatch / t.microbatches);
      if (e.action.kind == ActionKind::kStep) ++steps[e.action.stage];
      order.push_back(e.action);
      if (e.action.kind == ActionKind::kForward) order.back().microbatch -= first * t.microbatches;
    }
    for (const auto& [st, ids] : minibatches)
      if (static_cast<size_t>(steps[st]) != ids.size())
        throw FormatError(str(source, ": worker ", w, " steps stage ", st, " ", steps[st], " times for the ", ids.size(),
                              " minibatches its forwards make at ", t.microbatches,
                              " microbatches each (field 'microbatches'): not this run's header"));
    int least = two_bw ? least_weight_delay(order, t.microbatches) : 0;
    if (t.weight_delay < least)
      throw FormatError(str(source, ": field 'weight_delay' is ", t.weight_delay, ", but worker ", w,
                            "'s forwards run ahead of its steps by ", least, least == 1 ? " minibatch" : " minibatches",
                            ": not this run's header"));
  }
}

// One clock: a stage's forward of a microbatch starts after the stage before finished its
// forward of it, and a backward after the stage after finished its backward. Parts of a run
// merged from hosts whose clocks differ can break that, and their metrics mix the clocks:
// refused, naming both events. (A receive cannot tell: a run posts them ahead of their sends.)
void check_one_clock(const Trace& t, const std::string& source) {
  std::map<std::pair<int, int>, std::pair<int, double>> forward_end, backward_end;  // (stage, microbatch) -> (worker, end)
  for (size_t w = 0; w < t.workers.size(); ++w)
    for (const auto& e : t.workers[w]) {
      if (e.action.kind == ActionKind::kForward) forward_end[{e.action.stage, e.action.microbatch}] = {static_cast<int>(w), e.end_ms};
      if (e.action.kind == ActionKind::kBackward) backward_end[{e.action.stage, e.action.microbatch}] = {static_cast<int>(w), e.end_ms};
    }
  for (size_t w = 0; w < t.workers.size(); ++w)
    for (const auto& e : t.workers[w]) {
      const Action& a = e.action;
      const bool forward = a.kind == ActionKind::kForward;
      if (!forward && a.kind != ActionKind::kBackward) continue;
      const auto& ends = forward ? forward_end : backward_end;
      auto before = ends.find({forward ? a.stage - 1 : a.stage + 1, a.microbatch});
      if (before == ends.end()) continue;
      const auto [worker, end] = before->second;
      if (e.start_ms < end - 1e-9 * std::max(1.0, std::abs(end)))
        throw FormatError(str(source, ": worker ", w, "'s '", to_string(a), "' starts at ", e.start_ms,
                              " ms, before worker ", worker, " finished stage ", before->first.first, "'s ",
                              forward ? "forward" : "backward", " of microbatch ", a.microbatch, " at ", end,
                              " ms, which it needs: its workers' parts are on different clocks, not one run"));
    }
}

}  // namespace

void check_complete(const Trace& t, const std::string& source) {
  std::vector<std::set<int>> forwards(t.num_stages), backwards(t.num_stages);
  std::set<int> microbatches;
  for (const auto& list : t.workers)
    for (const auto& e : list) {
      if (e.action.kind == ActionKind::kForward) forwards[e.action.stage].insert(e.action.microbatch), microbatches.insert(e.action.microbatch);
      if (e.action.kind == ActionKind::kBackward || e.action.kind == ActionKind::kBackwardWeight)
        backwards[e.action.stage].insert(e.action.microbatch);
    }
  for (int mb : microbatches) {
    for (int st = 0; st < t.num_stages; ++st) {
      if (!forwards[st].count(mb))
        throw FormatError(str(source, ": no forward of stage ", st, " for microbatch ", mb,
                              ", which other stages ran: not a whole run's trace"));
      // A trace of forwards alone printed a whole run's throughput and bubbles.
      if (!backwards[st].count(mb))
        throw FormatError(str(source, ": no backward of stage ", st, " for microbatch ", mb,
                              ", which its forward ran: not a whole run's trace"));
    }
    int first = mb - mb % t.microbatches;
    for (int k = first; k < first + t.microbatches; ++k)
      if (!microbatches.count(k))
        throw FormatError(str(source, ": minibatch ", mb / t.microbatches, " has no microbatch ", k, " of its ",
                              t.microbatches, " (field 'microbatches'): not a whole run's trace"));
  }
  check_steps(t, source);
  check_one_clock(t, source);
  // A worker of the run computes (a row appended empty was counted a worker idle throughout).
  for (size_t w = 0; w < t.workers.size(); ++w)
    if (std::none_of(t.workers[w].begin(), t.workers[w].end(), [](const TraceEvent& e) { return is_compute(e.action.kind); }))
      throw FormatError(str(source, ": worker ", w, " runs no compute: not a whole run's trace"));
}

Trace trace_from_json(const json& doc, const std::string& source) {
  JsonField root(doc, source, "");
  expect_format(root, "trace", kTraceVersion);
  Trace t;
  t.source = root["source"].as_string();
  if (t.source != "simulated" && t.source != "measured" && t.source != "emulated")
    root["source"].fail(str("must be simulated, measured or emulated, got '", t.source, "'"));
  t.schedule = root["schedule"].as_string();
  // Counts held in an int: 4294967298 microbatches is an error, not 2 after narrowing.
  constexpr int64_t kMostInt = std::numeric_limits<int>::max();
  t.num_stages = static_cast<int>(root["stages"].as_int_in(1, kMostInt));
  t.microbatches = static_cast<int>(root["microbatches"].as_int_in(1, kMostInt));
  t.batch_size = root["batch_size"].as_int_at_least(1);  // 0 printed 0.0 samples/s
  if (root.has("weight_delay")) t.weight_delay = static_cast<int>(root["weight_delay"].as_int_in(0, kMostInt));
  if (root.has("predicted_weights")) t.predicted_weights = root["predicted_weights"].as_bool();
  if (root.has("stage_parameter_bytes")) {
    JsonField bytes = root["stage_parameter_bytes"];
    if (bytes.size() != static_cast<size_t>(t.num_stages))
      bytes.fail(str("must hold one count per stage (", t.num_stages, "), got ", bytes.size()));
    for (size_t st = 0; st < bytes.size(); ++st) t.stage_parameter_bytes.push_back(bytes[st].as_int_at_least(0));
  }
  JsonField workers = root["workers"];
  for (size_t w = 0; w < workers.size(); ++w) {
    JsonField row = workers[w];
    std::vector<TraceEvent> list;
    for (size_t i = 0; i < row.size(); ++i) {
      JsonField f = row[i];
      TraceEvent e;
      try {
        e.action = parse_action(f["action"].as_string(), static_cast<int>(w));
      } catch (const FormatError& err) {
        f["action"].fail(err.what());
      }
      if (e.action.stage >= t.num_stages)
        f["action"].fail(str("names stage ", e.action.stage, " of a trace of ", t.num_stages, " stages"));
      check_peer(e.action, w, workers.size(), f["action"]);
      if (f.has("chunk")) e.action.chunk = static_cast<int>(f["chunk"].as_int_in(0, kMostInt));
      // Times within 10^12 ms (31 years): beyond, the metrics' differences lose every digit
      // (an end_ms of 1e308 made a bubble fraction of -0.089).
      e.start_ms = time_of(f["start_ms"]);
      e.end_ms = time_of(f["end_ms"]);
      if (e.end_ms < e.start_ms) f["end_ms"].fail(str("is before start_ms ", e.start_ms));
      if (f.has("bytes")) e.bytes = f["bytes"].as_int_at_least(0);
      list.push_back(e);
    }
    check_computes(list, row);
    t.workers.push_back(std::move(list));
  }
  check_forwards(t, workers);
  // A trace of no computation measures nothing (0.000 ms per minibatch); and a worker holds at
  // most kMaxChunks stages ("stages": 1000000000 was taken). A worker's part of a trace holds
  // its own events only, so stages without events are no error.
  bool computes = false, timed = false;
  for (const auto& list : t.workers)
    for (const auto& e : list) computes |= is_compute(e.action.kind), timed |= e.end_ms > e.start_ms;
  if (!computes) workers.fail("holds no compute event: a trace of no computation measures nothing");
  // Every action of no length (it printed 0.000 ms a minibatch and 0.0 samples/s).
  if (!timed) workers.fail("holds no event that takes time (each ends where it starts): it measures nothing");
  if (static_cast<int64_t>(t.num_stages) > static_cast<int64_t>(t.workers.size()) * kMaxChunks)
    root["stages"].fail(str("is ", t.num_stages, ", more than its ", t.workers.size(), " workers hold (at most ",
                            kMaxChunks, " stages each)"));
  if (root.has("pauses")) {
    JsonField pauses = root["pauses"];
    for (size_t i = 0; i < pauses.size(); ++i) {
      JsonField pause = pauses[i];
      if (pause.size() != 2) pause.fail(str("must be [start_ms, end_ms], got ", pause.size(), " numbers"));
      double start = time_of(pause[0]), end = time_of(pause[1]);
      if (end < start) pause[1].fail(str("is before the pause's start ", start));
      if (!t.pauses.empty() && start < t.pauses.back().second)
        pause[0].fail(str("overlaps or precedes the pause before, which ends at ", t.pauses.back().second));
      // A pause is time no worker trains (an evaluation, a checkpoint): one over a computation
      // took it out of the run (0.000 ms per minibatch, 0.0 samples/s).
      for (size_t w = 0; w < t.workers.size(); ++w)
        for (const auto& e : t.workers[w])
          if (is_compute(e.action.kind) && e.start_ms < end && e.end_ms > start)
            pause.fail(str("[", start, ", ", end, "] covers worker ", w, "'s ", to_string(e.action), " at [", e.start_ms,
                           ", ", e.end_ms, "]: a pause is a time no worker trains"));
      t.pauses.emplace_back(start, end);
    }
  }
  return t;
}

std::vector<std::pair<double, double>> common_pauses(const std::vector<std::pair<double, double>>& a,
                                                     const std::vector<std::pair<double, double>>& b) {
  std::vector<std::pair<double, double>> out;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    double start = std::max(a[i].first, b[j].first), end = std::min(a[i].second, b[j].second);
    if (start < end) out.emplace_back(start, end);
    if (a[i].second < b[j].second) ++i;
    else ++j;
  }
  return out;
}

Trace read_trace(const std::string& path) {
  return trace_from_json(parse_json(read_input(path, InputKind::trace), path), path);
}

void write_trace(const Trace& t, const std::string& path) { write_text_file_atomic(path, to_json(t).dump() + "\n"); }

void start_at_first_event(Trace& t) {
  double origin = std::numeric_limits<double>::infinity();
  for (const auto& w : t.workers)
    for (const auto& e : w) origin = std::min(origin, e.start_ms);
  if (!std::isfinite(origin)) return;
  for (auto& w : t.workers)
    for (auto& e : w) {
      e.start_ms -= origin;
      e.end_ms -= origin;
    }
  for (auto& [start, end] : t.pauses) start -= origin, end -= origin;
}

void merge_worker_traces(int world_size, const std::string& trace_path) {
  // Every part is read and checked before anything is written or removed: a bad part leaves
  // them all as they were.
  Trace merged;
  std::vector<std::string> parts;
  size_t workers_in_first = 0;
  for (int r = 0; r < world_size; ++r) {
    parts.push_back(trace_path + ".worker" + std::to_string(r));
    Trace t = read_trace(parts.back());
    // Each worker writes its own events: a part holding another's (a whole trace, or one
    // renamed) would lose them here without a word.
    for (size_t w = 0; w < t.workers.size(); ++w)
      if (static_cast<int>(w) != r && !t.workers[w].empty())
        throw FormatError(str(parts.back(), ": field 'workers[", w, "]' holds ", t.workers[w].size(),
                              " events; the part of worker ", r, " may hold only worker ", r,
                              "'s (a trace of every worker needs no --merge)"));
    if (r == 0) {
      merged = t;
      workers_in_first = t.workers.size();
      merged.workers.assign(world_size, {});
    } else {
      // Parts of two runs (a 1f1b run's worker 0, a gpipe run's worker 1) were merged and removed,
      // and the merged trace then refused as on "different clocks".
      auto differs = [&](const char* field, const auto& mine, const auto& first) {
        if (mine != first)
          throw FormatError(str(parts.back(), ": field '", field, "' is ", mine, " but ", parts[0], "'s is ", first,
                                ": the parts are of different runs"));
      };
      differs("source", t.source, merged.source);
      differs("schedule", t.schedule, merged.schedule);
      differs("stages", t.num_stages, merged.num_stages);
      differs("microbatches", t.microbatches, merged.microbatches);
      differs("weight_delay", t.weight_delay, merged.weight_delay);
      differs("batch_size", t.batch_size, merged.batch_size);
      auto truth = [](bool b) { return std::string(b ? "true" : "false"); };
      differs("predicted_weights", truth(t.predicted_weights), truth(merged.predicted_weights));
      differs("workers (their count)", t.workers.size(), workers_in_first);
    }
    if (static_cast<int>(t.workers.size()) > r) merged.workers[r] = t.workers[r];
    if (r > 0) merged.pauses = common_pauses(merged.pauses, t.pauses);
  }
  // Workers record steady-clock times, shared by the processes of one host.
  start_at_first_event(merged);
  check_complete(merged, trace_path);  // before the parts go: a refusal leaves them
  write_trace(merged, trace_path);
  for (const auto& part : parts) std::remove(part.c_str());
}

}  // namespace pt::schedule
