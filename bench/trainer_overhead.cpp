// Single-worker trainer vs the same model trained by a plain LibTorch loop, side by side in
// one run (alternating rounds, so machine noise hits both alike). Prints steps/s and the ratio.
#include <torch/torch.h>

#include <cstdio>

#include "model/compute_threads.h"
#include "core/host_allocator.h"
#include "model/batch_sampler.h"
#include "model/dataset.h"
#include "model/zoo.h"
#include "runtime/progress.h"
#include "runtime/trainer.h"

namespace nn = torch::nn;

// The mnist-cnn architecture written directly against LibTorch, with no pipetrain code.
double plain_libtorch_steps_per_s(const pt::model::DataSplit& data, int64_t steps, int64_t batch) {
  torch::manual_seed(0);
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(1, 16, 5).padding(2)), nn::ReLU(), nn::MaxPool2d(2),
                     nn::Conv2d(nn::Conv2dOptions(16, 32, 5).padding(2)), nn::ReLU(), nn::MaxPool2d(2),
                     nn::Flatten(), nn::Linear(1568, 200), nn::ReLU(), nn::Linear(200, 200), nn::ReLU(),
                     nn::Linear(200, 10));
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.02).momentum(0.9));
  pt::model::BatchSampler sampler(data.train.size(), batch, 0);
  double t0 = pt::runtime::wall_ms();
  for (int64_t s = 0; s < steps; ++s) {
    auto idx = sampler.batch(s);
    // The rows as pipetrain draws them: its images are held as bytes and scaled as drawn (the raw
    // bytes, gathered, stopped the loop at its first convolution).
    auto x = data.train.gather_inputs(idx), y = data.train.gather_targets(idx);
    sgd.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    loss.backward();
    sgd.step();
    loss.item<double>();
  }
  return steps / ((pt::runtime::wall_ms() - t0) / 1000);
}

int main(int argc, char** argv) {
  pt::model::use_one_compute_thread();
  pt::keep_freed_host_memory();
  int64_t steps = argc > 1 ? std::atoll(argv[1]) : 300, batch = 64;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  auto data = pt::model::load_fashion_mnist(pt::model::kFashionMnistDir);
  double plain = 0, ours = 0;
  for (int r = 0; r < rounds; ++r) {
    double p = plain_libtorch_steps_per_s(data, steps, batch);
    torch::manual_seed(0);
    auto m = pt::model::build_mnist_cnn({});
    pt::runtime::TrainOptions o;
    o.steps = steps;
    o.batch_size = batch;
    o.quiet = true;
    o.evaluate = false;
    auto res = pt::runtime::train_single_worker(*m, data, o);
    double q = res.steps / res.seconds;
    std::printf("round %d: plain LibTorch %.1f steps/s, pipetrain %.1f steps/s, ratio %.3f\n", r + 1, p, q, q / p);
    plain += p;
    ours += q;
  }
  std::printf("mnist-cnn batch %lld, %lld steps x %d rounds, 1 thread: plain %.1f steps/s, pipetrain %.1f steps/s, "
              "ratio %.3f\n", (long long)batch, (long long)steps, rounds, plain / rounds, ours / rounds, ours / plain);
}
