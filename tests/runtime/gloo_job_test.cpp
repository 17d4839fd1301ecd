// The gloo transport with real processes: the same weights as threads and as single-worker
// training; a killed worker ends the job with a clear message; bad environments are named.
//
// Worker processes are forks where the launcher has one thread (as train's are), else this test
// binary again, running the GlooWorkerChild test, which does nothing unless the parent set
// PT_GLOO_TEST_MODE (a fork of a process with threads could inherit a lock one of them held).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "model/compute_threads.h"
#include "pipeline_test_util.h"
#include "job/gloo_job.h"
#include "runtime/job_secret.h"
#include "runtime/launcher.h"
#include "schedule/generators.h"

namespace pt::runtime {
namespace {

using namespace testing;
namespace fs = std::filesystem;

model::DataSplit small_data() { return model::synthetic_data(*seeded_cnn(3), 256, 64, 10, 11); }

// "KIND+recompute": KIND with activation recomputation on every stage.
std::string base_kind(const std::string& kind) { return kind.substr(0, kind.find('+')); }

// Two servers of two workers, whose all-reduces go inside each server, then across.
plan::Cluster two_by_two_hierarchical() {
  plan::Cluster c = plan::cluster_from_shorthand("2,2", "96,10");
  c.allreduce = plan::Cluster::Allreduce::kHierarchical;
  return c;
}

PipelineOptions options_for(const std::string& kind, int microbatches, int64_t steps) {
  PipelineOptions o;
  o.schedule = base_kind(kind) == "dp4" ? "dp" : base_kind(kind);
  if (kind.find("+hierarchical") != std::string::npos) o.cluster = two_by_two_hierarchical();
  o.microbatches = microbatches;
  if (base_kind(kind) == "interleaved-zb") o.chunks = 2;
  o.train.steps = steps;
  o.train.batch_size = 32;
  o.train.sgd = {0.05, 0.9, 1e-4};
  o.train.seed = 3;
  o.train.quiet = true;
  o.train.evaluate = false;
  o.timeout_s = 20;
  o.bucket_bytes = 4 << 10;  // dp: many buckets, all-reduced by gloo during the backward
  return o;
}

// "1f1b" / "gpipe": 2 stages; "dp": 2 replicas; "dp4": 4.
plan::Plan plan_for(const std::string& kind) {
  auto m = seeded_cnn(3);
  std::string base = base_kind(kind);
  plan::Plan p = base == "dp"    ? replicated_plan(*m, 2)
                 : base == "dp4" ? replicated_plan(*m, 4)
                 : schedule::is_v_schedule(base) || base == "interleaved-zb"
                     ? plan::even_split(unit_profile(*m), 4)  // 2 workers, two chunks each
                                  : plan::even_split(unit_profile(*m), 2);
  for (auto& st : p.stages) st.recompute = kind.find("+recompute") != std::string::npos;
  return p;
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

// A worker of a gloo job (its rank in the environment): trains `kind` for 3 steps and saves
// replica 0 of each stage it holds to OUT.stage<s>; returns the exit code.
int train_and_save_weights(const std::string& kind, const std::string& out) {
  auto o = options_for(kind, 4, 3);
  std::unique_ptr<Worker> worker;
  try {
    plan::Plan plan = plan_for(kind);
    run_gloo_worker([](const model::LayerSet& held = {}) { return seeded_cnn(3, held); }, small_data(), plan, o, gloo_config_from_env(), &worker);
    auto s = generate_schedule(plan, o, 1);
    for (int st = 0; st < s.num_stages; ++st) {
      StageReplica* rep = worker->replica(st);
      if (!rep || s.stage_workers[st][0] != gloo_config_from_env().rank) continue;
      std::vector<torch::Tensor> params;
      for (const auto& p : rep->parameters()) params.push_back(p.detach().clone());
      torch::save(params, out + ".stage" + std::to_string(st));
    }
  } catch (const std::exception& e) {
    std::cerr << "pipetrain " << e.what() << std::endl;
    return 1;
  }
  return 0;
}

// The child side. Mode "weights": train PT_GLOO_TEST_KIND for 3 steps and save replica 0 of
// each stage this worker holds to PT_GLOO_TEST_OUT.stage<s>. Mode "long": a long run through
// train_with_gloo (the CLI's path); a worker whose rank is PT_GLOO_TEST_DIE kills itself (-9)
// after a second.
TEST(GlooWorkerChild, Run) {
  std::string mode = env_or("PT_GLOO_TEST_MODE", "");
  if (mode.empty()) GTEST_SKIP() << "runs only as a worker process started by the gloo tests";
  model::use_one_compute_thread();
  std::string kind = env_or("PT_GLOO_TEST_KIND", "1f1b");
  auto data = small_data();
  plan::Plan plan = plan_for(kind);
  int code = 0;
  if (mode == "allreduce") {
    // 11 numbers (shards of 6 and 5) from each of 4 workers on 2x2, all-reduced hierarchically.
    GlooConfig config = gloo_config_from_env();
    config.cluster = two_by_two_hierarchical();
    GlooTransport t(config);
    t.prepare_groups({{0, 1, 2, 3}});
    torch::Tensor x = torch::arange(11, torch::kFloat) + 100.0 * config.rank;
    t.allreduce_start(x, {0, 1, 2, 3})->wait();
    torch::Tensor want = torch::arange(11, torch::kFloat) * 4 + 100.0 * (0 + 1 + 2 + 3);
    if (!torch::equal(x, want)) {
      std::cerr << "worker " << config.rank << " summed " << x << " not " << want << std::endl;
      code = 1;
    }
    t.barrier();
  } else if (mode == "undescribed") {
    // Worker 1 joins and never describes its job (a worker stopped just after joining): worker 0
    // names it within the rendezvous timeout (it waited on the store's get, saying nothing).
    GlooConfig config = gloo_config_from_env();
    config.timeout_s = config.rendezvous_timeout_s = 3;
    GlooTransport t(config);
    auto start = std::chrono::steady_clock::now();
    if (config.rank == 1) std::this_thread::sleep_for(std::chrono::seconds(5));
    try {
      if (config.rank == 0) t.check_agreement(json{{"job", 1}}), code = 1;
    } catch (const TransportError& e) {
      double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      bool named = std::string(e.what()).find("worker 1 of 2 did not describe its job (after it joined)") !=
                   std::string::npos;
      if (!named || waited > 4.5) std::cerr << "after " << waited << " s: " << e.what() << std::endl;
      code = named && waited <= 4.5 ? 0 : 1;
    }
  } else if (mode == "shm") {
    // Sums of several sizes and both dtypes over 3 workers on this host through shared memory (or,
    // where any worker's PIPETRAIN_SHARED_MEMORY is 0, through gloo on every worker alike).
    model::install_memory_meter();  // before anything arrives: worker 1 checks what it is charged
    GlooConfig config = gloo_config_from_env();
    int off = std::atoi(env_or("PT_GLOO_TEST_SHM_OFF", "-1").c_str());  // this worker's PIPETRAIN_SHARED_MEMORY=0
    if (off == config.rank) config.shared_memory = false;
    GlooTransport t(config);
    std::vector<int> all{0, 1, 2};
    t.prepare_groups({all});
    bool want_shared = off < 0;
    if (t.shares_memory(all) != want_shared) {
      std::cerr << "worker " << config.rank << ": shares memory " << t.shares_memory(all) << ", wanted " << want_shared
                << std::endl;
      code = 1;
    }
    // 5M floats: several rounds of the region's chunks; 1 and 11: shards shorter than a member count.
    for (int64_t n : {int64_t{1}, int64_t{11}, int64_t{5} << 20, int64_t{1000}})
      for (auto dtype : {torch::kFloat, torch::kDouble}) {
        torch::Tensor x = (torch::arange(n, dtype).remainder(1000) + 1000.0 * config.rank);
        t.allreduce_start(x, all)->wait();
        torch::Tensor want = torch::arange(n, dtype).remainder(1000) * 3 + 1000.0 * (0 + 1 + 2);
        if (!torch::equal(x, want)) {
          std::cerr << "worker " << config.rank << " summed " << n << " numbers wrong" << std::endl;
          code = 1;
        }
      }
    // Transfers: 0 -> 1 through the pair's channel (the largest streams through its ring several
    // times), taken in the reverse order of sending; 1 -> 2 through one or, with worker 2's off, gloo.
    t.prepare_channels({{1, 2}, {0, 1}});
    auto expect = [&](bool ok, const std::string& what) {
      if (!ok) std::cerr << "worker " << config.rank << ": " << what << std::endl;
      code = ok ? code : 1;
    };
    torch::Tensor small = torch::arange(5, torch::kLong), large = torch::arange(3 * (int64_t{2} << 20), torch::kFloat).reshape({3, -1}) / 7,
                  flags = torch::tensor({true, false, true});
    if (config.rank == 0) {
      expect(t.has_channel(1), "no channel to worker 1");
      std::vector<std::shared_ptr<PendingTransfer>> sent{t.isend(small, 1, 7), t.isend(large, 1, 8),
                                                         t.isend_known(flags, 1, 9)};
      for (auto& s : sent) s->wait();
      // A tensor sent is freed by the worker's thread that drops the transfer, not the channel's
      // (shm_channel.cpp's send says why).
      static std::thread::id freed_by;
      auto* numbers = new float[1000]();
      auto sent_away = t.isend(torch::from_blob(numbers, {1000}, [](void* p) {
                                 freed_by = std::this_thread::get_id();
                                 delete[] static_cast<float*>(p);
                               }),
                               1, 10);
      sent_away->wait();
      sent_away.reset();
      expect(freed_by == std::this_thread::get_id(), "the tensor sent was freed by another thread");
    } else if (config.rank == 1) {
      expect(t.has_channel(0) && t.has_channel(2) == want_shared, "channels to workers 0 and 2");
      // What arrives is charged to the receive that takes it: the large tensor's, posted with no
      // account (an evaluation's), is not the account's of the receives posted around it.
      auto account = std::make_shared<model::MemoryAccount>();
      std::shared_ptr<PendingTransfer> f, l, s;
      {
        model::ChargeTo charge(account);
        f = t.irecv_known(0, 9, {{3}, torch::kBool});
        {
          model::ChargeTo uncharged(nullptr);
          l = t.irecv(0, 8);
        }
        s = t.irecv(0, 7);
      }
      torch::Tensor got_f = f->wait(), got_l = l->wait(), got_s = s->wait();
      expect(torch::equal(got_f, flags), "tag 9");
      expect(torch::equal(got_l, large), "tag 8 (" + std::to_string(large.nbytes()) + " bytes)");
      expect(torch::equal(got_s, small), "tag 7");
      expect(t.irecv(0, 10)->wait().sum().item<float>() == 0, "tag 10");
      expect(account->live() == static_cast<int64_t>(flags.nbytes() + small.nbytes()),
             str("the receives' account holds ", account->live(), " bytes, not tags 9 and 7's ",
                 flags.nbytes() + small.nbytes()));
      t.isend(large * 2, 2, 3)->wait();
    } else {
      expect(t.has_channel(1) == want_shared, "the channel to worker 1");
      expect(torch::equal(t.irecv(1, 3)->wait(), large * 2), "tag 3 from worker 1");
    }
    t.barrier();
    // Each region's name is removed once every member has it mapped: none that this worker made
    // (its pid names them) is left. Names of other tests' jobs, running beside, are theirs: the
    // test that looked for none at all failed on them.
    const std::string own = str("pipetrain-", ::getpid(), "-");
    for (const auto& e : fs::directory_iterator("/dev/shm"))
      expect(e.path().filename().string().rfind(own, 0) == std::string::npos, "left " + e.path().string());
  } else if (mode == "weights") {
    code = train_and_save_weights(kind, env_or("PT_GLOO_TEST_OUT", ""));
  } else {
    auto o = options_for(kind, 2, 100000);
    o.train.metrics_path = env_or("PT_GLOO_TEST_METRICS", "");  // the test watches it for progress
    // A stopped peer is noticed only at the timeout: a shorter one keeps that test short.
    o.timeout_s = std::atof(env_or("PT_GLOO_TEST_TIMEOUT", std::to_string(o.timeout_s)).c_str());
    int die = std::atoi(env_or("PT_GLOO_TEST_DIE", "-1").c_str());
    if (die == gloo_config_from_env().rank)
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::seconds(2));
        ::raise(SIGKILL);
      }).detach();
    auto build = [](const model::LayerSet& held = {}) { return seeded_cnn(3, held); };
    auto described = build(model::LayerSet::none());
    int64_t before = schedule::schedules_made();
    Job job = make_job(plan, o, *described, data, gloo_config_from_env().rank == 0);
    int64_t made = schedule::schedules_made() - before;
    code = train_with_gloo(job, build, *described, data, "", nullptr);
    // The job made its schedules, once per segment length; the worker ran those (job.h).
    if (code == 0 && schedule::schedules_made() - before != made) {
      std::cerr << "the gloo worker generated " << schedule::schedules_made() - before - made
                << " schedules besides the job's " << made << std::endl;
      code = 1;
    }
  }
  std::cout.flush();
  std::cerr.flush();
  std::_Exit(code);  // skip gtest's summary and static destructors: the exit code is the result
}

