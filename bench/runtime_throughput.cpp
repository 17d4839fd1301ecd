// Real CPU training throughput of mnist-cnn on Fashion-MNIST, side by side in one run:
// single worker, pipedream on 2 stages (threads), dp on 2 workers (threads); and the
// runtime's per-action overhead: a 1-stage 1f1b pipeline (F, B, Step per minibatch) against
// the plain single-worker loop on the same minibatches.
#include <torch/torch.h>

#include <cmath>
#include <cstdio>

#include "model/compute_threads.h"
#include "model/dataset.h"
#include "model/zoo.h"
#include "plan/planner.h"
#include "job/job.h"
#include "job/threads_job.h"
#include "runtime/trainer.h"

using namespace pt;

namespace {

std::shared_ptr<model::LayeredModel> cnn(const model::LayerSet& held = {}) {
  return model::build_mnist_cnn({}, held);
}

profile::Profile structure(const model::LayeredModel& m) {
  profile::Profile p;
  p.model = m.name();
  p.batch_size = 64;
  // Relative costs of mnist-cnn's layers (measured once at batch 64) for a balanced split.
  const double cost[] = {3.4, 6.2, 2.0, 0.4, 0.1};
  for (int i = 0; i < m.num_layers(); ++i) p.layers.push_back({m.layer(i).name, cost[i], 0, 0, 0, m.layer(i).inputs});
  return p;
}

double run_pipeline(const model::DataSplit& data, const plan::Plan& plan, const std::string& kind, int micro,
                    int64_t steps) {
  job::PipelineOptions o;
  o.schedule = kind;
  o.microbatches = micro;
  o.train.steps = steps;
  o.train.batch_size = 64;
  o.train.quiet = true;
  o.train.evaluate = false;
  return job::train_pipeline(cnn, data, plan, o).train.samples_per_s;
}

}  // namespace

int main(int argc, char** argv) {
  pt::model::use_one_compute_thread();
  int64_t steps = argc > 1 ? std::atoll(argv[1]) : 300;
  auto data = model::load_fashion_mnist(model::kFashionMnistDir);
  auto m = cnn();
  runtime::TrainOptions o;
  o.steps = steps;
  o.batch_size = 64;
  o.quiet = true;
  o.evaluate = false;
  double single = runtime::train_single_worker(*m, data, o).samples_per_s;
  plan::Plan two = plan::even_split(structure(*m), 2);
  plan::Plan one = plan::even_split(structure(*m), 1);
  plan::Plan dp = plan::data_parallel_plan(m->num_layers(), 2);
  double pd = run_pipeline(data, two, "pipedream", 1, steps);
  double dp2 = run_pipeline(data, dp, "dp", 2, steps);
  double pipe1 = run_pipeline(data, one, "1f1b", 1, steps);
  double single_again = runtime::train_single_worker(*m, data, o).samples_per_s;
  double base = 0.5 * (single + single_again);
  std::printf("mnist-cnn, batch 64, %lld steps, one compute thread per worker, this machine: %u cores\n",
              (long long)steps, std::thread::hardware_concurrency());
  std::printf("%-34s %10s %8s\n", "configuration", "samples/s", "vs 1");
  std::printf("%-34s %10.0f %8.2f\n", "single worker", base, 1.0);
  std::printf("%-34s %10.0f %8.2f\n", "pipedream, 2 stages (threads)", pd, pd / base);
  std::printf("%-34s %10.0f %8.2f\n", "dp, 2 workers (threads)", dp2, dp2 / base);
  std::printf("%-34s %10.0f %8.2f\n", "1f1b, 1 stage (runtime overhead)", pipe1, pipe1 / base);
  // Each minibatch of the 1-stage pipeline is 3 actions (F, B, Step). The plain loop ran twice,
  // first and last: how far apart its two runs are is this machine's noise, and an overhead
  // inside it (or below zero) is not a measurement.
  double overhead_ms = (64.0 / pipe1 - 64.0 / base) * 1000 / 3;
  double share = (64.0 / pipe1 - 64.0 / base) / (64.0 / base), noise = std::abs(single - single_again) / base;
  if (share < 0)
    std::printf("runtime overhead per action: none measured (the 1-stage pipeline ran %.1f%% faster than the plain "
                "loop, whose two runs differ by %.1f%%)\n",
                -100 * share, 100 * noise);
  else if (share <= noise)
    std::printf("runtime overhead per action: within this machine's noise (%.1f%% of a %.2f ms minibatch; the plain "
                "loop's two runs differ by %.1f%%)\n",
                100 * share, 64.0 / base * 1000, 100 * noise);
  else
    std::printf("runtime overhead per action: %.3f ms (%.1f%% of a %.2f ms minibatch; the plain loop's two runs "
                "differ by %.1f%%)\n",
                overhead_ms, 100 * share, 64.0 / base * 1000, 100 * noise);
}
