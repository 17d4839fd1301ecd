#include "runtime/progress.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json_doc.h"
#include "core/units.h"
#include "model/memory_meter.h"

namespace pt::runtime {

namespace {
std::vector<std::string> split_fields(const std::string& line) {
  std::vector<std::string> fields;
  std::istringstream row(line);
  for (std::string field; std::getline(row, field, ',');) fields.push_back(field);
  if (!line.empty() && line.back() == ',') fields.emplace_back();  // getline drops an empty last field
  return fields;
}

// The columns before peak_rss_bytes came (2026-12-06): a file of them still resumes.
constexpr const char* kColumnsBeforeRss =
    "step,epoch,loss,samples_per_s,test_accuracy,train_s,peak_memory_bytes,test_loss,grad_norm,lr";
}  // namespace

double wall_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

Progress::Progress(int64_t total_steps, const std::string& metrics_path, bool quiet, int64_t resumed_step,
                   double resumed_first_loss)
    : total_(total_steps), tty_(::isatty(STDERR_FILENO) == 1), quiet_(quiet), csv_path_(metrics_path),
      resumed_step_(resumed_step), resumed_first_loss_(resumed_first_loss), start_ms_(wall_ms()) {
  if (!metrics_path.empty()) {
    struct stat st;
    const int descriptor = output_descriptor(metrics_path);  // `--metrics /dev/stdout >> log`: appended there
    bool through = descriptor >= 0 || (::stat(metrics_path.c_str(), &st) == 0 && !S_ISREG(st.st_mode));
    csv_path_ = output_target(metrics_path);  // a link stays a link (json_doc.h)
    csv_partial_ = through ? "" : csv_path_ + ".partial";
    const std::string header = str(kColumnsBeforeRss, ",peak_rss_bytes");
    // Read before the partial file is opened afresh: a killed run's rows are there.
    std::vector<std::string> earlier = resumed_step_ > 0 && !through ? earlier_rows(header) : std::vector<std::string>{};
    keeps_earlier_ = !earlier.empty();
    if (!earlier.empty()) {
      int64_t last = std::strtoll(earlier.back().c_str(), nullptr, 10);
      if (last < resumed_step_)
        std::fprintf(stderr,
                     "note: --metrics: the rows kept from %s end at step %lld, and the checkpoint holds %lld steps: "
                     "steps %lld..%lld have no row (a run in between wrote none?), and train_s leaves out their time\n",
                     csv_path_.c_str(), (long long)last, (long long)resumed_step_, (long long)last + 1,
                     (long long)resumed_step_);
    } else if (resumed_step_ > 0) {  // a new file for a resumed run: it is not the whole training
      std::fprintf(stderr,
                   "note: --metrics: %s holds no rows of the run being resumed (a new file?): its rows start at step "
                   "%lld, and train_s and samples_per_s count this run's time alone\n",
                   csv_path_.c_str(), (long long)resumed_step_ + 1);
    }
    // The kept rows are written to a file of their own first, which then replaces the partial
    // file: where they cannot be written, the partial file, perhaps their only copy, is intact.
    std::string fresh = keeps_earlier_ ? csv_partial_ + ".new" : csv_partial_;
    csv_ = descriptor >= 0 ? ::fdopen(::dup(descriptor), "w")  // fdopen truncates nothing
                           : std::fopen(through ? metrics_path.c_str() : fresh.c_str(), "w");
    if (!csv_) throw UsageError(str("--metrics: cannot write '", through ? metrics_path : fresh, "'"));
    bool written = std::fprintf(csv_, "%s\n", header.c_str()) >= 0;
    for (const auto& row : earlier) written = written && std::fprintf(csv_, "%s\n", row.c_str()) >= 0;
    written = std::fflush(csv_) == 0 && written;
    if (keeps_earlier_) {
      if (!written || std::rename(fresh.c_str(), csv_partial_.c_str()) != 0) {
        int err = errno;
        std::fclose(csv_);
        csv_ = nullptr;
        std::remove(fresh.c_str());
        throw RuntimeFailure(str("--metrics: writing '", fresh, "' failed (", std::strerror(err),
                                 "); the earlier run's rows are as they were; the run stops here"));
      }
    } else if (!written) {
      write_failed();
    }
  }
}

std::vector<std::string> Progress::earlier_rows(const std::string& header) {
  // The run being resumed was killed (its rows in the partial file, which it never moved into
  // place) or stopped at its --steps (its rows in the file). The partial file first: the file
  // could be an earlier run's, and its rows were kept while the killed run's were deleted.
  struct stat st;
  bool partial = ::stat(csv_partial_.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  std::ifstream in(partial ? csv_partial_ : csv_path_);
  std::vector<std::string> rows;
  std::string line;
  if (!in || !std::getline(in, line)) return rows;
  // A file without the last column has its rows' left empty: not measured.
  const bool without_rss = line == kColumnsBeforeRss;
  if (line != header && !without_rss) return rows;  // not this format: the run's rows alone
  std::vector<std::string> names = split_fields(line);
  int64_t last_step = 0;
  for (int number = 2; std::getline(in, line); ++number) {
    if (in.eof()) break;  // no newline after it: a row a killed run was writing
    // Each row kept is checked first: an inf in train_s made every new row's inf and its rate
    // nan, a row twice left 30 rows for 20 steps, exit 0. Rows past the checkpoint are dropped.
    std::vector<std::string> fields = split_fields(line);
    auto refuse = [&](size_t k, const std::string& why) {
      throw UsageError(str("--metrics ", partial ? csv_partial_ : csv_path_, ": line ", number, ", field '",
                           k < names.size() ? names[k] : "?", "' is '", printable(k < fields.size() ? fields[k] : ""),
                           "': ", why, "; a resumed run continues the file's rows, so fix the row or give another "
                           "--metrics"));
    };
    char* end = nullptr;
    const int64_t step = fields.empty() ? 0 : std::strtoll(fields[0].c_str(), &end, 10);
    if (fields.empty() || fields[0].empty() || *end != '\0' || step <= last_step)
      refuse(0, str("steps are whole numbers, each above the row before's (", last_step, ")"));
    last_step = step;
    if (step > resumed_step_) continue;
    if (fields.size() != names.size())
      throw UsageError(str("--metrics ", partial ? csv_partial_ : csv_path_, ": line ", number, " has ", fields.size(),
                           " fields where the header names ", names.size(), "; fix the row or give another --metrics"));
    std::vector<double> value(fields.size(), 0);
    for (size_t k = 1; k < fields.size(); ++k) {
      if (fields[k].empty()) continue;  // not measured at that step
      value[k] = std::strtod(fields[k].c_str(), &end);
      if (end != fields[k].c_str() + fields[k].size()) refuse(k, "not a number");
    }
    // samples_per_s and train_s, the fourth and sixth fields, carry on into this run's rows
    for (size_t k : {size_t{3}, size_t{5}})
      if (!std::isfinite(value[k]) || value[k] < 0) refuse(k, "it must be a finite number >= 0");
    if (value[5] < train_s_before_) refuse(5, str("it falls below the row before's ", train_s_before_));
    // Within the rounding of a row's 6 decimals, or of 6 significant digits (another format).
    const double first = resumed_first_loss_;
    if (step == 1 && !fields[2].empty() && std::isfinite(first) &&
        std::fabs(value[2] - first) > 1.01 * std::max(5e-7, 5e-6 * std::fabs(first)))
      refuse(2, str("the run being resumed began at loss ", first, ": these rows are another run's"));
    rows.push_back(without_rss ? line + "," : line);
    train_s_before_ = value[5], samples_before_ = value[3] * value[5];
  }
  return rows;
}

void note_metrics_left(const std::string& metrics_path, double since) {
  if (metrics_path.empty()) return;
  std::string target = output_target(metrics_path), partial = target + ".partial";
  struct stat st;
  if (::stat(partial.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || static_cast<double>(st.st_mtime) + 1 < since) return;
  bool earlier = ::stat(target.c_str(), &st) == 0;
  std::fprintf(stderr, "note: --metrics: the rows up to the failure are in %s (%s %s)\n", partial.c_str(),
               target.c_str(), earlier ? "is as it was" : "was not written");
}

Progress::~Progress() {
  // Torn down without finish(): the run failed. Its rows stay in the partial file, as a killed
  // run's do (a resume reads them there), and an earlier file stays as it was (a failed run's
  // 5 rows replaced a finished run's 20).
  try {
    flush_pending();
    if (csv_ && !csv_partial_.empty()) {
      std::fclose(csv_);
      csv_ = nullptr;
      note_metrics_left(csv_path_, 0);
    }
    close_csv();
  } catch (const Error&) {
    // finish() reports write errors; a Progress torn down by another error keeps that one.
  }
}

void Progress::write_failed() {
  int err = errno;
  std::fclose(csv_);
  csv_ = nullptr;
  // The partial file is kept, as a failed run's is (docs/runtime.md): its rows may be their only
  // copy, a resumed run's earlier rows (a full disk deleted 313 of them) and a fresh run's whose
  // checkpoints exist (300 rows lost, and --resume found none). A torn last row is left out there.
  std::string partial = csv_partial_.empty() ? ""
                        : str("it keeps the rows written", keeps_earlier_ ? ", the earlier run's among them," : "",
                              " and '", csv_path_, "' is left as it was; ");
  throw RuntimeFailure(str("--metrics: writing '", csv_partial_.empty() ? csv_path_ : csv_partial_, "' failed (",
                           std::strerror(err), "); ", partial, "the run stops here"));
}

void Progress::close_csv() {
  if (!csv_) return;
  if (std::fflush(csv_) != 0) write_failed();
  int rc = std::fclose(csv_);
  csv_ = nullptr;
  if (rc != 0)
    throw RuntimeFailure(str("--metrics: writing '", csv_partial_.empty() ? csv_path_ : csv_partial_,
                             "' failed (disk full?)",
                             csv_partial_.empty() ? std::string() : str("; '", csv_path_, "' is left as it was")));
  if (!csv_partial_.empty() && std::rename(csv_partial_.c_str(), csv_path_.c_str()) != 0)
    throw RuntimeFailure(str("--metrics: cannot move '", csv_partial_, "' to '", csv_path_, "' (", std::strerror(errno), ")"));
}

void Progress::flush_pending() {
  if (!csv_ || !has_pending_) return;
  has_pending_ = false;
  const StepRecord& r = pending_;
  char acc[32] = "";  // empty when not evaluated at this step
  if (r.test_accuracy >= 0) std::snprintf(acc, sizeof acc, "%.6f", r.test_accuracy);
  char peak[32] = "";
  if (r.peak_memory_bytes >= 0) std::snprintf(peak, sizeof peak, "%lld", (long long)r.peak_memory_bytes);
  // Losses, norms and rates to 9 significant digits, a float's: "%.6f" wrote a regression's loss
  // of 3e-8 as 0.000000, and "%.6g" a gradient norm 4e-6 from what was applied.
  char test_loss[32] = "";
  // A NaN is written as one ("nan"): an empty field reads "not measured" (a diverged run's was).
  if (r.test_loss) std::snprintf(test_loss, sizeof test_loss, "%.9g", *r.test_loss);
  char grad_norm[32] = "";
  if (!(r.grad_norm < 0)) std::snprintf(grad_norm, sizeof grad_norm, "%.9g", r.grad_norm);
  char lr[32] = "";
  if (r.lr >= 0) std::snprintf(lr, sizeof lr, "%.9g", r.lr);
  char rss[32] = "";
  if (r.peak_rss_bytes >= 0) std::snprintf(rss, sizeof rss, "%lld", (long long)r.peak_rss_bytes);
  // Steps and epochs counted from 1, as the progress lines count them (the column counted epochs from 0).
  char loss[32] = "";
  if (r.loss_known) std::snprintf(loss, sizeof loss, "%.9g", r.loss);
  // Over the whole training, as train_s is: a resumed run's own rate starts again at its first
  // step, which read as a drop of a quarter where a run of mnist-cnn was resumed.
  double rate = train_s_before_ > 0 ? (samples_before_ + r.samples_per_s * r.train_s) / (train_s_before_ + r.train_s)
                                    : r.samples_per_s;
  if (std::fprintf(csv_, "%lld,%lld,%s,%.1f,%s,%.3f,%s,%s,%s,%s,%s\n", (long long)r.step, (long long)r.epoch + 1, loss,
                   rate, acc, train_s_before_ + r.train_s, peak, test_loss, grad_norm, lr, rss) < 0 ||
      std::fflush(csv_) != 0)
    write_failed();
}

namespace {
// The progress line's loss: "-" where none was computed.
std::string loss_text(const StepRecord& r) {
  if (!r.loss_known) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.4f", r.loss);
  return text;
}
}  // namespace

void Progress::step(const StepRecord& r) {
  flush_pending();
  pending_ = r;
  has_pending_ = true;
  // A few µs: one /proc read. The kernel sums VmHWM from per-CPU counters, approximately: read
  // again it came out up to 172 KB lower (182 of 300 rows below an earlier one). The highest stands.
  if (csv_) pending_.peak_rss_bytes = peak_rss_ = std::max(peak_rss_, model::process_peak_rss_bytes());
  if (quiet_) return;
  double now = wall_ms();
  double elapsed_s = (now - start_ms_) / 1000;
  int64_t done = r.step - resumed_step_;  // by this run
  double eta_s = done > 0 ? elapsed_s / static_cast<double>(done) * static_cast<double>(total_ - r.step) : 0;
  if (tty_) {
    if (now - last_print_ms_ < 100 && r.step != total_) return;
    const int width = 30;
    int filled = total_ > 0 ? static_cast<int>(width * r.step / total_) : 0;
    std::string bar(filled, '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "\r[%s] %lld/%lld epoch %lld  loss %s  %.0f samples/s  ETA %.0fs   ", bar.c_str(),
                 (long long)r.step, (long long)total_, (long long)r.epoch + 1, loss_text(r).c_str(), r.samples_per_s, eta_s);
  } else {
    // Plain lines for logs: about every 10 s or every 10% of the run.
    bool tenth = total_ >= 10 && r.step % (total_ / 10) == 0;
    if (!(tenth || now - last_print_ms_ > 10000 || r.step == total_)) return;
    std::fprintf(stderr, "step %lld/%lld epoch %lld loss %s %.0f samples/s ETA %.0fs\n", (long long)r.step,
                 (long long)total_, (long long)r.epoch + 1, loss_text(r).c_str(), r.samples_per_s, eta_s);
  }
  last_print_ms_ = now;
}

void Progress::evaluated(const StepRecord& r) {
  // The accuracy belongs to the last completed step (an asynchronous pipeline may skip a
  // few minibatches at an epoch's end, so step numbers need not match).
  if (has_pending_) pending_.test_accuracy = r.test_accuracy, pending_.test_loss = r.test_loss;
  if (quiet_) return;
  std::string figures = r.test_accuracy >= 0 ? str("test accuracy ", fixed(100 * r.test_accuracy, 2), "%") : "";
  if (r.test_loss) figures += str(figures.empty() ? "" : ", ", "test loss ", fixed(*r.test_loss, 4));
  std::fprintf(stderr, "%sepoch %lld step %lld: %s\n", tty_ ? "\n" : "", (long long)r.epoch + 1,
               (long long)(has_pending_ ? pending_.step : r.step), figures.c_str());
}

void Progress::finish() {
  flush_pending();
  close_csv();
  if (tty_ && !quiet_) std::fprintf(stderr, "\n");
}

}  // namespace pt::runtime
