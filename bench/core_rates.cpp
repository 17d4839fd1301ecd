// How fast n computes run at once on this host's cores, by how long each measuring burst lasts
// (job::measure_core_rates, which calibrate runs with its default): a burst too short to see the
// cores' clocks settle under load reads a rate above what a training run gets.
//   build/bench/bench_core_rates [SECONDS ...]
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "job/calibration.h"
#include "model/compute_threads.h"

int main(int argc, char** argv) {
  pt::model::use_one_compute_thread();
  std::vector<double> bursts;
  for (int i = 1; i < argc; ++i) bursts.push_back(std::atof(argv[i]));
  if (bursts.empty()) bursts = {0.25, 1, 3};
  for (double s : bursts) {
    std::vector<double> rates = pt::job::measure_core_rates(4, s);
    std::printf("burst %.2f s: core_rates", s);
    for (double r : rates) std::printf(" %.3f", r);
    std::printf("\n");
  }
}
