#pragma once
// What `pipetrain train`'s flags set (train.cpp registers them), shared by its plan
// (train_plan.h) and its reports (train_report.h).
#include <string>

#include <CLI/CLI.hpp>

#include "apps/torch/model_flags.h"
#include "runtime/pipeline_job.h"

namespace pt::app {

struct TrainFlags {
  ModelFlags model;
  runtime::PipelineOptions pipe;
  std::string plan_path, profile_path, trace_path, transport = "threads";
  std::string cluster_path, allreduce;  // --cluster, --allreduce
  std::string schedule_file;            // --schedule-file
  int stages = 0, workers = 0;
  double bucket_mb = 25;  // PyTorch DDP's default bucket
  CLI::Option* batch_size_flag = nullptr;  // to tell a given --batch-size from the default
  CLI::Option* steps_flag = nullptr;
  CLI::Option* schedule_flag = nullptr;  // given flags override the plan's settings
  CLI::Option* microbatches_flag = nullptr;
  CLI::Option* chunks_flag = nullptr;
  CLI::Option* bucket_flag = nullptr;  // a given --bucket-mb overrides the plan's bucket_mb
  bool recompute = false;
  int deferred_step = -1;  // --deferred-step 1, --no-deferred-step 0, else the plan's
  bool print_job = false;  // --print-job
  std::vector<double> betas;  // --betas B1,B2 (pipe.train.sgd's once parsed)
};

}  // namespace pt::app
