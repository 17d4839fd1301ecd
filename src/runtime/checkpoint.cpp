#include "runtime/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "core/error.h"
#include "core/input_limits.h"
#include "core/json_doc.h"
#include "runtime/checkpoint_lock.h"
#include "runtime/layer_file.h"
#include "runtime/trainer.h"

namespace pt::runtime {

namespace fs = std::filesystem;

namespace {

std::string temp_dir_name(int64_t step) { return ".tmp-" + checkpoint_dir_name(step); }

// A file pipetrain writes into a temporary checkpoint folder: a layer file, the manifest, or a
// half-written one of either (write_text_file_atomic's NAME.tmp.PID).
bool written_by_checkpoints(const std::string& name) {
  std::string base = name.substr(0, name.find(".tmp."));
  auto ends_with = [&base](const std::string& tail) {
    return base.size() > tail.size() && base.compare(base.size() - tail.size(), tail.size(), tail) == 0;
  };
  return base == "manifest.json" || (base.rfind("layer-", 0) == 0 && ends_with(".tensors"));
}

// Removes what an interrupted run left in a temporary checkpoint folder: pipetrain's own files,
// then the folder once empty. Anything else (a user's file) stays, and so does the folder; its
// first such entry is returned ("" when the folder is gone).
std::string remove_temp_checkpoint(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dir, ec))) return "";
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return dir.string();
  std::string foreign;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (fs::is_regular_file(e.symlink_status()) && written_by_checkpoints(e.path().filename().string()))
      fs::remove(e.path());
    else if (foreign.empty())
      foreign = e.path().string();
  }
  if (foreign.empty()) fs::remove(dir);
  return foreign;
}

}  // namespace

void remove_interrupted_saves(const std::string& dir) {
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return;
  try {
    CheckpointLock lock(dir);  // none other runs here now
    for (const auto& e : fs::directory_iterator(dir, ec))
      // One holding its manifest is a complete checkpoint a failed rename left there, which the
      // run told the user to move: kept.
      if (e.path().filename().string().rfind(".tmp-step-", 0) == 0 && e.is_directory(ec) &&
          !fs::exists(e.path() / "manifest.json", ec))
        remove_temp_checkpoint(e.path());
  } catch (const std::exception&) {
    // Another run holds it, or the folder cannot be read: the next save removes them.
  }
}

namespace {

// Removes a checkpoint so that a kill at any instant leaves it whole or gone: renamed out of the
// step-<N> names first (a step folder exists only complete), then deleted. A kill during the
// deletion leaves a `.del-` folder, which the next save removes. (Deleted in place, a kill left a
// step folder of some layer files and no manifest, which --resume never removed and a later save
// of that step refused as "not a checkpoint".)
void discard_checkpoint(const fs::path& dir) {
  fs::path doomed = dir.parent_path() / (".del-" + dir.filename().string());
  std::error_code ec;
  fs::remove_all(doomed, ec);
  fs::rename(dir, doomed);
  fs::remove_all(doomed);
}

// A complete checkpoint: a folder with a manifest that parses (its files are verified when read).
bool is_checkpoint(const fs::path& dir) {
  try {
    manifest_from_json(read_regular_file((dir / "manifest.json").string(), input_limit(InputKind::manifest)),
                       (dir / "manifest.json").string());
    return true;
  } catch (const Error&) {
    return false;
  }
}

// What an older pipetrain left when killed while deleting a checkpoint in place: a step folder of
// pipetrain's own files only (at least one), without a manifest that reads. An empty folder, or
// one holding anything else, may be a user's and is left alone.
bool half_deleted_checkpoint(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec)) || is_checkpoint(dir)) return false;
  bool any = false;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!fs::is_regular_file(e.symlink_status()) || !written_by_checkpoints(e.path().filename().string())) return false;
    any = true;
  }
  return any;
}

// A rename is durable only once its directory is synced.
void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

