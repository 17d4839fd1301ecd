#pragma once
// What `pipetrain calibrate` makes of its measurements (issue 33): an alpha-beta fit of one
// message's time against its bytes per cluster level, and the cluster file that carries the
// fits and how they were obtained. Torch-free: the measuring is job/calibration.h's.
#include <cstdint>
#include <string>
#include <vector>

#include "core/json_doc.h"
#include "plan/cluster.h"

namespace pt::plan {

// One size's one-way time of a message: the median over its repetitions.
struct LinkPoint {
  double bytes = 0;
  double ms = 0;
};

// t(bytes) = latency + bytes / bandwidth.
struct AlphaBeta {
  double latency_us = 0;
  double bandwidth_gbps = 0;
  double max_error = 0;  // the largest |fit - measured| / measured over the points
  double ms(double bytes) const;
};

// The rate from the large messages (least squares over the sizes within 256x of the largest),
// the latency from the small ones (the median, over the three smallest sizes, of what the bytes
// at that rate leave of the time; never below 0): a link's burst allowance or a cache makes
// small messages faster than the rate large ones get, which a single line through all sizes
// would average away. Where the time does not grow with the bytes (threads hand tensors over in
// memory), the bandwidth is kUnmeasurableGbps. ConfigError for fewer than two distinct sizes or
// a time that is not positive.
AlphaBeta fit_alpha_beta(const std::vector<LinkPoint>& points);
inline constexpr double kUnmeasurableGbps = 1e6;

// A level's measurements: the pair of workers that talked over it and what they measured.
struct LevelCalibration {
  int level = 0;
  int a = 0, b = 0;
  std::vector<LinkPoint> points;
  AlphaBeta fit;
};

// An all-reduce measured against what the fitted cluster predicts for it (Cluster::allreduce_ms).
struct AllreduceCheck {
  std::vector<int> group;
  double bytes = 0;
  double measured_ms = 0;
  double modelled_ms = 0;
};

// What the all-reduces took beyond what `links` (its levels' fits) give them, as the host's two
// terms (Cluster::reduce_us_per_mib, allreduce_step_us, costed as Cluster::ring_step_ms does):
// least squares of the relative errors (each check's over its measured time), neither term below
// 0; none where the all-reduces took no longer, or where the terms would move some check farther
// off than they bring the worst of those the links alone model under closer. On loopback the links' ping-pong leaves out that every member
// sends, receives and sums at once on shared cores: 16 MiB over 4 gloo processes took 32.5 ms
// against 9.0 from the links alone, and 1 MiB 7-15 ms against 0.9.
struct HostFit {
  double reduce_us_per_mib = 0;
  double step_us = 0;
};
HostFit fit_allreduce_host(const Cluster& links, const std::vector<AllreduceCheck>& checks);

// `shape`'s levels with each measured level's latency and bandwidth set from its fit, and the
// host's terms from the all-reduces (fit_allreduce_host) (each check's modelled_ms in the record is the
// calibrated cluster's); the calibration record (when, over which transport, every point, fit
// and check) in Cluster::calibration. ConfigError when a level of fan-out > 1 has no fit.
// `action_us`: the host's time per action, as measured (Cluster::action_us).
Cluster calibrated_cluster(const Cluster& shape, const std::vector<LevelCalibration>& levels,
                           const std::vector<AllreduceCheck>& checks, double action_us, const std::string& transport,
                           const std::string& when);

// A calibration record read and checked, as a cluster file is read and as --refit reads it: each
// level's points (each fitted), the all-reduces (each within an hour: calibrate measures them in
// seconds), the time per action and the transport (threads or gloo). FormatError naming `source`
// and the field; the record's own levels are `shape`'s. A hand-edited record (points of -1 ms, an
// all-reduce of 1e12 ms, a transport "carrier-pigeon") was taken by plan without a word.
struct CalibrationRecord {
  std::vector<LevelCalibration> levels;
  std::vector<AllreduceCheck> checks;
  double action_us = 0;
  std::string transport, when;
};
CalibrationRecord read_calibration_record(const JsonField& record, const Cluster& shape);
// Sets c's ring corrections from its calibration record's all-reduces, judged against the terms
// calibrate fitted beside them (the record's own), whatever the file's levels now say.
void correct_rings_as_measured(Cluster& c, const JsonField& record);
inline constexpr double kMostAllreduceMs = 3.6e6;
// A message or all-reduce calibrate measures is whole bytes, at most 1 TiB (it sends up to 64 MiB
// and all-reduces a stage's weights): 1e300 or 0.5 bytes fitted the terms to 0.
inline constexpr int64_t kMostCalibratedBytes = int64_t{1} << 40;

// `calibrated` fitted again from its own calibration record (its points, all-reduces and time
// per action), under this version's model, without measuring again: what `calibrate --refit`
// writes. FormatError naming `source` and the record's field where the record is missing or
// malformed, or was scaled for an emulation (its levels no longer the measured ones).
Cluster refit_calibration(const Cluster& calibrated, const std::string& source);

// A measured all-reduce's "group" field (a calibration record's): worker ids of the cluster's
// `workers`, at least two, each once (one worker's "all-reduce" fitted a time to no transfer).
std::vector<int> read_allreduce_group(const JsonField& group, int workers);

}  // namespace pt::plan