std::vector<std::string> child_argv() { return {"/proc/self/exe", "--gtest_filter=GlooWorkerChild.Run"}; }

std::vector<torch::Tensor> load_weights(const std::string& prefix, int stages) {
  std::vector<torch::Tensor> out;
  for (int st = 0; st < stages; ++st) {
    std::vector<torch::Tensor> params;
    torch::load(params, prefix + ".stage" + std::to_string(st));
    out.insert(out.end(), params.begin(), params.end());
  }
  return out;
}

std::vector<torch::Tensor> single_worker_weights() {
  auto m = seeded_cnn(3);
  auto o = options_for("1f1b", 4, 3);
  train_single_worker(*m, small_data(), o.train);
  std::vector<torch::Tensor> out;
  for (auto& p : m->parameters()) out.push_back(p.detach().clone());
  return out;
}

TEST(GlooJob, ProcessesMatchThreadsAndSingleWorker) {
  auto reference = single_worker_weights();
  auto data = small_data();
  fs::path dir = fs::temp_directory_path() / ("pt_gloo_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const std::string kind : {"1f1b", "gpipe", "dp", "1f1b+recompute", "dp4+hierarchical", "zb-v", "v-half",
                                   "v-min", "dualpipev", "interleaved-zb"}) {
    SCOPED_TRACE(kind);
    plan::Plan plan = plan_for(kind);
    auto o = options_for(kind, 4, 3);
    std::vector<std::unique_ptr<Worker>> workers;
    train_pipeline([](const model::LayerSet& held = {}) { return seeded_cnn(3, held); }, data, plan, o, &workers);
    auto s = generate_schedule(plan, o, 1);
    auto threads = pipeline_weights(s, workers);

    std::string out = (dir / kind).string();
    ::setenv("PT_GLOO_TEST_MODE", "weights", 1);
    ::setenv("PT_GLOO_TEST_KIND", kind.c_str(), 1);
    ::setenv("PT_GLOO_TEST_OUT", out.c_str(), 1);
    auto t0 = std::chrono::steady_clock::now();
    // As `train --transport gloo` starts its workers: forks of this process while it has one
    // thread (the pipeline's above have ended), this binary again otherwise. A fork skips
    // loading LibTorch again, 0.8 s of CPU a worker (the exec'd path is LauncherStops... below).
    Launch l = fork_gloo_workers(s.num_workers(), child_argv());
    if (l.worker) {
      int code = train_and_save_weights(kind, out);
      std::cerr.flush();
      std::_Exit(code);  // the forked worker leaves without gtest's summary or destructors
    }
    std::cerr << kind << ": gloo job of " << s.num_workers() << " processes took "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s\n";
    ::unsetenv("PT_GLOO_TEST_MODE");
    ASSERT_EQ(l.status, 0);
    auto gloo = load_weights(out, s.num_stages);
    ASSERT_EQ(gloo.size(), reference.size());
    EXPECT_LE(max_relative_error(gloo, reference), 1e-5);
    EXPECT_LE(max_relative_error(gloo, threads), 1e-5);
  }
  fs::remove_all(dir);
}

