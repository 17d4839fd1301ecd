#include "profile/pipedream_graph.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <queue>
#include <sstream>

#include "core/error.h"
#include "core/input_limits.h"

namespace pt::profile {
namespace {

// One node of a PipeDream graph before it is ordered.
struct RawNode {
  std::string id;
  Layer layer;
};

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t at; (at = s.find(sep, start)) != std::string::npos; start = at + sep.size())
    parts.push_back(s.substr(start, at - start));
  parts.push_back(s.substr(start));
  return parts;
}

double parse_number(const std::string& text, const std::string& where) {
  std::string t = trim(text);
  try {
    size_t used = 0;
    double v = std::stod(t, &used);
    if (used == t.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  throw FormatError(str(where, ": '", t, "' is not a number"));
}

// PipeDream writes byte counts as decimals ("602112.0"); rounded, and bounded before rounding
// because llround of a huge value is undefined (in practice INT64_MIN, a negative size).
int64_t to_bytes(double v, const std::string& where) {
  if (v < 0) throw FormatError(str(where, ": must be >= 0, got ", v));
  if (v > static_cast<double>(kMaxLayerBytes))
    throw FormatError(str(where, ": ", v, " bytes is more than pipetrain accepts for one layer (", kMaxLayerBytes, ")"));
  return static_cast<int64_t>(std::llround(v));
}

std::string field_where(const JsonField& f) { return str(f.source(), ": field '", f.path(), "'"); }

// The same for a JSON field's value, which names it only in the error.
int64_t to_bytes(double v, const JsonField& f) {
  if (v < 0 || v > static_cast<double>(kMaxLayerBytes)) return to_bytes(v, field_where(f));
  return static_cast<int64_t>(std::llround(v));
}

// Orders nodes topologically (Kahn's algorithm, the earliest listed ready node first so that
// an already-ordered file keeps its order) and turns edges into `inputs`.
Profile order_nodes(std::vector<RawNode> nodes, const std::vector<std::pair<int, int>>& edges,
                    const std::string& source) {
  check_layer_count(nodes.size(), source);
  int n = static_cast<int>(nodes.size());
  if (n == 0) throw FormatError(str(source, ": has no layers"));
  for (const auto& node : nodes) {
    check_layer_ms(node.layer.forward_ms, [&] { return str(source, ": layer '", node.id, "' forward time"); });
    check_layer_ms(node.layer.backward_ms, [&] { return str(source, ": layer '", node.id, "' backward time"); });
  }
  std::vector<std::vector<int>> preds(n), succs(n);
  std::vector<int> indegree(n, 0);
  for (auto [from, to] : edges) {
    if (from == to) throw FormatError(str(source, ": cyclic graph: layer '", nodes[from].id, "' feeds itself"));
    preds[to].push_back(from);
    succs[from].push_back(to);
    ++indegree[to];
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int v = 0; v < n; ++v)
    if (indegree[v] == 0) ready.push(v);
  std::vector<int> order, position(n, -1);
  while (!ready.empty()) {
    int v = ready.top();
    ready.pop();
    position[v] = static_cast<int>(order.size());
    order.push_back(v);
    for (int s : succs[v])
      if (--indegree[s] == 0) ready.push(s);
  }
  if (static_cast<int>(order.size()) != n) {
    for (int v = 0; v < n; ++v)
      if (position[v] < 0)
        throw FormatError(str(source, ": cyclic graph: layer '", nodes[v].id, "' (", nodes[v].layer.name,
                              ") is on or after a cycle, so no topological order exists"));
  }
  Profile p;
  p.device = "pipedream";
  for (int v : order) {
    Layer l = std::move(nodes[v].layer);
    l.inputs.clear();
    for (int u : preds[v]) l.inputs.push_back(position[u]);
    std::sort(l.inputs.begin(), l.inputs.end());
    l.inputs.erase(std::unique(l.inputs.begin(), l.inputs.end()), l.inputs.end());
    p.layers.push_back(std::move(l));
  }
  return p;
}

// Layer names end up in JSON (profiles, traces), which must be UTF-8: reject others here,
// naming the line, rather than fail later far from the file. nlohmann's dump checks UTF-8.
void expect_utf8(const std::string& text, const std::string& where) {
  try {
    (void)json(text).dump();
  } catch (const json::type_error&) {
    throw FormatError(str(where, ": the description is not valid UTF-8"));
  }
}

// "forward_compute_time=F, backward_compute_time=B, activation_size=A, parameter_size=P"
void parse_metadata(const std::string& meta, Layer& l, const std::string& where) {
  std::map<std::string, std::string> fields;
  // A list activation "[a; b]" uses "; " inside, so ", " separates the four fields.
  for (const auto& item : split(meta, ", ")) {
    size_t eq = item.find('=');
    if (eq == std::string::npos) throw FormatError(str(where, ": expected key=value, got '", trim(item), "'"));
    // Given twice, the second silently won (as a JSON key given twice did).
    std::string key = trim(item.substr(0, eq));
    if (!fields.emplace(key, trim(item.substr(eq + 1))).second)
      throw FormatError(str(where, ": field '", key, "' is given twice"));
  }
  for (const char* key : {"forward_compute_time", "backward_compute_time", "activation_size", "parameter_size"})
    if (!fields.count(key)) throw FormatError(str(where, ": missing field '", key, "'"));
  l.forward_ms = parse_number(fields["forward_compute_time"], where + " forward_compute_time");
  l.backward_ms = parse_number(fields["backward_compute_time"], where + " backward_compute_time");
  if (l.forward_ms < 0 || l.backward_ms < 0)
    throw FormatError(str(where, ": negative time (forward ", l.forward_ms, " ms, backward ", l.backward_ms, " ms)"));
  std::string act = fields["activation_size"];
  double total = 0;
  if (!act.empty() && act.front() == '[') {
    if (act.back() != ']') throw FormatError(str(where, ": activation_size list '", act, "' has no closing ]"));
    std::string inner = trim(act.substr(1, act.size() - 2));
    // PipeDream writes lists with "; " because ", " already separates the four fields.
    if (!inner.empty())
      for (const auto& a : split(inner, ";")) total += parse_number(a, where + " activation_size");
  } else {
    total = parse_number(act, where + " activation_size");
  }
  l.activation_bytes = to_bytes(total, where + " activation_size");
  l.parameter_bytes = to_bytes(parse_number(fields["parameter_size"], where + " parameter_size"),
                               where + " parameter_size");
}

}  // namespace

Profile profile_from_pipedream_graph(const std::string& text, const std::string& source) {
  std::vector<RawNode> nodes;
  std::map<std::string, int> index;
  std::vector<std::pair<std::string, int>> raw_edges;  // "src -- dst", line number
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::string where = str(source, " line ", number);
    if (trim(line).empty()) continue;
    if (line[0] == '\t' || line[0] == ' ') {
      raw_edges.emplace_back(trim(line), number);
      continue;
    }
    auto parts = split(trim(line), " -- ");
    // id -- description -- metadata [-- stage_id=S]; the metadata is the part with the times.
    int meta = -1;
    for (size_t k = 1; k < parts.size(); ++k)
      if (parts[k].rfind("forward_compute_time=", 0) == 0) meta = static_cast<int>(k);
    if (parts.size() < 3 || meta < 2)
      throw FormatError(str(where, ": expected 'nodeID -- description -- forward_compute_time=..., "
                                   "backward_compute_time=..., activation_size=..., parameter_size=...', got '",
                            trim(line).substr(0, 120), "'"));
    RawNode node;
    node.id = trim(parts[0]);
    std::string desc = parts[1];
    for (int k = 2; k < meta; ++k) desc += " -- " + parts[k];
    node.layer.name = trim(desc);
    expect_utf8(node.layer.name, where);
    parse_metadata(parts[meta], node.layer, where);
    if (index.count(node.id)) throw FormatError(str(where, ": node '", node.id, "' is defined twice"));
    index[node.id] = static_cast<int>(nodes.size());
    nodes.push_back(std::move(node));
  }
  std::vector<std::pair<int, int>> edges;
  for (const auto& [e, number] : raw_edges) {
    auto ends = split(e, " -- ");
    std::string where = str(source, " line ", number);
    if (ends.size() != 2) throw FormatError(str(where, ": expected an edge '<tab>src -- dst', got '", e, "'"));
    for (auto& id : ends) {
      id = trim(id);
      if (!index.count(id)) throw FormatError(str(where, ": edge names unknown node '", id, "'"));
    }
    edges.emplace_back(index[ends[0]], index[ends[1]]);
  }
  Profile p = order_nodes(std::move(nodes), edges, source);
  p.model = "pipedream-graph";
  return p;
}

