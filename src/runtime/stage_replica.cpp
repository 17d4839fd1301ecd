#include "runtime/stage_replica.h"

#include <chrono>

#include "core/error.h"

namespace pt::runtime {

namespace {

// Of `params`, the replica in `held_by` holding each (nullptr: none, this replica will).
std::vector<const StageReplica*> owners(const std::vector<torch::Tensor>& params,
                                        const std::vector<const StageReplica*>& held_by) {
  std::vector<const StageReplica*> out;
  for (const auto& p : params) {
    const StageReplica* owner = nullptr;
    for (const StageReplica* r : held_by)
      if (r->holds(p)) owner = r;
    out.push_back(owner);
  }
  return out;
}

// What this replica flattens and steps: its trainable parameters no other replica holds. A frozen
// one (requires_grad false, as fine-tuning leaves a backbone) is no optimizer state, as in
// torch.optim.SGD, which skips a parameter without a gradient: in the flat buffer, weight decay
// shrank it at every step (a GPT's frozen LayerNorm moved 6.6e-3, every later weight 7.3e-3 off
// eager PyTorch, exit 0).
std::vector<torch::Tensor> own_only(const std::vector<torch::Tensor>& params,
                                    const std::vector<const StageReplica*>& owner) {
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < params.size(); ++i)
    if (!owner[i] && params[i].requires_grad()) out.push_back(params[i]);
  return out;
}

}  // namespace

StageReplica::StageReplica(std::shared_ptr<model::LayeredModel> model, int first, int last, bool is_last,
                           const model::OptimizerOptions& optimizer, bool stash_weights, int max_versions, bool recompute,
                           const std::vector<const StageReplica*>& held_by)
    : model_(std::move(model)), first_(first), last_(last), is_last_(is_last), stash_weights_(stash_weights),
      max_versions_(max_versions), recompute_(recompute), values_(model_->task() != model::Task::kEmulated), params_(model_->parameters(first, last)),
      owner_(owners(params_, held_by)),
      flat_(std::make_unique<model::FlatParameters>(own_only(params_, owner_),
                                                    [optimizer](const torch::Tensor& p) { return optimizer.decays(p); })),
      optimizer_(*flat_, optimizer) {
  for (size_t i = 0; i < params_.size(); ++i) {
    bool own = !owner_[i] && params_[i].requires_grad();
    size_t k = 0;
    while (own && !flat_->slots()[k].param.is_same(params_[i])) ++k;
    slot_of_.push_back(own ? k : kNoSlot);
  }
}

torch::Tensor StageReplica::reached_flag(const torch::Tensor& p) {
  const auto& slots = flat_->slots();
  for (size_t k = 0; k < slots.size(); ++k)
    if (slots[k].param.is_same(p)) return flat_->reached().narrow(0, static_cast<int64_t>(k), 1);
  return {};
}

int64_t StageReplica::steps_of(const torch::Tensor& p) const {
  const auto& slots = flat_->slots();
  for (size_t k = 0; k < slots.size(); ++k)
    if (slots[k].param.is_same(p)) return optimizer_.steps_taken(k);
  throw InternalError("steps_of a parameter this replica does not hold");
}

bool StageReplica::holds(const torch::Tensor& p) const {
  for (const auto& slot : flat_->slots())
    if (slot.param.is_same(p)) return true;
  return false;
}

torch::Tensor StageReplica::state_of(const torch::Tensor& p, int which) const {
  for (const auto& slot : flat_->slots())
    if (slot.param.is_same(p)) return optimizer_.state(slot, which);
  throw InternalError("state_of a parameter this replica does not hold");
}

double StageReplica::weight_sum() const {
  double s = 0;
  for (const auto& p : params_) s += p.data().sum().item<double>();
  return s;
}

