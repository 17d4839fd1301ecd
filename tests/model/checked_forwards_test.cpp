// The data checks' forwards run once per job: a gloo worker started by its launcher takes the
// output the launcher computed instead of loading every layer of the model again (its peak held
// the model's largest layer, not only its stage's). Only a parent's record is taken.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "model/check_forward.h"
#include "model/layered_model.h"

namespace pt::model {
namespace {

int builds = 0;

TEST(CheckedForwards, AChildTakesItsParentsProbeAndNoOtherProcessDoes) {
  // One layer, built from its maker only when a forward needs it (a layer the process does not
  // hold); no BLAS in it, so that the forked child computes nothing on another thread's pool.
  LayeredModel m("probe-me", Task::kClassification, {4}, false, LayerSet::none());
  m.add("first-three", [] {
    ++builds;
    torch::nn::Sequential s;
    s->push_back(torch::nn::Functional([](const torch::Tensor& t) { return t.narrow(1, 0, 3) * 2; }));
    return s;
  });
  torch::Tensor x = torch::randn({5, 4});
  builds = 0;
  torch::Tensor out = probe_output(m, x, "data.pt");
  ASSERT_EQ(builds, 1);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 3}));
  // The process that recorded it runs the forward again: it takes only its parent's records.
  probe_output(m, x, "data.pt");
  EXPECT_EQ(builds, 2);

  pid_t pid = ::fork();
  if (pid == 0) {
    int code = 0;
    torch::Tensor taken = probe_output(m, x, "data.pt");
    if (builds != 2 || taken.sizes() != out.sizes() || taken.scalar_type() != out.scalar_type()) code |= 1;
    // Another input is another forward.
    probe_output(m, torch::randn({5, 4}).narrow(0, 0, 1), "data.pt");
    if (builds != 3) code |= 2;
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the child ran its parent's forward again; 2: it took a record of another input";
}

// A job of many shards checks each one: the record keeps one line per check, and stays far
// under what exec takes (128 KiB a string), or the workers would not start.
TEST(CheckedForwards, TheRecordKeepsOneLinePerCheckAndStaysSmall) {
  auto lines = [] {
    const char* record = std::getenv("PIPETRAIN_CHECKED_FORWARDS");
    std::string all = record ? record : "";
    return std::count(all.begin(), all.end(), '\n');
  };
  auto model = [](const std::string& name) {
    auto m = std::make_unique<LayeredModel>(name, Task::kClassification, std::vector<int64_t>{4}, false,
                                            LayerSet::none());
    m->add("first-three", [] {
      torch::nn::Sequential s;
      s->push_back(torch::nn::Functional([](const torch::Tensor& t) { return t.narrow(1, 0, 3); }));
      return s;
    });
    return m;
  };
  auto same = model("shards");
  torch::Tensor x = torch::randn({5, 4});
  probe_output(*same, x, "shard-0.pt");
  const auto before = lines();
  for (int shard = 1; shard < 500; ++shard) probe_output(*same, x, "shard-" + std::to_string(shard) + ".pt");
  EXPECT_EQ(lines(), before);
  for (int i = 0; i < 2000; ++i) probe_output(*model("model-" + std::to_string(i)), x, "x");
  EXPECT_LE(std::strlen(std::getenv("PIPETRAIN_CHECKED_FORWARDS")), size_t{32} << 10);
  EXPECT_GT(lines(), before);
}

// A layer whose forward halves its weight in place, as an embedding's max_norm renormalises the
// rows it looks up.
struct ShrinkingImpl : torch::nn::Module {
  ShrinkingImpl() : w(register_parameter("w", torch::full({4}, 3.0))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    {
      torch::NoGradGuard no_grad;
      w.mul_(0.5);
    }
    return x * w;
  }
  torch::Tensor w;
};
TORCH_MODULE(Shrinking);

// The check trains nothing: the weights a forward changed in place are put back (the check's
// forward left a max_norm embedding's first rows renormalised before training began).
TEST(CheckedForwards, AForwardThatChangesItsWeightsLeavesThemAsTheyWere) {
  LayeredModel m("shrinks", Task::kClassification, {4}, false);
  Shrinking layer;
  m.add("shrinking", [layer] { return torch::nn::Sequential(layer); });
  torch::Tensor out = probe_output(m, torch::ones({3, 4}), "data.pt");
  EXPECT_TRUE(torch::equal(out, torch::full({2, 4}, 1.5)));
  EXPECT_TRUE(torch::equal(layer->w, torch::full({4}, 3.0))) << layer->w;
}

}  // namespace
}  // namespace pt::model
