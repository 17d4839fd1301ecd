#include "schedule/schedule_file.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "core/input_limits.h"
#include "core/json_doc.h"
#include "schedule/comm_pass.h"
#include "schedule/generator_util.h"
#include "schedule/generators.h"
#include "schedule/validate.h"

namespace pt::schedule {

namespace {

// torch.distributed.pipelining's cells that move data or memory rather than compute: the comm
// pass inserts pipetrain's own transfers, and nothing here shards.
bool is_left_out(const std::string& type) {
  for (const char* t : {"SEND_F", "RECV_F", "SEND_B", "RECV_B", "UNSHARD", "RESHARD", "REDUCE_GRAD"})
    if (type == t) return true;
  return false;
}

// One row per rank of cells "<stage><F|B|I|W><microbatch>"; plan_stages: read_schedule_file's.
Schedule schedule_from_csv(const std::string& text, const std::string& path, int plan_stages) {
  if (plan_stages > 0) {
    // More cells than the plan's stages can hold is refused before any is parsed: per stage and
    // microbatch F, B or I, W and the four transfers torch.distributed.pipelining may write
    // (left out here), and per stage its unshard, reshard and gradient reduction.
    int64_t cells = 0;
    bool in_cell = false;
    for (char c : text) {
      if (c == ',' || c == '\n') in_cell = false;
      else if (!in_cell && !std::isspace(static_cast<unsigned char>(c))) in_cell = true, ++cells;
    }
    int64_t most = int64_t{7} * plan_stages * kMaxMicrobatches + 3 * plan_stages;
    if (cells > most)
      throw ConfigError(str(path, ": holds ", cells, " cells, more than the plan's ", plan_stages, " stage",
                            plan_stages == 1 ? "" : "s", " can run (", most, ": F, B or I, W and four transfers for ",
                            "each of at most ", kMaxMicrobatches, " microbatches a stage)"));
  }
  Schedule s;
  s.kind = "file";
  s.flush = true;
  std::vector<std::vector<bool>> split_marks;  // [stage] -> {saw B, saw I or W}
  int stages = 0, microbatches = 0;
  std::istringstream lines(text);
  std::string line;
  for (int rank = 0; std::getline(lines, line); ++rank) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    s.actions.emplace_back();
    std::istringstream cells(line);
    std::string cell;
    for (int col = 0; std::getline(cells, cell, ','); ++col) {
      cell.erase(std::remove_if(cell.begin(), cell.end(), [](unsigned char c) { return std::isspace(c); }), cell.end());
      if (cell.empty()) continue;  // an idle slot
      auto bad = [&](const std::string& why) {
        throw ConfigError(str(path, ": rank ", rank, ", column ", col, ": '", printable(cell), "' ", why,
                              " (expected <stage><F|B|I|W><microbatch>, e.g. 2F0, 1I3)"));
      };
      size_t pos = 0;
      while (pos < cell.size() && std::isdigit(static_cast<unsigned char>(cell[pos]))) ++pos;
      size_t type_end = pos;
      while (type_end < cell.size() && (std::isupper(static_cast<unsigned char>(cell[type_end])) || cell[type_end] == '_'))
        ++type_end;
      std::string stage_text = cell.substr(0, pos), type = cell.substr(pos, type_end - pos),
                  mb_text = cell.substr(type_end);
      if (is_left_out(type)) continue;
      if (stage_text.empty() || stage_text.size() > 6) bad("has no stage number, or one past 999999");
      if (mb_text.empty() || !std::all_of(mb_text.begin(), mb_text.end(), ::isdigit))
        bad("has no microbatch number after its type");
      if (mb_text.size() > 6)  // the number is there, past any a run takes (it was said to be missing)
        bad(str("names microbatch ", mb_text, "; at most ", kMaxMicrobatches, " are run"));
      int stage = std::stoi(stage_text), mb = std::stoi(mb_text);
      if (plan_stages > 0 && stage >= plan_stages)
        bad(str("names stage ", stage, ", but the plan has ", plan_stages, " stage", plan_stages == 1 ? "" : "s",
                " (0..", plan_stages - 1, ")"));
      if (mb >= kMaxMicrobatches) bad(str("names microbatch ", mb, "; at most ", kMaxMicrobatches, " are run"));
      ActionKind kind;
      if (type == "F") kind = ActionKind::kForward;
      else if (type == "B" || type == "I") kind = ActionKind::kBackward;
      else if (type == "W") kind = ActionKind::kBackwardWeight;
      else bad(str("has type '", type, "', not F, B, I or W"));
      if (stage >= static_cast<int>(split_marks.size())) split_marks.resize(stage + 1, {false, false});
      if (type == "B") split_marks[stage][0] = true;
      if (type == "I" || type == "W") split_marks[stage][1] = true;
      Action a;
      a.worker = rank;
      a.kind = kind;
      a.stage = stage;
      a.microbatch = mb;
      s.actions.back().push_back(a);
      stages = std::max(stages, stage + 1);
      microbatches = std::max(microbatches, mb + 1);
    }
  }
  while (!s.actions.empty() && s.actions.back().empty()) s.actions.pop_back();  // trailing blank lines
  if (stages == 0) throw ConfigError(str(path, ": no F, B, I or W action in any row"));
  for (int rank = 0; rank < s.num_workers(); ++rank)
    if (s.actions[rank].empty()) throw ConfigError(str(path, ": rank ", rank, " (row ", rank + 1, ") runs nothing"));
  s.num_stages = stages;
  s.microbatches = microbatches;
  s.stage_workers.assign(stages, {});
  s.split_backward.assign(stages, false);
  for (int st = 0; st < stages; ++st) {
    if (split_marks[st][0] && split_marks[st][1])
      throw ConfigError(str(path, ": stage ", st, " has both whole backwards (B) and split ones (I, W); use one form"));
    s.split_backward[st] = split_marks[st][1];
  }
  for (int rank = 0; rank < s.num_workers(); ++rank)
    for (const Action& a : s.actions[rank]) {
      auto& ws = s.stage_workers[a.stage];
      if (ws.empty()) ws.push_back(rank);
      else if (ws[0] != rank)
        throw ConfigError(str(path, ": stage ", a.stage, " runs on rank ", ws[0], " and rank ", rank,
                              "; in a CSV each stage runs on one rank"));
    }
  for (int st = 0; st < stages; ++st)
    if (s.stage_workers[st].empty()) throw ConfigError(str(path, ": no rank runs stage ", st));
  int chunks = 1;
  for (int rank = 0; rank < s.num_workers(); ++rank) {
    int held = 0;
    for (int st = 0; st < stages; ++st) held += s.stage_workers[st][0] == rank;
    chunks = std::max(chunks, held);
  }
  s.chunks = chunks;
  s.weight_versions.assign(stages, 1);
  for (auto& list : s.actions)
    for (auto& a : list) a.chunk = chunks > 1 ? s.chunk_of(a.stage) : 0;
  return s;
}

// Each worker's own order, before the comm pass places transfers around it: a B after its F, a W
// after its B (the comm pass cannot place the transfers of an order that breaks this, and the
// validator would then name a transfer rather than the action at fault).
Action compute(ActionKind kind, int stage, int microbatch) {
  Action a;
  a.kind = kind, a.stage = stage, a.microbatch = microbatch;
  return a;
}

// An action as the file wrote it: a CSV's split backward is I (pipetrain's B).
std::string as_written(const Action& a, const Schedule& s, bool csv) {
  if (csv && a.kind == ActionKind::kBackward && s.split_backward[a.stage]) return str(a.stage, "I", a.microbatch);
  return to_string(a);
}

void check_local_order(const Schedule& s, const std::string& path, bool csv) {
  for (int w = 0; w < s.num_workers(); ++w) {
    std::set<std::tuple<int, int, int>> done;  // (kind, stage, mb)
    for (size_t i = 0; i < s.actions[w].size(); ++i) {
      const Action& a = s.actions[w][i];
      ActionKind before = a.kind == ActionKind::kBackward ? ActionKind::kForward : ActionKind::kBackward;
      if ((a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardWeight) &&
          !done.count({static_cast<int>(before), a.stage, a.microbatch}))
        throw InvalidSchedule(str(path, ": ", s.kind, " schedule is invalid: worker ", w, ", step ", i, ", action ",
                                  as_written(a, s, csv), ": runs before ",
                                  as_written(compute(before, a.stage, a.microbatch), s, csv), " on its worker\n",
                                  format_grid(s, {{w, static_cast<int>(i)}})));
      done.insert({static_cast<int>(a.kind), a.stage, a.microbatch});
    }
  }
}

// The file's computes in their workers' orders, each waiting for what it needs from another
// stage (a forward the stage before's forward, a backward the stage after's): a cycle of
// waits is named in the file's own cells, before the comm pass puts transfers around them
// (it named a send the user never wrote, placed before its forward).
void check_no_deadlock(const Schedule& s, const std::string& path, bool csv) {
  std::set<std::tuple<int, int, int>> done;  // (kind, stage, mb)
  std::vector<size_t> next(s.num_workers(), 0);
  auto needs = [&](const Action& a) -> std::optional<Action> {
    if (a.kind == ActionKind::kForward && a.stage > 0) return compute(ActionKind::kForward, a.stage - 1, a.microbatch);
    if (a.kind == ActionKind::kBackward && a.stage + 1 < s.num_stages)
      return compute(ActionKind::kBackward, a.stage + 1, a.microbatch);
    return std::nullopt;
  };
  for (bool moved = true; moved;) {
    moved = false;
    for (int w = 0; w < s.num_workers(); ++w)
      for (; next[w] < s.actions[w].size(); ++next[w], moved = true) {
        const Action& a = s.actions[w][next[w]];
        auto need = needs(a);
        if (need && !done.count({static_cast<int>(need->kind), need->stage, need->microbatch})) break;
        done.insert({static_cast<int>(a.kind), a.stage, a.microbatch});
      }
  }
  std::set<std::tuple<int, int, int>> written;  // a wait for a cell the file lacks: the validator names it
  for (const auto& list : s.actions)
    for (const Action& a : list) written.insert({static_cast<int>(a.kind), a.stage, a.microbatch});
  std::string waits;
  std::vector<std::pair<int, int>> marks;
  for (int w = 0; w < s.num_workers(); ++w)
    if (next[w] < s.actions[w].size()) {
      const Action& a = s.actions[w][next[w]];
      auto need = *needs(a);
      if (!written.count({static_cast<int>(need.kind), need.stage, need.microbatch})) return;
      waits += str(waits.empty() ? "" : ", ", "worker ", w, " waits at ", as_written(a, s, csv), " for ",
                   as_written(*needs(a), s, csv));
      marks.emplace_back(w, static_cast<int>(next[w]));
    }
  if (!waits.empty())
    throw InvalidSchedule(str(path, ": ", s.kind, " schedule is invalid: it deadlocks: ", waits, "\n", format_grid(s, marks)));
}

}  // namespace