torch::Tensor StageReplica::forward(int64_t mb, const torch::Tensor& input, const torch::Tensor& target,
                                    double loss_scale, int64_t version, int64_t predict_steps,
                                    int64_t minibatch) {
  PT_CHECK(!in_flight_.count(mb), "microbatch ", mb, " is already in flight");
  InFlight f;
  f.version = version >= 0 ? version : version_;
  PT_CHECK(f.version <= version_, "forward asks for weight version ", f.version, " but the newest is ", version_);
  auto predicted_copy = [&] {  // in a released prediction's buffers where there is one
    std::vector<torch::Tensor> w = flat_->copy_weights(
        spare_predicted_.empty() ? std::vector<torch::Tensor>{} : std::move(spare_predicted_.back()), values_);
    if (!spare_predicted_.empty()) spare_predicted_.pop_back();
    if (values_) optimizer_.predict(w, predict_steps, minibatch);
    return w;
  };
  if (predicts_per_minibatch() && version < 0) {
    auto it = minibatch_predicted_.find(minibatch);
    if (it == minibatch_predicted_.end() && predict_steps > 0)
      it = minibatch_predicted_.emplace(minibatch, predicted_copy()).first;
    if (it != minibatch_predicted_.end()) f.shares = minibatch;
  } else if (predict_steps > 0 && stash_weights_ && optimizer_.predicts() && version < 0) {
    f.predicted = predicted_copy();
  }
  f.input = first_ > 0 ? model::from_wire(input, model_->wire_precision(first_ - 1)).detach() : input.detach();
  if (first_ > 0 && f.input.is_floating_point()) f.input.requires_grad_(true);
  torch::Tensor out;
  with_weights(f, [&] {
    torch::AutoGradMode graph(!recompute_);
    model_->set_draw_key(mb);  // its dropout masks, the same when recomputed
    out = model_->forward(f.input, first_, last_);
    if (recompute_ && !checked_determinism_ && values_) check_recomputable(f.input, out);
    if (is_last_) {
      torch::Tensor loss = model_->loss(out, target);
      last_loss_ = loss.item<double>();
      out = loss * loss_scale;
    }
  });
  f.output_sizes = out.sizes().vec();
  f.microbatch = mb;
  if (recompute_) {
    f.target = target;
    f.loss_scale = loss_scale;
  } else {
    f.output = out;
  }
  if (record_sums_) {
    with_weights(f, [&] { weight_sums_[mb].first = weight_sum(); });
    used_versions_[mb] = f.version;
  }
  in_flight_[mb] = std::move(f);
  count_copies();
  return is_last_ ? out.detach() : model::to_wire(out.detach(), model_->wire_precision(last_ - 1));
}

void StageReplica::check_recomputable(const torch::Tensor& input, const torch::Tensor& output) {
  checked_determinism_ = true;
  struct Kept {
    std::string name;
    torch::Tensor buffer, was;
  };
  std::vector<Kept> kept;  // each buffer and its values now
  for (int l = first_; l < last_; ++l)
    for (auto& b : model_->layer(l).module->named_buffers())
      kept.push_back({str(model_->layer(l).name, ".", b.key()), b.value(), b.value().detach().clone()});
  std::string moved;  // the buffers the forward run again updated
  auto run_again = [&] {
    torch::NoGradGuard no_grad;
    torch::Tensor out = model_->forward(input, first_, last_);
    moved.clear();
    for (auto& k : kept) {
      if (!k.buffer.equal(k.was)) moved += (moved.empty() ? "" : ", ") + k.name;
      k.buffer.detach().copy_(k.was);
    }
    return out;
  };
  auto alike = [](const torch::Tensor& a, const torch::Tensor& b) {
    return a.sizes() == b.sizes() && (a.eq(b) | (a.isnan() & b.isnan())).all().item<bool>();
  };
  torch::Tensor again = run_again();
  if (alike(again, output.detach())) return;
  // A forward that reads what it updates (a running mean it centres by) gives another output when
  // run again, as one that draws does: the message blamed random numbers for both. Run once more
  // from the same buffers: the same output there is the buffers' doing.
  const bool buffers = !moved.empty() && alike(run_again(), again);
  const std::string why = !buffers ? "the forward draws random numbers pipetrain does not key per microbatch "
                                     "(dropout's it does), so a recomputed forward would draw others"
                                   : str("the forward updates buffers (", moved, ") and reads what it updated, "
                                         "so a recomputed forward would read them moved on");
  throw ConfigError(str("--recompute: ",
                        first_ + 1 < last_ ? str("layers ", first_, "..", last_ - 1, " (", model_->layer(first_).name,
                                                 " .. ", model_->layer(last_ - 1).name)
                                           : str("layer ", first_, " (", model_->layer(first_).name),
                        "): run again on the same input, its output differs: ", why, ", and the backward would "
                        "differentiate another function than the one that gave the loss. Train them without "
                        "recomputation (no --recompute; a plan's stage without \"recompute\": true)"));
}

