#pragma once
// Training progress for people and for files: a progress bar (samples/s, loss, ETA) on a
// terminal, plain lines otherwise, and per-step metrics as CSV (--metrics FILE).
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <limits>
#include <string>
#include <vector>

namespace pt::runtime {

struct StepRecord {
  int64_t step = 0;     // 1-based global step (minibatch)
  int64_t epoch = 0;    // 0-based (the CSV and the lines count from 1)
  double loss = 0;
  double samples_per_s = 0;
  double test_accuracy = -1;  // < 0: not evaluated at this step
  double train_s = 0;         // training time so far in this run, evaluations excluded
  int64_t peak_memory_bytes = -1;  // the reporting worker's measured peak so far (< 0: not measured)
  std::optional<double> test_loss = std::nullopt;  // the test set's mean loss where evaluated (any sign, NaN)
  // The whole model's gradient norm before clipping (--clip-grad-norm under a synchronous
  // schedule, or one worker's; < 0: not computed).
  double grad_norm = -1;
  double lr = -1;  // the learning rate the step applied (the schedule's, warm-up and decay; < 0: not known)
  // The writing process's peak resident set when the step's record arrived, as the OS counts it
  // (VmHWM): Progress reads it; < 0 not read. A threads run's is the whole job's, a gloo run's
  // the reporting worker's process's. peak_memory_bytes above counts tensors alone.
  int64_t peak_rss_bytes = -1;
  bool loss_known = true;  // false: nothing computed one (emulated layers): no figure, not 0
};

// After a run failed: says where its metrics rows are, where `metrics_path`'s partial file was
// written at or after `since` (a run's start, seconds since the epoch); says nothing otherwise.
// A gloo launcher calls it for a worker killed before it could say so itself.
void note_metrics_left(const std::string& metrics_path, double since);

class Progress {
 public:
  // total_steps for the ETA; metrics_path "" = no CSV. One CSV row per step; the test
  // accuracy goes on the row of the step after which it was measured. Rows go to
  // metrics_path + ".partial", flushed as they complete (a killed or failed run keeps what it
  // measured there, and an earlier metrics_path as it was), which replaces metrics_path when
  // the run finishes (finish()). A
  // write that fails (a full disk) removes the partial file and leaves an earlier metrics_path
  // as it was. A device or a FIFO (/dev/stdout) is written through.
  // A resumed run (`resumed_step`: the steps its checkpoint holds) keeps the rows of those steps,
  // from metrics_path + ".partial" where a killed run left them, else from metrics_path, so the
  // file covers the whole training (a resume wrote its own steps alone over them), and its
  // train_s goes on from theirs. `resumed_first_loss`: the checkpoint's run's first loss (NaN:
  // not known): a file whose step 1 lost another is another run's, refused before a row is
  // written (its rows were joined to this run's, exit 0).
  Progress(int64_t total_steps, const std::string& metrics_path, bool quiet = false, int64_t resumed_step = 0,
           double resumed_first_loss = std::numeric_limits<double>::quiet_NaN());
  ~Progress();

  void step(const StepRecord& r);       // after each training step
  void evaluated(const StepRecord& r);  // after a test-set evaluation
  // Writes the last step's row now, not when the next step starts: before a checkpoint is
  // written, so that a job killed after it keeps that step's row (its accuracy too).
  void flush_pending();
  void finish();

 private:
  void write_failed();   // throws, after removing the partial file
  void close_csv();      // closes and moves the partial file into place
  // A resumed run's rows of the steps its checkpoint holds: the partial file's where the run was
  // killed, else the file's.
  std::vector<std::string> earlier_rows(const std::string& header);
  StepRecord pending_;  // the last step's row, written when the next step starts (or at finish)
  bool has_pending_ = false;
  int64_t peak_rss_ = -1;  // the highest VmHWM read so far: the column's "peak so far"
  int64_t total_;
  bool tty_;
  bool quiet_;
  FILE* csv_ = nullptr;
  std::string csv_path_;
  std::string csv_partial_;  // where rows go ("" when written through)
  int64_t resumed_step_;
  double resumed_first_loss_;
  bool keeps_earlier_ = false;  // the partial file holds a resumed run's earlier rows
  double train_s_before_ = 0;  // the kept rows' train_s
  double samples_before_ = 0;  // and the samples they trained (their last rate x train_s)
  double start_ms_;
  double last_print_ms_ = 0;
};

double wall_ms();  // monotonic clock, ms

}  // namespace pt::runtime
