// A stage replica's layers' state for checkpoints: out of its flat buffers and back in.
#include "core/error.h"
#include "runtime/stage_replica.h"

namespace pt::runtime {

size_t StageReplica::param_offset(int layer) const {
  PT_CHECK(layer >= first_ && layer < last_, "layer ", layer, " is not in this replica's layers ", first_, "..", last_ - 1);
  size_t offset = 0;
  for (int i = first_; i < layer; ++i) offset += model_->layer_parameters(i).size();
  return offset;
}

LayerState StageReplica::layer_state(int layer, bool storage) const {
  PT_CHECK(in_flight_.empty(), "a checkpoint needs a drained pipeline, but ", in_flight_.size(),
           " microbatches are in flight");
  size_t offset = param_offset(layer), n = model_->layer_parameters(layer).size();
  LayerState s;
  for (size_t i = offset; i < offset + n; ++i) {
    s.params.push_back(params_[i].detach());
    for (int which = 0; which < (optimizer_.options().adam() ? 2 : 1); ++which)
      (which == 0 ? s.momentum : s.variance)
          .push_back(owner_[i]                ? (storage ? torch::Tensor() : owner_[i]->state_of(params_[i], which))
                     : slot_of_[i] == kNoSlot ? torch::Tensor()  // frozen: none, as before a first step
                                              : optimizer_.state(flat_->slots()[slot_of_[i]], which, storage));
  }
  // Each parameter's own count: a borrowed one's from its holder (a V schedule's head tied to the
  // embedding in the worker's other chunk wrote this chunk's, 0, and a resume restarted Adam's bias
  // correction: a helper's audit); a frozen one's the stage's.
  for (size_t i = offset; i < offset + n; ++i)
    s.optimizer_steps.push_back(owner_[i]                ? owner_[i]->steps_of(params_[i])
                                : slot_of_[i] == kNoSlot ? optimizer_.steps_taken()
                                                         : optimizer_.steps_taken(slot_of_[i]));
  for (const auto& b : model_->layer(layer).module->buffers()) s.buffers.push_back(b.detach());
  return s;
}

void StageReplica::load_layer_state(int layer, const LayerState& s, const std::string& source) {
  size_t offset = param_offset(layer), n = model_->layer_parameters(layer).size();
  if (s.params.size() != n || s.momentum.size() != n)
    throw ConfigError(str(source, ": holds ", s.params.size(), " parameters for layer ", layer, " ('",
                          model_->layer(layer).name, "') but the model's layer has ", n));
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < n; ++i) {
    auto& p = params_[offset + i];
    if (!s.params[i].sizes().equals(p.sizes()) || s.params[i].scalar_type() != p.scalar_type())
      throw ConfigError(pt::str(source, ": parameter ", i, " of layer ", layer, " ('", model_->layer(layer).name,
                            "') has shape ", s.params[i].sizes(), " but the model's has ", p.sizes()));
    for (const auto* state : {&s.momentum, &s.variance})
      if (i < state->size() && (*state)[i].defined() && !(*state)[i].sizes().equals(p.sizes()))
        throw ConfigError(pt::str(source, ": ", state == &s.momentum ? "momentum " : "variance ", i, " of layer ", layer,
                                  " has shape ", (*state)[i].sizes(), " but the parameter's is ", p.sizes()));
    p.data().copy_(s.params[i]);
    // A borrowed parameter's momentum is its holder's, which loads it with its own layer; a
    // frozen one has none.
    if (slot_of_[offset + i] != kNoSlot) {
      const auto& slot = flat_->slots()[slot_of_[offset + i]];
      optimizer_.set_state(slot, 0, s.momentum[i]);
      optimizer_.set_state(slot, 1, i < s.variance.size() ? s.variance[i] : torch::Tensor());
      if (!s.optimizer_steps.empty())  // one count for the layer, or one per parameter
        optimizer_.set_steps_taken(slot_of_[offset + i], s.optimizer_steps[s.optimizer_steps.size() == 1 ? 0 : i]);
    }
  }
  if (s.buffers.empty()) return;  // a checkpoint from before buffers were kept: the model's own stay
  load_layer_buffers(layer, s.buffers, source);
}

void StageReplica::load_layer_buffers(int layer, const std::vector<torch::Tensor>& saved, const std::string& source) {
  torch::NoGradGuard no_grad;
  auto buffers = model_->layer(layer).module->buffers();
  if (saved.size() != buffers.size())
    throw ConfigError(str(source, ": holds ", saved.size(), " buffers for layer ", layer, " ('",
                          model_->layer(layer).name, "') but the model's layer has ", buffers.size()));
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (!saved[i].sizes().equals(buffers[i].sizes()) || saved[i].scalar_type() != buffers[i].scalar_type())
      throw ConfigError(pt::str(source, ": buffer ", i, " of layer ", layer, " ('", model_->layer(layer).name,
                                "') has shape ", saved[i].sizes(), " but the model's has ", buffers[i].sizes()));
    buffers[i].copy_(saved[i]);
  }
}

}  // namespace pt::runtime