std::vector<std::pair<torch::Tensor, torch::Tensor>> StageReplica::rebuild(InFlight& f) {
  // The first forward already updated the layers' buffers (BatchNorm's running statistics):
  // the second updates copies, and the buffers get their own memory back once the backward
  // is done (restoring them in place would change what the graph saved).
  std::vector<std::pair<torch::Tensor, torch::Tensor>> buffers;
  for (int l = first_; l < last_; ++l)
    for (auto& b : model_->layer(l).module->buffers()) {
      torch::Tensor own = b.data();
      b.set_data(own.clone());
      buffers.push_back({b, own});
    }
  torch::AutoGradMode graph(true);
  model_->set_draw_key(f.microbatch);
  torch::Tensor out = model_->forward(f.input, first_, last_);
  if (is_last_) out = model_->loss(out, f.target) * f.loss_scale;
  f.output = out;
  f.target = torch::Tensor();
  return buffers;
}

template <typename F>
void StageReplica::with_weights(InFlight& mb, F&& f) {
  if (!runs_on_copy(mb)) {
    with_version(mb.version, std::forward<F>(f));
    return;
  }
  std::vector<torch::Tensor>& copy = mb.shares >= 0 ? minibatch_predicted_.at(mb.shares) : mb.predicted;
  flat_->swap_weights(copy);
  try {
    torch::AutoGradMode grad_on(true);
    f();
  } catch (...) {
    flat_->swap_weights(copy);
    throw;
  }
  flat_->swap_weights(copy);
}