Profile profile_from_pipedream_json(const json& doc, const std::string& source) {
  JsonField root(doc, source, "");
  JsonField layers = root["layers"];
  if (layers.size() == 0) layers.fail("must list at least one layer");
  std::vector<RawNode> nodes;
  std::map<std::string, int> index;
  for (size_t i = 0; i < layers.size(); ++i) {
    JsonField f = layers[i];
    RawNode node;
    node.id = f["id"].as_string();
    node.layer.name = f.has("name") ? f["name"].as_string() : node.id;
    node.layer.forward_ms = f["forward_ms"].as_non_negative();
    node.layer.backward_ms = f["backward_ms"].as_non_negative();
    if (f.has("activation_bytes_list")) {
      // Several outputs: the optimizer uses their sum (graph.txt's "[a; b]").
      double total = 0;
      JsonField list = f["activation_bytes_list"];
      for (size_t k = 0; k < list.size(); ++k) total += list[k].as_non_negative();
      node.layer.activation_bytes = to_bytes(total, list);
      // Both given: they must agree (a list of [1, 2] beside 9437184 planned on 3 bytes, unsaid).
      if (f.has("activation_bytes") && std::abs(f["activation_bytes"].as_non_negative() - total) > 0.5)
        list.fail(str("sums to ", node.layer.activation_bytes, " bytes, but field 'activation_bytes' beside it is ",
                      brief(f["activation_bytes"].raw()), " (the list is the layer's outputs, their sum its bytes)"));
    } else {
      JsonField bytes = f["activation_bytes"];
      node.layer.activation_bytes = to_bytes(bytes.as_non_negative(), bytes);
    }
    JsonField parameters = f["parameter_bytes"];
    node.layer.parameter_bytes = to_bytes(parameters.as_non_negative(), parameters);
    if (index.count(node.id)) f["id"].fail("is used by two layers");
    index[node.id] = static_cast<int>(i);
    nodes.push_back(std::move(node));
  }
  std::vector<std::pair<int, int>> edges;
  JsonField raw = root["edges"];
  for (size_t e = 0; e < raw.size(); ++e) {
    JsonField pair = raw[e];
    if (pair.size() != 2) pair.fail("must be a [from_id, to_id] pair");
    int ends[2];
    for (size_t k = 0; k < 2; ++k) {
      std::string id = pair[k].as_string();
      if (!index.count(id)) pair[k].fail("names no layer");
      ends[k] = index[id];
    }
    edges.emplace_back(ends[0], ends[1]);
  }
  Profile p = order_nodes(std::move(nodes), edges, source);
  p.model = root.has("model") ? root["model"].as_string() : "pipedream";
  if (root.has("profiled_batch_size")) p.batch_size = root["profiled_batch_size"].as_int_at_least(1);
  return p;
}

