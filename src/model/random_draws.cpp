#include "model/random_draws.h"

#include <functional>
#include <set>
#include <string>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/script.h>

namespace pt::model {

bool draws_random(const torch::nn::Module& module) {
  for (const auto& m : module.modules(/*include_self=*/true)) {
    if (const auto* r = dynamic_cast<const RandomDrawing*>(m.get())) {
      if (r->draws_random()) return true;
    } else if (m->as<torch::nn::Dropout>() || m->as<torch::nn::Dropout2d>() || m->as<torch::nn::Dropout3d>() ||
               m->as<torch::nn::AlphaDropout>() || m->as<torch::nn::FeatureAlphaDropout>() || m->as<torch::nn::RReLU>()) {
      return true;
    }
  }
  return false;
}

bool script_draws_random(const torch::jit::Module& module) {
  if (!module.find_method("forward")) return false;
  static const char* kRandom[] = {"dropout", "bernoulli", "rand", "normal", "multinomial", "uniform",
                                  "exponential", "geometric", "cauchy", "poisson", "rrelu", "binomial",
                                  "standard_gamma", "sample_dirichlet"};
  std::set<torch::jit::Graph*> seen;
  std::function<bool(torch::jit::Graph&)> in_graph;
  std::function<bool(torch::jit::Block*)> in_block = [&](torch::jit::Block* block) {
    for (torch::jit::Node* node : block->nodes()) {
      std::string op = node->kind().toUnqualString();
      while (!op.empty() && op[0] == '_') op.erase(0, 1);
      for (const char* random : kRandom)
        if (op.find(random) != std::string::npos && op.find("renorm") == std::string::npos) return true;
      torch::jit::Function* callee = nullptr;
      if (node->kind() == c10::prim::CallFunction) {
        if (auto f = node->input(0)->type()->cast<c10::FunctionType>()) callee = f->function();
      } else if (node->kind() == c10::prim::CallMethod) {
        if (auto c = node->input(0)->type()->cast<c10::ClassType>()) callee = c->findMethod(node->s(c10::attr::name));
      }
      if (callee) {
        if (auto* g = torch::jit::tryToGraphFunction(*callee); g && in_graph(*g->graph())) return true;
      }
      for (torch::jit::Block* inner : node->blocks())
        if (in_block(inner)) return true;
    }
    return false;
  };
  in_graph = [&](torch::jit::Graph& g) { return seen.insert(&g).second && in_block(g.block()); };
  return in_graph(*module.get_method("forward").graph());
}

}  // namespace pt::model