TEST(GlooJob, WorkersOnOneHostAllReduceAndTransferThroughSharedMemory) {
  ::setenv("PT_GLOO_TEST_MODE", "shm", 1);
  EXPECT_EQ(launch_gloo_workers(3, child_argv()), 0);
  // One worker without it: every worker sums through gloo.
  ::setenv("PT_GLOO_TEST_SHM_OFF", "2", 1);
  EXPECT_EQ(launch_gloo_workers(3, child_argv()), 0);
  ::unsetenv("PT_GLOO_TEST_SHM_OFF");
  ::unsetenv("PT_GLOO_TEST_MODE");
}

TEST(GlooJob, AWorkerThatJoinedAndDescribesNoJobIsNamed) {
  ::setenv("PT_GLOO_TEST_MODE", "undescribed", 1);
  int rc = launch_gloo_workers(2, child_argv());
  ::unsetenv("PT_GLOO_TEST_MODE");
  EXPECT_EQ(rc, 0);
}

TEST(GlooJob, HierarchicalAllreduceSumsShardsAcrossServers) {
  ASSERT_EQ(two_by_two_hierarchical().allreduce_units({0, 1, 2, 3}).size(), 2u);  // the split is taken
  ::setenv("PT_GLOO_TEST_MODE", "allreduce", 1);
  int rc = launch_gloo_workers(4, child_argv());
  ::unsetenv("PT_GLOO_TEST_MODE");
  EXPECT_EQ(rc, 0);
}