template <typename F>
void StageReplica::with_version(int64_t version, F&& f) {
  if (!stash_weights_ || version == version_) {
    f();
    return;
  }
  auto it = versions_.find(version);
  PT_CHECK(it != versions_.end(), "weight version ", version, " was not stashed");
  // The weight buffers exchange their memory with the stash and back: no copy, where copying
  // the newest out, the stash in and the newest back cost three passes over the weights. Every
  // view of the buffers follows, what autograd saved included (set_data on the parameters alone
  // left a Linear's saved weight.t() on the newest version).
  flat_->swap_weights(it->second);
  auto restore = [&] { flat_->swap_weights(it->second); };
  try {
    torch::AutoGradMode grad_on(true);
    f();
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

torch::Tensor StageReplica::backward(int64_t mb, const torch::Tensor& output_grad, bool input_only) {
  auto it = in_flight_.find(mb);
  PT_CHECK(it != in_flight_.end(), "backward of microbatch ", mb, " before its forward");
  InFlight& f = it->second;
  PT_CHECK(is_last_ || output_grad.sizes() == c10::IntArrayRef(f.output_sizes), "gradient shape ", output_grad.sizes(),
           " vs output ", c10::IntArrayRef(f.output_sizes));
  bool has_input_grad = f.input.requires_grad();
  // A stage whose input needs no gradient (the first: its input is the data) has no B to run
  // apart: a split backward runs whole here, and its W only releases the microbatch. Run at its
  // W instead (all B's skipped), vgg16's first chunk put its whole backward where zb-v defers
  // W's, and the order of 995.0 ms per minibatch simulated where this runs 882.8
  // (profile::input_gradient_share).
  bool whole = !input_only || !has_input_grad;
  torch::Tensor input_grad;
  with_weights(f, [&] {
    std::vector<std::pair<torch::Tensor, torch::Tensor>> buffers;
    if (!f.output.defined()) buffers = rebuild(f);
    // A gradient that came over the wire in bf16 (precision.h) returns to the output's dtype.
    f.output_grad = is_last_ ? torch::ones_like(f.output) : output_grad.to(f.output.scalar_type());
    if (record_sums_) weight_sums_[mb].second = weight_sum();
    // An output that needs no gradient (a first stage of layers without weights, or all frozen:
    // a Flatten, a fine-tuned model's backbone) has nothing to propagate: autograd refused it,
    // and the job failed at its first backward.
    // An emulated layer charges its split itself (emulated_layer.cpp).
    if (f.output.requires_grad()) {
      if (whole)
        torch::autograd::backward({f.output}, {f.output_grad});
      else if (values_)
        f.split = model::input_gradient(f.output, f.output_grad, f.input, trainable(), &input_grad, &f.weight_backward);
      if (!whole && !f.split)
        model::backward_to_input(f.output, f.output_grad, f.input, trainable());
    }
    for (auto& [b, own] : buffers) b.set_data(own);
  });
  if (has_input_grad) {
    if (!f.split) input_grad = f.input.grad();
    // An output that does not depend on the input: its gradient there is zero.
    if (!input_grad.defined()) input_grad = torch::zeros_like(f.input);
    input_grad = model::to_wire(input_grad, model_->precision());
  }
  if (!input_only) finish(it);
  return input_grad;
}

void StageReplica::backward_weight(int64_t mb) {
  auto it = in_flight_.find(mb);
  PT_CHECK(it != in_flight_.end(), "weight gradient of microbatch ", mb, " before its forward");
  InFlight& f = it->second;
  PT_CHECK(f.output_grad.defined(), "weight gradient of microbatch ", mb, " before its input gradient");
  if (!f.input.requires_grad()) return finish(it);  // its B ran the whole backward (backward)
  std::vector<torch::Tensor> weights = trainable();
  with_weights(f, [&] {
    if (f.split)
      model::weight_gradients(f.weight_backward);
    else if (!weights.empty() && f.output.requires_grad())
      torch::autograd::backward({f.output}, {f.output_grad}, false, false, weights);
  });
  finish(it);
}

std::vector<torch::Tensor> StageReplica::trainable() const {
  std::vector<torch::Tensor> out;
  for (const auto& p : params_)
    if (p.requires_grad()) out.push_back(p);
  return out;
}

void StageReplica::finish(std::map<int64_t, InFlight>::iterator it) {
  int64_t v = it->second.version;
  if (!it->second.predicted.empty()) spare_predicted_.push_back(std::move(it->second.predicted));
  in_flight_.erase(it);
  release_version_if_unused(v);
}

void StageReplica::release_version_if_unused(int64_t version) {
  if (version == version_ || history_ > 0) return;  // a history is pruned by step()
  for (const auto& [mb, f] : in_flight_)
    if (f.version == version && !runs_on_copy(f)) return;
  auto it = versions_.find(version);
  if (it == versions_.end()) return;
  spare_ = std::move(it->second);
  versions_.erase(it);
}

void StageReplica::step(double grad_scale, int64_t minibatch) {
  auto t0 = std::chrono::steady_clock::now();
  // Microbatches in flight keep the version their forward used: stash it before updating.
  bool stashed = false;  // a flushing schedule's step never does (the profile's stash_copy_ms)
  if (stash_weights_) {
    bool needed = history_ > 0;
    for (const auto& [mb, f] : in_flight_) needed |= f.version == version_ && !runs_on_copy(f);
    // A history drops the versions this step leaves behind first, and its copy is the one the
    // stash reuses (stashing first held one copy more at each step: 3 where 2BW keeps 2).
    while (history_ > 0 && !versions_.empty() && versions_.begin()->first < version_ + 1 - history_) {
      for (const auto& [mb, f] : in_flight_)
        PT_CHECK(f.version != versions_.begin()->first, "weight version ", f.version, " dropped while in use");
      spare_ = std::move(versions_.begin()->second);
      versions_.erase(versions_.begin());
    }
    if (needed) {
      versions_[version_] = flat_->copy_weights(std::move(spare_), values_);
      spare_.clear();
      stashed = true;
      peak_versions_ = std::max<int64_t>(peak_versions_, static_cast<int64_t>(versions_.size()));
    }
  }
  count_copies();
  // This step applies `minibatch`'s gradient: the copy its microbatches ran on is done with.
  for (auto it = minibatch_predicted_.begin(); it != minibatch_predicted_.end() && it->first <= minibatch;) {
    for (const auto& [mb, f] : in_flight_)
      PT_CHECK(f.shares != it->first, "minibatch ", it->first, "'s predicted weights freed while microbatch ", mb,
               " runs on them");
    spare_predicted_.push_back(std::move(it->second));
    it = minibatch_predicted_.erase(it);
  }
  if (!values_)
    optimizer_.count_step();
  else
    optimizer_.step(grad_scale, minibatch);
  model_->device_step(first_, last_,
                      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
                      stashed);
  ++version_;
  PT_CHECK(history_ > 0 || static_cast<int64_t>(versions_.size()) + 1 <= max_versions_, versions_.size() + 1,
           " weight versions alive, more than the schedule's budget of ", max_versions_);
}

void StageReplica::count_copies() {
  int64_t copies = 1 + static_cast<int64_t>(versions_.size() + minibatch_predicted_.size());
  for (const auto& [mb, f] : in_flight_) copies += !f.predicted.empty();
  peak_copies_ = std::max(peak_copies_, copies);
}

int64_t StageReplica::activation_bytes(int64_t mb) const {
  auto it = in_flight_.find(mb);
  if (it == in_flight_.end()) return 0;
  const torch::Tensor& kept = recompute_ ? it->second.input : it->second.output;
  return kept.numel() * static_cast<int64_t>(kept.element_size());
}

}  // namespace pt::runtime