namespace {

// The reporter's RunLoss on every worker (a sum in which only it adds): [known, first, steps,
// count, losses...].
RunLoss shared_loss(Transport& transport, const RunLoss& mine) {
  std::vector<int> all(transport.world_size());
  std::iota(all.begin(), all.end(), 0);
  std::vector<double> v(5 + kFinalLossSteps, 0.0);
  if (mine.known) {
    size_t n = std::min<size_t>(mine.recent.size(), kFinalLossSteps);
    v[0] = 1, v[1] = mine.first, v[2] = static_cast<double>(mine.steps), v[3] = static_cast<double>(n);
    v[4] = mine.first_of_run ? 1 : 0;
    std::copy(mine.recent.end() - static_cast<std::ptrdiff_t>(n), mine.recent.end(), v.begin() + 5);
  }
  std::vector<torch::Tensor> t{torch::tensor(v, torch::kDouble)};
  transport.allreduce_sum(t, all);
  auto a = t[0].accessor<double, 1>();
  if (a[0] != 1) return {};
  RunLoss run{true, a[1], {}, static_cast<int64_t>(a[2]), a[4] == 1};
  for (int64_t i = 0; i < static_cast<int64_t>(a[3]); ++i) run.recent.push_back(a[5 + i]);
  return run;
}

}  // namespace

