// Every synchronous schedule computes the same weights as single-worker training on the same
// minibatches (relative error <= 1e-5), for 2, 3 and 4 stages and several microbatch counts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "core/error.h"
#include "core/json_doc.h"
#include "job/request.h"
#include "metrics/metrics.h"
#include "pipeline_test_util.h"
#include "schedule/schedule_file.h"

namespace pt::runtime {
namespace {

using namespace testing;
namespace fs = std::filesystem;

struct Setup {
  model::DataSplit data;
  TrainOptions train;
  std::vector<torch::Tensor> reference;
};

const Setup& setup() {
  static Setup s = [] {
    Setup s;
    auto m = seeded_cnn(3);
    s.data = model::synthetic_data(*m, 256, 64, 10, 11);
    s.train.steps = 3;
    s.train.batch_size = 32;
    s.train.sgd = {0.05, 0.9, 1e-4};
    s.train.seed = 3;
    s.train.quiet = true;
    s.train.evaluate = false;
    train_single_worker(*m, s.data, s.train);
    for (auto& p : m->parameters()) s.reference.push_back(p.detach().clone());
    return s;
  }();
  return s;
}

void expect_same_as_single_worker(const std::string& kind, const plan::Plan& plan, int microbatches, int chunks = 1,
                                  double tolerance = 1e-5, int64_t bucket_bytes = WorkerOptions{}.bucket_bytes) {
  SCOPED_TRACE(kind + " stages " + std::to_string(plan.num_stages()) + " x" + std::to_string(plan.workers) +
               " workers, microbatches " + std::to_string(microbatches) + ", chunks " + std::to_string(chunks) +
               ", buckets of " + std::to_string(bucket_bytes) + " bytes");
  const Setup& s = setup();
  PipelineOptions o;
  o.schedule = kind;
  o.microbatches = microbatches;
  o.chunks = chunks;
  o.train = s.train;
  o.timeout_s = 20;
  o.bucket_bytes = bucket_bytes;
  std::vector<std::unique_ptr<Worker>> workers;
  auto result = train_pipeline([](const model::LayerSet& held = {}) { return seeded_cnn(3, held); }, s.data, plan, o, &workers);
  EXPECT_EQ(result.train.steps, 3);
  auto sched = generate_schedule(plan, o, 1);
  EXPECT_LE(max_relative_error(pipeline_weights(sched, workers), s.reference), tolerance);
  // The measured trace's all-reduces carry the bytes they sum, as the simulator's do (they said
  // 0): each replicated stage's gradients once a minibatch.
  int64_t reduced = 0;
  for (int st = 0; st < plan.num_stages(); ++st)
    if (plan.stages[st].replicas > 1)
      for (int l : plan.stages[st].layers)
        for (const auto& p : seeded_cnn(3)->layer_parameters(l)) reduced += 3 * static_cast<int64_t>(p.nbytes());
  EXPECT_EQ(metrics::compute_metrics(result.trace).allreduce_bytes, reduced);
}

TEST(PipelineEquivalence, FlushSchedulesMatchSingleWorker) {
  auto model = seeded_cnn(3);
  auto prof = unit_profile(*model);
  for (const std::string kind : {"gpipe", "1f1b", "zb-h1", "mp"})
    for (int stages : {2, 3, 4})
      for (int m : {1, 2, 4}) expect_same_as_single_worker(kind, plan::even_split(prof, stages), m);
}

// With a replicated last stage each replica computes part of a minibatch's losses: the loss a
// run reports is still the whole minibatch's (it was replica 0's share, scaled: mnist's
// 18.61 where one worker's was 18.84, with the weights right), on data parallelism and on a
// pipeline whose last stage has two replicas.
TEST(PipelineEquivalence, AReplicatedLastStageReportsTheWholeMinibatchsLoss) {
  const auto& s = setup();
  auto single = seeded_cnn(3);
  double want = train_single_worker(*single, s.data, s.train).final_loss;
  auto model = seeded_cnn(3);
  plan::Plan tail = plan::even_split(unit_profile(*model), 2);
  tail.stages[1].replicas = 2;
  tail.stages[1].workers = {1, 2};
  tail.workers = 3;
  for (const auto& [kind, plan] : {std::pair<std::string, plan::Plan>{"dp", replicated_plan(*model, 2)},
                                   std::pair<std::string, plan::Plan>{"1f1b", tail}}) {
    SCOPED_TRACE(kind);
    PipelineOptions o;
    o.schedule = kind;
    o.microbatches = 4;
    o.train = s.train;
    o.timeout_s = 20;
    auto result = train_pipeline([](const model::LayerSet& held = {}) { return seeded_cnn(3, held); }, s.data, plan, o);
    EXPECT_NEAR(result.train.final_loss / want, 1.0, 1e-5) << result.train.final_loss << " vs " << want;
  }
}

// A minibatch of padding alone (every target -100) keeps no target: its mean over none is no
// figure, and it entered the run's losses as 0 (the final loss of 4 steps read 3/4 of the others').
// It is left out of them, on one stage and on a pipeline, and the other steps' losses are as ever.
TEST(PipelineEquivalence, AMinibatchOfPaddingAloneRecordsNoLoss) {
  const auto& s = setup();
  model::DataSplit padded = s.data;
  padded.train.targets = s.data.train.targets.clone();
  TrainOptions t = s.train;
  t.steps = 4;
  t.shuffle = false;  // minibatch 2 is samples 64..95
  padded.train.targets.narrow(0, 2 * t.batch_size, t.batch_size).fill_(model::LayeredModel::kIgnoredTarget);
  auto model = seeded_cnn(3);
  for (const auto& [kind, plan] : {std::pair<std::string, plan::Plan>{"1f1b", plan::even_split(unit_profile(*model), 1)},
                                   std::pair<std::string, plan::Plan>{"1f1b", plan::even_split(unit_profile(*model), 2)}}) {
    SCOPED_TRACE(plan.num_stages());
    PipelineOptions o;
    o.schedule = kind;
    o.microbatches = 2;
    o.train = t;
    o.timeout_s = 20;
    auto result = train_pipeline([](const model::LayerSet& held = {}) { return seeded_cnn(3, held); }, padded, plan, o);
    ASSERT_EQ(result.train.final_losses.size(), 3u);  // steps 1, 2 and 4
    for (double loss : result.train.final_losses) EXPECT_GT(loss, 0.5);
  }
}

// Trains `plan` under `kind` in `microbatches` into `workers`: the schedule they ran.
schedule::Schedule train_with(const ModelFactory& make,
                              const model::DataSplit& data, const plan::Plan& plan, const std::string& kind,
                              int microbatches, const TrainOptions& t, std::vector<std::unique_ptr<Worker>>& workers) {
  PipelineOptions o;
  o.schedule = kind;
  o.microbatches = microbatches;
  o.train = t;
  o.timeout_s = 20;
  train_pipeline(make, data, plan, o, &workers);
  return generate_schedule(plan, o, 1);
}

// A weight two layers share (tied embeddings, as a small MLP): x -> tanh(x W) -> `middle`
// linears -> tanh(. W) -> head (without `head`, the tied layer's 8 outputs are the classes).
struct TiedMatMul : torch::nn::Module {
  explicit TiedMatMul(torch::Tensor weight) : w(register_parameter("w", weight)) {}
  torch::Tensor forward(torch::Tensor x) { return torch::tanh(x.matmul(w)); }
  torch::Tensor w;
};

std::shared_ptr<model::LayeredModel> tied_mlp(int middle = 1, bool head = true) {
  torch::manual_seed(5);
  torch::Tensor w = torch::randn({8, 8}) * 0.3;
  auto m = std::make_shared<model::LayeredModel>("tied-mlp", model::Task::kClassification, std::vector<int64_t>{8}, false);
  auto one = [](std::shared_ptr<TiedMatMul> layer) {
    torch::nn::Sequential seq;
    seq->push_back(layer);
    return seq;
  };
  m->add("in", one(std::make_shared<TiedMatMul>(w)));
  for (int i = 0; i < middle; ++i) m->add(str("mid", i), torch::nn::Sequential(torch::nn::Linear(8, 8)));
  m->add("out", one(std::make_shared<TiedMatMul>(w)));
  if (head) m->add("head", torch::nn::Sequential(torch::nn::Linear(8, 10)));
  return m;
}

// The tied MLP's training, on one worker and in pipelines alike.
TrainOptions tied_training() {
  TrainOptions t;
  t.steps = 4;
  t.batch_size = 16;
  t.sgd = {0.1, 0.9, 1e-3};
  t.seed = 2;
  t.quiet = true;
  t.evaluate = false;
  return t;
}

// With no schedule asked for or planned, a plan whose stages split a tie that trains runs 1f1b
// (pipedream, the default, refuses it: the copies would drift apart); one that keeps each tie in
// a stage, or a schedule the request names, is left as it is.
TEST(PipelineEquivalence, ASplitTieTrainsSynchronouslyByDefault) {
  auto tied = tied_mlp();
  auto data = model::synthetic_data(*tied, 64, 16, 10, 4);
  job::Request r;
  r.options.schedule = "none";
  r.options.train = tied_training();
  r.profile = std::make_shared<const profile::Profile>(unit_profile(*tied));
  r.stages = 2;  // in mid0 | out head: the tie split
  EXPECT_EQ(job::settle_request(r, *tied, data).options.schedule, "1f1b");
  r.stages = 1;
  EXPECT_EQ(job::settle_request(r, *tied, data).options.schedule, "pipedream");
  r.stages = 2;
  r.options.schedule = "pipedream";
  r.schedule_given = true;
  EXPECT_EQ(job::settle_request(r, *tied, data).options.schedule, "pipedream");
  auto untied = seeded_cnn(3);
  job::Request plain;
  plain.options.schedule = "none";
  plain.stages = 2;
  plain.profile = std::make_shared<const profile::Profile>(unit_profile(*untied));
  EXPECT_EQ(job::settle_request(plain, *untied, setup().data).options.schedule, "pipedream");
}

// --workers N without --stages or --plan is one stage on N workers: data parallelism unless a
// schedule is named (it ran 2 stages of pipedream on 2 workers whatever N was, exit 0).
TEST(PipelineEquivalence, WorkersAloneAreDataParallelismOverThatMany) {
  auto m = seeded_cnn(3);
  const auto& data = setup().data;
  job::Request r;
  r.options.schedule = "none";
  r.workers = 3;
  job::Settled s = job::settle_request(r, *m, data);
  EXPECT_EQ(s.options.schedule, "dp");
  ASSERT_EQ(s.plan.num_stages(), 1);
  EXPECT_EQ(s.plan.stages[0].workers.size(), 3u);
  r.options.schedule = "1f1b";
  r.schedule_given = true;
  s = job::settle_request(r, *m, data);
  EXPECT_EQ(s.options.schedule, "1f1b");
  ASSERT_EQ(s.plan.num_stages(), 1);
  EXPECT_EQ(s.plan.stages[0].workers.size(), 3u);
}

// Single-worker training steps a tied weight once per minibatch, as every pipeline does (it
// stepped it once per layer holding it, with the momentum of both: wrong weights, exit 0).
TEST(PipelineEquivalence, ATiedWeightStepsOnceOnOneWorker) {
  auto data = model::synthetic_data(*tied_mlp(), 128, 32, 10, 4);
  TrainOptions t = tied_training();
  auto single = tied_mlp();
  ASSERT_EQ(single->tie_groups().size(), 1u);
  train_single_worker(*single, data, t);
  std::vector<torch::Tensor> reference;
  for (auto& p : single->parameters()) reference.push_back(p.detach().clone());
  for (int stages : {1, 3}) {  // 3: the tie split across stages, its copies exchanging gradients
    SCOPED_TRACE(str(stages, " stages"));
    profile::Profile prof = unit_profile(*single);
    plan::Plan plan = plan::even_split(prof, stages);
    for (const auto& g : single->tie_groups()) plan.ties.push_back(g.layers());
    PipelineOptions o;
    o.schedule = "1f1b";
    o.microbatches = 2;
    o.train = t;
    o.timeout_s = 20;
    std::vector<std::unique_ptr<Worker>> workers;
    train_pipeline([](const model::LayerSet& = {}) { return tied_mlp(); }, data, plan, o, &workers);
    EXPECT_LE(max_relative_error(pipeline_weights(generate_schedule(plan, o, 1), workers), reference), 1e-5);
  }
}

// A V schedule puts the first and the last chunk on worker 0: a language model's input embedding
// and its tied head there are one tensor, held by the first chunk and borrowed by the last, which
// adds its gradient to it; stepped once, it trains as on one worker. (Refused before: the two
// chunks each flattened it, and the second took it from the first.)
TEST(PipelineEquivalence, VSchedulesStepATieBetweenAWorkersChunksOnce) {
  auto make = [](const model::LayerSet& = {}) { return tied_mlp(2); };  // in | mid0 | mid1 | out, head: the tie in chunks 0 and 3
  auto single = make();
  auto data = model::synthetic_data(*single, 128, 32, 10, 4);
  TrainOptions t = tied_training();
  train_single_worker(*single, data, t);
  std::vector<torch::Tensor> reference;
  for (auto& p : single->parameters()) reference.push_back(p.detach().clone());
  plan::Plan plan = plan::even_split(unit_profile(*single), 4);
  for (int st = 0; st < 4; ++st) plan.stages[st].layers = st < 3 ? std::vector<int>{st} : std::vector<int>{3, 4};
  for (const auto& g : single->tie_groups()) plan.ties.push_back(g.layers());
  for (const std::string kind : {"zb-v", "v-half", "dualpipev"}) {
    SCOPED_TRACE(kind);
    std::vector<std::unique_ptr<Worker>> workers;
    auto sched = train_with(make, data, plan, kind, 4, t, workers);
    ASSERT_EQ(sched.stage_workers[0], sched.stage_workers[3]);  // the tie's chunks share a worker
    EXPECT_LE(max_relative_error(pipeline_weights(sched, workers), reference), 1e-5);
    // A checkpoint of either chunk's layer holds the one momentum (the borrower's is its holder's).
    Worker& both = *workers[sched.stage_workers[0][0]];
    LayerState in = both.replica(0)->layer_state(0), out = both.replica(3)->layer_state(3);
    ASSERT_TRUE(in.momentum.at(0).defined());
    EXPECT_TRUE(torch::equal(in.momentum.at(0), out.momentum.at(0)));
  }
}

// A checkpoint of the borrowed copy records its holder's Adam count: a V schedule's last chunk
// holding the tied output alone wrote its own optimizer's, 0, and a resume into another plan
// restarted that tie's bias correction (2.0e-2 off an uninterrupted run, exit 0; a helper's audit).
TEST(PipelineEquivalence, AVSchedulesBorrowedTieCheckpointsItsHoldersAdamCount) {
  auto make = [](const model::LayerSet& = {}) { return tied_mlp(2, false); };  // in | mid0 | mid1 | out
  auto single = make();
  auto data = model::synthetic_data(*single, 128, 32, 8, 4);
  TrainOptions t = tied_training();
  t.sgd.kind = "adam";
  t.sgd.lr = 0.01;
  plan::Plan plan = plan::even_split(unit_profile(*single), 4);
  for (const auto& g : single->tie_groups()) plan.ties.push_back(g.layers());
  std::vector<std::unique_ptr<Worker>> workers;
  auto sched = train_with(make, data, plan, "zb-v", 4, t, workers);
  ASSERT_EQ(sched.stage_workers[0], sched.stage_workers[3]);
  ASSERT_EQ(plan.stages[3].layers, std::vector<int>{3});  // the borrower holds nothing of its own
  Worker& both = *workers[sched.stage_workers[0][0]];
  EXPECT_EQ(both.replica(0)->layer_state(0).optimizer_steps, std::vector<int64_t>{t.steps});
  EXPECT_EQ(both.replica(3)->layer_state(3).optimizer_steps, std::vector<int64_t>{t.steps});
}

// `train` on one worker runs a one-stage pipeline (job::choose_road): it
// must compute what single-worker training does, for the schedules that can run one stage.
// Training options `t` on one worker (LibTorch's own optimizer and clip_grad_norm_), then on
// each plan below, every pipeline's weights within 1e-5 of one worker's: mnist-cnn on 2 and 3
// stages, a replicated first stage and data parallelism; the tied MLP with its tie split over 3.
void expect_optimizer_matches_single_worker(const TrainOptions& t) {
  const auto& s = setup();
  auto single = seeded_cnn(3);
  train_single_worker(*single, s.data, t);
  std::vector<torch::Tensor> reference;
  for (auto& p : single->parameters()) reference.push_back(p.detach().clone());
  auto prof = unit_profile(*single);
  plan::Plan two_by_one = plan::even_split(prof, 2);
  two_by_one.stages[0].replicas = 2;
  plan::assign_workers(two_by_one);
  for (const auto& [kind, plan] : std::vector<std::pair<std::string, plan::Plan>>{
           {"1f1b", plan::even_split(prof, 2)}, {"gpipe", plan::even_split(prof, 3)}, {"zb-h1", plan::even_split(prof, 3)},
           {"1f1b", two_by_one}, {"dp", replicated_plan(*single, 2)}}) {
    SCOPED_TRACE(kind + " " + plan.shape());
    std::vector<std::unique_ptr<Worker>> workers;
    auto sched = train_with([](const model::LayerSet& held = {}) { return seeded_cnn(3, held); }, s.data, plan, kind, 4,
                            t, workers);
    EXPECT_LE(max_relative_error(pipeline_weights(sched, workers), reference), 1e-5);
  }
}

void expect_tied_matches_single_worker(const TrainOptions& t) {
  SCOPED_TRACE("a tie split over 3 stages");
  auto data = model::synthetic_data(*tied_mlp(), 128, 32, 10, 4);
  auto single = tied_mlp();
  train_single_worker(*single, data, t);
  std::vector<torch::Tensor> reference;
  for (auto& p : single->parameters()) reference.push_back(p.detach().clone());
  plan::Plan plan = plan::even_split(unit_profile(*single), 3);
  for (const auto& g : single->tie_groups()) plan.ties.push_back(g.layers());
  std::vector<std::unique_ptr<Worker>> workers;
  auto sched = train_with([](const model::LayerSet& = {}) { return tied_mlp(); }, data, plan, "1f1b", 2, t, workers);
  EXPECT_LE(max_relative_error(pipeline_weights(sched, workers), reference), 1e-5);
}

// --clip-grad-norm clips by the whole model's norm, as torch.nn.utils.clip_grad_norm_ on one
// worker: every stage's gradient summed over the workers, a replicated stage's once, a tie split
// over stages once. A cap under every step's norm, so each step is scaled (the clipped and the
// unclipped runs end apart, or the check could not fail).
TEST(PipelineEquivalence, ClippingByTheWholeModelsNormMatchesSingleWorker) {
  TrainOptions t = setup().train;
  t.sgd.clip_grad_norm = 0.05;
  auto clipped = seeded_cnn(3);
  train_single_worker(*clipped, setup().data, t);
  std::vector<torch::Tensor> weights;
  for (auto& p : clipped->parameters()) weights.push_back(p.detach().clone());
  EXPECT_GT(max_relative_error(weights, setup().reference), 1e-3);  // clipping changed the run
  expect_optimizer_matches_single_worker(t);
  TrainOptions tied = tied_training();
  tied.sgd.clip_grad_norm = 0.05;
  expect_tied_matches_single_worker(tied);
}

// Adam and AdamW as one worker trains with LibTorch's own (the reference PyTorch's are held to in
// tests/python): a stage's moments are its parameters', a replicated stage's replicas step the
// same sum, a split tie's copies the same exchanged gradient; AdamW with clipping too.
TEST(PipelineEquivalence, AdamMatchesSingleWorker) {
  for (const std::string optimizer : {"adam", "adamw"}) {
    SCOPED_TRACE(optimizer);
    TrainOptions t = setup().train;
    t.sgd.kind = optimizer;
    t.sgd.lr = 0.002;
    t.sgd.weight_decay = 0.1;
    t.sgd.beta2 = 0.95;
    t.sgd.clip_grad_norm = optimizer == "adamw" ? 0.05 : 0;
    expect_optimizer_matches_single_worker(t);
  }
  TrainOptions t = tied_training();
  t.sgd.kind = "adamw";
  t.sgd.lr = 0.005;
  expect_tied_matches_single_worker(t);
}

TEST(PipelineEquivalence, OneStagePipelineIsSingleWorkerTraining) {
  auto model = seeded_cnn(3);
  auto one = plan::even_split(unit_profile(*model), 1);
  ASSERT_EQ(one.num_stages(), 1);
  ASSERT_EQ(one.workers, 1);
  for (const std::string kind : {"1f1b", "gpipe", "pipedream"}) expect_same_as_single_worker(kind, one, 1, 1, 1e-6);
}

TEST(PipelineEquivalence, InterleavedMatchesSingleWorker) {
  auto model = seeded_cnn(3);
  auto prof = unit_profile(*model);
  for (int m : {2, 4}) expect_same_as_single_worker("interleaved", plan::even_split(prof, 4), m, 2);
  // interleaved-zb: the same placement, B and W split, any number of microbatches.
  for (int m : {1, 8}) expect_same_as_single_worker("interleaved-zb", plan::even_split(prof, 4), m, 2);
}

// The V schedules: two chunks per worker, the middle worker handing its first chunk's output
// (and its second chunk's input gradient) to itself; B and W split as in zb-h1.
TEST(PipelineEquivalence, VSchedulesMatchSingleWorker) {
  auto model = seeded_cnn(3);
  auto prof = unit_profile(*model);
  for (const std::string kind : {"zb-v", "v-half", "v-min", "dualpipev"})
    for (int stages : {2, 4})
      for (int m : {1, 4})
        if (kind != "dualpipev" || m >= stages)  // dualpipev: at least 2 x workers microbatches
          expect_same_as_single_worker(kind, plan::even_split(prof, stages), m);
}

// A frozen layer (requires_grad false: a fine-tuned model's backbone) takes no step, as in
// torch.optim.SGD, which skips a parameter without a gradient. With weight decay the flat
// buffer's step shrank it anyway (a GPT's frozen LayerNorm moved 6.6e-3, exit 0). And a first
// stage with nothing to train (all frozen, or no weights at all: a Flatten) has no backward to
// run: autograd refused its output, and every schedule failed at its first backward.
TEST(PipelineEquivalence, FrozenLayersTakeNoStepAndAStageOfThemRuns) {
  auto frozen_first = [](const model::LayerSet& held = {}) {
    auto m = seeded_cnn(3, held);
    if (m->holds(0))
      for (auto& p : m->layer_parameters(0)) p.set_requires_grad(false);
    return m;
  };
  const auto& s = setup();
  TrainOptions t = s.train;
  t.sgd.weight_decay = 0.05;
  auto single = frozen_first();
  std::vector<torch::Tensor> initial;
  for (auto& p : single->layer_parameters(0)) initial.push_back(p.detach().clone());
  ASSERT_FALSE(initial.empty());
  train_single_worker(*single, s.data, t);
  std::vector<torch::Tensor> reference;
  for (auto& p : single->parameters()) reference.push_back(p.detach().clone());
  plan::Plan plan = plan::even_split(unit_profile(*single), 2);
  plan.stages[0].layers = {0};  // the frozen layer alone: a stage with nothing to train
  plan.stages[1].layers.clear();
  for (int l = 1; l < single->num_layers(); ++l) plan.stages[1].layers.push_back(l);
  for (const std::string kind : {"1f1b", "gpipe", "zb-h1"}) {
    SCOPED_TRACE(kind);
    std::vector<std::unique_ptr<Worker>> workers;
    auto weights = pipeline_weights(train_with(frozen_first, s.data, plan, kind, 2, t, workers), workers);
    EXPECT_LE(max_relative_error(weights, reference), 1e-5);
    for (size_t i = 0; i < initial.size(); ++i) EXPECT_TRUE(torch::equal(weights[i], initial[i])) << "frozen " << i;
  }
}

// train --schedule-file: each built-in synchronous schedule, written out (simulate
// --emit-schedule's JSON) and as torch.distributed.pipelining's CSV of actions, read back and run
// in place of its generator, trains to the built-in's weights (the same actions in the same
// order: bitwise).
TEST(PipelineEquivalence, ScheduleFilesTrainToTheBuiltInsWeights) {
  auto model = seeded_cnn(3);
  auto prof = unit_profile(*model);
  const auto& s = setup();
  fs::path dir = fs::temp_directory_path() / ("pt_schedule_files_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  struct Case {
    std::string kind;
    int stages, microbatches, chunks;
  };
  for (const Case& c : {Case{"1f1b", 3, 4, 1}, Case{"gpipe", 2, 2, 1}, Case{"zb-h1", 3, 4, 1},
                        Case{"interleaved", 4, 2, 2}, Case{"interleaved-zb", 4, 8, 2}, Case{"zb-v", 4, 4, 1},
                        Case{"dualpipev", 4, 8, 1}}) {
    SCOPED_TRACE(c.kind);
    plan::Plan plan = plan::even_split(prof, c.stages);
    PipelineOptions o;
    o.schedule = c.kind;
    o.microbatches = c.microbatches;
    o.chunks = c.chunks;
    o.train = s.train;
    o.timeout_s = 20;
    std::vector<std::unique_ptr<Worker>> builtin;
    train_pipeline([](const model::LayerSet& held = {}) { return seeded_cnn(3, held); }, s.data, plan, o, &builtin);
    schedule::Schedule sched = generate_schedule(plan, o, 1);
    auto expected = pipeline_weights(sched, builtin);
    std::string json_file = (dir / (c.kind + ".json")).string();
    write_text_file_atomic(json_file, schedule::to_json(sched).dump(1));
    PipelineOptions f = o;
    f.schedule = "file";
    f.schedule_file = std::make_shared<const schedule::Schedule>(
        schedule::bind_schedule(schedule::read_schedule_file(json_file), plan, json_file));
    std::vector<std::unique_ptr<Worker>> from_file;
    auto result = train_pipeline([](const model::LayerSet& held = {}) { return seeded_cnn(3, held); }, s.data, plan, f, &from_file);
    EXPECT_EQ(result.train.steps, 3);
    EXPECT_EQ(max_relative_error(pipeline_weights(sched, from_file), expected), 0.0);
  }
  fs::remove_all(dir);
}

TEST(PipelineEquivalence, DataParallelMatchesSingleWorker) {
  auto model = seeded_cnn(3);
  for (int replicas : {2, 3, 4})
    for (int m : {4, 8}) expect_same_as_single_worker("dp", replicated_plan(*model, replicas), m);
}

// Gradients all-reduced in small buckets during the last backward (gradient_buckets.h), or in
// one after it (0), sum to what one worker computes: data parallelism and a replicated stage
// feeding an unreplicated one.
TEST(PipelineEquivalence, BucketedAllReduceMatchesSingleWorker) {
  auto model = seeded_cnn(3);
  plan::Plan hybrid = plan::even_split(unit_profile(*model), 2);
  hybrid.stages[0].replicas = 2;
  hybrid.stages[0].workers = {0, 1};
  hybrid.stages[1].workers = {2};
  hybrid.workers = 3;
  for (int64_t bucket : {int64_t{4} << 10, int64_t{0}}) {
    for (int replicas : {2, 3}) expect_same_as_single_worker("dp", replicated_plan(*model, replicas), 4, 1, 1e-5, bucket);
    for (const std::string kind : {"1f1b", "gpipe"}) expect_same_as_single_worker(kind, hybrid, 4, 1, 1e-5, bucket);
  }
}

// PipeDream's replicated stage (docs/runtime.md): its r replicas take one minibatch each at the
// same weights and the round steps with their mean gradient, w - lr (g_0 + ... + g_{r-1}) / r, as
// PipeDream's DDP does; with --replica-gradients sum, w - lr (g_0 + ... + g_{r-1}). Without
// momentum that is one worker's step on the r minibatches joined (the sampler's order does not
// depend on the batch size) at the rate, or at r times it. Summed, 8 replicas of mnist-cnn at
// 0.02 trained to chance.
TEST(PipelineEquivalence, ReplicatedPipeDreamStageStepsWithTheRoundsMeanOrSum) {
  for (bool sum : {false, true})
    for (int r : {2, 3}) {
      SCOPED_TRACE(str(r, " replicas, ", sum ? "sum" : "mean"));
      auto m = seeded_cnn(5);
      auto data = model::synthetic_data(*m, 256, 64, 10, 13);
      TrainOptions joined;
      joined.steps = 1;
      joined.batch_size = 16 * r;
      joined.sgd = {0.05 * (sum ? r : 1), 0, 0};
      joined.seed = 4;
      joined.quiet = true;
      joined.evaluate = false;
      train_single_worker(*m, data, joined);
      std::vector<torch::Tensor> reference;
      for (auto& p : m->parameters()) reference.push_back(p.detach().clone());

      PipelineOptions o;
      o.schedule = "pipedream";
      o.sum_replica_gradients = sum;
      o.train = joined;
      o.train.steps = r;  // one round
      o.train.batch_size = 16;
      o.train.sgd = {0.05, 0, 0};
      o.timeout_s = 20;
      std::vector<std::unique_ptr<Worker>> workers;
      auto plan = replicated_plan(*seeded_cnn(5), r);
      train_pipeline([](const model::LayerSet& held = {}) { return seeded_cnn(5, held); }, data, plan, o, &workers);
      auto sched = generate_schedule(plan, o, r);
      auto trained = pipeline_weights(sched, workers);
      EXPECT_LE(max_relative_error(trained, reference), 1e-5);
      // The other reduction moves the weights r times more (less): the test can tell them apart.
      auto start = seeded_cnn(5)->parameters();
      std::vector<torch::Tensor> other;
      for (size_t i = 0; i < start.size(); ++i) {
        torch::Tensor moved = reference[i] - start[i].detach();
        other.push_back(start[i].detach() + (sum ? moved / r : moved * r));
      }
      EXPECT_GT(max_relative_error(trained, other), 1e-3);
    }
}

}  // namespace
}  // namespace pt::runtime
