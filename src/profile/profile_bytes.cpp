// Bytes from a profile: a stage's parameters and buffers (a tied parameter counted once), its
// gradient buckets, the activations crossing each cut (profile.h).
#include <algorithm>

#include "profile/profile.h"

namespace pt::profile {

namespace {

int64_t duplicate_bytes(const std::vector<Tie>& ties, const std::vector<int>& layers) {
  int64_t twice = 0;
  for (const auto& t : ties) {
    int64_t in = 0;
    for (int l : t.layers) in += std::count(layers.begin(), layers.end(), l);
    if (in > 1) twice += (in - 1) * t.bytes;
  }
  return twice;
}

}  // namespace

int64_t tied_duplicate_bytes(const Profile& profile, const std::vector<int>& layers) {
  return duplicate_bytes(profile.ties, layers);
}

int64_t buffer_bytes(const Profile& profile, const std::vector<int>& layers) {
  int64_t b = 0;
  for (int l : layers) b += profile.layers[l].buffer_bytes;
  return b - duplicate_bytes(profile.frozen_ties, layers);
}

int64_t parameter_bytes(const Profile& profile, const std::vector<int>& layers) {
  int64_t b = 0;
  for (int l : layers) b += profile.layers[l].parameter_bytes;
  return b - tied_duplicate_bytes(profile, layers);
}

std::vector<int64_t> own_parameter_bytes(const Profile& profile) {
  std::vector<int64_t> own(profile.layers.size());
  for (size_t l = 0; l < own.size(); ++l) own[l] = profile.layers[l].parameter_bytes;
  for (const auto& t : profile.ties)
    for (size_t i = 1; i < t.layers.size(); ++i) own[t.layers[i]] -= t.bytes;
  return own;
}

std::vector<GradientBucket> gradient_buckets(const Profile& profile, const std::vector<int>& layers,
                                             int64_t bucket_bytes) {
  double backward = 0, done = 0;
  for (int l : layers) backward += compute_backward_ms(profile, l);
  std::vector<GradientBucket> out;
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    done += compute_backward_ms(profile, *it);
    int64_t bytes = profile.layers[*it].parameter_bytes;
    // A tied tensor is one gradient, final at the backward of its first holder here.
    for (const auto& t : profile.ties)
      if (std::find(t.layers.begin(), t.layers.end(), *it) != t.layers.end() &&
          std::any_of(it + 1, layers.rend(), [&](int l) { return std::count(t.layers.begin(), t.layers.end(), l) > 0; }))
        bytes -= t.bytes;
    if (bytes == 0) continue;
    bool fits = !out.empty() && (bucket_bytes <= 0 || out.back().bytes + bytes <= bucket_bytes);
    if (!fits) out.push_back({});
    out.back().bytes += bytes;
    out.back().ready_share = bucket_bytes > 0 && backward > 0 ? done / backward : 1;
  }
  return out;
}

std::vector<double> cut_bytes(const Profile& profile, const std::vector<int>& stage_of, int stages,
                              bool count_input_layers) {
  int n = profile.num_layers();
  std::vector<int> last_reader(n, -1);  // the latest stage reading each layer's output
  for (int r = 0; r < n; ++r)
    for (int in : profile.layers[r].inputs) last_reader[in] = std::max(last_reader[in], stage_of[r]);
  std::vector<double> out(stages, 0);
  for (int l = 0; l < n; ++l) {
    if (!count_input_layers && is_input_layer(profile, l)) continue;
    for (int s = stage_of[l]; s < last_reader[l]; ++s) out[s] += static_cast<double>(profile.layers[l].activation_bytes);
  }
  return out;
}

std::vector<double> bytes_after_each_layer(const Profile& profile) {
  std::vector<int> own(profile.num_layers());
  for (int l = 0; l < profile.num_layers(); ++l) own[l] = l;
  return cut_bytes(profile, own, profile.num_layers());
}

}  // namespace pt::profile
