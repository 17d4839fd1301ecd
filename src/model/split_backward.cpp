#include "model/split_backward.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <unordered_map>
#include <unordered_set>

namespace pt::model {

namespace ag = torch::autograd;

namespace {

// Every node under `root`, children first, each with whether it leads to `input`.
std::vector<std::pair<ag::Node*, bool>> nodes_below(ag::Node* root, const ag::Node* input) {
  std::unordered_map<ag::Node*, bool> leads;        // visited; final once the node is popped
  std::vector<std::pair<ag::Node*, size_t>> stack;  // a node and its next edge to follow
  std::vector<std::pair<ag::Node*, bool>> order;
  auto visit = [&](ag::Node* n) {
    if (leads.emplace(n, n == input).second) stack.push_back({n, 0});
  };
  visit(root);
  while (!stack.empty()) {
    ag::Node* n = stack.back().first;
    size_t i = stack.back().second;
    if (i < n->num_outputs()) {
      ++stack.back().second;
      const ag::Edge& e = n->next_edge(i);
      if (e.is_valid()) visit(e.function.get());  // a graph is acyclic: a visited child is final
      continue;
    }
    stack.pop_back();
    bool r = n == input;
    for (const ag::Edge& e : n->next_edges()) r = r || (e.is_valid() && leads.at(e.function.get()));
    leads[n] = r;
    order.push_back({n, r});
  }
  return order;
}

// The weights' accumulators drop what reaches them while B runs. LibTorch 1.13's CopySlices (an
// in-place op on a slice: h[:, :3] *= scale) marks every next edge of the node it wraps as needed,
// so a backward to the input alone accumulated `scale`'s gradient, and W accumulated it again:
// doubled on every zero-bubble schedule, exit 0 (a helper's audit).
class AccumulatorsHeld {
 public:
  explicit AccumulatorsHeld(const std::vector<torch::Tensor>& weights) {
    std::unordered_set<const ag::Node*> seen;
    for (const auto& p : weights)
      if (auto a = ag::impl::try_get_grad_accumulator(p); a && seen.insert(a.get()).second) {
        a->add_pre_hook(std::make_unique<Drop>());
        held_.push_back(std::move(a));
      }
  }
  ~AccumulatorsHeld() {
    for (auto& a : held_) a->pre_hooks().pop_back();  // nothing runs between: ours is the last
  }
  AccumulatorsHeld(const AccumulatorsHeld&) = delete;
  AccumulatorsHeld& operator=(const AccumulatorsHeld&) = delete;

