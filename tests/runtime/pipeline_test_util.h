#pragma once
// Shared set-up of the runtime tests: mnist-cnn on seeded synthetic data, plans, weights.
#include <limits>
#include <memory>
#include <vector>

#include "core/json_doc.h"
#include "model/zoo.h"
#include "plan/planner.h"
#include "job/job.h"
#include "job/threads_job.h"

// The runtime's tests run jobs (job/): its names read as the runtime's own there.
namespace pt::runtime {
using namespace ::pt::job;
}  // namespace pt::runtime

namespace pt::runtime::testing {

// mnist-cnn from `seed`, holding the layers of `held` (their weights do not depend on which).
inline std::shared_ptr<model::LayeredModel> seeded_cnn(uint64_t seed, const model::LayerSet& held = {}) {
  model::ModelOptions o;
  o.seed = seed;
  return model::build_mnist_cnn(o, held);
}

// A profile with the model's structure and unit costs: enough for even splits.
inline profile::Profile unit_profile(const model::LayeredModel& m) {
  profile::Profile p;
  p.model = m.name();
  p.batch_size = 32;
  for (int i = 0; i < m.num_layers(); ++i) p.layers.push_back({m.layer(i).name, 1, 1, 1000, 1000, m.layer(i).inputs});
  return p;
}

inline plan::Plan replicated_plan(const model::LayeredModel& m, int replicas) {
  return plan::data_parallel_plan(m.num_layers(), replicas);
}

// Weights after training: replica 0 of every stage, in layer order.
inline std::vector<torch::Tensor> pipeline_weights(const schedule::Schedule& s,
                                                   std::vector<std::unique_ptr<Worker>>& workers) {
  std::vector<torch::Tensor> out;
  for (int st = 0; st < s.num_stages; ++st)
    for (const auto& p : workers[s.stage_workers[st][0]]->replica(st)->parameters()) out.push_back(p.detach().clone());
  return out;
}

// Infinity when the lists differ in length or any pair in shape: a missing tensor is not a match.
inline double max_relative_error(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size() || a.empty()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].sizes().equals(b[i].sizes())) return std::numeric_limits<double>::infinity();
    double err = (a[i] - b[i]).norm().item<double>() / std::max(1e-12, b[i].norm().item<double>());
    worst = std::max(worst, err);
  }
  return worst;
}

// The weights a checkpoint holds, in layer order.
inline std::vector<torch::Tensor> checkpoint_weights(const std::string& checkpoint) {
  auto m = read_verified_manifest(checkpoint);
  std::vector<torch::Tensor> out;
  for (const auto& f : m.files) {
    std::string path = checkpoint + "/" + f.name;
    for (auto& p : read_layer_state(path).params) out.push_back(p);
  }
  return out;
}

inline bool bitwise_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!a[i].sizes().equals(b[i].sizes()) || !torch::equal(a[i], b[i])) return false;
  return true;
}

}  // namespace pt::runtime::testing
