// plan_segments: where a job drains (epoch ends, checkpoints, evaluations) and what it skips.
#include <gtest/gtest.h>

#include "pipeline_test_util.h"

namespace pt::runtime {
namespace {

std::vector<Segment> segments_of(const std::string& kind, int replicas, int64_t per_epoch, int64_t total,
                                 int64_t checkpoint_every, int64_t eval_every, int64_t first_step = 0) {
  plan::Plan p = plan::data_parallel_plan(4, 1);
  p.stages = {{{0, 1}, replicas, {}}, {{2, 3}, 1, {}}};
  for (int r = 0; r < replicas + 1; ++r) (r < replicas ? p.stages[0] : p.stages[1]).workers.push_back(r);
  p.workers = replicas + 1;
  PipelineOptions o;
  o.schedule = kind;
  auto probe = generate_schedule(p, o, 4);
  return plan_segments(probe, p, per_epoch, total, first_step, checkpoint_every, eval_every);
}

// "first+n:flags" per segment, flags c (checkpoint), e (evaluate), E (ends epoch).
std::string describe(const std::vector<Segment>& segs) {
  std::string out;
  for (const auto& s : segs) {
    out += str(s.first_minibatch, "+", s.minibatches, ":", s.checkpoint ? "c" : "", s.evaluate ? "e" : "",
               s.ends_epoch ? "E" : "", " ");
  }
  return out;
}

TEST(Segments, AsynchronousCutsAtEvaluationsAndCheckpointsInReplicaMultiples) {
  // 2 replicas on stage 0: segments are even; eval every 5 rounds up to 6, counted across the
  // epochs (the count restarted at each: 15+6, 21+6); epoch of 15 skips 1.
  EXPECT_EQ(describe(segments_of("pipedream", 2, 15, 30, 0, 5)), "0+6:e 6+6:e 12+2:eE 15+4:e 19+6:e 25+4:eE ");
  EXPECT_EQ(describe(segments_of("pipedream", 2, 15, 30, 0, 0)), "0+14:eE 15+14:eE ");
  // Both kinds: each counts from its own last cut.
  EXPECT_EQ(describe(segments_of("pipedream", 1, 20, 20, 8, 6)), "0+6:e 6+2:c 8+4:e 12+4:c 16+2:e 18+2:ceE ");
  // 2bw's replicas split each minibatch's microbatches: no rounds, nothing skipped, no rounding
  // (it skipped a minibatch of each epoch and evaluated every 6 for --eval-every 5).
  EXPECT_EQ(describe(segments_of("2bw", 2, 15, 30, 0, 5)), "0+5:e 5+5:e 10+5:eE 15+5:e 20+5:e 25+5:eE ");
}

TEST(Segments, AsynchronousCheckpointsCountAcrossEpochs) {
  // Every 5 rounds up to 6 (2 replicas): 6, 12, 18, ... whatever the epochs of 16 (they cut
  // evaluations); the end of training checkpoints too. The count restarted at each epoch end,
  // which checkpointed: 6, 12, 16, 22, 28, 32, 38.
  EXPECT_EQ(describe(segments_of("pipedream", 2, 16, 40, 5, 0)),
            "0+6:c 6+6:c 12+4:eE 16+2:c 18+6:c 24+6:c 30+2:eE 32+4:c 36+4:ceE ");
  // A checkpoint every `total` minibatches over 3 epochs is one, at the end.
  int checkpoints = 0;
  for (const auto& s : segments_of("pipedream", 2, 16, 48, 48, 0)) checkpoints += s.checkpoint;
  EXPECT_EQ(checkpoints, 1);
}

// A resumed asynchronous run cuts where the uninterrupted one does: its counts run from step 0
// (they ran from the resume step: --eval-every 15 resumed at 140 evaluated at 155, not 150).
TEST(Segments, AResumedAsynchronousRunCutsWhereTheUninterruptedOneDoes) {
  for (int replicas : {1, 2}) {
    std::vector<Segment> whole = segments_of("pipedream", replicas, 62, 310, 20, 15);
    for (const auto& at : whole) {
      if (!at.checkpoint) continue;
      int64_t resume = at.first_minibatch + at.minibatches;
      std::vector<Segment> tail;
      for (const auto& s : whole)
        if (s.first_minibatch >= resume) tail.push_back(s);
      EXPECT_EQ(describe(segments_of("pipedream", replicas, 62, 310, 20, 15, resume)), describe(tail))
          << replicas << " replicas, resumed at " << resume;
    }
  }
}

TEST(Segments, SynchronousEvaluatesOnMultiplesOfTheStep) {
  std::string d = describe(segments_of("1f1b", 1, 4, 8, 0, 3));
  EXPECT_EQ(d, "0+1: 1+1: 2+1:e 3+1:eE 4+1: 5+1:e 6+1: 7+1:eE ");
}

}  // namespace
}  // namespace pt::runtime

namespace pt::runtime {
namespace {

// An epoch too short for one round of a replicated stage: refused before anything is written,
// where it ran zero steps and exited 0.
TEST(Segments, NothingToTrainIsRefused) {
  auto m = testing::seeded_cnn(4);
  auto data = model::synthetic_data(*m, 24, 8, 10, 5);  // 3 minibatches of 8 per epoch
  plan::Plan p = plan::data_parallel_plan(m->num_layers(), 4);
  PipelineOptions o;
  o.schedule = "pipedream";
  o.train.batch_size = 8;
  o.train.steps = 4;
  o.train.quiet = true;
  try {
    make_job(p, o, *m, data);
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("nothing would train"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("an epoch of 3 minibatches of 8"), std::string::npos) << e.what();
  }
  o.schedule = "1f1b";  // synchronous: a minibatch at a time
  EXPECT_EQ(make_job(p, o, *m, data).steps, 4);
}

// Steps that whole rounds cannot make are refused with the steps that would run (4 of --steps 5
// or 8 ran without a word); epochs train what their whole rounds hold, and say what they skip.
TEST(Segments, StepsThatRoundsCannotMakeAreRefused) {
  auto m = testing::seeded_cnn(4);
  auto data = model::synthetic_data(*m, 48, 8, 10, 5);  // 6 minibatches of 8 per epoch
  plan::Plan p = plan::data_parallel_plan(m->num_layers(), 4);
  PipelineOptions o;
  o.schedule = "pipedream";
  o.train.batch_size = 8;
  o.train.quiet = true;
  for (int64_t steps : {5, 8}) {
    o.train.steps = steps;
    try {
      make_job(p, o, *m, data);
      FAIL() << "accepted --steps " << steps;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(str("--steps ", steps, ": the replicas of plan 4 under pipedream take "
                                               "minibatches in rounds of 4, and an epoch of 6 minibatches of 8 holds "
                                               "1 whole round, so the run would train 4 of the ", steps)),
                std::string::npos)
          << e.what();
    }
  }
  // Below one round the cause is --steps, not the epoch (it said the epoch "holds no whole round").
  o.train.steps = 2;
  try {
    make_job(p, o, *m, data);
    FAIL() << "accepted --steps 2";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--steps 2: nothing would train: the replicas of plan 4 under pipedream take "
                                         "minibatches in rounds of 4, and 2 minibatches are less than one round"),
              std::string::npos)
        << e.what();
  }
  o.train.steps = 4;
  EXPECT_EQ(make_job(p, o, *m, data).steps, 4);
  o.train.steps = 0;
  o.train.epochs = 3;
  EXPECT_EQ(make_job(p, o, *m, data).steps, 12);  // 4 of each epoch's 6
}

}  // namespace
}  // namespace pt::runtime
