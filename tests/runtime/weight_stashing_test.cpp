// PipeDream's weight stashing: every backward runs with the weights its own forward used, on
// every stage, although other minibatches' steps updated the weights in between. With
// stashing off the same check fails, so the test can tell.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "pipeline_test_util.h"
#include "schedule/memory.h"

namespace pt::runtime {
namespace {

using namespace testing;

struct Outcome {
  int mismatches = 0;   // backwards whose weights differ from their forward's
  int checked = 0;
  int64_t max_versions = 0;
};

// 24 pipedream minibatches of 16 with momentum, recording each backward's and its forward's
// weights.
PipelineOptions recorded_pipedream() {
  PipelineOptions o;
  o.schedule = "pipedream";
  o.train.steps = 24;
  o.train.batch_size = 16;
  o.train.sgd = {0.05, 0.9, 0};
  o.train.quiet = true;
  o.train.evaluate = false;
  o.record_weight_sums = true;
  o.timeout_s = 20;
  return o;
}

// 12 2bw minibatches of 16 in 4 microbatches, recorded as recorded_pipedream's.
PipelineOptions recorded_2bw() {
  PipelineOptions o = recorded_pipedream();
  o.schedule = "2bw";
  o.microbatches = 4;
  o.train.steps = 12;
  return o;
}

Outcome run_pipedream(bool stash, int stages, bool predict = false) {
  auto m = seeded_cnn(4);
  auto data = model::synthetic_data(*m, 512, 32, 10, 5);
  PipelineOptions o = recorded_pipedream();
  o.stash_weights = stash;
  o.weight_prediction = predict;
  auto plan = plan::even_split(unit_profile(*m), stages);
  std::vector<std::unique_ptr<Worker>> workers;
  train_pipeline([](const model::LayerSet& held = {}) { return seeded_cnn(4, held); }, data, plan, o, &workers);
  Outcome out;
  for (int st = 0; st < stages; ++st) {
    StageReplica* rep = workers[st]->replica(st);
    EXPECT_EQ(rep->version(), 24);  // one step per minibatch
    for (const auto& [mb, sums] : rep->weight_sums()) {
      ++out.checked;
      if (sums.first != sums.second) ++out.mismatches;
    }
  }
  return out;
}

TEST(WeightStashing, EachBackwardUsesItsForwardsWeights) {
  Outcome with = run_pipedream(true, 4);
  EXPECT_EQ(with.checked, 4 * 24);
  EXPECT_EQ(with.mismatches, 0);
  Outcome without = run_pipedream(false, 4);
  // Without stashing, stages 0..2 run backwards with newer weights (stage 3 has none in flight).
  EXPECT_GT(without.mismatches, 24);
}

// With weight prediction, a minibatch's forward and backward run on its own predicted weights:
// the same for both, and on stages with minibatches in flight not the newest (so they differ
// from stashing alone's).
TEST(WeightPrediction, EachBackwardUsesItsForwardsPredictedWeights) {
  Outcome predicted = run_pipedream(true, 4, true);
  EXPECT_EQ(predicted.checked, 4 * 24);
  EXPECT_EQ(predicted.mismatches, 0);
}

TEST(WeightPrediction, PredictsAsFarAsTheStepsBetweenForwardAndBackward) {
  auto m = seeded_cnn(4);
  auto data = model::synthetic_data(*m, 512, 32, 10, 5);
  auto plan = plan::even_split(unit_profile(*m), 4);
  std::map<bool, std::vector<std::map<int64_t, std::pair<double, double>>>> sums;
  for (bool predict : {false, true}) {
    PipelineOptions o = recorded_pipedream();
    o.weight_prediction = predict;
    std::vector<std::unique_ptr<Worker>> workers;
    train_pipeline([](const model::LayerSet& held = {}) { return seeded_cnn(4, held); }, data, plan, o, &workers);
    for (int st = 0; st < 4; ++st) sums[predict].push_back(workers[st]->replica(st)->weight_sums());
    for (int st = 0; st < 4; ++st) EXPECT_EQ(workers[st]->replica(st)->stash_size(), 0);
  }
  // Stage 0 keeps 4 in flight, each predicted 3 steps ahead: the runs agree until its first
  // step gives it a velocity, and differ from then on.
  for (int64_t mb = 0; mb < 4; ++mb) EXPECT_EQ(sums[false][0].at(mb).first, sums[true][0].at(mb).first) << mb;
  for (int64_t mb = 5; mb < 20; ++mb) EXPECT_NE(sums[false][0].at(mb).first, sums[true][0].at(mb).first) << mb;
}

// Stashing keeps only what is needed: at most the stage's in-flight count of old versions.
TEST(WeightStashing, VersionsAreReleased) {
  auto m = seeded_cnn(4);
  auto data = model::synthetic_data(*m, 512, 32, 10, 5);
  PipelineOptions o;
  o.schedule = "pipedream";
  o.train.steps = 12;
  o.train.batch_size = 16;
  o.train.quiet = true;
  o.train.evaluate = false;
  o.timeout_s = 20;
  o.weight_prediction = false;  // the paper's versions (a prediction is each minibatch's own copy)
  std::vector<std::unique_ptr<Worker>> workers;
  auto plan = plan::even_split(unit_profile(*m), 3);
  train_pipeline([](const model::LayerSet& held = {}) { return seeded_cnn(4, held); }, data, plan, o, &workers);
  auto sched = generate_schedule(plan, o, 12);
  for (int st = 0; st < 3; ++st) {
    // Old versions stashed besides the current one: fewer than the versions the schedule keeps.
    EXPECT_LT(workers[st]->replica(st)->peak_versions_held(), sched.weight_versions[st]);
    if (st < 2) {
      EXPECT_GT(workers[st]->replica(st)->peak_versions_held(), 0);
    }
    EXPECT_EQ(workers[st]->replica(st)->stash_size(), 0);      // drained at the end
    EXPECT_EQ(workers[st]->replica(st)->versions_held(), 0);   // nothing kept after the drain
  }
}

}  // namespace
}  // namespace pt::runtime

