// The test-set evaluation through a pipeline (Worker::evaluate): the same figures as one model
// evaluating alone, and no stage running ahead of the next by more than Worker::kEvaluationAhead
// rounds, whatever the schedule's placement (a chain, interleaved chunks, a V).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "job/worker_runner.h"
#include "pipeline_test_util.h"
#include "runtime/thread_transport.h"

namespace pt::runtime {
namespace {

// A count and the most it has reached.
struct Peak {
  std::atomic<int> now{0}, most{0};
  void add(int k) {
    int n = now.fetch_add(k) + k, seen = most.load();
    while (n > seen && !most.compare_exchange_weak(seen, n)) {
    }
  }
};

// Over all workers: the evaluation's activations sent and not yet taken; the credits (one
// number each) whose transfers a worker still holds; the most samples one activation carried.
struct InFlight : Peak {
  Peak credits;
  std::atomic<int64_t> rows{0};
};

// A worker's transport that counts activations in flight; `slow` takes each received
// activation 5 ms late, a next stage slower than the one feeding it; `late_ms` leaves each
// barrier that much late, a thread woken after a busy core's timer tick.
class CountingTransport : public Transport {
 public:
  CountingTransport(std::shared_ptr<ThreadHub> hub, int rank, InFlight& counts, bool slow, int late_ms = 0)
      : inner_(std::move(hub), rank), counts_(counts), slow_(slow), late_ms_(late_ms) {}
  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  std::shared_ptr<PendingTransfer> isend(const torch::Tensor& t, int peer, int64_t tag) override {
    if (t.numel() == 1) {
      struct Credit : PendingTransfer {
        std::shared_ptr<PendingTransfer> inner;
        Peak* alive;
        ~Credit() override { alive->add(-1); }
        torch::Tensor wait() override { return inner->wait(); }
      };
      auto out = std::make_shared<Credit>();
      out->inner = inner_.isend(t, peer, tag);
      out->alive = &counts_.credits;
      counts_.credits.add(1);
      return out;
    }
    if (tag < 0) {  // the evaluation's tags
      counts_.add(1);
      int64_t seen = counts_.rows.load();
      while (t.size(0) > seen && !counts_.rows.compare_exchange_weak(seen, t.size(0))) {
      }
    }
    return inner_.isend(t, peer, tag);
  }
  std::shared_ptr<PendingTransfer> irecv(int peer, int64_t tag) override {
    struct Counted : PendingTransfer {
      std::shared_ptr<PendingTransfer> inner;
      InFlight* counts;
      bool slow;
      int64_t tag;
      torch::Tensor wait() override {
        torch::Tensor t = inner->wait();
        if (t.numel() > 1 && tag < 0) {
          if (slow) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          counts->add(-1);
        }
        return t;
      }
    };
    auto out = std::make_shared<Counted>();
    out->inner = inner_.irecv(peer, tag);
    out->tag = tag;
    out->counts = &counts_;
    out->slow = slow_;
    return out;
  }
  void allreduce_sum(std::vector<torch::Tensor>& tensors, const std::vector<int>& group) override {
    inner_.allreduce_sum(tensors, group);
    std::this_thread::sleep_for(std::chrono::milliseconds(late_ms_));
  }
  std::shared_ptr<PendingTransfer> allreduce_start(torch::Tensor t, const std::vector<int>& group) override {
    return inner_.allreduce_start(std::move(t), group);
  }
  void abort(const std::string& why) override { inner_.abort(why); }

