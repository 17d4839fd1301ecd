// pipetrain train: trains a model. This file: the single-worker mode.
#include <iostream>

#include <torch/torch.h>

#include "apps/command.h"
#include "apps/model_flags.h"
#include "runtime/trainer.h"

namespace pt::app {
namespace {

struct TrainFlags {
  ModelFlags model;
  runtime::TrainOptions train;
};

int run_train(TrainFlags& f) {
  at::set_num_threads(1);  // one compute thread per worker (DESIGN.md)
  model::DataSplit data;
  auto m = f.model.build(&data);
  f.train.seed = f.model.seed;
  std::cerr << "training " << m->name() << " (" << m->num_layers() << " layers) on " << data.name << ": "
            << data.train.size() << " training / " << data.test.size() << " test samples, 1 worker\n";
  auto r = runtime::train_single_worker(*m, data, f.train);
  std::cout << "steps " << r.steps << ", " << r.seconds << " s, " << static_cast<int64_t>(r.samples_per_s)
            << " samples/s, final loss " << r.final_loss << "\n";
  if (r.test_accuracy >= 0) std::cout << "test accuracy " << 100 * r.test_accuracy << "%\n";
  return 0;
}

Register reg({"train", "Train a model (single worker)", [](CLI::App& app) -> std::function<int()> {
  auto f = std::make_shared<TrainFlags>();
  f->model.add_to(app);
  app.add_option("--epochs", f->train.epochs, "Passes over the training set")->capture_default_str();
  app.add_option("--steps", f->train.steps, "Stop after this many minibatches (overrides --epochs)");
  app.add_option("--batch-size", f->train.batch_size, "Minibatch size")->capture_default_str();
  app.add_option("--lr", f->train.sgd.lr, "SGD learning rate")->capture_default_str();
  app.add_option("--momentum", f->train.sgd.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--weight-decay", f->train.sgd.weight_decay, "SGD weight decay")->capture_default_str();
  app.add_option("--metrics", f->train.metrics_path, "Write per-step metrics to this CSV file");
  app.add_flag("--quiet", f->train.quiet, "No progress output");
  return [f] { return run_train(*f); };
}});

}  // namespace
}  // namespace pt::app