namespace pt::runtime {
namespace {

using namespace testing;

// Vertical sync (PipeDream §3.3): a minibatch runs with the same weight version on every stage
// (the one stage 0 had when it entered); without it, later stages use newer versions.
int stages_disagreeing(bool vertical_sync) {
  auto m = seeded_cnn(4);
  auto data = model::synthetic_data(*m, 512, 32, 10, 5);
  PipelineOptions o;
  o.schedule = "pipedream";
  o.vertical_sync = vertical_sync;
  o.train.steps = 20;
  o.train.batch_size = 16;
  o.train.quiet = true;
  o.train.evaluate = false;
  o.record_weight_sums = true;
  o.timeout_s = 20;
  std::vector<std::unique_ptr<Worker>> workers;
  train_pipeline([](const model::LayerSet& held = {}) { return seeded_cnn(4, held); }, data, plan::even_split(unit_profile(*m), 4), o, &workers);
  int disagreeing = 0;
  for (int64_t mb = 0; mb < 20; ++mb) {
    int64_t v0 = workers[0]->replica(0)->used_versions().at(mb);
    for (int st = 1; st < 4; ++st) disagreeing += workers[st]->replica(st)->used_versions().at(mb) != v0;
    // Stashing still holds: each backward saw its forward's weights.
    for (int st = 0; st < 4; ++st) {
      auto sums = workers[st]->replica(st)->weight_sums().at(mb);
      EXPECT_EQ(sums.first, sums.second) << "stage " << st << " minibatch " << mb;
    }
  }
  return disagreeing;
}

TEST(VerticalSync, EveryStageUsesTheEntryVersion) {
  EXPECT_EQ(stages_disagreeing(true), 0);
  EXPECT_GT(stages_disagreeing(false), 20);
}

// Each stage keeps the versions its lists reach back to (Schedule::vertical_sync_history), not
// 2W + 2: over segments of two lengths (evaluations every 5 minibatches, a short last one)
// every forward still finds its entry version (the replica
// throws where it was not kept, or was dropped in use), every stage runs on it, and no replica
// ever holds more than its history.
TEST(VerticalSync, EachStageKeepsOnlyTheVersionsItsListsReachBackTo) {
  auto m = seeded_cnn(4);
  auto data = model::synthetic_data(*m, 512, 32, 10, 5);
  PipelineOptions o = recorded_pipedream();
  o.vertical_sync = true;
  o.weight_prediction = false;
  o.train.steps = 22;
  o.train.eval_every = 5;
  o.train.evaluate = true;
  plan::Plan plan = plan::even_split(unit_profile(*m), 4);
  std::vector<std::unique_ptr<Worker>> workers;
  ASSERT_NO_THROW(
      train_pipeline([](const model::LayerSet& held = {}) { return seeded_cnn(4, held); }, data, plan, o, &workers));
  schedule::Schedule s = generate_schedule(plan, o, 6);
  const auto& entry = workers[0]->replica(0)->used_versions();  // minibatch -> stage 0's version
  ASSERT_EQ(entry.size(), 22u);
  for (int st = 0; st < 4; ++st) {
    int history = s.vertical_sync_history(st);
    EXPECT_EQ(history, 3) << "stage " << st;  // 4 stages: stage 0's 3 in flight behind
    for (int w : s.stage_workers[st]) {
      StageReplica* rep = workers[w]->replica(st);
      EXPECT_LE(rep->peak_versions_held(), 3) << "stage " << st << " worker " << w;
      for (const auto& [mb, v] : rep->used_versions())
        EXPECT_EQ(v, entry.at(mb)) << "stage " << st << " minibatch " << mb;
    }
  }
}

}  // namespace
}  // namespace pt::runtime

