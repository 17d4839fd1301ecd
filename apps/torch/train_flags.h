#pragma once
// What `pipetrain train`'s flags set (train.cpp registers them), shared by its reports
// (train_report.h). The request (job/request.h) is what the job is made of.
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/torch/model_flags.h"
#include "job/request.h"

namespace pt::app {

struct TrainFlags {
  ModelFlags model;
  job::Request request;
  std::string trace_path, transport = "threads";
  std::string prediction_trace_path;  // --prediction-trace: the simulation --profile's prediction replayed
  CLI::Option* batch_size_flag = nullptr;  // to tell a given --batch-size from the default
  CLI::Option* steps_flag = nullptr;
  CLI::Option* lr_flag = nullptr;  // not given: the optimizer's default rate
  CLI::Option* schedule_flag = nullptr;  // given flags override the plan's settings
  CLI::Option* microbatches_flag = nullptr;
  CLI::Option* chunks_flag = nullptr;
  CLI::Option* bucket_flag = nullptr;  // a given --bucket-mb overrides the plan's bucket_mb
  bool print_job = false;  // --print-job
  bool no_pin_cores = false;  // --no-pin-cores
  std::vector<double> betas;  // --betas B1,B2 (the optimizer's once parsed)
};

// Registers train's flags on `app`, bound to `flags`.
void add_train_flags(CLI::App& app, const std::shared_ptr<TrainFlags>& flags);
// Once parsed: flags that go together (or not at all), the command line every worker must share
// (apps/flag_digest.h), and which of the plan's settings the flags override.
void finish_train_flags(const CLI::App& app, TrainFlags& flags);

}  // namespace pt::app
