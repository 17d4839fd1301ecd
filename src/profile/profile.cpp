#include "profile/profile.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "core/input_limits.h"

namespace pt::profile {

bool Profile::is_chain() const {
  for (int i = 0; i < num_layers(); ++i) {
    const auto& in = layers[i].inputs;
    if (i == 0 ? !in.empty() : (in.size() != 1 || in[0] != i - 1)) return false;
  }
  return true;
}

double Profile::total_compute_ms() const {
  double t = 0;
  for (const auto& l : layers) t += l.forward_ms + l.backward_ms;
  return t;
}

double Profile::total_step_ms() const {
  double t = 0;
  for (const auto& l : layers) t += l.optimizer_ms;
  return t;
}

int64_t Profile::total_parameter_bytes() const {
  int64_t b = 0;
  for (int64_t own : own_parameter_bytes(*this)) b += own;
  return b;
}

json to_json(const Profile& p) {
  json layers = json::array();
  for (const auto& l : p.layers) {
    json layer = {{"name", l.name},
                  {"forward_ms", l.forward_ms},
                  {"backward_ms", l.backward_ms},
                  {"activation_bytes", l.activation_bytes},
                  {"parameter_bytes", l.parameter_bytes},
                  {"inputs", l.inputs}};
    if (l.optimizer_ms > 0) layer["optimizer_ms"] = l.optimizer_ms;
    if (l.stash_copy_ms > 0) layer["stash_copy_ms"] = l.stash_copy_ms;
    if (l.input_gradient_ms > 0) layer["input_gradient_ms"] = l.input_gradient_ms;
    if (l.stash_measured || l.stash_bytes > 0) layer["stash_bytes"] = l.stash_bytes;
    if (l.fixed_stash_bytes > 0) layer["fixed_stash_bytes"] = l.fixed_stash_bytes;
    if (l.split_bytes > 0) layer["split_bytes"] = l.split_bytes;
    if (l.workspace_bytes > 0) layer["workspace_bytes"] = l.workspace_bytes;
    if (l.fixed_workspace_bytes > 0) layer["fixed_workspace_bytes"] = l.fixed_workspace_bytes;
    if (l.split_workspace_bytes > 0) layer["split_workspace_bytes"] = l.split_workspace_bytes;
    if (l.buffer_bytes > 0) layer["buffer_bytes"] = l.buffer_bytes;
    if (!l.timings.empty()) {
      json timings = json::array();
      for (const auto& t : l.timings)
        timings.push_back({{"batch", t.batch}, {"forward_ms", t.forward_ms}, {"backward_ms", t.backward_ms}});
      layer["timings"] = timings;
    }
    layers.push_back(std::move(layer));
  }
  json out = {{"format", format_tag("profile", kProfileVersion)},
              {"model", p.model},
              {"batch_size", p.batch_size},
              {"device", p.device},
              {"precision", p.precision},
              {"optimizer", p.optimizer},
              {"timed", p.timed},
              {"layers", layers}};
  for (const auto& [field, list] : {std::pair{"ties", &p.ties}, {"frozen_ties", &p.frozen_ties}}) {
    if (list->empty()) continue;
    json ties = json::array();
    for (const auto& t : *list) ties.push_back({{"layers", t.layers}, {"bytes", t.bytes}});
    out[field] = ties;
  }
  if (!p.alike.empty()) out["alike_layers"] = p.alike;
  if (p.timing_spread > 0) out["timing_spread"] = p.timing_spread;
  if (p.batch_norms > 0) out["batch_norms"] = p.batch_norms;
  if (p.input_bytes > 0) out["input_bytes"] = p.input_bytes;
  return out;
}

namespace {
// A layer's time read from a profile's field, which its error names.
double layer_ms(const JsonField& f) {
  return check_layer_ms(f.as_non_negative(), [&] { return str(f.source(), ": field '", f.path(), "'"); });
}
// A part of the layer's time `whole_name` (the copy of its step, the input gradient of its
// backward): at most that whole.
double part_ms(const JsonField& f, const char* whole_name, double whole) {
  double ms = layer_ms(f);
  if (ms > whole) f.fail(str("must be at most the layer's ", whole_name, " (", whole, "), which includes it, got ", ms));
  return ms;
}
}  // namespace

Profile profile_from_json(const json& doc, const std::string& source) {
  JsonField root(doc, source, "");
  expect_format(root, "profile", kProfileVersion);
  // A misspelled field ("precison": "bf16") was read as absent: fp32, and the run's note said so.
  root.only_fields({"format", "model", "batch_size", "device", "recipe", "precision", "optimizer", "timed",
                    "timing_spread", "batch_norms", "input_bytes", "layers", "ties", "frozen_ties", "alike_layers"});
  Profile p;
  p.model = root["model"].as_string();
  p.batch_size = root["batch_size"].as_int_at_least(1);
  p.device = root.has("device") ? root["device"].as_string() : "unknown";
  if (root.has("precision")) {
    p.precision = root["precision"].as_string();
    if (p.precision != "fp32" && p.precision != "bf16") root["precision"].fail(str("must be fp32 or bf16, got '", p.precision, "'"));
  }
  if (root.has("optimizer")) {
    p.optimizer = root["optimizer"].as_string();
    if (p.optimizer != "sgd" && p.optimizer != "adam" && p.optimizer != "adamw")
      root["optimizer"].fail(str("must be sgd, adam or adamw, got '", p.optimizer, "'"));
  }
  if (root.has("timed")) {
    p.timed = root["timed"].as_string();
    if (p.timed != "in sequence" && p.timed != "alone")
      root["timed"].fail(str("must be 'in sequence' or 'alone', got '", p.timed, "'"));
  }
  if (root.has("timing_spread")) p.timing_spread = root["timing_spread"].as_non_negative();
  if (root.has("batch_norms")) p.batch_norms = root["batch_norms"].as_int_in(0, int64_t{1} << 40);
  if (root.has("input_bytes")) p.input_bytes = root["input_bytes"].as_int_in(0, kMaxLayerBytes);
  JsonField layers = root["layers"];
  size_t n = layers.size();
  if (n == 0) layers.fail("must list at least one layer");
  check_layer_count(n, str(source, ": field 'layers'"));
  for (size_t i = 0; i < n; ++i) {
    JsonField f = layers[i];
    f.only_fields({"name", "forward_ms", "backward_ms", "activation_bytes", "parameter_bytes", "inputs", "optimizer_ms",
                   "stash_copy_ms", "input_gradient_ms", "stash_bytes", "fixed_stash_bytes", "split_bytes",
                   "workspace_bytes", "fixed_workspace_bytes", "split_workspace_bytes", "buffer_bytes", "timings"});
    Layer l;
    l.name = f["name"].as_string();
    l.forward_ms = layer_ms(f["forward_ms"]);
    l.backward_ms = layer_ms(f["backward_ms"]);
    l.activation_bytes = f["activation_bytes"].as_int_in(0, kMaxLayerBytes);
    l.parameter_bytes = f["parameter_bytes"].as_int_in(0, kMaxLayerBytes);
    if (f.has("optimizer_ms")) l.optimizer_ms = layer_ms(f["optimizer_ms"]);
    if (f.has("stash_copy_ms")) l.stash_copy_ms = part_ms(f["stash_copy_ms"], "optimizer_ms", l.optimizer_ms);
    if (f.has("input_gradient_ms"))
      l.input_gradient_ms = part_ms(f["input_gradient_ms"], "backward_ms", l.backward_ms);
    if (f.has("stash_bytes")) l.stash_bytes = f["stash_bytes"].as_int_in(0, kMaxLayerBytes), l.stash_measured = true;
    if (f.has("fixed_stash_bytes")) l.fixed_stash_bytes = f["fixed_stash_bytes"].as_int_in(0, l.stash_bytes);
    if (f.has("split_bytes")) l.split_bytes = f["split_bytes"].as_int_in(0, kMaxLayerBytes);
    if (f.has("workspace_bytes")) l.workspace_bytes = f["workspace_bytes"].as_int_in(0, kMaxLayerBytes);
    if (f.has("fixed_workspace_bytes"))
      l.fixed_workspace_bytes = f["fixed_workspace_bytes"].as_int_in(0, l.workspace_bytes);
    if (f.has("split_workspace_bytes"))
      l.split_workspace_bytes = f["split_workspace_bytes"].as_int_in(0, kMaxLayerBytes);
    if (f.has("buffer_bytes")) l.buffer_bytes = f["buffer_bytes"].as_int_in(0, kMaxLayerBytes);
    if (f.has("timings")) {
      JsonField ts = f["timings"];
      for (size_t k = 0; k < ts.size(); ++k) {
        JsonField t = ts[k];
        Timing timing;
        timing.batch = t["batch"].as_int_in(1, int64_t(1) << 40);
        if (!l.timings.empty() && timing.batch <= l.timings.back().batch)
          t["batch"].fail(str("must be above the batch before it (", l.timings.back().batch, "), got ", timing.batch));
        timing.forward_ms = layer_ms(t["forward_ms"]);
        timing.backward_ms = layer_ms(t["backward_ms"]);
        // At the profile's own batch a timing is the layer's forward_ms and backward_ms: one that
        // differs was accepted, and each figure was read where the other was not.
        auto differs = [](double a, double b) { return std::abs(a - b) > 1e-6 * std::max(std::abs(a), std::abs(b)); };
        if (timing.batch == p.batch_size &&
            (differs(timing.forward_ms, l.forward_ms) || differs(timing.backward_ms, l.backward_ms)))
          t["forward_ms"].fail(str("and 'backward_ms' are ", timing.forward_ms, " and ", timing.backward_ms,
                                   " ms at the profile's batch of ", p.batch_size, ", where the layer's forward_ms and ",
                                   "backward_ms are ", l.forward_ms, " and ", l.backward_ms));
        l.timings.push_back(timing);
      }
    }
    if (f.has("inputs")) {
      JsonField in = f["inputs"];
      for (size_t k = 0; k < in.size(); ++k) {
        int64_t src = in[k].as_int();
        if (src < 0 || src >= static_cast<int64_t>(i))
          in[k].fail(str("must name an earlier layer (0..", static_cast<int64_t>(i) - 1,
                         "), got ", src));
        l.inputs.push_back(static_cast<int>(src));
      }
    } else if (i > 0) {
      l.inputs.push_back(static_cast<int>(i) - 1);
    }
    p.layers.push_back(std::move(l));
  }
  for (const char* field : {"ties", "frozen_ties"}) {
    if (!root.has(field)) continue;
    JsonField ties = root[field];
    for (size_t t = 0; t < ties.size(); ++t) {
      Tie tie;
      JsonField tl = ties[t]["layers"];
      if (tl.size() < 2) tl.fail(str("a tie joins two or more layers, got ", tl.size()));
      for (size_t k = 0; k < tl.size(); ++k) {
        int64_t l = tl[k].as_int();
        if (l < 0 || l >= static_cast<int64_t>(n) || (k > 0 && l <= tie.layers.back()))
          tl[k].fail(str("must name layers in ascending order within 0..", n - 1, ", got ", l));
        tie.layers.push_back(static_cast<int>(l));
      }
      tie.bytes = ties[t]["bytes"].as_int_in(0, kMaxLayerBytes);
      (std::string(field) == "ties" ? p.ties : p.frozen_ties).push_back(std::move(tie));
    }
  }
  if (root.has("alike_layers")) {
    JsonField groups = root["alike_layers"];
    std::vector<char> seen(n, 0);
    for (size_t g = 0; g < groups.size(); ++g) {
      JsonField gl = groups[g];
      if (gl.size() < 2) gl.fail(str("must list two layers or more, got ", gl.size()));
      std::vector<int> members;
      for (size_t k = 0; k < gl.size(); ++k) {
        int64_t l = gl[k].as_int();
        if (l < 0 || l >= static_cast<int64_t>(n) || (k > 0 && l <= members.back()))
          gl[k].fail(str("must name layers in ascending order within 0..", n - 1, ", got ", l));
        if (seen[l]) gl[k].fail(str("names layer ", l, ", which an earlier group holds"));
        seen[l] = 1;
        members.push_back(static_cast<int>(l));
      }
      p.alike.push_back(std::move(members));
    }
  }
  return p;
}

Profile read_profile_json(const std::string& path) {
  return profile_from_json(parse_json(read_input(path, InputKind::profile), path), path);
}

void write_profile(const Profile& p, const std::string& path) {
  write_text_file_atomic(path, to_json(p).dump(1) + "\n");
}

Profile with_batch_size(const Profile& p, int64_t batch_size) {
  PT_CHECK(batch_size >= 1 && p.batch_size >= 1, "batch sizes ", batch_size, " and ", p.batch_size);
  double f = static_cast<double>(batch_size) / static_cast<double>(p.batch_size);
  Profile out = p;
  out.batch_size = batch_size;
  out.input_bytes = static_cast<int64_t>(std::llround(static_cast<double>(p.input_bytes) * f));
  for (auto& l : out.layers) {
    l.forward_ms = forward_ms_at(l, static_cast<double>(batch_size), p.batch_size);
    double backward = backward_ms_at(l, static_cast<double>(batch_size), p.batch_size);
    if (l.backward_ms > 0) l.input_gradient_ms *= backward / l.backward_ms;  // the same share
    l.backward_ms = backward;
    l.activation_bytes = static_cast<int64_t>(std::llround(static_cast<double>(l.activation_bytes) * f));
    l.stash_bytes = l.fixed_stash_bytes + static_cast<int64_t>(std::llround(static_cast<double>(l.stash_bytes - l.fixed_stash_bytes) * f));
    if (l.split_bytes > 0) {
      int64_t fixed = std::min(l.fixed_stash_bytes, l.split_bytes);
      l.split_bytes = fixed + static_cast<int64_t>(std::llround(static_cast<double>(l.split_bytes - fixed) * f));
    }
    l.workspace_bytes = static_cast<int64_t>(std::llround(workspace_bytes_at(p, static_cast<int>(&l - out.layers.data()), f)));
    l.split_workspace_bytes = static_cast<int64_t>(std::llround(static_cast<double>(l.split_workspace_bytes) * f));
  }
  return out;
}

namespace {

// t(batch) from points (b_i, t_i) ascending: piecewise linear; beyond the ends, the line
// through the two nearest points, kept between the end's time (a constant cost) and the end's
// time scaled linearly (no fixed cost at all), which noisy points could otherwise pass.
double interpolate(const std::vector<Timing>& ts, double batch, bool backward) {
  auto t = [&](size_t i) { return backward ? ts[i].backward_ms : ts[i].forward_ms; };
  auto b = [&](size_t i) { return static_cast<double>(ts[i].batch); };
  size_t n = ts.size();
  auto line = [&](size_t i, size_t j) { return t(i) + (batch - b(i)) * (t(j) - t(i)) / (b(j) - b(i)); };
  if (batch <= b(0)) return std::clamp(line(0, 1), t(0) * batch / b(0), t(0));
  if (batch >= b(n - 1)) return std::clamp(line(n - 2, n - 1), t(n - 1), t(n - 1) * batch / b(n - 1));
  size_t k = 1;
  while (b(k) < batch) ++k;
  return line(k - 1, k);
}

double time_at(const Layer& l, double batch, int64_t profile_batch, bool backward) {
  if (l.timings.size() < 2) return (backward ? l.backward_ms : l.forward_ms) * batch / static_cast<double>(profile_batch);
  return interpolate(l.timings, batch, backward);
}

double compute_ms(const Profile& profile, int layer, int microbatches, bool backward) {
  if (is_input_layer(profile, layer)) return 0;
  const Layer& l = profile.layers[layer];
  double whole = backward ? l.backward_ms : l.forward_ms;
  if (microbatches <= 1 || l.timings.size() < 2) return whole;
  double m = microbatches;
  return m * time_at(l, static_cast<double>(profile.batch_size) / m, profile.batch_size, backward);
}

}  // namespace

double forward_ms_at(const Layer& l, double batch, int64_t profile_batch) {
  return time_at(l, batch, profile_batch, false);
}

double backward_ms_at(const Layer& l, double batch, int64_t profile_batch) {
  return time_at(l, batch, profile_batch, true);
}

double layer_share_floor(const Layer& l, int64_t batch, bool backward) {
  double floor = 1;
  if (l.timings.size() < 2) return floor;
  double whole = time_at(l, static_cast<double>(batch), batch, backward);
  if (whole <= 0) return floor;
  for (const auto& t : l.timings)
    floor = std::min(floor, (backward ? t.backward_ms : t.forward_ms) * static_cast<double>(batch) /
                                static_cast<double>(t.batch) / whole);
  return floor;
}

double microbatch_share_floor(const Profile& profile) {
  double floor = 1;
  for (const auto& l : profile.layers)
    floor = std::min({floor, layer_share_floor(l, profile.batch_size, false), layer_share_floor(l, profile.batch_size, true)});
  return floor;
}

bool knows_batch_sizes(const Profile& profile) {
  for (const auto& l : profile.layers)
    if (l.forward_ms + l.backward_ms > 0 && l.timings.size() < 2) return false;
  return true;
}

double compute_forward_ms(const Profile& profile, int layer, int microbatches) {
  return compute_ms(profile, layer, microbatches, false);
}

double compute_backward_ms(const Profile& profile, int layer, int microbatches) {
  return compute_ms(profile, layer, microbatches, true);
}

int64_t stash_bytes(const Profile& profile, int layer) {
  if (is_input_layer(profile, layer)) return 0;
  const Layer& l = profile.layers[layer];
  return l.stash_measured || l.stash_bytes > 0 ? l.stash_bytes : l.activation_bytes;
}

double stash_bytes_at(const Profile& profile, int layer, double scale) {
  int64_t whole = stash_bytes(profile, layer), fixed = std::min(profile.layers[layer].fixed_stash_bytes, whole);
  return static_cast<double>(fixed) + static_cast<double>(whole - fixed) * scale;
}

double workspace_bytes_at(const Profile& profile, int layer, double scale) {
  const Layer& l = profile.layers[layer];
  int64_t fixed = std::min(l.fixed_workspace_bytes, l.workspace_bytes);
  return static_cast<double>(fixed) + static_cast<double>(l.workspace_bytes - fixed) * scale;
}

double split_bytes_at(const Profile& profile, int layer, double scale) {
  if (is_input_layer(profile, layer)) return 0;
  const Layer& l = profile.layers[layer];
  if (l.split_bytes <= 0) return -1;
  int64_t fixed = std::min(l.fixed_stash_bytes, l.split_bytes);
  return static_cast<double>(fixed) + static_cast<double>(l.split_bytes - fixed) * scale;
}

bool Profile::timed_busy() const { return timing_spread > kBusySpread; }

double compute_step_ms(const Profile& profile, int layer, bool stashes) {
  const Layer& l = profile.layers[layer];
  return is_input_layer(profile, layer) ? 0 : l.optimizer_ms - (stashes ? 0 : l.stash_copy_ms);
}

void check_layer_count(size_t layers, const std::string& where) {
  if (layers > static_cast<size_t>(kMaxLayers))
    throw FormatError(str(where, ": ", layers, " layers, more than the ", kMaxLayers, " pipetrain accepts"));
}

void require_timed(const Profile& profile, const std::string& path) {
  for (const auto& l : profile.layers)
    if (l.forward_ms > 0 || l.backward_ms > 0) return;
  throw FormatError(str(path, ": every layer's forward_ms and backward_ms is 0 (", profile.layers.size(),
                        " layers): a profile to plan, simulate or train by times at least one layer"));
}

void refuse_layer_ms(double ms, const std::string& where) {
  throw FormatError(str(where, ": ", ms, " ms, more than the ", kMaxLayerMs, " ms pipetrain accepts for one layer"));
}

double input_gradient_share(const Profile& profile, int layer) {
  const Layer& l = profile.layers[layer];
  return l.input_gradient_ms > 0 && l.backward_ms > 0 ? l.input_gradient_ms / l.backward_ms : kInputGradientShare;
}

double input_gradient_share(const Profile& profile, int stage, const std::vector<int>& layers) {
  if (stage == 0) return 1.0;
  double all = 0, input = 0;
  for (int l : layers) {
    all += profile.layers[l].backward_ms;
    input += profile.layers[l].backward_ms * input_gradient_share(profile, l);
  }
  return all > 0 ? input / all : kInputGradientShare;
}

}  // namespace pt::profile