namespace pt::runtime {
namespace {

using namespace testing;

// A deferred step (plan.h, deferred_step): a replicated first stage steps after its next
// forward. That forward runs on the version before the step, one update behind the plain
// schedule's, and weight stashing still gives every backward its own forward's weights.
std::map<int64_t, int64_t> first_stage_versions(bool deferred) {
  auto m = seeded_cnn(4);
  auto data = model::synthetic_data(*m, 512, 32, 10, 5);
  PipelineOptions o = recorded_pipedream();
  auto plan = plan::even_split(unit_profile(*m), 2);
  plan.stages[0].replicas = 3;
  plan::assign_workers(plan);
  plan.deferred_step = deferred;
  std::vector<std::unique_ptr<Worker>> workers;
  train_pipeline([](const model::LayerSet& held = {}) { return seeded_cnn(4, held); }, data, plan, o, &workers);
  std::map<int64_t, int64_t> used;
  for (int w = 0; w < 4; ++w) {
    int st = w < 3 ? 0 : 1;
    StageReplica* rep = workers[w]->replica(st);
    EXPECT_EQ(rep->version(), st == 0 ? 8 : 24);  // stage 0 steps once per round of 3
    for (const auto& [mb, sums] : rep->weight_sums()) EXPECT_EQ(sums.first, sums.second) << "worker " << w << " minibatch " << mb;
    if (st == 0)
      for (const auto& [mb, v] : rep->used_versions()) used[mb] = v;
  }
  return used;
}

// A replicated stage's replicas step together at one rate, the round's: each took its own
// minibatch's, and under a warm-up (or a cosine, or the default stale warm-up) they drifted
// apart for good, and a checkpoint kept replica 0's.
TEST(WeightStashing, ReplicasOfAStageStepAtOneRateAndStayEqual) {
  auto m = seeded_cnn(4);
  auto data = model::synthetic_data(*m, 512, 32, 10, 5);
  PipelineOptions o = recorded_pipedream();
  o.train.sgd.warmup_steps = 24;  // the rate changes every minibatch
  auto plan = plan::even_split(unit_profile(*m), 2);
  plan.stages[0].replicas = 3;
  plan::assign_workers(plan);
  std::vector<std::unique_ptr<Worker>> workers;
  train_pipeline([](const model::LayerSet& held = {}) { return seeded_cnn(4, held); }, data, plan, o, &workers);
  auto weights = [&](int w) { return workers[w]->replica(0)->flat().weights(); };
  for (int w = 1; w < 3; ++w)
    for (size_t b = 0; b < weights(0).size(); ++b)
      EXPECT_TRUE(torch::equal(weights(w)[b], weights(0)[b])) << "replica " << w << " buffer " << b;
}

TEST(WeightStashing, DeferredStepRunsTheNextForwardOneVersionBehind) {
  auto plain = first_stage_versions(false);
  auto deferred = first_stage_versions(true);
  ASSERT_EQ(plain.size(), 24u);
  ASSERT_EQ(deferred.size(), 24u);
  // Rounds 0 and 1 enter before any step; from round 2 on each forward follows one step less.
  for (int64_t mb = 0; mb < 24; ++mb)
    EXPECT_EQ(deferred.at(mb), std::max<int64_t>(0, plain.at(mb) - 1)) << "minibatch " << mb;
  EXPECT_GT(plain.at(23), 0);
}

}  // namespace
}  // namespace pt::runtime

