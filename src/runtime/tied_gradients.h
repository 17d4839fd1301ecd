#pragma once
// Parameters tied across stages (docs/design.md, "Parameters shared between layers"), as Megatron
// ties a language model's input and output embeddings: each stage that holds a copy of a tie
// group sums the copies' gradients with the other stages' before its step, so every copy takes
// the same step from the same value and they stay one parameter. A group inside one stage is
// one tensor there and needs nothing.
//
// Only synchronous schedules can do this: pipedream and 2bw step each stage at its own time on
// its own weight version, so the copies would see different gradients at different versions.
// The constructor refuses them, and any placement it cannot exchange correctly.
#include <functional>
#include <vector>

#include "model/layered_model.h"
#include "runtime/transport.h"
#include "schedule/schedule.h"

namespace pt::runtime {

class StageReplica;

class TiedGradients {
 public:
  // ConfigError naming the layers, the stages and the schedule when `s` would train a tie group
  // of `ties` wrong: split across stages by an asynchronous schedule, held by two stages of one
  // worker where one is replicated or a backward follows the worker's first step, or exchanged
  // on a worker before its replicated stage's all-reduce (layer names from `model`). Two stages
  // of one worker (a V schedule's first and last chunks) share its one tensor (StageReplica).
  TiedGradients(const std::vector<model::TieGroup>& ties, const model::LayeredModel& model,
                const schedule::Schedule& s, int rank);

  // The worker groups (sorted ranks) of the tie groups that span stages: the gloo transport
  // creates their process groups before training.
  static std::vector<std::vector<int>> worker_groups(const std::vector<model::TieGroup>& ties,
                                                     const schedule::Schedule& s);

  // True when this worker takes part in an exchange: call exchange() before the action at
  // exchange_before() of each run of the schedule.
  bool active() const { return !mine_.empty(); }
  size_t exchange_before() const { return first_step_; }
  // Sums each tie group's gradients over the stages that hold it. A replicated stage's
  // replicas already hold the stage's sum (its all-reduce ran), so each adds 1/r of it.
  // `reached_of(p)`: p's one-element FlatParameters::reached flag, summed with the gradient so
  // that every copy steps where any stage's backward reached one.
  void exchange(Transport& transport, model::LayeredModel& model,
                const std::function<torch::Tensor(const torch::Tensor&)>& reached_of);

 private:
  struct Mine {
    std::vector<int> workers;  // every replica of every stage holding the group, sorted
    model::TieMember member;   // the copy this worker holds
    int replicas = 1;          // of the stage holding it here
  };
  std::vector<Mine> mine_;  // in tie-group order, the same on every worker
  size_t first_step_ = 0;
};

}  // namespace pt::runtime