void Checkpointer::save(Worker& worker, Transport& transport, int64_t step, const RunLoss& loss) {
  fs::path root(options_.dir);
  fs::path tmp = root / temp_dir_name(step);
  bool leader = transport.rank() == 0;
  RunLoss run = shared_loss(transport, loss);  // and every worker has drained and stepped up to `step`
  // What a diverged run leaves the folder (it said "keeps the ones before" of a folder of none).
  auto kept = [&] {
    std::string newest = newest_checkpoint(options_.dir);
    return newest.empty() ? str(options_.dir, " holds none") : str(options_.dir, " keeps ", newest, " and those before");
  };
  if (run.known) {
    if (std::string why = divergence(run.first, run.recent, run.steps, base_.shuffle); !why.empty()) {
      if (diverged_for_good(run.first, run.recent, base_.shuffle))
        throw RuntimeFailure(str("training diverged by step ", step, ": ", why, "; no checkpoint written for this step, ",
                                 kept(), ". Lower --lr, or warm it up over more --warmup-steps"));
      // Perhaps a spike the run comes back from: these weights are not kept, and the run goes on
      // (its end, or a later checkpoint over a whole window, judges it).
      if (leader)
        print_line_to_stderr(str("note: no checkpoint written at step ", step, ": ", why,
                                 "; the run goes on, and fails at its end if the loss does not come back"));
      return;
    }
  }
  if (leader) {
    fs::create_directories(root);
    std::string foreign = remove_temp_checkpoint(tmp);  // left by an interrupted run
    if (!foreign.empty())
      throw RuntimeFailure(str("checkpoint at step ", step, ": '", foreign, "' is in the way and pipetrain did not ",
                               "write it; move it out of ", root.string()));
    fs::create_directories(tmp);
  }
  // A write that fails (a full disk, a worker lost) leaves no half checkpoint taking the room the
  // user must free: it stayed until the next run's save. Worker 0 removes it on the way out.
  struct Partial {
    fs::path dir;
    bool leader, done = false;
    ~Partial() {
      try {
        if (leader && !done) remove_temp_checkpoint(dir);
      } catch (...) {  // leaving it is what the next save cleans up, as before
      }
    }
  } partial{tmp, leader};
  transport.barrier();
  // Worker 0 made the folder; one this worker cannot see is on a file system they do not share
  // (each host's own disk): that said, not only "cannot write file".
  std::error_code seen;
  if (!leader && !fs::is_directory(tmp, seen))
    throw RuntimeFailure(str("checkpoint at step ", step, ": worker 0 made ", tmp.string(), " but worker ",
                             transport.rank(), " does not see it: --checkpoint-dir must be a folder every worker "
                             "shares (one file system, as NFS gives machines)"));
  // Replica 0 of each stage writes that stage's layers: replicas hold equal weights. The others
  // write their buffers, which each keeps (CheckpointManifest::replica_buffers).
  for (size_t st = 0; st < stage_workers_.size(); ++st) {
    const auto& holders = stage_workers_[st];
    size_t r = std::find(holders.begin(), holders.end(), transport.rank()) - holders.begin();
    if (r == holders.size()) continue;
    StageReplica* rep = worker.replica(static_cast<int>(st));
    PT_CHECK(rep, "worker ", transport.rank(), " holds no replica of stage ", st);
    for (int layer : stage_layers_[st]) {
      LayerState state = rep->layer_state(layer);
      if (r > 0) {
        if (state.buffers.empty()) continue;
        LayerState own;
        own.buffers = std::move(state.buffers);
        state = std::move(own);
      }
      // A diverged run writes no checkpoint: with `keep` it would rotate out the last good ones
      // (a run at --lr 100 kept only steps 10 and 12, both NaN, and resuming was refused), and
      // with --overwrite remove the previous run's. The job stops here, the folder as it was.
      std::string bad = first_non_finite(state);
      if (!bad.empty())
        throw RuntimeFailure(str("training diverged by step ", step, ": layer ", layer, "'s ", bad,
                                 " holds NaN or infinite values; no checkpoint written for this step, ", kept(),
                                 ". Lower --lr, or warm it up over more --warmup-steps"));
      write_layer_state((tmp / (r == 0 ? layer_file_name(layer) : replica_file_name(layer, static_cast<int>(r)))).string(),
                        state);
      transport.progress();
    }
  }
  // The stages write unequal shares: the others wait for the slowest as long as a layer is
  // written within --timeout, however long the whole takes (the caller's wait for worker 0's
  // read-back below likewise).
  transport.pause_barrier();
  if (!leader) return;
  CheckpointManifest m = base_;
  m.step = step;
  if (run.known && run.first_of_run) m.first_loss = run.first;
  m.files.clear();
  for (int layer = 0; layer < m.layers; ++layer) {
    std::string name = layer_file_name(layer), path = (tmp / name).string();
    m.files.push_back({name, layer, static_cast<int64_t>(fs::file_size(path)), crc32_of_file(path)});
    transport.progress();
  }
  m.replica_buffers.clear();
  for (size_t st = 0; st < stage_workers_.size(); ++st)
    for (int layer : stage_layers_[st])
      for (int r = 1; r < static_cast<int>(stage_workers_[st].size()); ++r) {
        std::string name = replica_file_name(layer, r), path = (tmp / name).string();
        if (fs::exists(path))  // a layer without buffers has none
          m.replica_buffers.push_back({name, layer, static_cast<int64_t>(fs::file_size(path)), crc32_of_file(path), r});
        transport.progress();
      }
  write_text_file_atomic((tmp / "manifest.json").string(), manifest_to_json(m));
  fsync_dir(tmp);
  partial.done = true;  // complete: a refusal below leaves it to be moved into place by hand
  // Into place: a step directory exists only complete. One of the same step (a resumed run
  // passing it again) is moved aside first, since rename cannot replace a full directory.
  fs::path final_dir = root / checkpoint_dir_name(step);
  // A step folder of pipetrain's files and no manifest is what an older pipetrain left when killed
  // while rotating one out: removed (a user's file in it keeps it, and the refusal below).
  if (half_deleted_checkpoint(final_dir)) remove_temp_checkpoint(final_dir);
  if (fs::exists(final_dir)) {
    // Only a checkpoint is replaced: a folder of that name pipetrain did not write stays.
    if (!is_checkpoint(final_dir))
      throw RuntimeFailure(str("checkpoint at step ", step, ": '", final_dir.string(), "' exists and is not a ",
                               "checkpoint (no manifest.json that reads); move it away. This step's checkpoint is "
                               "left complete in '", tmp.string(), "'"));
    fs::path old = root / (".old-" + checkpoint_dir_name(step));
    fs::remove_all(old);
    fs::rename(final_dir, old);
    fs::rename(tmp, final_dir);
    fs::remove_all(old);
  } else {
    fs::rename(tmp, final_dir);
  }
  fsync_dir(root);
  // Keep this run's newest `keep` complete checkpoints, and other runs' unless --overwrite;
  // drop temporaries of steps already passed.
  std::vector<std::pair<int64_t, fs::path>> mine;
  for (const auto& e : fs::directory_iterator(root)) {
    std::string name = e.path().filename().string();
    if (name.rfind(".tmp-", 0) == 0 && checkpoint_step_of(name.substr(5)) <= step) remove_temp_checkpoint(e.path());
    bool rotated = name.rfind(".del-", 0) == 0 || name.rfind(".old-", 0) == 0;  // a kill left it half deleted
    if (rotated && checkpoint_step_of(name.substr(5)) >= 0) remove_temp_checkpoint(e.path());
    int64_t s = checkpoint_step_of(name);
    if (s < 0 || e.path() == final_dir) continue;
    std::string run;
    try {
      run = manifest_from_json(read_regular_file((e.path() / "manifest.json").string(), input_limit(InputKind::manifest)),
                               (e.path() / "manifest.json").string()).run_id;
    } catch (const Error&) {
      if (half_deleted_checkpoint(e.path())) remove_temp_checkpoint(e.path());
      continue;  // anything else that is not a checkpoint this run can claim: left alone
    }
    if (run == base_.run_id) mine.push_back({s, e.path()});
    else if (options_.overwrite) discard_checkpoint(e.path());
  }
  std::sort(mine.begin(), mine.end());
  // The one just written counts among the kept.
  for (size_t i = 0; i + std::max(options_.keep - 1, 0) < mine.size(); ++i) discard_checkpoint(mine[i].second);
}

