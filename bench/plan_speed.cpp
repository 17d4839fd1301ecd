// How long planning takes, in two parts.
// 1. The search in this process, under both cost models: a 300-layer chain on 64 workers in 2
//    levels, a ResNet-50-sized DAG on 16 workers in 2 levels, and every PipeDream profile of
//    ../shared/data/pipedream-profiles on 4, 8, 16 flat workers and on 4x4 in two levels.
// 2. End to end, as a user runs it: the built `pipetrain plan` process (start included; the
//    front end links no LibTorch) on every PipeDream profile x {4, 8, 16, 4x4} x both cost
//    models, median of 5 runs each; `pipetrain --help`; and `pipetrain simulate` of VGG-16
//    (data/profiles) on 4x4 with the pipedream schedule (16 stages over 30 minibatches, and the
//    planner's plan).
// Prints one line per case and the totals. Builds without LibTorch (bench/CMakeLists.txt).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "plan/planner.h"
#include "profile/pipedream_graph.h"
#include "pt_paths.h"

using namespace pt;

namespace {

profile::Layer layer(const std::string& name, double ms, int64_t act, int64_t params, std::vector<int> inputs) {
  return profile::Layer{name, ms / 3, 2 * ms / 3, act, params, std::move(inputs)};
}

profile::Profile chain(int n, std::mt19937& rng) {
  std::uniform_real_distribution<double> ms(0.5, 5), act(1e6, 5e7), par(0, 2e7);
  profile::Profile p;
  p.model = "chain-300";
  for (int i = 0; i < n; ++i)
    p.layers.push_back(layer("layer" + std::to_string(i), ms(rng), static_cast<int64_t>(act(rng)),
                             static_cast<int64_t>(par(rng)), i ? std::vector<int>{i - 1} : std::vector<int>{}));
  return p;
}

// ResNet-50's shape: a stem, 16 bottleneck blocks (3, 4, 6, 3) of conv-bn-relu x3 plus a
// shortcut (a downsampling conv in each group's first block) joined by an add, then a head.
profile::Profile resnet50_like() {
  profile::Profile p;
  p.model = "resnet50-like-dag";
  auto add = [&](const std::string& name, double ms, int64_t act, int64_t params, std::vector<int> in) {
    p.layers.push_back(layer(name, ms, act, params, std::move(in)));
    return p.num_layers() - 1;
  };
  int x = add("Input", 0, 77070336, 0, {});
  x = add("conv1", 12, 411041792, 37632, {x});
  x = add("bn1", 3, 411041792, 256, {x});
  x = add("relu1", 2, 411041792, 0, {x});
  x = add("maxpool", 2, 102760448, 0, {x});
  int groups[] = {3, 4, 6, 3};
  for (int g = 0; g < 4; ++g)
    for (int b = 0; b < groups[g]; ++b) {
      double scale = 1.0 / (1 << g);
      int64_t act = static_cast<int64_t>(411041792 * scale), params = static_cast<int64_t>(280000 * (1 << 2 * g));
      int in = x, y = x;
      for (int c = 0; c < 3; ++c) {
        std::string base = "layer" + std::to_string(g + 1) + "." + std::to_string(b) + ".";
        y = add(base + "conv" + std::to_string(c + 1), 6 * (c == 1 ? 1.5 : 1.0), act / (c == 2 ? 1 : 4), params / 3, {y});
        y = add(base + "bn" + std::to_string(c + 1), 1, act / (c == 2 ? 1 : 4), 1024, {y});
        if (c < 2) y = add(base + "relu" + std::to_string(c + 1), 0.8, act / 4, 0, {y});
      }
      int shortcut = in;
      if (b == 0) shortcut = add("layer" + std::to_string(g + 1) + ".0.downsample", 5, act, params / 4, {in});
      int sum = add("layer" + std::to_string(g + 1) + "." + std::to_string(b) + ".add", 1, act, 0, {y, shortcut});
      x = add("layer" + std::to_string(g + 1) + "." + std::to_string(b) + ".relu", 0.8, act, 0, {sum});
    }
  x = add("avgpool", 0.5, 1048576, 0, {x});
  add("fc", 1, 512000, 8196000, {x});
  return p;
}

void run(const profile::Profile& prof, const std::string& cluster_name, const plan::Cluster& cluster) {
  for (auto model : {plan::CostModel::kRealised, plan::CostModel::kPipedream}) {
    plan::PlanOptions o;
    o.cost_model = model;
    auto t0 = std::chrono::steady_clock::now();
    plan::Plan p = plan::make_plan(prof, cluster, o);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::string shape = p.shape();
    if (shape.size() > 24) shape = shape.substr(0, 21) + "...";
    std::printf("%-26s %4d layers  %-8s %-9s %8.1f ms to plan  %3d stages  %-24s pipeline %9.2f  dp %9.2f ms/mb%s\n",
                prof.model.c_str(), prof.num_layers(), cluster_name.c_str(), p.cost_model.c_str(), ms,
                p.num_stages(), shape.c_str(), p.pipeline_ms_per_minibatch, p.data_parallel_ms_per_minibatch,
                p.notes.empty() ? "" : "  (coarsened)");
  }
}

// Wall milliseconds of one run of `argv` (output to /dev/null); exits the bench if it fails.
double run_ms(std::vector<std::string> argv) {
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t io;
  posix_spawn_file_actions_init(&io);
  posix_spawn_file_actions_addopen(&io, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&io, 2, "/dev/null", O_WRONLY, 0);
  auto t0 = std::chrono::steady_clock::now();
  pid_t pid;
  int status = 0;
  bool ok = posix_spawn(&pid, args[0], &io, nullptr, args.data(), environ) == 0 && waitpid(pid, &status, 0) == pid &&
            WIFEXITED(status) && WEXITSTATUS(status) == 0;
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  posix_spawn_file_actions_destroy(&io);
  if (!ok) {
    std::string cmd;
    for (const auto& a : argv) cmd += a + " ";
    std::fprintf(stderr, "plan_speed: failed: %s\n", cmd.c_str());
    std::exit(1);
  }
  return ms;
}

double median_ms(const std::vector<std::string>& argv, int runs = 5) {
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) t.push_back(run_ms(argv));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void end_to_end(const std::vector<std::string>& paths) {
  const std::string exe = std::string(PT_BINARY_DIR) + "/pipetrain";
  std::printf("\nend to end: %s, process start included, median of 5 runs\n", exe.c_str());
  std::printf("%-62s %6.1f ms\n", "pipetrain --help", median_ms({exe, "--help"}));
  // Beside it, what loading LibTorch costs a process (the planning commands paid it before).
  std::string torch_exe = std::string(PT_BINARY_DIR) + "/pipetrain-torch";
  if (std::filesystem::exists(torch_exe))
    std::printf("%-62s %6.1f ms\n", "pipetrain-torch --help (links LibTorch)", median_ms({torch_exe, "--help"}));
  struct Shape {
    const char* name;
    const char* workers;
    const char* gbps;
  };
  const Shape shapes[] = {{"4", "4", "10"}, {"8", "8", "10"}, {"16", "16", "10"}, {"4x4", "4,4", "100,10"}};
  std::vector<double> all;
  for (const auto& path : paths) {
    std::string name = std::filesystem::path(path).stem().string();
    std::printf("%-22s", name.c_str());
    for (const auto& sh : shapes)
      for (const char* model : {"pipetrain", "pipedream"}) {
        double ms = median_ms({exe, "plan", "--profile", path, "--workers", sh.workers, "--bandwidth-gbps", sh.gbps,
                               "--cost-model", model});
        all.push_back(ms);
        std::printf(" %s/%s %5.1f", sh.name, model[6] == 'a' ? "pt" : "pd", ms);
      }
    std::printf("  ms\n");
  }
  if (!all.empty()) {
    double total = 0, log_sum = 0;
    for (double ms : all) total += ms, log_sum += std::log(ms);
    std::printf("pipetrain plan, %zu cases (%zu profiles x 4 clusters x 2 cost models): total %.0f ms, geometric "
                "mean %.1f ms, slowest %.1f ms\n",
                all.size(), paths.size(), total, std::exp(log_sum / all.size()), *std::max_element(all.begin(), all.end()));
  }
  std::string vgg = std::string(PT_SOURCE_DIR) + "/data/profiles/vgg16.json";
  std::vector<std::string> sim = {exe, "simulate", "--profile", vgg, "--workers", "4,4", "--bandwidth-gbps", "96,10",
                                  "--schedule", "pipedream", "--minibatches", "30"};
  std::printf("%-62s %6.1f ms\n", "pipetrain simulate vgg16 4x4 pipedream, 16 stages, 30 minibatches", median_ms(sim));
  // The planner's plan, over its default minibatches (six rounds of its replica counts).
  std::string plan_file = (std::filesystem::temp_directory_path() / "plan_speed_vgg16_4x4.json").string();
  run_ms({exe, "plan", "--profile", vgg, "--workers", "4,4", "--bandwidth-gbps", "96,10", "-o", plan_file});
  sim.back() = "0";
  sim.insert(sim.end(), {"--plan", plan_file});
  std::printf("%-62s %6.1f ms\n", "pipetrain simulate vgg16 4x4 pipedream, planner's plan, default minibatches",
              median_ms(sim));
  std::filesystem::remove(plan_file);
}

}  // namespace

int main() {
  std::mt19937 rng(7);
  run(chain(300, rng), "8x8", plan::cluster_from_shorthand("8,8", "100,10"));
  run(resnet50_like(), "4x4", plan::cluster_from_shorthand("4,4", "100,10"));
  std::string dir = std::string(PT_SHARED_DIR) + "/data/pipedream-profiles";
  std::vector<std::string> paths;
  if (std::filesystem::exists(dir))
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().extension() == ".json") paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  for (const auto& path : paths) {
    auto prof = profile::read_any_profile(path);
    for (int w : {4, 8, 16}) run(prof, std::to_string(w), plan::Cluster::flat(w, 10));
    run(prof, "4x4", plan::cluster_from_shorthand("4,4", "100,10"));
  }
  end_to_end(paths);
  return 0;
}
