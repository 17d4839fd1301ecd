// A stage's optimizer step (model/optimizer.h: one pass over each weight's gradient and state,
// fused_step.h) against LibTorch's own optimizers (torch::optim, a pass over the buffer per
// operation) on the same float weights, gradients and settings, one compute thread, rounds
// interleaved: the median time of each and their ratio, per size and kind, and whether the two
// left the same weights (they must: the step is the same arithmetic).
//   build/bench/bench_optimizer_step [ROUNDS=15] [MIB=1,4,16,64,256]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "core/host_allocator.h"
#include "core/median.h"
#include "model/compute_threads.h"
#include "model/flat_parameters.h"
#include "model/optimizer.h"

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::unique_ptr<torch::optim::Optimizer> torch_optimizer(const pt::model::OptimizerOptions& o, torch::Tensor p) {
  using namespace torch::optim;
  std::vector<torch::Tensor> params{p};
  if (o.kind == "sgd")
    return std::make_unique<SGD>(params, SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
  if (o.kind == "adam") return std::make_unique<Adam>(params, AdamOptions(o.lr).weight_decay(o.weight_decay));
  return std::make_unique<AdamW>(params, AdamWOptions(o.lr).weight_decay(o.weight_decay));
}

}  // namespace

int main(int argc, char** argv) {
  pt::model::use_one_compute_thread();
  pt::keep_freed_host_memory();
  int rounds = argc > 1 ? std::atoi(argv[1]) : 15;
  std::vector<int64_t> sizes_mib;
  std::stringstream list(argc > 2 ? argv[2] : "1,4,16,64,256");
  for (std::string item; std::getline(list, item, ',');) sizes_mib.push_back(std::atoll(item.c_str()));
  std::printf("%-6s %8s %14s %14s %8s  %s\n", "kind", "MiB", "pipetrain ms", "torch.optim ms", "speed-up",
              "same weights");
  for (const std::string kind : {"sgd", "adam", "adamw"}) {
    for (int64_t mib : sizes_mib) {
      const int64_t n = mib * (int64_t{1} << 20) / 4;
      pt::model::OptimizerOptions o;
      o.kind = kind;
      o.lr = kind == "sgd" ? 0.02 : 1e-3;
      o.weight_decay = 0.01;
      torch::manual_seed(0);
      torch::Tensor ours = torch::randn({n}).requires_grad_(true), theirs = ours.detach().clone().requires_grad_(true);
      pt::model::FlatParameters flat({ours});
      pt::model::Optimizer step(flat, o);
      auto reference = torch_optimizer(o, theirs);
      torch::Tensor g = torch::empty({n});
      std::vector<double> mine_ms, torch_ms;
      for (int r = 0; r < rounds; ++r) {
        g.normal_();
        flat.grads()[0].copy_(g);
        theirs.mutable_grad() = g.clone();
        double t0 = now_ms();
        step.step(1.0, r);
        double t1 = now_ms();
        reference->step();
        double t2 = now_ms();
        if (r > 0) mine_ms.push_back(t1 - t0), torch_ms.push_back(t2 - t1);  // the first allocates state
      }
      double a = pt::median(mine_ms), b = pt::median(torch_ms);
      bool same = torch::equal(flat.weights()[0], theirs.detach());
      std::printf("%-6s %8lld %14.3f %14.3f %7.2fx  %s\n", kind.c_str(), static_cast<long long>(mib), a, b, b / a,
                  same ? "yes" : "NO");
    }
  }
}
