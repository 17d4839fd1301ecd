#include "schedule/action.h"

#include <cctype>

#include "core/error.h"

namespace pt::schedule {

namespace {
struct KindInfo {
  ActionKind kind;
  const char* code;
  const char* name;
};
constexpr KindInfo kKinds[kNumActionKinds] = {
    {ActionKind::kForward, "F", "forward"},
    {ActionKind::kBackward, "B", "backward"},
    {ActionKind::kBackwardWeight, "W", "backward_weight"},
    {ActionKind::kSendActivation, "SA", "send_activation"},
    {ActionKind::kRecvActivation, "RA", "recv_activation"},
    {ActionKind::kSendGradient, "SG", "send_gradient"},
    {ActionKind::kRecvGradient, "RG", "recv_gradient"},
    {ActionKind::kAllReduce, "AR", "allreduce"},
    {ActionKind::kStep, "ST", "step"},
};

// Reads a run of digits at text[pos]; -1 when there is none.
// -1 where no digit stands at pos, -2 where more than 9 do (past what an int holds, named as
// too large: "0F2147483647" was "no microbatch number").
long read_number(const std::string& text, size_t& pos) {
  size_t start = pos;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  if (pos == start) return -1;
  if (pos - start > 9) return -2;
  return std::stol(text.substr(start, pos - start));
}
}  // namespace

const char* kind_code(ActionKind k) { return kKinds[static_cast<int>(k)].code; }
const char* kind_name(ActionKind k) { return kKinds[static_cast<int>(k)].name; }


std::string to_string(const Action& a) {
  std::string s = str(a.stage, kind_code(a.kind), a.microbatch);
  if (is_p2p(a.kind)) s += str(is_send(a.kind) ? ">" : "<", a.peer);
  return s;
}

Action parse_action(const std::string& text, int worker) {
  auto bad = [&](const std::string& why) -> Action {
    throw FormatError(str("action '", text, "': ", why,
                          " (expected <stage><F|B|W|SA|RA|SG|RG|AR|ST><microbatch>[>peer|<peer], e.g. 2F0, 2SA0>3)"));
  };
  Action a;
  a.worker = worker;
  size_t pos = 0;
  long stage = read_number(text, pos);
  if (stage < 0) return bad(stage == -2 ? "a stage number of more than 9 digits" : "no stage number");
  size_t code_start = pos;
  while (pos < text.size() && std::isupper(static_cast<unsigned char>(text[pos]))) ++pos;
  std::string code = text.substr(code_start, pos - code_start);
  bool found = false;
  for (const auto& k : kKinds)
    if (code == k.code) {
      a.kind = k.kind;
      found = true;
    }
  if (!found) return bad(str("unknown kind '", code, "'"));
  long mb = read_number(text, pos);
  if (mb < 0) return bad(mb == -2 ? "a microbatch number of more than 9 digits" : "no microbatch number");
  a.stage = static_cast<int>(stage);
  a.microbatch = static_cast<int>(mb);
  if (is_p2p(a.kind)) {
    char want = is_send(a.kind) ? '>' : '<';
    if (pos >= text.size() || text[pos] != want) return bad(str("a ", kind_name(a.kind), " needs '", want, "peer'"));
    ++pos;
    long peer = read_number(text, pos);
    if (peer < 0) return bad(peer == -2 ? "a peer worker number of more than 9 digits" : "no peer worker number");
    a.peer = static_cast<int>(peer);
  }
  if (pos != text.size()) return bad(str("unexpected '", text.substr(pos), "'"));
  return a;
}

}  // namespace pt::schedule