// Spawns world_size workers directly (not through the launcher), stderr to files.
std::vector<pid_t> spawn_workers(int world_size, const fs::path& dir) {
  int port = free_tcp_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < world_size; ++r) {
    std::string err = (dir / ("worker" + std::to_string(r) + ".err")).string();
    auto argv = child_argv();
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world_size).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("PIPETRAIN_JOB_SECRET", "spawned-by-the-gloo-test", 1);
      std::freopen(err.c_str(), "w", stderr);
      ::execl("/proc/self/exe", argv[0].c_str(), argv[1].c_str(), nullptr);
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  return pids;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Worker 1 is killed (`stop` false) or stopped with SIGSTOP, so that it no longer answers but
// keeps its connections open (`stop` true): worker 0 must end non-zero within 30 s, naming it.
// `kind` "dp": worker 0 is lost waiting in a shared-memory all-reduce, not on a gloo transfer.
void expect_worker0_ends(bool stop, const std::string& kind = "1f1b") {
  fs::path dir = fs::temp_directory_path() / ("pt_gloo_lost_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  ::setenv("PT_GLOO_TEST_MODE", "long", 1);
  ::setenv("PT_GLOO_TEST_KIND", kind.c_str(), 1);
  fs::path metrics = dir / "metrics.csv";  // written by the reporter: worker 1 (1f1b) or 0 (dp)
  // While a run goes on its rows are in metrics.csv.partial (moved into place at the end).
  fs::path rows = dir / "metrics.csv.partial";
  ::setenv("PT_GLOO_TEST_METRICS", metrics.c_str(), 1);
  // A stopped worker is found at the timeout, not before: 8 s, far above a step of this job
  // even beside other tests on 2 cores (a few ms) and the stalls of a second seen on CI; each
  // second of it is the test's wait.
  ::setenv("PT_GLOO_TEST_TIMEOUT", "8", 1);
  auto pids = spawn_workers(2, dir);
  ::unsetenv("PT_GLOO_TEST_MODE");
  ::unsetenv("PT_GLOO_TEST_METRICS");
  ::unsetenv("PT_GLOO_TEST_TIMEOUT");
  // Lose worker 1 once training is under way (a few steps reported), not during start-up.
  auto started = std::chrono::steady_clock::now();
  auto lines = [&] {
    std::string text = read_file(rows);
    return std::count(text.begin(), text.end(), '\n');
  };
  while (lines() < 5 &&
         std::chrono::steady_clock::now() - started < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_GE(lines(), 5) << "no steps reported in 60 s (" << rows << ")";
  ASSERT_EQ(::waitpid(pids[1], nullptr, WNOHANG), 0) << "worker 1 ended before it was lost";
  ::kill(pids[1], stop ? SIGSTOP : SIGKILL);
  auto lost = std::chrono::steady_clock::now();
  int status = 0;
  bool ended = true;
  while (::waitpid(pids[0], &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - lost > std::chrono::seconds(30)) {
      ::kill(pids[0], SIGKILL);
      ::waitpid(pids[0], &status, 0);
      ended = false;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pids[1], SIGKILL);
  ::kill(pids[1], SIGCONT);
  ::waitpid(pids[1], nullptr, 0);
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - lost).count();
  std::cerr << "worker 0 ended " << waited << " s after worker 1 was " << (stop ? "stopped" : "killed") << "\n";
  EXPECT_TRUE(ended) << "worker 0 still running 30 s after worker 1 was lost";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0);
  std::string err = read_file(dir / "worker0.err");
  if (auto at = err.find("pipetrain worker 0"); at != std::string::npos) std::cerr << "worker 0 said: " << err.substr(at) << "\n";
  EXPECT_NE(err.find("pipetrain worker 0 at "), std::string::npos) << err;
  EXPECT_NE(err.find("worker 1"), std::string::npos) << err;  // names the lost peer
  fs::remove_all(dir);
}

TEST(GlooJob, KilledWorkerEndsTheOthersWithAMessage) { expect_worker0_ends(false); }
TEST(GlooJob, StoppedWorkerEndsTheOthersWithinTheTimeout) { expect_worker0_ends(true); }
TEST(GlooJob, KilledReplicaEndsTheSharedMemoryAllReduce) { expect_worker0_ends(false, "dp"); }
TEST(GlooJob, StoppedReplicaEndsTheSharedMemoryAllReduceAtTheTimeout) { expect_worker0_ends(true, "dp"); }

TEST(GlooJob, LauncherStopsTheJobWhenAWorkerDies) {
  ::setenv("PT_GLOO_TEST_MODE", "long", 1);
  ::setenv("PT_GLOO_TEST_KIND", "1f1b", 1);
  ::setenv("PT_GLOO_TEST_DIE", "0", 1);  // rank 0 also serves the rendezvous store
  auto t0 = std::chrono::steady_clock::now();
  ::testing::internal::CaptureStderr();
  int rc = launch_gloo_workers(2, child_argv());
  std::string err = ::testing::internal::GetCapturedStderr();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::unsetenv("PT_GLOO_TEST_MODE");
  ::unsetenv("PT_GLOO_TEST_DIE");
  EXPECT_NE(rc, 0);
  EXPECT_LT(secs, 32);
  EXPECT_NE(err.find("pipetrain: worker 0 was killed by signal 9"), std::string::npos) << err;
}

// fork_gloo_workers from a process of one thread: each worker is a fork that returns to the
// caller with its rank's environment (the test's fork writes it down and leaves); the launcher
// waits for them and stops the job at the first failure as it does for exec'd workers.
std::string forked_env_file(const fs::path& dir) { return (dir / env_or("RANK", "none")).string(); }

TEST(ForkedWorkers, ReturnToTheCallerWithTheirEnvironment) {
  fs::path dir = fs::temp_directory_path() / ("pt_forked_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  Launch l = fork_gloo_workers(3, child_argv());
  if (l.worker) {
    std::ofstream(forked_env_file(dir)) << env_or("WORLD_SIZE", "") << " " << env_or("MASTER_ADDR", "") << " "
                                        << !env_or("MASTER_PORT", "").empty() << " "
                                        << !env_or(kJobSecretVar, "").empty();
    ::_exit(0);
  }
  EXPECT_EQ(l.status, 0);
  for (const char* rank : {"0", "1", "2"}) {
    std::ifstream in(dir / rank);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, "3 127.0.0.1 1 1") << "rank " << rank;
  }
  fs::remove_all(dir);
}

// A stopped worker fails nothing itself: its peers time out waiting on it, and the launcher
// named the first of them to exit alone (a helper's audit: pipedream on 3 gloo workers, worker 0
// stopped, and the closing lines named workers 2 and 1).
TEST(ForkedWorkers, AStoppedOneIsNamedWhenThePeersGiveUp) {
  ::testing::internal::CaptureStderr();
  Launch l = fork_gloo_workers(2, child_argv(), "", 1);
  if (l.worker) {
    if (env_or("RANK", "") == "0") ::raise(SIGSTOP);
    ::usleep(500 * 1000);  // a peer's timeout
    ::_exit(3);
  }
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(l.status, 1);
  EXPECT_NE(err.find("pipetrain: worker 1 exited with status 3; stopping the other workers"), std::string::npos) << err;
  EXPECT_NE(err.find("pipetrain: worker 0 (pid "), std::string::npos) << err;
  EXPECT_NE(err.find(") is stopped (SIGSTOP, Ctrl-Z or a debugger)"), std::string::npos) << err;
  // Said as it stopped, before the peer's timeout (before the job starts that wait was 300 s, silent).
  size_t told = err.find(") is stopped (SIGSTOP, Ctrl-Z or a debugger): the others wait for it until their timeouts");
  EXPECT_LT(told, err.find("pipetrain: worker 1 exited with status 3")) << err;
}

TEST(ForkedWorkers, AFailedOneStopsTheOthers) {
  auto t0 = std::chrono::steady_clock::now();
  ::testing::internal::CaptureStderr();
  Launch l = fork_gloo_workers(2, child_argv(), "", 1);
  if (l.worker) {
    if (env_or("RANK", "") == "1") ::_exit(3);
    ::sleep(60);  // stopped by the launcher long before
    ::_exit(0);
  }
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(l.status, 1);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20);
  EXPECT_NE(err.find("pipetrain: worker 1 exited with status 3; stopping the other workers"), std::string::npos) << err;
}