namespace pt::runtime {
namespace {

using namespace testing;

// PipeDream-2BW's update, W(t+1) = W(t) - lr grad f(W(t-1)): every microbatch of minibatch t runs
// on every stage on the weights after t - 1 steps (the initial ones for t = 0 and 1), its
// backward on its forward's. Each forward took the newest weights instead: the last stage ran
// with no delay, and stage 0 mixed two versions inside one minibatch's gradient.
TEST(TwoBw, EveryMicrobatchOfAMinibatchRunsOnTheVersionOneStepBehindOnEveryStage) {
  auto m = seeded_cnn(4);
  auto data = model::synthetic_data(*m, 512, 32, 10, 5);
  PipelineOptions o = recorded_2bw();
  o.weight_prediction = false;  // the paper's versions (TwoBw.PredictsEachMinibatchsWeights: pipetrain's default)
  std::vector<std::unique_ptr<Worker>> workers;
  train_pipeline([](const model::LayerSet& held = {}) { return seeded_cnn(4, held); }, data,
                 plan::even_split(unit_profile(*m), 4), o, &workers);
  for (int st = 0; st < 4; ++st) {
    StageReplica* rep = workers[st]->replica(st);
    EXPECT_EQ(rep->version(), 12);  // one step per minibatch
    EXPECT_EQ(rep->peak_versions_held() + 1, 2) << "stage " << st << ": the newest and the one before";
    ASSERT_EQ(rep->used_versions().size(), 12u * 4);
    for (const auto& [mb, version] : rep->used_versions())
      EXPECT_EQ(version, std::max<int64_t>(0, mb / 4 - 1)) << "stage " << st << " microbatch " << mb;
    for (const auto& [mb, sums] : rep->weight_sums()) EXPECT_EQ(sums.first, sums.second) << "stage " << st << " microbatch " << mb;
  }
}


// 2bw with weight prediction (its default) against the update written out by hand: minibatch t's
// microbatches all run, on stage s, on one copy of the weights, predicted at its first forward
// from the newest version b there as far as the step that applies its gradient:
// W(b) - (t - b) lr v(b), v(b) the velocity after b steps (none before a first step); the stage
// then steps as SGD with momentum does, W(t+1) = W(t) - lr v(t+1), v(t+1) = mu v(t) + g. The
// reference takes b from the version the runtime recorded at that forward; how far ahead the
// runtime predicts from it is what the test checks.
TEST(TwoBw, PredictsEachMinibatchsWeightsAsFarAsTheStepThatAppliesItsGradient) {
  constexpr int kStages = 4, kMicro = 4, kSteps = 12, kBatch = 16;
  const double lr = 0.05, mu = 0.9;
  auto ref = seeded_cnn(4);
  auto data = model::synthetic_data(*ref, 512, 32, 10, 5);
  auto plan = plan::even_split(unit_profile(*ref), kStages);
  PipelineOptions o = recorded_2bw();
  ASSERT_EQ(o.microbatches, kMicro);
  ASSERT_EQ(o.train.steps, kSteps);
  o.train.batch_size = kBatch;
  o.train.sgd = {lr, mu, 0};
  o.train.shuffle = false;  // minibatch t: samples [t B, (t + 1) B)
  o.stale_warmup = 0;       // the rate is lr throughout
  std::vector<std::unique_ptr<Worker>> workers;
  train_pipeline([](const model::LayerSet& held = {}) { return seeded_cnn(4, held); }, data, plan, o, &workers);

  std::vector<std::vector<torch::Tensor>> params(kStages);  // the reference's, by stage
  for (int st = 0; st < kStages; ++st)
    for (int l : plan.stages[st].layers)
      for (auto& p : ref->layer_parameters(l)) params[st].push_back(p);
  auto copies = [](const std::vector<torch::Tensor>& ts) {
    std::vector<torch::Tensor> out;
    for (const auto& t : ts) out.push_back(t.detach().clone());
    return out;
  };
  // [stage][version]: the weights and the velocity after that many steps.
  std::vector<std::vector<std::vector<torch::Tensor>>> w(kStages), v(kStages);
  for (int st = 0; st < kStages; ++st) {
    w[st].push_back(copies(params[st]));
    std::vector<torch::Tensor> zero;
    for (const auto& p : params[st]) zero.push_back(torch::zeros_like(p));
    v[st].push_back(zero);
  }
  int predicted = 0;  // minibatches some stage ran on weights ahead of its newest
  for (int t = 0; t < kSteps; ++t) {
    torch::NoGradGuard no_grad;
    for (int st = 0; st < kStages; ++st) {
      int64_t b = workers[st]->replica(st)->used_versions().at(static_cast<int64_t>(t) * kMicro);
      ASSERT_LE(b, t) << "stage " << st << " minibatch " << t;
      predicted += b < t;
      for (size_t i = 0; i < params[st].size(); ++i)
        params[st][i].copy_(w[st][b][i] - static_cast<double>(t - b) * lr * v[st][b][i]);
    }
    for (auto& p : ref->parameters()) p.mutable_grad() = torch::Tensor();
    for (int micro = 0; micro < kMicro; ++micro) {
      std::vector<int64_t> rows;
      for (int r = 0; r < kBatch / kMicro; ++r) rows.push_back(t * kBatch + micro * (kBatch / kMicro) + r);
      torch::AutoGradMode grad(true);
      (ref->loss(ref->forward(data.train.gather_inputs(rows)), data.train.gather_targets(rows)) / kMicro).backward();
    }
    for (int st = 0; st < kStages; ++st) {
      std::vector<torch::Tensor> nv, nw;
      for (size_t i = 0; i < params[st].size(); ++i) {
        nv.push_back(v[st][t][i] * mu + params[st][i].grad());
        nw.push_back(w[st][t][i] - lr * nv.back());
      }
      v[st].push_back(nv);
      w[st].push_back(nw);
    }
  }
  // Stage 0 starts minibatch t before its step of t - 1 from the second on; the last stage after.
  EXPECT_GE(predicted, kSteps - 1);
  // The memory model counts the weight copies the replicas held: on the plan's schedule, each
  // stage's weights over its parameters' bytes.
  profile::Profile prof = unit_profile(*ref);
  schedule::MemoryOptions mo;
  auto memory = schedule::memory_per_worker(generate_schedule(plan, o, kSteps), prof, mo);
  for (int st = 0; st < kStages; ++st) {
    StageReplica* rep = workers[st]->replica(st);
    EXPECT_EQ(rep->version(), kSteps);
    EXPECT_EQ(rep->versions_held(), 0) << "stage " << st << ": no delayed version is kept";
    int64_t stage_bytes = 0;
    for (int l : plan.stages[st].layers) stage_bytes += prof.layers[l].parameter_bytes;
    EXPECT_EQ(memory[st].weights, rep->peak_weight_copies() * stage_bytes) << "stage " << st;
    EXPECT_LE(max_relative_error(copies(rep->parameters()), w[st][kSteps]), 1e-5) << "stage " << st;
    for (const auto& [mb, sums] : rep->weight_sums()) {
      EXPECT_EQ(sums.first, sums.second) << "stage " << st << " microbatch " << mb << ": its backward's weights";
      EXPECT_EQ(sums.first, rep->weight_sums().at(mb - mb % kMicro).first)
          << "stage " << st << " microbatch " << mb << ": its minibatch's first microbatch's weights";
    }
  }
}


// A replicated stage under 2bw's prediction: each replica predicts its minibatches' copies from
// its own newest weights and steps count, and the replicas, which sum their gradients, stay equal.
TEST(TwoBw, ReplicasOfAPredictingStageStayEqual) {
  auto m = seeded_cnn(4);
  auto data = model::synthetic_data(*m, 512, 32, 10, 5);
  PipelineOptions o = recorded_2bw();
  auto plan = plan::even_split(unit_profile(*m), 2);
  plan.stages[0].replicas = 2;
  plan::assign_workers(plan);
  std::vector<std::unique_ptr<Worker>> workers;
  auto result =
      train_pipeline([](const model::LayerSet& held = {}) { return seeded_cnn(4, held); }, data, plan, o, &workers);
  EXPECT_EQ(result.train.steps, 12);
  auto weights = [&](int w) { return workers[w]->replica(0)->flat().weights(); };
  for (size_t b = 0; b < weights(0).size(); ++b)
    EXPECT_TRUE(torch::equal(weights(1)[b], weights(0)[b])) << "buffer " << b;
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(workers[w]->replica(0)->versions_held(), 0) << "replica " << w;
    for (const auto& [mb, sums] : workers[w]->replica(0)->weight_sums())
      EXPECT_EQ(sums.first, sums.second) << "replica " << w << " microbatch " << mb;
  }
}


// A stage's stale warm-up spans its own lag: the paper's 2bw lags every stage by the schedule's
// weight delay; predicting, a stage lags the steps between a minibatch's forward and its step,
// none on the last stage (it warmed up as the others did).
TEST(TwoBw, APredictingStageWarmsUpOverItsOwnLag) {
  auto m = seeded_cnn(4);
  auto plan = plan::even_split(unit_profile(*m), 4);
  PipelineOptions o = recorded_2bw();
  schedule::Schedule s = generate_schedule(plan, o, o.train.steps);
  WorkerOptions w;
  w.sgd = o.train.sgd;
  w.stale_warmup = 100;
  for (bool predict : {true, false}) {
    w.weight_prediction = predict;
    for (int st = 0; st < 4; ++st)
      EXPECT_EQ(stage_optimizer(s, st, w).stale_warmup_steps, predict && st == 3 ? 0 : 100)
          << (predict ? "predicting" : "paper") << ", stage " << st;
  }
}

}  // namespace
}  // namespace pt::runtime