void check_checkpoint_steps(const std::string& dir, const std::vector<int64_t>& steps) {
  std::error_code ec;
  for (int64_t step : steps) {
    fs::path at = fs::path(dir) / checkpoint_dir_name(step);
    // A checkpoint is replaced, and what an older pipetrain left half deleted removed, by the save.
    if (fs::exists(fs::symlink_status(at, ec)) && !is_checkpoint(at) && !half_deleted_checkpoint(at))
      throw ConfigError(str("--checkpoint-dir: '", at.string(), "' is not a checkpoint (no manifest.json that reads), ",
                            "and this run writes its step-", step, " checkpoint there: move it away"));
  }
}

CheckpointStart start_checkpoints(const CheckpointOptions& options) {
  CheckpointStart start;
  if (options.dir.empty()) return start;
  const std::string& dir = options.dir;
  if (options.resume && options.overwrite)
    throw UsageError("--resume and --overwrite: give one (continue the run in --checkpoint-dir, or replace it)");
  std::error_code ec;
  bool exists = fs::exists(dir, ec);
  if (exists && !fs::is_directory(dir, ec))
    throw UsageError(str("--checkpoint-dir: '", dir, "' exists and is not a directory"));
  if (options.resume && !exists)
    throw UsageError(str("--resume: --checkpoint-dir '", dir, "' does not exist (misspelt?); without --resume a "
                         "new run starts there"));
  std::string newest = exists ? newest_checkpoint(dir) : "";
  if (!options.resume && !newest.empty() && !options.overwrite)
    throw ConfigError(str("--checkpoint-dir '", dir, "' holds checkpoints of an earlier run (newest ",
                          fs::path(newest).filename().string(), "): give --resume to continue it, or --overwrite to ",
                          "replace them, or another folder"));
  // Its own error first: a folder it could not make (a parent this process may not write) was
  // reported as "No such file or directory", trying a file in it.
  if (!fs::create_directories(dir, ec) && ec)
    throw UsageError(str("--checkpoint-dir: cannot make '", dir, "': ", ec.message()));
  if (int err = create_error_in(dir)) throw UsageError(str("--checkpoint-dir: cannot write in '", dir, "': ", std::strerror(err)));
  if (options.resume && !newest.empty()) {
    start.resume_from = newest;
    try {
      start.manifest = read_verified_manifest(newest);
    } catch (const FormatError& e) {
      // Not taken in its place without a word: the damage may be the user's to look at first. The
      // one offered instead is verified too (a hint to a second damaged one cost a second failure).
      std::string moved = fs::path(newest).filename().string(), earlier, older = newest;
      while (!(older = newest_checkpoint(dir, checkpoint_step_of(fs::path(older).filename().string()))).empty()) {
        try {
          read_verified_manifest(older);
          break;
        } catch (const FormatError&) {
          earlier += (earlier.empty() ? "" : ", ") + fs::path(older).filename().string();
        }
      }
      if (older.empty() && earlier.empty()) throw;
      if (older.empty()) throw FormatError(str(e.what(), "; no earlier checkpoint verifies either (", earlier, ")"));
      throw FormatError(str(e.what(), "; the newest checkpoint that verifies, ", fs::path(older).filename().string(),
                            ", resumes once ", moved, earlier.empty() ? " is" : ", " + earlier + " are",
                            " moved out of '", dir, "'"));
    }
    start.run_id = start.manifest.run_id;
    const int64_t resumed = checkpoint_step_of(fs::path(newest).filename().string());
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      int64_t step = checkpoint_step_of(e.path().filename().string());
      if (step > resumed && !is_checkpoint(e.path())) start.passed_over.push_back(e.path().filename().string());
    }
  } else {
    start.run_id = new_run_id();
  }
  return start;
}

}  // namespace pt::runtime
