// The alpha-beta fit `pipetrain calibrate` makes (issue 33), and the calibrated cluster file.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "plan/link_fit.h"

namespace pt::plan {
namespace {

std::vector<LinkPoint> points_of(double latency_us, double gbps, double noise, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> jitter(1 - noise, 1 + noise);
  AlphaBeta truth{latency_us, gbps, 0};
  std::vector<LinkPoint> p;
  for (double bytes = 1024; bytes <= 64.0 * (1 << 20); bytes *= 4) p.push_back({bytes, truth.ms(bytes) * jitter(rng)});
  return p;
}

TEST(LinkFit, RecoversLatencyAndBandwidth) {
  for (auto [latency, gbps] : {std::pair{50.0, 1.0}, std::pair{5.0, 25.0}, std::pair{300.0, 10.0}}) {
    AlphaBeta exact = fit_alpha_beta(points_of(latency, gbps, 0, 1));
    EXPECT_NEAR(exact.latency_us, latency, latency * 1e-6);
    EXPECT_NEAR(exact.bandwidth_gbps, gbps, gbps * 1e-6);
    EXPECT_LT(exact.max_error, 1e-9);
    // 5% noise on every point: both within 10%, and the residual says how far the points are.
    AlphaBeta noisy = fit_alpha_beta(points_of(latency, gbps, 0.05, 7));
    EXPECT_NEAR(noisy.latency_us, latency, latency * 0.10);
    EXPECT_NEAR(noisy.bandwidth_gbps, gbps, gbps * 0.10);
    EXPECT_GT(noisy.max_error, 0.0);
    EXPECT_LT(noisy.max_error, 0.12);
  }
}

TEST(LinkFit, FlatTimesAreALatencyAndNoRate) {
  // Threads hand tensors over in memory: the time does not grow with the bytes.
  std::vector<LinkPoint> flat{{1024, 0.010}, {65536, 0.011}, {1 << 20, 0.009}};
  AlphaBeta f = fit_alpha_beta(flat);
  EXPECT_EQ(f.bandwidth_gbps, kUnmeasurableGbps);
  EXPECT_NEAR(f.latency_us, 10, 1);
  // A latency that would come out negative is 0.
  AlphaBeta steep = fit_alpha_beta({{1024, 0.001}, {1 << 20, 10.0}, {4 << 20, 41.0}});
  EXPECT_EQ(steep.latency_us, 0);
  EXPECT_GT(steep.bandwidth_gbps, 0);
}

TEST(LinkFit, BadPointsAreNamed) {
  EXPECT_THROW(fit_alpha_beta({{1024, 0.1}}), ConfigError);
  EXPECT_THROW(fit_alpha_beta({{1024, 0.1}, {1024, 0.2}}), ConfigError);
  try {
    fit_alpha_beta({{1024, 0.1}, {4096, -1}});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("-1 ms for 4096 bytes"), std::string::npos) << e.what();
  }
}

TEST(LinkFit, CalibratedClusterRoundTripsWithItsRecord) {
  Cluster shape = cluster_from_shorthand("2,2", "1,1");
  LevelCalibration inner{0, 0, 1, points_of(20, 40, 0, 1), {}}, outer{1, 0, 2, points_of(200, 2, 0, 1), {}};
  inner.fit = fit_alpha_beta(inner.points);
  outer.fit = fit_alpha_beta(outer.points);
  Cluster c = calibrated_cluster(shape, {inner, outer}, {{{0, 1, 2, 3}, 1 << 20, 12.0, 11.0}}, "gloo", "2026-11-26T02:00:00Z");
  EXPECT_NEAR(c.levels[0].bandwidth_gbps, 40, 1e-6);
  EXPECT_NEAR(c.levels[1].latency_us, 200, 1e-6);
  Cluster again = cluster_from_json(parse_json(to_json(c).dump(), "c.json"), "c.json");
  EXPECT_EQ(again.levels[1].latency_us, c.levels[1].latency_us);
  EXPECT_EQ(again.levels[0].bandwidth_gbps, c.levels[0].bandwidth_gbps);
  EXPECT_EQ(again.calibration["transport"], "gloo");
  EXPECT_EQ(again.calibration["levels"].size(), 2u);
  EXPECT_EQ(again.calibration["allreduce"][0]["measured_ms"], 12.0);
  EXPECT_EQ(to_json(again), to_json(c));
  // A level that talks but was not measured is not guessed.
  EXPECT_THROW(calibrated_cluster(shape, {inner}, {}, "gloo", "now"), ConfigError);
  // A record that is not an object is named.
  try {
    cluster_from_json(parse_json(R"({"format": "pipetrain.cluster/1", "levels": [{"fan_out": 2, "bandwidth_gbps": 1}],
                                     "calibration": 3})", "c.json"), "c.json");
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("c.json: field 'calibration' must be an object"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pt::plan
