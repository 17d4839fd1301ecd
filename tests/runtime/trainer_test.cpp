// Single-worker training is deterministic under a seed and writes its per-step CSV.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <numeric>
#include <sstream>

#include "core/error.h"
#include "model/data_checks.h"
#include "model/memory_meter.h"
#include "model/zoo.h"
#include "runtime/progress.h"
#include "runtime/trainer.h"

namespace pt::runtime {
namespace {

std::vector<torch::Tensor> train_weights(uint64_t seed, const std::string& csv = "") {
  torch::manual_seed(seed);
  auto m = model::build_mnist_cnn({});
  auto data = model::synthetic_data(*m, 256, 32, 10, seed + 1);
  TrainOptions o;
  o.steps = 12;
  o.batch_size = 32;
  o.seed = seed;
  o.quiet = true;
  o.metrics_path = csv;
  train_single_worker(*m, data, o);
  std::vector<torch::Tensor> w;
  for (auto& p : m->parameters()) w.push_back(p.detach().clone());
  return w;
}

TEST(Trainer, DeterministicUnderSeed) {
  auto a = train_weights(5), b = train_weights(5), c = train_weights(6);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
  EXPECT_FALSE(torch::equal(a[0], c[0]));
}

TEST(Trainer, MetricsCsvHasOneRowPerStepAndTheAccuracy) {
  std::string path = ::testing::TempDir() + "metrics.csv";
  train_weights(1, path);
  std::ifstream in(path);
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 13u);
  EXPECT_EQ(lines[0],
            "step,epoch,loss,samples_per_s,test_accuracy,train_s,peak_memory_bytes,test_loss,grad_norm,lr,peak_rss_bytes");
  auto field = [&](int row, int col) {
    std::stringstream ss(lines[row]);
    std::string f;
    for (int c = 0; c <= col; ++c) std::getline(ss, f, ',');
    return f;
  };
  EXPECT_EQ(lines[1].substr(0, 4), "1,1,");  // steps and epochs from 1, as the progress lines count
  EXPECT_EQ(lines[9].substr(0, 4), "9,2,");   // 8 steps an epoch
  EXPECT_EQ(field(1, 4), "");   // not evaluated after step 1
  EXPECT_NE(field(8, 4), "");   // end of epoch 1 (8 steps of 32 of 256 samples)
  EXPECT_NE(field(12, 4), "");  // end of the run
  // The OS's figure for this process, which ran the training: never falling, and no more than
  // the peak read after it.
  const int64_t after = model::process_peak_rss_bytes();
  int64_t before = 0;
  for (int row = 1; row <= 12; ++row) {
    const int64_t rss = std::stoll(field(row, 10));
    EXPECT_GE(rss, before) << lines[row];
    EXPECT_LE(rss, after) << lines[row];
    before = rss;
  }
  EXPECT_GT(before, 16 << 20);  // LibTorch alone holds more
  EXPECT_GT(std::stod(field(12, 5)), std::stod(field(1, 5)));  // training seconds grow
  // The test loss beside the accuracy, where evaluated: 10 classes at about chance here.
  EXPECT_EQ(field(1, 7), "");
  EXPECT_GT(std::stod(field(12, 7)), 1.5);
  EXPECT_LT(std::stod(field(12, 7)), 3.5);
  EXPECT_EQ(field(1, 9), "0.02");  // the rate each step applied: the default, constant
  EXPECT_EQ(field(12, 9), "0.02");
}

TEST(Progress, ANanIsWrittenNotLeftEmpty) {
  std::string path = ::testing::TempDir() + "nan_metrics.csv";
  {
    Progress progress(2, path, true);
    StepRecord r{1, 0, 2.5};
    progress.step(r);
    r.step = 2;
    r.test_loss = r.grad_norm = std::nan("");
    progress.step(r);
    progress.finish();
  }
  std::ifstream in(path);
  std::string header, first, second;
  std::getline(in, header);
  std::getline(in, first);
  std::getline(in, second);
  const std::string before_rss = first.substr(0, first.rfind(','));
  EXPECT_EQ(before_rss.substr(before_rss.size() - 4), ",,,,") << first;  // not measured: empty
  EXPECT_NE(second.find(",nan,nan,"), std::string::npos) << second;  // diverged: said
}

// A model file's own loss may be negative (a Gaussian NLL): its test loss is written, not taken
// for "not evaluated" (a -1 for that dropped every negative loss from the file and the lines).
TEST(Progress, ANegativeTestLossIsWritten) {
  std::string path = ::testing::TempDir() + "negative_metrics.csv";
  {
    Progress progress(1, path, true);
    StepRecord r{1, 0, -0.25};
    r.test_loss = -0.5;
    progress.step(r);
    progress.finish();
  }
  std::ifstream in(path);
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  EXPECT_NE(row.find(",-0.5,"), std::string::npos) << row;
}

// A converged regression's loss keeps its digits: "%.6f" wrote 3.25e-8 as 0.000000.
TEST(Progress, ASmallLossKeepsItsDigits) {
  std::string path = ::testing::TempDir() + "small_loss_metrics.csv";
  {
    Progress progress(1, path, true);
    StepRecord r{1, 0, 3.25e-8};
    r.test_loss = 1.5e-9;
    r.grad_norm = 1.234567891;
    progress.step(r);
    progress.finish();
  }
  std::ifstream in(path);
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  EXPECT_EQ(row.rfind("1,1,3.25e-08,", 0), 0u) << row;
  EXPECT_NE(row.find(",1.5e-09,1.23456789,"), std::string::npos) << row;
}

// A resumed run's rows give the rate over the whole training, as their train_s does: its own
// rate started again at its first step (a resumed mnist-cnn's read 576 where the run went at 780).
TEST(Progress, AResumedRunsRateIsTheWholeTrainings) {
  std::string path = ::testing::TempDir() + "resumed_metrics.csv";
  {
    std::ofstream earlier(path);
    earlier << "step,epoch,loss,samples_per_s,test_accuracy,train_s,peak_memory_bytes,test_loss,grad_norm,lr\n";
    earlier << "1,1,2.3,100.0,,2.000,,,,\n2,1,2.2,100.0,,4.000,,,,\n";  // 400 samples in 4 s
  }
  {
    Progress progress(4, path, true, 2);
    StepRecord r{3, 0, 2.1, 50.0};  // this run's own: 100 samples in 2 s
    r.train_s = 2.0;
    progress.step(r);
    r.step = 4, r.samples_per_s = 50.0, r.train_s = 4.0;  // 200 in 4 s
    progress.step(r);
    progress.finish();
  }
  std::ifstream in(path);
  std::vector<std::string> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(line);
  ASSERT_EQ(rows.size(), 5u);
  // Written before peak_rss_bytes came, its rows are kept with that field empty.
  EXPECT_EQ(rows[0].substr(rows[0].size() - 18), ",lr,peak_rss_bytes");
  EXPECT_EQ(rows[2], "2,1,2.2,100.0,,4.000,,,,,");
  EXPECT_EQ(rows[3].substr(0, 24), "3,1,2.1,83.3,,6.000,,,,,") << rows[3];  // (400 + 100) / (4 + 2)
  EXPECT_EQ(rows[4].substr(0, 24), "4,1,2.1,75.0,,8.000,,,,,") << rows[4];  // (400 + 200) / (4 + 4)
}

// The rows a resumed run keeps are checked first, naming the file, the line and the field, and
// the file is left as it was: an inf in train_s made every new row's train_s inf and its rate nan,
// and a row twice left 30 rows for 20 steps, exit 0. A row past the checkpoint, or one a killed
// run left half written, is dropped as before.
TEST(Progress, AResumedRunsRowsAreCheckedBeforeTheyAreKept) {
  std::string path = ::testing::TempDir() + "checked_metrics.csv";
  const std::string header =
      "step,epoch,loss,samples_per_s,test_accuracy,train_s,peak_memory_bytes,test_loss,grad_norm,lr,peak_rss_bytes\n";
  auto refused = [&](const std::string& rows) {
    { std::ofstream(path) << header << rows; }
    std::remove((path + ".partial").c_str());  // a resume reads a killed run's partial file first
    std::string error;
    try {
      Progress progress(4, path, true, 2);
    } catch (const UsageError& e) {
      error = e.what();
    }
    std::ifstream in(path);
    std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(kept, header + rows);
    return error;
  };
  EXPECT_NE(refused("1,1,2.3,100.0,,2.000,,,,,\n2,1,2.2,100.0,,inf,,,,,\n")
                .find("checked_metrics.csv: line 3, field 'train_s' is 'inf': it must be a finite number >= 0"),
            std::string::npos);
  EXPECT_NE(refused("1,1,2.3,100.0,,2.000,,,,,\n1,1,2.3,100.0,,2.000,,,,,\n").find("line 3, field 'step' is '1'"),
            std::string::npos);
  EXPECT_NE(refused("1,1,2.3,abc,,2.000,,,,,\n").find("field 'samples_per_s' is 'abc': not a number"),
            std::string::npos);
  EXPECT_NE(refused("1,1,2.3,100.0,,2.000\n").find("line 2 has 6 fields where the header names 11"),
            std::string::npos);
  // Past the checkpoint (step 3) and half written (no newline): dropped, not refused.
  EXPECT_EQ(refused("1,1,2.3,100.0,,2.000,,,,,\n2,1,2.2,100.0,,4.000,,,,,\n3,1,9.9\n4,1,2.1,1"), "");
}

TEST(Trainer, EvalEveryAddsAccuracyRows) {
  std::string path = ::testing::TempDir() + "metrics_every.csv";
  auto m = model::build_mnist_cnn({});
  auto data = model::synthetic_data(*m, 256, 64, 10, 1);
  TrainOptions o;
  o.batch_size = 32;
  o.epochs = 1;
  o.eval_every = 3;
  o.metrics_path = path;
  o.quiet = true;
  train_single_worker(*m, data, o);
  std::ifstream in(path);
  std::string line;
  std::vector<int> evaluated;
  for (int row = 0; std::getline(in, line); ++row) {
    std::stringstream ss(line);
    std::string field;
    for (int c = 0; c <= 4; ++c) std::getline(ss, field, ',');  // test_accuracy
    if (row > 0 && !field.empty()) evaluated.push_back(row);
  }
  EXPECT_EQ(evaluated, (std::vector<int>{3, 6, 8}));  // every 3 steps and the epoch's end
}

// A loss whose last steps' median is 10x over its first step's (risen by 9x its size) is a diverged
// run (an error); a spike it came back from is not, and is noted; one that ended no lower than it
// started over 50 steps is said in a note; a loss that fell, or a shorter run, says nothing.
TEST(Trainer, ALossThatRoseIsDivergedAndOneThatDidNotFallIsNoted) {
  auto result = [](int64_t steps, double first, std::vector<double> last) {
    TrainResult r;
    r.steps = steps, r.first_loss = first, r.final_losses = last;
    r.final_loss = std::accumulate(last.begin(), last.end(), 0.0) / static_cast<double>(last.size());
    return r;
  };
  auto flat = [&](int64_t steps, double first, double final_loss) {
    return result(steps, first, std::vector<double>(std::min<int64_t>(steps, kFinalLossSteps), final_loss));
  };
  EXPECT_NO_THROW(check_not_diverged(flat(30, 2.3, 22.9)));
  try {
    check_not_diverged(flat(30, 2.3, 23.0));
    ADD_FAILURE() << "a loss 10x its start passed";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("rose from 2.3 (the first step's) to 23 (the median of the last 30 steps)"),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(check_not_diverged(flat(30, 2.3, NAN)), RuntimeFailure);
  // In the data's order (--no-shuffle) the loss follows the data: a rise says nothing, NaN still
  // does (one-hot rows sorted by target rose 7.5 to 77.5 at a rate of 1e-30: failed as diverged).
  TrainResult ordered = flat(30, 7.5, 77.5);
  ordered.shuffled = false;
  EXPECT_NO_THROW(check_not_diverged(ordered));
  EXPECT_EQ(divergence(7.5, {77.5, 77.5}, 30, /*shuffled=*/false), "");
  ordered.final_losses.back() = ordered.final_loss = NAN;
  EXPECT_THROW(check_not_diverged(ordered), RuntimeFailure);
  TrainResult emulated = flat(30, 2.3, 1e9);
  emulated.loss_known = false;  // no loss: nothing to judge
  EXPECT_NO_THROW(check_not_diverged(emulated));
  // A loss below 0 (the user's own: MSE less 2) rises by 9 times its size: from -0.56 to 4.5.
  EXPECT_NO_THROW(check_not_diverged(flat(30, -0.56, 4.47)));
  EXPECT_THROW(check_not_diverged(flat(30, -0.56, 4.49)), RuntimeFailure);
  EXPECT_THROW(check_not_diverged(flat(30, -0.56, 5.6e28)), RuntimeFailure);
  // A spike the run came back from (Adam at 0.2: 311,382 at step 2, then 2.3): its mean is
  // 10,000x the start, its median is not. Noted, not refused; half the steps up is refused.
  std::vector<double> spiked(30, 2.31);
  spiked[1] = 311382;
  EXPECT_NO_THROW(check_not_diverged(result(30, 2.3, spiked)));
  std::string spike = unlearned_note(result(30, 2.3, spiked));
  EXPECT_NE(spike.find("the loss spiked: the mean of the last 30 steps is 10381.6, their median 2.31"),
            std::string::npos) << spike;
  std::vector<double> up(30, 2.31);
  std::fill(up.begin() + 14, up.end(), 1e6);
  EXPECT_THROW(check_not_diverged(result(30, 2.3, up)), RuntimeFailure);
  // A loss that blows up in its last few steps is no spike it came back from, though its median
  // of 50 is low (a regression from 0.85: 0.05 for 36 steps, then up to 2e6; exit 0 before, its
  // checkpoint written), nor is one below 0 that ends on two huge steps. One last spike passes.
  std::vector<double> blown(50, 0.05);
  for (int k = 0; k < 14; ++k) blown[36 + k] = 1e4 * (k + 1);
  try {
    check_not_diverged(result(60, 0.85, blown));
    ADD_FAILURE() << "a loss that blew up in its last 14 steps passed";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("rose from 0.85 (the first step's) to 130000 (the median of the last 3 steps)"),
              std::string::npos) << e.what();
  }
  std::vector<double> negative(7, -1.6);
  negative.insert(negative.end(), {61.8, 5e7});
  EXPECT_THROW(check_not_diverged(result(9, -1.65, negative)), RuntimeFailure);
  negative.back() = -1.6;  // one spike, then back down
  EXPECT_NO_THROW(check_not_diverged(result(9, -1.65, negative)));
  std::vector<double> last_spike(30, 2.2);
  last_spike.back() = 1e6;
  EXPECT_NO_THROW(check_not_diverged(result(30, 2.3, last_spike)));
  EXPECT_NE(unlearned_note(result(30, 2.3, last_spike)).find("the loss spiked"), std::string::npos);
  // The note on a loss that did not fall reads the median too: a dip it came back from is no fall.
  EXPECT_EQ(unlearned_note(flat(100, 2.3, 2.29)), "");
  EXPECT_EQ(unlearned_note(flat(49, 2.3, 2.31)), "");  // too short to tell
  std::string note = unlearned_note(flat(90, 2.3, 2.31));  // mnist-cnn at --lr 0.3: chance after 90 steps
  EXPECT_NE(note.find("the loss did not fall: 2.3 at the first step, 2.31 over the last 50 (their median"),
            std::string::npos) << note;
  std::vector<double> dipped(50, 2.31);
  dipped[10] = -40;  // a mean of 1.46
  EXPECT_NE(unlearned_note(result(100, 2.3, dipped)), "");
  // A spike does not hide that the loss did not fall: both are said.
  std::vector<double> spiked_flat(50, 2.38);
  spiked_flat[20] = 3e6;
  std::string both = unlearned_note(result(60, 2.3, spiked_flat));
  EXPECT_NE(both.find("note: the loss spiked"), std::string::npos) << both;
  EXPECT_NE(both.find("\nnote: the loss did not fall: 2.3 at the first step, 2.38 over the last 50"), std::string::npos)
      << both;
}

// A model's own loss over float targets (a model file's MSE, no --loss) is a regression: no
// accuracy, where argmax against the targets read 0%. Class ids still count.
TEST(Trainer, OwnLossOverFloatTargetsMeasuresNoAccuracy) {
  torch::manual_seed(0);
  auto m = std::make_shared<model::LayeredModel>("own-mse", model::Task::kClassification, std::vector<int64_t>{4}, false);
  m->add("fc", torch::nn::Sequential(torch::nn::Linear(4, 1)));
  m->set_loss([](const torch::Tensor& out, const torch::Tensor& y) { return torch::mse_loss(out.squeeze(1), y); });
  model::Dataset test;
  test.inputs = torch::randn({32, 4});
  test.targets = torch::randn({32});
  Evaluation e = evaluate(*m, test, 8);
  EXPECT_EQ(e.accuracy, -1);
  ASSERT_TRUE(e.loss.has_value());
  EXPECT_GT(*e.loss, 0);
  m->set_loss([](const torch::Tensor& out, const torch::Tensor& y) { return out.sum() * 0 + y.sum() * 0; });
  test.targets = torch::zeros({32}, torch::kLong);  // class ids: the one output's argmax is always right
  EXPECT_EQ(evaluate(*m, test, 8).accuracy, 1.0);
}

// A file's own loss says nothing of where its classes lie: an LM's [N, T, V] against [N, T] counted
// the argmax along T (0.00% where T != V, a figure of no meaning where T = V). The dimension its
// shapes leave is taken, and where two do, none.
TEST(Trainer, OwnLossCountsClassesAlongTheDimensionItsShapesLeave) {
  auto m = std::make_shared<model::LayeredModel>("own-lm", model::Task::kClassification, std::vector<int64_t>{3}, true);
  m->add("head", torch::nn::Sequential(torch::nn::Embedding(5, 5)));
  auto ids = [](std::vector<int64_t> sizes) { return torch::zeros(sizes, torch::kLong); };
  EXPECT_EQ(m->class_dim(torch::zeros({2, 3, 5}), ids({2, 5})), 1) << "cross-entropy's: classes along dimension 1";
  EXPECT_EQ(m->class_dim(torch::zeros({2, 3, 5}), ids({2, 3})), std::nullopt);
  m->set_loss([](const torch::Tensor& out, const torch::Tensor& y) {
    return torch::nn::functional::cross_entropy(out.reshape({-1, out.size(-1)}), y.reshape({-1}));
  });
  EXPECT_EQ(m->class_dim(torch::zeros({2, 3, 5}), ids({8, 3})), 2);
  EXPECT_EQ(m->class_dim(torch::zeros({2, 10}), ids({8})), 1);
  EXPECT_EQ(m->class_dim(torch::zeros({2, 10, 7, 7}), ids({8, 7, 7})), 1);
  EXPECT_EQ(m->class_dim(torch::zeros({2, 4, 4}), ids({2, 4})), std::nullopt) << "dimensions 1 and 2 both fit";
  EXPECT_EQ(m->class_dim(torch::zeros({2, 3, 5}), ids({2, 4})), std::nullopt);
  EXPECT_EQ(m->class_dim(torch::zeros({2, 3, 5}), torch::zeros({2, 3})), std::nullopt) << "float targets";
  EXPECT_EQ(model::no_accuracy_reason(*m, torch::zeros({2, 3, 5}), ids({8, 3})), "");
  EXPECT_NE(model::no_accuracy_reason(*m, torch::zeros({2, 4, 4}), ids({8, 4})).find("dimension 1 and the last (2) both fit"),
            std::string::npos);
  // An evaluation counts each token whose score is highest at its next token's id.
  model::Dataset test;
  test.inputs = torch::tensor({0, 1, 2, 3, 4, 0}, torch::kLong).reshape({2, 3});
  test.targets = test.inputs.clone();
  test.targets[1][2] = 3;  // an identity embedding predicts each input id: all but this one right
  torch::NoGradGuard no_grad;
  m->parameters()[0].copy_(torch::eye(5));
  EXPECT_NEAR(evaluate(*m, test, 2).accuracy, 5.0 / 6, 1e-12);
}

TEST(Trainer, BadOptionsNameTheFlag) {
  auto m = model::build_mnist_cnn({});
  auto data = model::synthetic_data(*m, 64, 8, 10, 1);
  TrainOptions o;
  o.batch_size = 65;
  try {
    train_single_worker(*m, data, o);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--batch-size: 65 is larger than the 64 training samples of synthetic (8 more are held out for testing)");
  }
  o.batch_size = 8;
  o.sgd.lr = -1;
  EXPECT_THROW(train_single_worker(*m, data, o), UsageError);
}

}  // namespace
}  // namespace pt::runtime