namespace {
// JSON (either flavour) rather than graph.txt.
bool is_json_text(const std::string& text) {
  size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string::npos && (text[first] == '{' || text[first] == '[');  // `[]`: JSON, not a graph
}
}  // namespace

Profile parse_any_profile(const std::string& text, const std::string& source) {
  Profile p;
  bool pipedreams = true;
  // Read as a graph.txt, an empty file "has no layers".
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw FormatError(str(source, ": is empty (a profile is pipetrain's JSON, PipeDream's JSON figures or a graph.txt)"));
  if (!is_json_text(text)) {
    p = profile_from_pipedream_graph(text, source);
  } else {
    json doc = parse_json(text, source);
    if (doc.is_object() && doc.contains("format")) {
      p = profile_from_json(doc, source);
      pipedreams = false;
    } else if (doc.is_object() && doc.contains("layers") && doc.contains("edges")) {
      p = profile_from_pipedream_json(doc, source);
    } else {
      throw FormatError(str(source, ": a JSON document that is neither a pipetrain profile (no \"format\") nor "
                                    "PipeDream's JSON figures (no \"layers\" and \"edges\")"));
    }
  }
  // PipeDream's Input nodes hold the batch the first stage keeps from each microbatch's forward
  // to its backward, which no layer's stash counts: left out, AlexNet's first stage was modelled
  // 147 MiB short a microbatch in flight.
  if (pipedreams)
    for (int l = 0; l < p.num_layers(); ++l)
      if (is_input_layer(p, l)) p.input_bytes += p.layers[l].activation_bytes;
  // Every command failed on it later, or printed a table of nothing, without naming the file.
  if (!has_layer_to_plan(p))
    throw FormatError(str(source, ": no layer besides its Input source(s) (and unread outputs): nothing to train or "
                                  "plan; a profile of the whole model has them"));
  return p;
}

namespace {
std::atomic<int64_t> read_count{0};
}  // namespace

int64_t profiles_read() { return read_count; }

Profile read_any_profile(const std::string& path) {
  ++read_count;
  std::string text = read_input(path, InputKind::profile);
  Profile p = parse_any_profile(text, path);
  if (is_json_text(text)) return p;
  // profiles/<model>/graph.txt: the folder names the model.
  size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    size_t prev = path.find_last_of('/', slash - 1);
    std::string dir = path.substr(prev == std::string::npos ? 0 : prev + 1,
                                  slash - (prev == std::string::npos ? 0 : prev + 1));
    if (!dir.empty() && dir != ".") p.model = dir;
  }
  return p;
}

}  // namespace pt::profile
