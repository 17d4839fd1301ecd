// A layer's time measured alone, again and again (the profiler's way for a model too large to
// build whole), against the same layers one after another on fresh microbatches (a stage's way,
// and the profiler's where the model fits): mnist-cnn on Fashion-MNIST, one compute thread.
// Prints both sums and their ratio, per round.
//   build/bench/bench_layers_in_sequence [MICROBATCH=16] [ROUNDS=3]
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>

#include "core/host_allocator.h"
#include "core/median.h"
#include "model/batch_sampler.h"
#include "model/compute_threads.h"
#include "model/dataset.h"
#include "model/zoo.h"
#include "profile/profiler.h"
#include "runtime/progress.h"
#include "runtime/trainer.h"

int main(int argc, char** argv) {
  pt::model::use_one_compute_thread();
  pt::keep_freed_host_memory();
  int64_t mb = argc > 1 ? std::atoll(argv[1]) : 16;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  auto data = pt::model::load_fashion_mnist(pt::model::kFashionMnistDir);
  torch::manual_seed(0);
  auto m = pt::model::build_mnist_cnn({});
  pt::model::BatchSampler sampler(data.train.size(), mb, 0);
  for (int round = 0; round < rounds; ++round) {
    auto first = sampler.batch(0);
    auto x = pt::runtime::gather(data.train.inputs, first), y = pt::runtime::gather(data.train.targets, first);
    pt::profile::ProfilerOptions alone_options;
    alone_options.batch_sizes = {mb};
    auto p = pt::profile::measure_profile(*m, x, alone_options, y);
    double f_alone = 0, b_alone = 0;
    for (auto& l : p.layers) f_alone += l.forward_ms, b_alone += l.backward_ms;
    // The whole model's forward and backward, one call each, on the next microbatch each time.
    std::vector<double> fs, bs;
    for (auto& param : m->parameters()) param.mutable_grad() = torch::zeros_like(param);
    for (int64_t s = 1; s <= 200; ++s) {
      auto idx = sampler.batch(s);
      auto xi = pt::runtime::gather(data.train.inputs, idx), yi = pt::runtime::gather(data.train.targets, idx);
      double t0 = pt::runtime::wall_ms();
      auto loss = m->loss(m->forward(xi), yi);
      double t1 = pt::runtime::wall_ms();
      loss.backward();
      fs.push_back(t1 - t0), bs.push_back(pt::runtime::wall_ms() - t1);
    }
    std::printf("microbatch %lld: each layer alone, summed: forward %.3f ms, backward %.3f ms; "
                "in sequence: forward %.3f ms, backward %.3f ms (x%.2f, x%.2f)\n",
                (long long)mb, f_alone, b_alone, pt::median(fs), pt::median(bs), pt::median(fs) / f_alone, pt::median(bs) / b_alone);
  }
}