// With a second thread running the launcher cannot fork safely: its workers run the command
// line again (here GlooWorkerChild, which does nothing without PT_GLOO_TEST_MODE).
TEST(ForkedWorkers, ALauncherOfSeveralThreadsStartsItsCommandAgain) {
  std::promise<void> stop;
  std::thread other([f = stop.get_future()]() mutable { f.wait(); });
  Launch l = fork_gloo_workers(2, child_argv());
  if (l.worker) ::_exit(9);  // a fork: the test fails on the status
  stop.set_value();
  other.join();
  EXPECT_EQ(l.status, 0);
}

TEST(GlooConfig, BadEnvironmentNamesTheVariable) {
  struct Case {
    const char *rank, *size, *expect;
  };
  for (const Case& c : {Case{"abc", "2", "RANK='abc'"}, Case{"0", "0", "WORLD_SIZE='0'"},
                        Case{"2", "2", "RANK=2 must be below WORLD_SIZE=2"}, Case{"1", nullptr, "WORLD_SIZE is not"}}) {
    ::setenv("RANK", c.rank, 1);
    if (c.size) ::setenv("WORLD_SIZE", c.size, 1); else ::unsetenv("WORLD_SIZE");
    try {
      gloo_config_from_env();
      ADD_FAILURE() << "no error for RANK=" << c.rank;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << e.what();
    }
  }
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  ::setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  try {
    gloo_config_from_env();
    ADD_FAILURE() << "no error for OMPI_COMM_WORLD_RANK=3";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("OMPI_COMM_WORLD_RANK=3"), std::string::npos) << e.what();
  }
  // mpirun's and torchrun's ranks both set, disagreeing: RANK was taken (every process rank 0).
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  try {
    gloo_config_from_env();
    ADD_FAILURE() << "no error for RANK=0 beside OMPI_COMM_WORLD_RANK=1";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("RANK=0 and OMPI_COMM_WORLD_RANK=1 disagree"), std::string::npos) << e.what();
  }
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  ::unsetenv("OMPI_COMM_WORLD_RANK");
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  // The job secret: required, and long enough.
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  for (const char* secret : {static_cast<const char*>(nullptr), "short"}) {
    if (secret) ::setenv("PIPETRAIN_JOB_SECRET", secret, 1); else ::unsetenv("PIPETRAIN_JOB_SECRET");
    try {
      gloo_config_from_env();
      ADD_FAILURE() << "no error for the secret " << (secret ? secret : "(unset)");
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("PIPETRAIN_JOB_SECRET"), std::string::npos) << e.what();
    }
  }
  ::setenv("PIPETRAIN_JOB_SECRET", "a-secret-of-this-job", 1);
  EXPECT_EQ(gloo_config_from_env().secret, "a-secret-of-this-job");
  for (const char* v : {"RANK", "WORLD_SIZE", "PIPETRAIN_JOB_SECRET"}) ::unsetenv(v);
  EXPECT_EQ(gloo_tag(0, false), 0);
  EXPECT_EQ(gloo_tag(-1, true), 3);
  EXPECT_THROW(gloo_tag(int64_t{1} << 40, false), TransportError);
}

TEST(GlooJob, MpirunSmoke) {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun is not installed (openmpi-bin)";
  fs::path dir = fs::temp_directory_path() / ("pt_gloo_mpi_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string out = (dir / "w").string();
  std::string self = fs::read_symlink("/proc/self/exe").string();
  std::string cmd = "PT_GLOO_TEST_MODE=weights PT_GLOO_TEST_KIND=1f1b PT_GLOO_TEST_OUT=" + out + " MASTER_PORT=" +
                    std::to_string(free_tcp_port()) + " PIPETRAIN_JOB_SECRET=" + new_job_secret() +
                    " timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 " +
                    "-x PT_GLOO_TEST_MODE -x PT_GLOO_TEST_KIND -x PT_GLOO_TEST_OUT -x MASTER_PORT -x PIPETRAIN_JOB_SECRET " + self +
                    " --gtest_filter=GlooWorkerChild.Run > " + (dir / "log").string() + " 2>&1";
  int rc = std::system(cmd.c_str());
  ASSERT_EQ(rc, 0) << read_file(dir / "log");
  EXPECT_LE(max_relative_error(load_weights(out, 2), single_worker_weights()), 1e-5);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pt::runtime
