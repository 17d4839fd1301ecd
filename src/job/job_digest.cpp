#include "job/job_digest.h"

#include "core/version.h"
#include "runtime/checkpoint_manifest.h"

namespace pt::job {

namespace {

// The layers' names and ties: every worker knows them without building a layer. Their shapes
// follow from the model file (its SHA-256, below) or the zoo's flags (the command line).
std::string layers_of(const model::LayeredModel& m) {
  std::string out;
  for (int i = 0; i < m.num_layers(); ++i) out += m.layer(i).name + " ";
  for (const auto& g : m.tie_groups()) {
    out += "tie";
    for (const auto& member : g.members) out += pt::str(" ", member.layer, ".", member.param);
    out += pt::str(" ", g.bytes, ";");
  }
  return out;
}

}  // namespace

json job_digest(const Job& job, const model::LayeredModel& model, const model::DataSplit& data) {
  const plan::Plan& plan = job.plan;
  const PipelineOptions& options = job.options;
  const runtime::TrainOptions& t = options.train;
  // As the job places it: an interleaved or V run's chunks on the workers they share (--print-job
  // read "workers": 4 for 4 chunks on 2), as `plan` writes its file.
  plan::Plan placed = plan;
  placed.workers = job.workers();
  for (int s = 0; s < placed.num_stages(); ++s) placed.stages[s].workers = job.typical->stage_workers[s];
  return json{{"version", kPipetrainVersion},
              {"plan", plan::to_json(placed)},
              {"schedule", options.schedule},
              {"microbatches", options.microbatches},
              {"chunks", options.chunks},
              {"vertical_sync", options.vertical_sync},
              {"weight_prediction", options.weight_prediction},
              {"stale_warmup", options.stale_warmup},
              {"sum_replica_gradients", options.sum_replica_gradients},
              {"deferred_batch_norm", options.deferred_batch_norm},
              {"model", model.name()},
              {"layers", layers_of(model)},
              {"model_sha256", model.file_sha256()},
              {"precision", model::to_string(model.precision())},
              {"label_smoothing", model.label_smoothing()},
              {"seed", t.seed},
              {"batch_size", t.batch_size},
              {"epochs", t.epochs},
              {"steps", t.steps},
              {"eval_every", t.eval_every},
              {"evaluate", t.evaluate},
              {"shuffle", t.shuffle},  // ranks that sampled different minibatches trained garbage, exit 0
              {"task", static_cast<int>(model.task())},
              {"stash_weights", options.stash_weights},
              {"sgd", json{{"lr", t.sgd.lr}, {"momentum", t.sgd.momentum}, {"weight_decay", t.sgd.weight_decay}, {"weight_decay_on", t.sgd.weight_decay_on},
                           {"zero_grad", t.sgd.zero_grad},
                           {"lr_schedule", t.sgd.lr_schedule}, {"min_lr", t.sgd.min_lr}, {"warmup_steps", t.sgd.warmup_steps},
                           {"total_steps", t.sgd.total_steps}, {"clip_grad_norm", t.sgd.clip_grad_norm},
                           {"optimizer", t.sgd.kind}, {"betas", {t.sgd.beta1, t.sgd.beta2}}, {"eps", t.sgd.eps}}},
              {"data", json{{"name", data.name}, {"train", data.train.size()}, {"test", data.test.size()},
                            {"classes", data.classes}, {"vocab", data.vocab},
                            {"crc32", {inputs_crc32(data.train), tensor_crc32(data.train.targets),
                                       inputs_crc32(data.test), tensor_crc32(data.test.targets)}},
                            {"shard_crc32", data.train.on_disk ? data.train.on_disk->crcs() : std::vector<uint32_t>{}}}},
              {"checkpoint", json{{"dir", options.checkpoint.dir}, {"every", options.checkpoint.every},
                                  {"resume", options.checkpoint.resume}, {"overwrite", options.checkpoint.overwrite}}},
              // The checkpoint each resumes from: workers started apart each pick the newest they
              // see, and two that picked different ones all-reduced different weights, or waited
              // out --timeout for transfers of other steps, blamed on the folder or the network.
              {"resumed", job.resume_from.empty() ? json() : json{{"step", job.first_step},
                                                                  {"run_id", job.resume_manifest.run_id}}},
              {"bucket_bytes", options.bucket_bytes},
              {"cluster", options.cluster.levels.empty() ? json() : plan::to_json(options.cluster)},
              // Every flag of the command line, as the command read it (apps/flag_digest.h): a
              // setting missing above still stops a job whose workers were given different ones.
              {"flags", options.command_line}};
}

}  // namespace pt::job