 private:
  struct Drop : ag::FunctionPreHook {
    ag::variable_list operator()(const ag::variable_list& grads) override { return ag::variable_list(grads.size()); }
  };
  std::vector<std::shared_ptr<ag::Node>> held_;
};

}  // namespace

void backward_to_input(const torch::Tensor& output, const torch::Tensor& output_grad, const torch::Tensor& input,
                       const std::vector<torch::Tensor>& weights) {
  AccumulatorsHeld held(weights);
  torch::autograd::backward({output}, {output_grad}, /*retain_graph=*/true, /*create_graph=*/false, {input});
}

bool input_gradient(const torch::Tensor& output, const torch::Tensor& output_grad, const torch::Tensor& input,
                    const std::vector<torch::Tensor>& weights, torch::Tensor* input_grad, WeightBackward* w) {
  ag::Edge out_edge = ag::impl::gradient_edge(output);
  ag::Edge in_edge = ag::impl::gradient_edge(input);
  if (!out_edge.is_valid() || !in_edge.is_valid()) return false;
  std::unordered_set<const ag::Node*> accumulators;
  for (const auto& p : weights)
    if (auto a = ag::impl::try_get_grad_accumulator(p)) accumulators.insert(a.get());

  std::vector<std::pair<ag::Node*, bool>> order = nodes_below(out_edge.function.get(), in_edge.function.get());
  if (!order.back().second) return false;  // the root: the output does not depend on the input
  std::unordered_set<const ag::Node*> chain;
  for (const auto& [n, leads] : order)
    if (leads) chain.insert(n);
  // Each node off the chain belongs to the one chain node whose weight side it lies on.
  std::unordered_map<const ag::Node*, const ag::Node*> side_of;
  WeightBackward found;
  std::vector<ag::Node*> bare;  // chain nodes that feed no weight
  for (const auto& [n, leads] : order) {
    if (!leads || n == in_edge.function.get()) continue;
    WeightBackward::Part part;
    std::vector<std::shared_ptr<ag::Node>> stack;
    for (const ag::Edge& e : n->next_edges())
      if (e.is_valid() && !chain.count(e.function.get())) stack.push_back(e.function);
    while (!stack.empty()) {
      std::shared_ptr<ag::Node> m = std::move(stack.back());
      stack.pop_back();
      auto [it, first] = side_of.emplace(m.get(), n);
      if (!first) {
        if (it->second != n) return false;  // shared by two chain nodes
        continue;
      }
      if (accumulators.count(m.get())) part.weights.push_back(ag::Edge(m, 0));
      for (const ag::Edge& e : m->next_edges())
        if (e.is_valid()) stack.push_back(e.function);
    }
    if (part.weights.empty()) {
      bare.push_back(n);
      continue;
    }
    for (uint32_t k = 0; k < n->num_inputs(); ++k) part.roots.push_back(ag::Edge(n->shared_from_this(), k));
    found.parts.push_back(std::move(part));
  }

  // One pass down the chain, capturing the input's gradient and what reaches each part's node.
  ag::edge_list capture{in_edge};
  for (const auto& part : found.parts) capture.insert(capture.end(), part.roots.begin(), part.roots.end());
  // What only the chain needs (an activation's input, attention's probabilities) is freed as
  // each such node finishes, as a backward that keeps no graph frees it; W keeps what its nodes
  // saved (a matmul's input) and the gradients that reached them. Freed at B's end, gpt's second
  // stage held them and the captured gradients at once: 36.5 MiB against 28.1 unsplit.
  std::vector<std::pair<ag::Node*, uintptr_t>> hooks;
  for (ag::Node* n : bare)
    hooks.push_back({n, n->add_post_hook(std::make_unique<ag::utils::LambdaPostHook>(
                            [n](const ag::variable_list& outputs, const ag::variable_list&) {
                              n->release_variables();
                              return outputs;
                            }))});
  ag::variable_list got;
  {
    AccumulatorsHeld held(weights);
    got = ag::Engine::get_default_engine().execute({out_edge}, {output_grad}, /*keep_graph=*/true,
                                                   /*create_graph=*/false, /*accumulate_grad=*/false, capture);
  }
  for (auto& [n, key] : hooks) n->del_post_hook(key);
  *input_grad = got[0];
  size_t k = 1;
  for (auto& part : found.parts)
    for (size_t r = 0; r < part.roots.size(); ++r) part.grads.push_back(got[k++]);
  *w = std::move(found);
  return true;
}

void weight_gradients(WeightBackward& w) {
  for (auto& part : w.parts) {
    // Only the inputs a gradient reached: the engine's root takes the device of each it is given,
    // and an undefined one (GroupNorm's mean and rstd, outputs nothing used) aborted the process
    // from inside LibTorch. The node sees the others undefined, as in a whole backward.
    ag::edge_list roots;
    ag::variable_list grads;
    for (size_t r = 0; r < part.roots.size(); ++r)
      if (part.grads[r].defined()) {
        roots.push_back(part.roots[r]);
        grads.push_back(part.grads[r]);
      }
    if (roots.empty()) continue;  // nothing reached the node: a whole backward accumulated nothing here either
    // The chain below the node leads to no weight of this part (its side is its own), so the
    // engine runs the node's weight outputs and its side alone.
    ag::Engine::get_default_engine().execute(roots, grads, /*keep_graph=*/true, /*create_graph=*/false,
                                             /*accumulate_grad=*/true, part.weights);
  }
  w.parts.clear();
}

}  // namespace pt::model