Schedule read_schedule_file(const std::string& path, int plan_stages) {
  std::string text = read_input(path, InputKind::schedule);
  // A spreadsheet's "CSV UTF-8" starts with a byte-order mark, which read as part of the first
  // action ("'\xEF\xBB\xBF0F0' has no stage number", the mark unseen in the message).
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') return schedule_from_json(parse_json(text, path), path);
  return schedule_from_csv(text, path, plan_stages);
}

plan::Plan plan_of_schedule_file(const Schedule& file, const std::string& path, const std::string& flag) {
  if (file.stage_layers.empty())
    throw ConfigError(str(path, ": a CSV names no layers; give ", flag, " (its ", file.num_stages, " stages)"));
  plan::Plan p;
  for (int st = 0; st < file.num_stages; ++st) {
    plan::Stage stage;
    stage.layers = file.stage_layers[st];
    stage.replicas = static_cast<int>(file.stage_workers[st].size());
    p.stages.push_back(stage);
  }
  plan::assign_workers(p);
  return p;
}

Schedule bind_schedule(Schedule s, const plan::Plan& plan, const std::string& path) {
  if (s.num_stages != plan.num_stages())
    throw ConfigError(str(path, ": the schedule has ", s.num_stages, " stages but the plan has ", plan.num_stages()));
  if (s.microbatches > kMaxMicrobatches || s.minibatches > kMaxMinibatches)
    throw ConfigError(str(path, ": ", s.microbatches, " microbatches x ", s.minibatches, " minibatches; at most ",
                          kMaxMicrobatches, " x ", kMaxMinibatches, " are run"));
  bool csv = s.stage_layers.empty();
  if (csv) s.recompute.assign(s.num_stages, false);
  for (int st = 0; st < s.num_stages; ++st) {
    std::vector<int> layers = plan.stages[st].layers;
    std::sort(layers.begin(), layers.end());
    if (csv) {
      if (plan.stages[st].replicas != 1)
        throw ConfigError(str(path, ": plan stage ", st, " has ", plan.stages[st].replicas,
                              " replicas; a CSV places each stage on one rank"));
      s.stage_layers.push_back(layers);
      s.recompute[st] = plan.stages[st].recompute;
    } else {
      std::vector<int> mine = s.stage_layers[st];
      std::sort(mine.begin(), mine.end());
      if (mine != layers)
        throw ConfigError(str(path, ": stage ", st, " holds layers ", json(mine).dump(), " but the plan's stage ", st,
                              " holds ", json(layers).dump()));
    }
  }
  bool steps = false, transfers = false;
  for (const auto& list : s.actions)
    for (const auto& a : list) steps = steps || a.kind == ActionKind::kStep, transfers = transfers || is_p2p(a.kind);
  if (!steps) detail::append_flush(s, 0);  // the file computes; each stage steps at the end
  if (!transfers) {
    check_local_order(s, path, csv);
    check_no_deadlock(s, path, csv);
    s = insert_comm(s);
  }
  try {
    validate(s);
  } catch (const InvalidSchedule& e) {
    throw InvalidSchedule(str(path, ": ", e.what()));
  }
  return s;
}

void refuse_settings_the_file_overrides(const Schedule& file, const std::string& path, bool microbatches_given,
                                        int microbatches, bool chunks_given, int chunks) {
  auto check = [&](bool given, const char* flag, int value, int files, const char* what) {
    if (given && value != files)
      throw UsageError(str(flag, " ", value, ": --schedule-file ", path, " runs ", files, " ", what,
                           " (its own); leave ", flag, " out or give ", files));
  };
  check(microbatches_given, "--microbatches", microbatches, file.microbatches, "microbatches per minibatch");
  check(chunks_given, "--chunks", chunks, file.chunks, "chunks per worker");
}

}  // namespace pt::schedule
