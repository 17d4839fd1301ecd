#include "model/layered_model.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <set>

#include <ATen/CPUGeneratorImpl.h>

#include "core/error.h"
#include "core/host_allocator.h"
#include "model/emulated_layer.h"
#include "model/random_draws.h"

namespace pt::model {

namespace {

// splitmix64's finaliser: seeds of neighbouring layers far apart.
uint64_t layer_seed(uint64_t seed, int layer) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (static_cast<uint64_t>(layer) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// LibTorch's modules draw from the process's one generator (initial weights, dropout masks): a
// layer is built, and a layer with a stream of its own runs, with the generator lent that
// layer's state (one at a time in the process), then given back its own, so every other draw
// stays as it was. `state` is set before `run` and holds the layer's state after it.
template <typename Run>
auto with_generator_state(at::Tensor& state, Run run) {
  static std::mutex lending;
  std::lock_guard<std::mutex> lock(lending);
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  at::Tensor own;
  {
    std::lock_guard<std::mutex> g(gen.mutex());
    own = gen.get_state();
    gen.set_state(state);
  }
  struct GiveBack {
    at::Generator& gen;
    at::Tensor& state;
    at::Tensor& own;
    ~GiveBack() {
      std::lock_guard<std::mutex> g(gen.mutex());
      state = gen.get_state();
      gen.set_state(own);
    }
  } give_back{gen, state, own};
  return run();
}

// A generator's state seeded by `seed`.
at::Tensor seeded_state(uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return gen.get_state();
}

// Initial weights: layer i's from a generator seeded by (seed, i).
torch::nn::Sequential seeded(const LayerMaker& make, uint64_t seed, int layer) {
  at::Tensor state = seeded_state(layer_seed(seed, layer));
  return with_generator_state(state, make);
}

// A layer's random draws in a forward keyed `key` (a microbatch), apart from its weights'.
at::Tensor random_draws(uint64_t seed, int layer, int64_t key) {
  return seeded_state(layer_seed(seed + 0xD1B54A32D192ED03ULL * (static_cast<uint64_t>(key) + 1), layer));
}

}  // namespace

bool LayerSet::contains(int layer) const {
  return all() || std::find(layers_->begin(), layers_->end(), layer) != layers_->end();
}

std::string LayerSet::describe() const {
  if (all()) return "all";
  std::vector<int> v = *layers_;
  std::sort(v.begin(), v.end());
  if (v.empty()) return "none";
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    out += str(out.empty() ? "" : ", ", v[i], j > i ? str("-", v[j]) : std::string());
    i = j + 1;
  }
  return out;
}

LayeredModel::LayeredModel(std::string name, Task task, std::vector<int64_t> sample_shape,
                           bool integer_input, LayerSet held, uint64_t seed)
    : name_(std::move(name)), held_(std::move(held)), seed_(seed), task_(task),
      sample_shape_(std::move(sample_shape)), integer_input_(integer_input) {}

void LayeredModel::add(std::string name, LayerMaker make, torch::nn::Sequential built) {
  std::vector<int> inputs;
  if (!layers_.empty()) inputs.push_back(num_layers() - 1);
  int index = num_layers();
  torch::nn::Sequential module{nullptr};
  if (held_.contains(index)) module = built ? built : seeded(make, seed_, index);
  bool draws = module && draws_random(*module);
  layers_.push_back({std::move(name), std::move(module), std::move(inputs), std::move(make), draws});
}


void LayeredModel::add(std::string name, torch::nn::Sequential module) {
  add(std::move(name), [module] { return module; }, module);
}

torch::nn::Sequential LayeredModel::make_layer(int layer) const {
  PT_CHECK(layer >= 0 && layer < num_layers(), layer);
  return seeded(layers_[layer].make, seed_, layer);
}

const Layer& LayeredModel::held_layer(int i) const {
  const Layer& l = layers_.at(i);
  PT_CHECK(l.module, name_, ": layer ", i, " ('", l.name, "') is not held by this process (it holds layers ",
           held_.describe(), ")");
  return l;
}

torch::Tensor LayeredModel::forward(torch::Tensor x, int first, int last) {
  if (last < 0) last = num_layers();
  PT_CHECK(first >= 0 && first <= last && last <= num_layers(), first, "..", last);
  ComputeScope scope(precision_);
  for (int i = first; i < last; ++i) {
    Layer& l = layers_[i];
    if (l.module && l.draws_random && is_training_) {
      at::Tensor state = random_draws(seed_, i, draw_key_);
      x = with_generator_state(state, [&] { return l.module->forward(x); });
    } else if (l.module) {
      x = l.module->forward(x);
    } else {
      torch::nn::Sequential built = make_layer(i);
      built->train(is_training_);
      x = built->forward(x);
      built = torch::nn::Sequential(nullptr);
      release_freed_host_memory();  // the layer is gone: so is its memory
    }
  }
  return x;
}

torch::Tensor LayeredModel::loss(const torch::Tensor& output, const torch::Tensor& target) const {
  if (task_ == Task::kEmulated) return emulated_loss(output);
  ComputeScope scope(precision_);
  if (custom_loss_) return custom_loss_(output, target);
  if (task_ == Task::kRegression) {
    if (output.sizes() != target.sizes())
      throw Error(pt::str("loss mse: the model's output is ", output.sizes(), " but the target is ", target.sizes()));
    return torch::nn::functional::mse_loss(output, target);
  }
  const auto smoothed =
      torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(is_training_ ? label_smoothing_ : 0.0);
  torch::Tensor loss =
      task_ == Task::kLanguageModel
          ? torch::nn::functional::cross_entropy(output.reshape({-1, output.size(-1)}), target.reshape({-1}), smoothed)
          : torch::nn::functional::cross_entropy(output, target, smoothed);
  // A batch of padding alone: PyTorch's mean over no target is 0/0; it adds nothing to a minibatch
  // (0 without reading the logits, so an -inf among them gives no NaN either).
  if (std::isnan(loss.item<double>()) && !target.ne(kIgnoredTarget).any().item<bool>()) return output.narrow(0, 0, 0).sum();
  return loss;
}

void LayeredModel::set_label_smoothing(double smoothing) {
  if (!(smoothing >= 0 && smoothing <= 1))
    throw UsageError(pt::str("--label-smoothing: must be in 0..1 (PyTorch's label_smoothing), got ", smoothing));
  if (smoothing > 0 && (custom_loss_ || task_ == Task::kRegression || task_ == Task::kEmulated))
    throw UsageError(
        custom_loss_ ? pt::str("--label-smoothing: ", name_, " trains with its own loss method, which the flag does not "
                               "reach: smooth in it, or give --loss cross-entropy (or lm) to train with the built-in one")
        : task_ == Task::kRegression ? std::string("--label-smoothing: --loss mse has no classes to smooth")
                                     : std::string("--label-smoothing: emulated compute computes no loss to smooth"));
  label_smoothing_ = smoothing;
}

bool LayeredModel::skips_ignored_targets() const {
  return !custom_loss_ && (task_ == Task::kClassification || task_ == Task::kLanguageModel);
}

int64_t LayeredModel::kept_targets(const torch::Tensor& target) const {
  return skips_ignored_targets() ? target.ne(kIgnoredTarget).sum().item<int64_t>() : target.numel();
}

int64_t LayeredModel::loss_weight(const torch::Tensor& target) const {
  return skips_ignored_targets() ? kept_targets(target) : target.size(0);
}

// Per sample: the probe's output and the test set's targets need not hold as many samples.
bool LayeredModel::classes_along(const torch::Tensor& output, const torch::Tensor& target, int64_t dim) {
  if (dim < 1 || output.dim() != target.dim() + 1) return false;
  std::vector<int64_t> rest(output.sizes().begin() + 1, output.sizes().end());
  rest.erase(rest.begin() + (dim - 1));
  return torch::IntArrayRef(rest) == target.sizes().slice(1);
}

std::optional<int64_t> LayeredModel::class_dim(const torch::Tensor& output, const torch::Tensor& target) const {
  if (task_ == Task::kRegression || task_ == Task::kEmulated || target.is_floating_point()) return std::nullopt;
  auto fits = [&](int64_t dim) { return classes_along(output, target, dim); };
  int64_t last = output.dim() - 1;
  if (task_ == Task::kLanguageModel) return fits(last) ? std::optional<int64_t>(last) : std::nullopt;
  if (!custom_loss_) return fits(1) ? std::optional<int64_t>(1) : std::nullopt;
  if (fits(1) && fits(last) && last != 1) return std::nullopt;
  if (fits(1)) return 1;
  if (fits(last)) return last;
  return std::nullopt;
}

int64_t LayeredModel::correct(const torch::Tensor& output, const torch::Tensor& target) const {
  std::optional<int64_t> dim = class_dim(output, target);
  if (!dim) return 0;
  return output.argmax(*dim).eq(target).sum().item<int64_t>();
}

std::vector<torch::Tensor> LayeredModel::layer_parameters(int i) const {
  return held_layer(i).module->parameters();
}

std::vector<torch::Tensor> LayeredModel::unique_parameters() const {
  std::vector<torch::Tensor> out;
  std::set<const c10::TensorImpl*> seen;
  for (auto& p : parameters())
    if (seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
  return out;
}

std::vector<torch::Tensor> LayeredModel::parameters(int first, int last) const {
  if (last < 0) last = num_layers();
  std::vector<torch::Tensor> out;
  for (int i = first; i < last; ++i)
    for (auto& p : layer_parameters(i)) out.push_back(p);
  return out;
}

Precision LayeredModel::wire_precision(int layer) const {
  bool exact = layer >= 0 && layer < static_cast<int>(exact_outputs_.size()) && exact_outputs_[layer];
  return exact ? Precision::kFloat32 : precision_;
}

int64_t LayeredModel::parameter_bytes(int i) const {
  int64_t bytes = 0;
  for (const auto& p : layer_parameters(i)) bytes += p.numel() * static_cast<int64_t>(p.element_size());
  return bytes;
}

std::vector<int> TieGroup::layers() const {
  std::vector<int> out;
  for (const auto& m : members) out.push_back(m.layer);
  return out;
}

std::vector<TieGroup> LayeredModel::tie_groups() const {
  if (declared_ties_) return *declared_ties_;
  // Keyed by the tensor's own storage and view: a parameter's TensorImpl may differ between two
  // registrations of it (a TorchScript module hands out new handles), its memory does not.
  struct Seen {
    const char* lo;
    const char* hi;
    std::vector<int64_t> sizes, strides;
    TieMember first;
  };
  std::vector<Seen> seen;
  std::vector<TieGroup> groups;
  std::vector<int> group_of;  // seen index -> group index, -1: none yet
  for (int l = 0; l < num_layers(); ++l) {
    if (!holds(l)) continue;
    auto params = layer_parameters(l);
    for (int k = 0; k < static_cast<int>(params.size()); ++k) {
      const auto& p = params[k];
      if (p.numel() == 0) continue;
      const char* lo = static_cast<const char*>(p.data_ptr());
      const char* hi = lo + p.numel() * p.element_size();
      bool matched = false;
      for (size_t s = 0; s < seen.size() && !matched; ++s) {
        const char *slo = seen[s].lo, *shi = seen[s].hi;
        if (hi <= slo || shi <= lo) continue;  // disjoint
        if (lo != slo || p.sizes().vec() != seen[s].sizes || p.strides().vec() != seen[s].strides)
          throw FormatError(str(name_, ": parameter ", k, " of layer ", l, " ('", layers_[l].name,
                                "') overlaps parameter ", seen[s].first.param, " of layer ", seen[s].first.layer,
                                " ('", layers_[seen[s].first.layer].name,
                                "') without being the same tensor: pipetrain ties whole parameters only"));
        matched = true;
        if (seen[s].first.layer == l) break;  // used twice inside one layer: one parameter
        if (group_of[s] < 0) {
          group_of[s] = static_cast<int>(groups.size());
          groups.push_back({{seen[s].first}, p.numel() * static_cast<int64_t>(p.element_size()), p.requires_grad()});
        }
        auto& members = groups[group_of[s]].members;
        if (members.back().layer != l) members.push_back({l, k});
      }
      if (!matched) {
        seen.push_back({lo, hi, p.sizes().vec(), p.strides().vec(), {l, k}});
        group_of.push_back(-1);
      }
    }
  }
  return groups;
}

namespace {
std::vector<DeferredBatchNorm> deferred_in(const torch::nn::Sequential& module) {
  std::vector<DeferredBatchNorm> out;
  for (const auto& child : module->children())
    if (auto* layer = dynamic_cast<DeferrableLayer*>(child.get()))
      for (auto& n : layer->deferred_batch_norms()) out.push_back(std::move(n));
  return out;
}
}  // namespace

std::vector<DeferredBatchNorm> LayeredModel::deferred_batch_norms(int first, int last) const {
  std::vector<DeferredBatchNorm> out;
  for (int l = first; l < last; ++l)
    for (auto& n : deferred_in(held_layer(l).module)) out.push_back(std::move(n));
  return out;
}

int64_t LayeredModel::deferrable_batch_norms() const {
  int64_t found = 0;
  for (int l = 0; l < num_layers(); ++l) found += static_cast<int64_t>(deferred_in(holds(l) ? layers_[l].module : make_layer(l)).size());
  return found;
}

bool LayeredModel::any_layer_draws() const {
  for (int l = 0; l < num_layers(); ++l)
    if (holds(l) ? layers_[l].draws_random : model::draws_random(*make_layer(l))) return true;
  return false;
}

void LayeredModel::train(bool on) {
  is_training_ = on;
  for (auto& l : layers_)
    if (l.module) l.module->train(on);
}

}  // namespace pt::model