 private:
  ThreadTransport inner_;
  InFlight& counts_;
  bool slow_;
  int late_ms_;
};

void expect_bounded_evaluation(const std::string& kind, int stages, int chunks) {
  SCOPED_TRACE(str(kind, " on ", stages, " stages"));
  auto whole = testing::seeded_cnn(3);
  auto data = model::synthetic_data(*whole, 64, 240, 10, 5);  // 30 rounds of 8 test samples
  PipelineOptions o;
  o.schedule = kind;
  o.microbatches = 2;
  o.chunks = chunks;
  o.train.batch_size = 8;
  o.train.quiet = true;
  o.timeout_s = 20;
  Job job = make_job(plan::even_split(testing::unit_profile(*whole), stages), o,
                     *testing::seeded_cnn(3, model::LayerSet::none()), data);
  const schedule::Schedule& s = *job.typical;
  int n = s.num_workers();
  auto hub = std::make_shared<ThreadHub>(n, o.timeout_s);
  InFlight counts;
  std::vector<std::unique_ptr<CountingTransport>> transports;
  std::vector<std::unique_ptr<Worker>> workers;
  for (int w = 0; w < n; ++w) {
    // Every worker but the first takes its input late: the first would run ahead of it.
    transports.push_back(std::make_unique<CountingTransport>(hub, w, counts, w > 0));
    workers.push_back(std::make_unique<Worker>(w, testing::seeded_cnn(3, model::LayerSet(s.worker_layers(w))), data,
                                               *transports[w], job.worker));
  }
  std::vector<Evaluation> results(n);
  std::vector<std::thread> threads;
  for (int w = 0; w < n; ++w)
    threads.emplace_back([&, w] { results[w] = workers[w]->evaluate(s, data.test, o.train.batch_size); });
  for (auto& t : threads) t.join();

  Evaluation alone = evaluate(*whole, data.test, o.train.batch_size);
  const Evaluation& piped = results[s.stage_workers.back()[0]];
  EXPECT_NEAR(piped.accuracy, alone.accuracy, 1e-12);
  ASSERT_TRUE(piped.loss && alone.loss);
  EXPECT_NEAR(*piped.loss, *alone.loss, 1e-5 * std::max(1.0, *alone.loss));
  EXPECT_EQ(counts.now.load(), 0);
  // Each link holds at most kEvaluationAhead rounds sent ahead and the one its receiver takes;
  // without the credits the first worker sent all 30 rounds before the second took its third.
  int links = 0;
  for (int st = 1; st < s.num_stages; ++st) links += s.stage_workers[st][0] != s.stage_workers[st - 1][0];
  EXPECT_LE(counts.most.load(), links * (Worker::kEvaluationAhead + 1));
  EXPECT_GE(counts.most.load(), 1);
  // And the credits a worker sent are let go of as it goes: each was kept to the end (30 a
  // link), and a transfer held a round sat among the blocks the rounds free (worker.cpp).
  EXPECT_EQ(counts.credits.now.load(), 0);
  EXPECT_LE(counts.credits.most.load(), links * (Worker::kEvaluationAhead + 1));
}

TEST(Evaluation, NoStageRunsMoreThanAFewRoundsAheadOfTheNext) {
  expect_bounded_evaluation("1f1b", 2, 1);
  expect_bounded_evaluation("gpipe", 4, 1);
  // Two links between the same pair of workers, one each way, and both ways in a V.
  expect_bounded_evaluation("interleaved", 4, 2);
  expect_bounded_evaluation("zb-v", 4, 1);
}

// A 1f1b job of the seeded CNN on 2 stages, its 2 workers run on threads through CountingTransports
// (worker 1's barriers `late_ms` late); `on_evaluated(worker, evaluation)` after each evaluation.
struct TwoStageRun {
  InFlight counts;
  std::vector<std::unique_ptr<Worker>> workers;
};
std::unique_ptr<TwoStageRun> run_two_stages(const PipelineOptions& o, const model::DataSplit& data, int late_ms,
                                            const std::function<void(int, const Evaluation&)>& on_evaluated) {
  auto whole = testing::seeded_cnn(3);
  Job job = make_job(plan::even_split(testing::unit_profile(*whole), 2), o,
                     *testing::seeded_cnn(3, model::LayerSet::none()), data);
  auto run = std::make_unique<TwoStageRun>();
  auto hub = std::make_shared<ThreadHub>(2, o.timeout_s);
  std::vector<std::unique_ptr<CountingTransport>> transports;
  for (int w = 0; w < 2; ++w) {
    transports.push_back(std::make_unique<CountingTransport>(hub, w, run->counts, false, w == 1 ? late_ms : 0));
    run->workers.push_back(std::make_unique<Worker>(
        w, testing::seeded_cnn(3, model::LayerSet(job.typical->worker_layers(w))), data, *transports[w], job.worker));
  }
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w)
    threads.emplace_back([&, w] {
      TrainingClock clock;
      run_worker_segments(*run->workers[w], *transports[w], job, data, clock,
                          [&](const Segment&, const Evaluation& e) { on_evaluated(w, e); });
    });
  for (auto& t : threads) t.join();
  return run;
}

// A job's evaluations (run_worker_segments) run the training's microbatches, not its whole
// minibatch: no forward of an evaluation holds more than one of training does (a language
// model's last stage held 4x training's logits, job/worker_runner.cpp).
TEST(Evaluation, RunsTheTrainingsMicrobatches) {
  auto whole = testing::seeded_cnn(3);
  auto data = model::synthetic_data(*whole, 64, 40, 10, 5);
  PipelineOptions o;
  o.schedule = "1f1b";
  o.microbatches = 4;
  o.train.batch_size = 16;
  o.train.steps = 2;
  o.train.quiet = true;
  o.timeout_s = 20;
  std::vector<double> accuracy(2, -2);
  auto run = run_two_stages(o, data, 0, [&](int w, const Evaluation& e) { accuracy[w] = e.accuracy; });
  EXPECT_GE(accuracy[1], 0);  // the last stage evaluated
  EXPECT_EQ(run->counts.rows.load(), 4) << "samples in an evaluation's activation (a microbatch: 16 / 4)";
}

// 1f1b on 2 stages, 4 steps of 2 microbatches, evaluating after steps 2 and 4.
PipelineOptions evaluating_every_second() {
  PipelineOptions o;
  o.schedule = "1f1b";
  o.microbatches = 2;
  o.train.batch_size = 16;
  o.train.steps = 4;
  o.train.eval_every = 2;
  o.train.quiet = true;
  o.timeout_s = 20;
  return o;
}

// A worker's pause in the trace starts when its training of the segment ended, not when it left
// the barrier before the evaluation: the trace's common pause (the last worker's start to the
// first one's end) counted a late wake-up as training, 1.8 ms of each evaluation on a busy machine,
// where train's training time did not.
TEST(Evaluation, APauseStartsWhereTheWorkersTrainingEnded) {
  auto data = model::synthetic_data(*testing::seeded_cnn(3), 64, 16, 10, 5);
  PipelineOptions o = evaluating_every_second();
  // Barriers 100 ms late, against a bound of 50: a thread woken late on a busy machine (10 ms was
  // the bound against 30) cannot pass for the bug, nor the bug for it.
  auto run = run_two_stages(o, data, 100, [](int, const Evaluation&) {});
  const auto& workers = run->workers;
  for (int w = 0; w < 2; ++w) {
    SCOPED_TRACE(str("worker ", w));
    const auto& pauses = workers[w]->pauses();
    ASSERT_EQ(pauses.size(), 2u);  // after minibatches 2 and 4
    for (const auto& [start, end] : pauses) {
      double trained = 0;  // the end of its last action before the pause
      for (const auto& e : workers[w]->trace())
        if (e.end_ms <= start) trained = std::max(trained, e.end_ms);
      EXPECT_LT(start - trained, 50) << "ms from its last action to its pause";
      EXPECT_GT(end - start, 100) << "the late barriers are the pause's";
    }
  }
}

// A pause ends when the last worker has done its part of it, not when the first resumes: worker 0
// ends a checkpoint alone (CRCs, manifest, rename) and the reporter writes its rows, and the
// others, which left at once, ended the common pause then, so that work counted as training (a
// checkpoint every 10 steps: 3,231 samples/s read for 3,354).
TEST(Evaluation, APauseEndsWhenTheLastWorkerHasDoneItsPart) {
  auto data = model::synthetic_data(*testing::seeded_cnn(3), 64, 16, 10, 5);
  PipelineOptions o = evaluating_every_second();
  auto run = run_two_stages(o, data, 0, [](int w, const Evaluation&) {
    if (w == 0) std::this_thread::sleep_for(std::chrono::milliseconds(60));  // its part alone
  });
  for (size_t p = 0; p < 2; ++p) {
    SCOPED_TRACE(str("pause ", p));
    const auto& alone = run->workers[0]->pauses().at(p);
    const auto& other = run->workers[1]->pauses().at(p);
    double common = std::min(alone.second, other.second) - std::max(alone.first, other.first);
    EXPECT_GT(common, 55) << "ms of the common pause: worker 0's 60 ms alone are in it";
  }
}

}  // namespace
}  // namespace pt::runtime
