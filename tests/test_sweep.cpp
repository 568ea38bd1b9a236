// Sweep statistics against hand-computed values and brute-force twins (Karp-Flatt, Amdahl fit on
// data made from a known serial fraction, Mann-Whitney U against a textbook example and full
// enumeration), the ring model, the strict report reader, compare's exit codes, and what the
// core probes conclude (which repetitions ran next to a slow probe) from made-up probes.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/sweep.hpp"
#include "cnnbench/topology.hpp"
#include "cnnbench/train.hpp"
#include "../lib/sweep/runner.hpp"
#include "../lib/sweep/subprocess.hpp"
#include "temp_dir.hpp"

namespace cnnbench {
namespace {

TEST(SweepStatistics, SpeedupEfficiencyKarpFlattByHand) {
  EXPECT_DOUBLE_EQ(speedup(10.0, 4.0), 2.5);
  EXPECT_DOUBLE_EQ(efficiency(2.5, 4), 0.625);
  // S = 2.5 on p = 4: (1/2.5 - 1/4) / (1 - 1/4) = (0.4 - 0.25) / 0.75 = 0.2.
  EXPECT_NEAR(karp_flatt(2.5, 4), 0.2, 1e-12);
  // Perfect speedup has no serial fraction; no speedup at all is entirely serial.
  EXPECT_NEAR(karp_flatt(8.0, 8), 0.0, 1e-12);
  EXPECT_NEAR(karp_flatt(1.0, 8), 1.0, 1e-12);
  EXPECT_THROW(karp_flatt(1.0, 1), Error);
  EXPECT_THROW(speedup(0.0, 1.0), Error);
}

TEST(SweepStatistics, AmdahlFitRecoversAKnownSerialFraction) {
  for (double f : {0.0, 0.05, 0.3, 0.9}) {
    const std::vector<int> cores = {1, 2, 3, 4, 7, 16};
    std::vector<double> speedups;
    for (int p : cores) speedups.push_back(amdahl_speedup(f, p));
    const AmdahlFit fit = fit_amdahl(cores, speedups);
    EXPECT_NEAR(fit.serial_fraction, f, 1e-12) << "f = " << f;
    EXPECT_NEAR(fit.rmse, 0.0, 1e-12);
    EXPECT_EQ(fit.points, 5);  // p = 1 carries no information about f
    // With Karp-Flatt, every point of exact Amdahl data gives f back.
    for (std::size_t i = 1; i < cores.size(); ++i) EXPECT_NEAR(karp_flatt(speedups[i], cores[i]), f, 1e-12);
  }
  // Noisy data: the fit lies between the per-point serial fractions.
  const std::vector<int> cores = {2, 4};
  const std::vector<double> speedups = {1.8, 2.9};
  const double f = fit_amdahl(cores, speedups).serial_fraction;
  EXPECT_GT(f, std::min(karp_flatt(1.8, 2), karp_flatt(2.9, 4)));
  EXPECT_LT(f, std::max(karp_flatt(1.8, 2), karp_flatt(2.9, 4)));
  const std::vector<int> only_one = {1};
  const std::vector<double> one = {1.0};
  EXPECT_THROW(fit_amdahl(only_one, one), Error);
}

TEST(SweepStatistics, MannWhitneyTextbookExample) {
  // Conover's example as in SciPy's documentation: U = 17, exact two-sided p = 1/9.
  const std::vector<double> males = {19, 22, 16, 29, 24};
  const std::vector<double> females = {20, 11, 17, 12};
  const MannWhitney r = mann_whitney_u(males, females);
  EXPECT_DOUBLE_EQ(r.u, 17.0);
  EXPECT_TRUE(r.exact);
  EXPECT_NEAR(r.p_value, 1.0 / 9.0, 1e-12);
  // Fully separated samples of 3 and 3: p = 2 / C(6,3) = 0.1, which is also the smallest possible.
  const std::vector<double> low = {1, 2, 3}, high = {4, 5, 6};
  const MannWhitney separated = mann_whitney_u(low, high);
  EXPECT_DOUBLE_EQ(separated.u, 0.0);
  EXPECT_NEAR(separated.p_value, 0.1, 1e-12);
  EXPECT_NEAR(separated.min_p_value, 0.1, 1e-12);
}

// Naive twin: the exact two-sided p-value by enumerating every way to pick sample a's ranks.
double enumerated_p_value(int n1, int n2, double u_observed) {
  const int n = n1 + n2;
  long long total = 0, lower = 0, upper = 0;
  for (unsigned mask = 0; mask < (1u << n); ++mask) {
    if (__builtin_popcount(mask) != n1) continue;
    double rank_sum = 0;
    for (int i = 0; i < n; ++i) {
      if (mask & (1u << i)) rank_sum += i + 1;
    }
    const double u = rank_sum - n1 * (n1 + 1) / 2.0;
    ++total;
    lower += u <= u_observed;
    upper += u >= u_observed;
  }
  return std::min(1.0, 2.0 * static_cast<double>(std::min(lower, upper)) / static_cast<double>(total));
}

TEST(SweepStatistics, MannWhitneyExactMatchesEnumeration) {
  Rng rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    const int n1 = 2 + static_cast<int>(rng.below(5)), n2 = 2 + static_cast<int>(rng.below(6));
    std::vector<double> a, b;
    for (int i = 0; i < n1; ++i) a.push_back(rng.next_float() + 0.1 * trial);
    for (int i = 0; i < n2; ++i) b.push_back(rng.next_float());
    const MannWhitney r = mann_whitney_u(a, b);
    ASSERT_TRUE(r.exact);
    EXPECT_NEAR(r.p_value, enumerated_p_value(n1, n2, r.u), 1e-12) << "n1 " << n1 << " n2 " << n2;
  }
}

TEST(SweepStatistics, MannWhitneyNormalApproximationWithTies) {
  // Ties force the normal approximation. Hand computation: pooled {1,1,2,2 | 2,3,3,3}, mid-ranks
  // 1.5,1.5,4,4 | 4,7,7,7; R_a = 11, U = 11 - 10 = 1; ties t = 2,3,3: sum(t^3 - t) = 6 + 24 + 24 = 54;
  // var = 4*4/12 * (9 - 54/56); z = (|1 - 8| - 0.5) / sqrt(var).
  const std::vector<double> a = {1, 1, 2, 2}, b = {2, 3, 3, 3};
  const MannWhitney r = mann_whitney_u(a, b);
  EXPECT_FALSE(r.exact);
  EXPECT_DOUBLE_EQ(r.u, 1.0);
  const double var = 16.0 / 12.0 * (9.0 - 54.0 / 56.0);
  const double z = 6.5 / std::sqrt(var);
  EXPECT_NEAR(r.p_value, std::erfc(z / std::sqrt(2.0)), 1e-12);
  const std::vector<double> same = {2, 2, 2};
  EXPECT_DOUBLE_EQ(mann_whitney_u(same, same).p_value, 1.0);
}

TEST(SweepScalingModel, StrongScalingPrediction) {
  const CollectiveCost ring{{1e-5, 1e-9}, 0};
  // p = 4, n = 1 MB over a ring: 2*3*1e-5 + 2*3/4 * 1e6 * 1e-9 = 6e-5 + 1.5e-3.
  const double ring_4 = 6e-5 + 1.5e-3;
  EXPECT_NEAR(predicted_step_seconds(0.064, 64, 4, 1e6, ring), 0.016 + ring_4, 1e-15);
  // Batch 64 on 128 nodes: one sample per node, never less; no bytes leave 2*127 latencies.
  EXPECT_NEAR(predicted_step_seconds(0.064, 64, 128, 0, ring), 0.001 + 2 * 127 * 1e-5, 1e-15);
  EXPECT_DOUBLE_EQ(predicted_step_seconds(0.064, 64, 1, 1e6, ring), 0.064);
}

// ---- reports and compare ---------------------------------------------------------------------

// One folder for this binary's report files, removed when it exits.
std::filesystem::path scratch_dir() {
  static const std::filesystem::path dir = test::fresh_temp_dir("sweep");
  return dir;
}

nlohmann::json point(const std::string& strategy, int cores, std::vector<double> times) {
  PointSpec spec{ModelKind::fc3, strategy, cores, 1};
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  return {{"id", spec.id()}, {"model", "fc3"}, {"strategy", strategy}, {"cores", cores}, {"nodes", 1},
          {"p", cores}, {"series", strategy}, {"status", "ok"}, {"times_s", times},
          {"time", {{"median", sorted[sorted.size() / 2]}, {"min", sorted.front()}, {"max", sorted.back()},
                    {"mean", 0}, {"mad", 0}}}};
}

nlohmann::json sweep_report(double slowdown) {
  nlohmann::json points = nlohmann::json::array();
  points.push_back(point("serial", 1, {1.00 * slowdown, 1.02 * slowdown, 0.99 * slowdown, 1.01 * slowdown, 1.03 * slowdown}));
  points.push_back(point("stream", 2, {0.60, 0.61, 0.59, 0.62, 0.60}));
  points.push_back({{"id", "fc3/gpu/n1c1"}, {"model", "fc3"}, {"strategy", "gpu"}, {"cores", 1}, {"nodes", 1},
                    {"p", 1}, {"series", "gpu"}, {"status", "skipped"}, {"reason", "no CUDA device"}});
  return {{"schema_version", sweep_schema_version}, {"kind", "sweep"}, {"complete", true},
          {"context", nlohmann::json::object()}, {"config", nlohmann::json::object()}, {"points", points}};
}

std::filesystem::path write(const std::string& name, const std::string& text) {
  const auto path = scratch_dir() / name;
  std::ofstream(path) << text;
  return path;
}

int run_cli(const std::string& args, const std::string& log_name) {
  const auto log = scratch_dir() / log_name;
  const std::string command = std::string(CNNBENCH_CLI) + " " + args + " > " + log.string() + " 2>&1";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string log_text(const std::string& log_name) { return read_file(scratch_dir() / log_name); }

// A one-core point faster than serial by more than 5% (paired) is named in baseline_warning;
// one within 5% is not, and the warning goes away when the point no longer beats serial.
TEST(SweepAnalysis, OneCorePointFasterThanSerialIsABaselineWarning) {
  nlohmann::json report = sweep_report(1.0);
  report["allreduce"] = nullptr;  // no cluster points: no scaling prediction
  nlohmann::json blas = point("blas", 1, {0.90, 0.91, 0.89});
  blas["paired_baseline"] = {{"ratios", {1.08, 1.10, 1.12}}};
  nlohmann::json close_call = point("stream", 1, {0.97, 0.98, 0.99});
  close_call["paired_baseline"] = {{"ratios", {1.03, 1.04, 1.02}}};
  report["points"].push_back(blas);
  report["points"].push_back(close_call);
  add_scaling_analysis(report);
  ASSERT_TRUE(report.contains("baseline_warning"));
  const auto& beaten = report["baseline_warning"]["points"];
  ASSERT_EQ(beaten.size(), 1u);
  EXPECT_EQ(beaten[0]["id"], "fc3/blas/n1c1");
  EXPECT_DOUBLE_EQ(beaten[0]["speedup"].get<double>(), 1.10);
  EXPECT_NE(report["baseline_warning"]["message"].get<std::string>().find("fc3/blas/n1c1"),
            std::string::npos);

  report["points"][3]["paired_baseline"]["ratios"] = {0.97, 0.99, 1.01};
  add_scaling_analysis(report);
  EXPECT_FALSE(report.contains("baseline_warning"));
}

// The pairs ran on core 1, which took 13% longer than core 0 (the baseline's fastest) over the
// sweep: every point paired there is named, with the core and how much; pairs on core 0, or a
// core within 5%, are not.
TEST(SweepAnalysis, PairsOnASlowerCoreAreAPairCoreWarning) {
  nlohmann::json report = sweep_report(1.0);
  report["allreduce"] = nullptr;
  const auto series = [](int core, double seconds) {
    return nlohmann::json{{"core", core}, {"times_s", {seconds, seconds * 1.01, seconds * 0.99}},
                          {"images_per_s", {{"median", 1.0}, {"min", 1.0}, {"max", 1.0}, {"mean", 1.0}, {"mad", 0.0}}}};
  };
  report["points"][0]["baseline_cores"] = {{"chosen", 0}, {"per_core", {series(0, 1.00), series(1, 1.13)}}};
  report["points"][1]["paired_baseline"] = {{"core", 1}, {"ratios", {1.70, 1.72, 1.68}}};
  add_scaling_analysis(report);
  ASSERT_TRUE(report.contains("pair_core_warning")) << report.dump(1);
  const auto& warning = report["pair_core_warning"];
  ASSERT_EQ(warning["points"].size(), 1u);
  EXPECT_EQ(warning["points"][0]["id"], "fc3/stream/n1c2");
  const std::string message = warning["message"].get<std::string>();
  EXPECT_NE(message.find("core 1, whose serial repetitions took 13% longer than core 0's"), std::string::npos)
      << message;

  report["points"][1]["paired_baseline"]["core"] = 0;
  add_scaling_analysis(report);
  EXPECT_FALSE(report.contains("pair_core_warning"));
  report["points"][1]["paired_baseline"]["core"] = 1;
  report["points"][0]["baseline_cores"]["per_core"][1] = series(1, 1.04);
  add_scaling_analysis(report);
  EXPECT_FALSE(report.contains("pair_core_warning"));
}

// A point whose paired ratios' middle half spans more than a tenth of their median says so (the
// two-rank LeNet-5 point of one sweep: 1.34, 1.34, 1.37, 1.49, 1.55); a narrow one, or one of
// fewer than 5 pairs, does not.
TEST(SweepAnalysis, AWideMiddleOfThePairedRatiosIsASpreadWarning) {
  nlohmann::json report = sweep_report(1.0);
  report["allreduce"] = nullptr;
  report["points"][1]["paired_baseline"] = {{"ratios", {1.37, 1.55, 1.34, 1.49, 1.34}}};
  add_scaling_analysis(report);
  ASSERT_TRUE(report["points"][1].contains("spread_warning")) << report["points"][1].dump();
  const std::string text = report["points"][1]["spread_warning"].get<std::string>();
  EXPECT_NE(text.find("spans 1.34-1.49, 11% of their median 1.37"), std::string::npos) << text;
  EXPECT_NE(text.find("no core probe fell"), std::string::npos) << text;

  report["points"][1]["paired_baseline"]["ratios"] = {1.31, 1.50, 1.46, 1.53, 1.52};
  add_scaling_analysis(report);
  EXPECT_FALSE(report["points"][1].contains("spread_warning"));
  report["points"][1]["paired_baseline"]["ratios"] = {1.0, 1.5, 1.2};
  add_scaling_analysis(report);
  EXPECT_FALSE(report["points"][1].contains("spread_warning"));
}

// The probes' handoffs between the cores say where they sit: a line passed in 94 ns at the
// first probe and 335-349 ns after (a host that moved a virtual core to another die, seen on
// 2026-12-07) is a move, named with its probes, and a wide 2-core point says so; steady at 340
// ns the cores sit apart; steady at 72-80 ns nothing is said.
TEST(SweepAnalysis, TheCoresHandoffSaysWhereTheySit) {
  nlohmann::json report = sweep_report(1.0);
  report["allreduce"] = nullptr;
  const auto probes = [](std::vector<double> handoffs) {
    nlohmann::json list = nlohmann::json::array();
    for (std::size_t k = 0; k < handoffs.size(); ++k) {
      const int probe = static_cast<int>(k);
      list.push_back({{"probe", probe}, {"core", 0}, {"compute_gflops", 9.8}, {"memory_gbps", 27.0}, {"started_s", 6.0 * probe}});
      list.push_back({{"probe", probe}, {"core", 1}, {"compute_gflops", 9.8}, {"memory_gbps", 27.0},
                      {"started_s", 6.0 * probe}, {"handoff_ns", handoffs[k]}});
    }
    return nlohmann::json{{"threshold", 0.1}, {"probes", list}, {"medians", nlohmann::json::array()}};
  };
  report["core_probes"] = probes({94.0, 349.1, 342.1, 338.7, 338.1, 334.6});
  report["points"][1]["paired_baseline"] = {{"ratios", {1.61, 0.84, 0.85, 0.82, 1.60}}};
  add_scaling_analysis(report);
  ASSERT_TRUE(report.contains("core_placement")) << report.dump(1);
  const auto& moved = report["core_placement"];
  EXPECT_TRUE(moved["moved"].get<bool>());
  EXPECT_TRUE(moved["apart"].get<bool>());
  EXPECT_EQ(moved["near_probes"], nlohmann::json::array({0}));
  EXPECT_EQ(moved["far_probes"], nlohmann::json::array({1, 2, 3, 4, 5}));
  const std::string message = moved["message"].get<std::string>();
  EXPECT_NE(message.find("between cores 0 and 1 took 94 ns at probe 0 and 335-349 ns at probes 1-5"),
            std::string::npos) << message;
  const std::string spread = report["points"][1].value("spread_warning", "");
  EXPECT_NE(spread.find("round trip between the cores changed (core_placement)"), std::string::npos) << spread;

  report["core_probes"] = probes({338.0, 341.0, 352.0, 340.0, 336.0, 339.0});
  add_scaling_analysis(report);
  ASSERT_TRUE(report.contains("core_placement"));
  EXPECT_FALSE(report["core_placement"]["moved"].get<bool>());
  EXPECT_TRUE(report["core_placement"]["apart"].get<bool>());
  EXPECT_NE(report["core_placement"]["message"].get<std::string>().find(
                "cores 0 and 1 pass a cache line in 340 ns (median of 6 probes, 336-352) a round trip"),
            std::string::npos) << report["core_placement"].dump();
  EXPECT_NE(report["points"][1].value("spread_warning", "").find("no core probe fell"), std::string::npos);

  report["core_probes"] = probes({72.0, 75.0, 80.0, 78.0, 74.0, 79.0});
  add_scaling_analysis(report);
  EXPECT_FALSE(report.contains("core_placement"));
}

TEST(SweepCompare, TwiceSlowerIsARegressionAndItselfIsNot) {
  const auto base = write("base.json", sweep_report(1.0).dump());
  const auto slow = write("slow.json", sweep_report(2.0).dump());
  const auto noisy = write("noisy.json", sweep_report(1.01).dump());
  EXPECT_EQ(run_cli("compare " + base.string() + " " + base.string(), "self.log"), 0) << log_text("self.log");
  EXPECT_EQ(run_cli("compare " + base.string() + " " + slow.string(), "slow.log"), 1) << log_text("slow.log");
  EXPECT_NE(log_text("slow.log").find("REGRESSION"), std::string::npos);
  // 1% slower is within the 5% threshold even if the rank test sees it.
  EXPECT_EQ(run_cli("compare " + base.string() + " " + noisy.string(), "noisy.log"), 0) << log_text("noisy.log");
  // A wider threshold lets the 2x through; --json says the same.
  EXPECT_EQ(run_cli("compare " + base.string() + " " + slow.string() + " --threshold 150%", "wide.log"), 0);
  EXPECT_EQ(run_cli("compare " + base.string() + " " + slow.string() + " --json", "json.log"), 1);
  const auto json = nlohmann::json::parse(log_text("json.log"));
  EXPECT_TRUE(json.at("regression").get<bool>());
  EXPECT_NEAR(json.at("points")[0].at("ratio").get<double>(), 2.0, 1e-12);
  // The verdicts and the last line the table prints, for readers of --json (cnnbench report).
  EXPECT_EQ(json.at("points")[0].at("verdict"), "REGRESSION");
  EXPECT_EQ(json.at("points")[1].at("verdict"), "same");
  const std::string summary = json.at("summary").get<std::string>();
  EXPECT_EQ(summary.rfind("regression: 1 point more than 5.0% slower", 0), 0u) << summary;
  EXPECT_NE(log_text("slow.log").find(summary), std::string::npos) << log_text("slow.log");
}

// Runs of different length compare by time per image: 60 steps at the same speed as 200 are
// neither faster nor slower, and a 2x slower short run is still caught.
TEST(SweepCompare, RunsOfDifferentLengthCompareByWork) {
  nlohmann::json base = sweep_report(1.0);
  for (auto& p : base["points"]) p["steps"] = 200, p["batch"] = 64;
  const auto shorter = [&](double slowdown) {
    nlohmann::json report = base;
    for (auto& p : report["points"]) {
      if (p.at("status") != "ok") continue;
      p["steps"] = 60;
      for (auto& t : p["times_s"]) t = t.get<double>() * 0.3 * slowdown;
      p["time"]["median"] = p["time"]["median"].get<double>() * 0.3 * slowdown;
    }
    return report;
  };
  const Comparison same = compare_reports(base, shorter(1.0), 0.05, 0.05);
  ASSERT_EQ(same.points.size(), 2u);
  for (const ComparedPoint& c : same.points) {
    EXPECT_NEAR(c.ratio, 1.0, 1e-12) << c.id;
    EXPECT_NEAR(c.work_scale, 200.0 / 60.0, 1e-12) << c.id;
    EXPECT_FALSE(c.improvement || c.regression) << c.id;
  }
  const Comparison slow = compare_reports(base, shorter(2.0), 0.05, 0.05);
  EXPECT_TRUE(slow.any_regression());
  EXPECT_NEAR(slow.points[0].ratio, 2.0, 1e-12);
}

TEST(SweepCompare, SameMediansButOverlappingNoiseIsNotSignificant) {
  nlohmann::json base = sweep_report(1.0), candidate = sweep_report(1.0);
  // Medians 10% apart but the repetitions interleave: the rank test calls it noise.
  base["points"][0] = point("serial", 1, {1.0, 1.3, 0.8, 1.25, 0.95});
  candidate["points"][0] = point("serial", 1, {1.1, 0.85, 1.35, 0.9, 1.28});
  const Comparison c = compare_reports(base, candidate, 0.05, 0.05);
  ASSERT_EQ(c.points.size(), 2u);
  EXPECT_GT(c.points[0].ratio, 1.05);
  EXPECT_FALSE(c.points[0].significant);
  EXPECT_FALSE(c.any_regression());
}

// A sweep report whose context says which SIMD target and CPU it ran on.
nlohmann::json sweep_report_on(const std::string& simd_target, const std::string& cpu_model) {
  nlohmann::json report = sweep_report(1.0);
  report["context"] = {{"cpu_model", cpu_model},
                       {"cores", 2},
                       {"simd", {{"target", simd_target}}},
                       {"build", {{"compiler", "GNU 12.2.0"}, {"flags", "-O3 -DNDEBUG"}}}};
  return report;
}

TEST(SweepCompare, DifferentSimdTargetsWarnAndFailUnderSameMachine) {
  const auto base = write("avx2.json", sweep_report_on("avx2", "AMD EPYC").dump());
  const auto candidate = write("avx3.json", sweep_report_on("avx3", "AMD EPYC").dump());
  EXPECT_EQ(run_cli("compare " + base.string() + " " + candidate.string(), "simd.log"), 0)
      << log_text("simd.log");
  const std::string warned = log_text("simd.log");
  EXPECT_NE(warned.find("warning: the reports differ in SIMD target: avx2 (base) vs avx3 (new)"),
            std::string::npos)
      << warned;
  EXPECT_EQ(warned.find("differ in CPU"), std::string::npos) << warned;
  EXPECT_NE(warned.find("no regression"), std::string::npos) << warned;  // the table still comes

  EXPECT_EQ(run_cli("compare " + base.string() + " " + candidate.string() + " --same-machine",
                    "same.log"),
            2);
  const std::string refused = log_text("same.log");
  EXPECT_NE(refused.find("cnnbench: error: --same-machine"), std::string::npos) << refused;
  EXPECT_NE(refused.find("SIMD target: avx2 (base) vs avx3 (new)"), std::string::npos) << refused;
  EXPECT_EQ(refused.find("no regression"), std::string::npos) << refused;

  // Identical machines: no warning, and --same-machine lets the comparison through.
  EXPECT_EQ(run_cli("compare " + base.string() + " " + base.string() + " --same-machine", "one.log"), 0);
  EXPECT_EQ(log_text("one.log").find("warning"), std::string::npos) << log_text("one.log");
}

TEST(SweepCompare, MachineDifferencesAreListedInTheComparison) {
  nlohmann::json base = sweep_report_on("avx2", "AMD EPYC 7763 64-Core Processor");
  nlohmann::json candidate = sweep_report_on("avx2", "AMD EPYC 9654 96-Core Processor");
  candidate["context"]["cores"] = 4;
  candidate["context"]["build"]["flags"] = "-O2";
  candidate["context"]["openblas"] = {{"core_type", "SkylakeX"}};  // the base does not record it

  const Comparison c = compare_reports(base, candidate, 0.05, 0.05);
  ASSERT_EQ(c.machine_differences.size(), 3u);
  EXPECT_EQ(c.machine_differences[0].describe(),
            "CPU: AMD EPYC 7763 64-Core Processor (base) vs AMD EPYC 9654 96-Core Processor (new)");
  EXPECT_EQ(c.machine_differences[1].describe(), "core count: 2 (base) vs 4 (new)");
  EXPECT_EQ(c.machine_differences[2].describe(), "build flags: -O3 -DNDEBUG (base) vs -O2 (new)");
  const nlohmann::json json = comparison_json(c);
  ASSERT_EQ(json.at("machine_differences").size(), 3u);
  EXPECT_EQ(json.at("machine_differences")[1],
            (nlohmann::json{{"item", "core count"}, {"base", "2"}, {"new", "4"}}));

  // The cores' handoff as a whole: one die against two is a difference, 72 against 94 ns is not.
  const auto with_handoffs = [&](std::vector<double> handoffs) {
    nlohmann::json report = sweep_report_on("avx2", "AMD EPYC 7763 64-Core Processor");
    nlohmann::json probes = nlohmann::json::array();
    for (std::size_t k = 0; k < handoffs.size(); ++k) {
      probes.push_back({{"probe", k}, {"core", 0}});
      probes.push_back({{"probe", k}, {"core", 1}, {"handoff_ns", handoffs[k]}});
    }
    report["core_probes"] = {{"threshold", 0.1}, {"probes", probes}};
    return report;
  };
  const std::vector<MachineDifference> moved =
      machine_differences(with_handoffs({72, 79, 75}), with_handoffs({94, 349, 338, 342}));
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_EQ(moved[0].describe(), "cores' placement: close (a cache line's round trip 75 ns) (base) vs "
                                 "apart, no cache shared (a cache line's round trip 340 ns) (new)");
  EXPECT_TRUE(machine_differences(with_handoffs({72, 79, 75}), with_handoffs({94, 90, 88})).empty());
  EXPECT_TRUE(machine_differences(with_handoffs({72, 79, 75}), sweep_report_on("avx2", "AMD EPYC 7763 64-Core Processor")).empty());

  // With cpu objects on both sides they decide, not the marketing name: same name, other model.
  base["context"]["cpu"] = {{"vendor", "AMD"}, {"family", 25}, {"model", 1}, {"microarchitecture", "Zen 3"}};
  candidate = base;
  candidate["context"]["cpu"]["model"] = 17;
  candidate["context"]["cpu"]["microarchitecture"] = "Zen 4";
  const std::vector<MachineDifference> cpu = machine_differences(base, candidate);
  ASSERT_EQ(cpu.size(), 1u);
  EXPECT_EQ(cpu[0].describe(),
            "CPU: AMD family 25 model 1 (Zen 3) (base) vs AMD family 25 model 17 (Zen 4) (new)");
  EXPECT_TRUE(machine_differences(base, base).empty());
  // Reports with no context at all (hand-made ones) have nothing to compare.
  EXPECT_TRUE(machine_differences(sweep_report(1.0), sweep_report(2.0)).empty());
}

TEST(SweepCompare, MalformedReportsGetAClearError) {
  const auto base = write("good.json", sweep_report(1.0).dump());
  struct Case {
    std::string name, text, expected;
  };
  nlohmann::json bad_time = sweep_report(1.0);
  bad_time["points"][1]["times_s"][2] = "fast";
  nlohmann::json missing = sweep_report(1.0);
  missing["points"][0].erase("time");
  nlohmann::json version = sweep_report(1.0);
  version["schema_version"] = 99;
  const std::vector<Case> cases = {
      {"truncated.json", sweep_report(1.0).dump().substr(0, 40), "valid JSON"},
      {"bad_time.json", bad_time.dump(), "points[1].times_s[2]: expected a positive number"},
      {"missing.json", missing.dump(), "points[0].time"},
      {"version.json", version.dump(), "schema_version"},
      {"array.json", "[1, 2]", "(root)"},
  };
  for (const Case& c : cases) {
    const auto path = write(c.name, c.text);
    EXPECT_EQ(run_cli("compare " + base.string() + " " + path.string(), c.name + ".log"), 1) << c.name;
    const std::string log = log_text(c.name + ".log");
    EXPECT_NE(log.find(path.string()), std::string::npos) << log;
    EXPECT_NE(log.find(c.expected), std::string::npos) << log;
    EXPECT_THROW(read_report(path), Error) << c.name;
  }
  EXPECT_EQ(run_cli("compare " + base.string(), "usage.log"), 2);
  EXPECT_EQ(run_cli("compare " + base.string() + " " + base.string() + " --threshold five", "threshold.log"), 2);
  EXPECT_EQ(run_cli("compare " + base.string() + " /nonexistent/report.json", "absent.log"), 1);
}

// The typed records hold every field a sweep writes: a fixed report (tests/data/sweep-2core.json,
// the 2-core sweep of 2026-12-03, kept as it was made while results/ is remade) reads into a
// SweepRecord and back to the same JSON, and the analysis run again on it gives back its numbers
// (to the last bits: the report was written by an earlier build).
TEST(SweepRecords, ReportsReadBackUnchanged) {
  const nlohmann::json committed = read_report(CNNBENCH_SOURCE_DIR "/tests/data/sweep-2core.json");
  const nlohmann::json again = committed.get<SweepRecord>();
  // The report predates vs_pytorch_1thread, which every point now carries: null, as the report has
  // no pytorch point. Nothing else may change.
  for (const auto& change : nlohmann::json::diff(committed, again)) {
    const auto where = nlohmann::json::json_pointer(change.at("path").get<std::string>());
    EXPECT_TRUE(change.at("op") == "add" && where.back() == "vs_pytorch_1thread" &&
                change.at("value").is_null())
        << change.dump();
  }

  nlohmann::json analysed = committed;
  add_scaling_analysis(analysed);
  for (const auto& change : nlohmann::json::diff(committed, analysed)) {
    const auto where = nlohmann::json::json_pointer(change.at("path").get<std::string>());
    if (change.at("op") == "add" && where.back() == "vs_pytorch_1thread" && change.at("value").is_null()) continue;
    // The report predates the communication model's per-point prediction: that is the one field
    // the analysis may add (its numbers are checked in test_collective_model).
    if (change.at("op") == "add" && where.back() == "prediction") continue;
    ASSERT_EQ(change.at("op"), "replace") << change.dump();
    ASSERT_TRUE(committed.at(where).is_number()) << change.dump();
    const double before = committed.at(where).get<double>();
    EXPECT_NEAR(change.at("value").get<double>(), before, 1e-12 * std::abs(before)) << change.dump();
  }
}

TEST(SweepPlan, SerialFirstAndClusterGridWithinTheMachine) {
  SweepOptions options;
  options.models = {ModelKind::fc3, ModelKind::lenet5};
  options.strategies = {"stream", "cluster", "serial"};
  const auto plan = plan_points(options, {1, 2}, {1, 2}, 2);
  ASSERT_GE(plan.size(), 2u);
  EXPECT_EQ(plan[0].id(), "fc3/serial/n1c1");
  EXPECT_EQ(plan[1].id(), "lenet5/serial/n1c1");
  std::vector<std::string> ids;
  for (const auto& p : plan) ids.push_back(p.id());
  for (const char* id : {"fc3/stream/n1c2", "fc3/cluster/n1c2", "fc3/cluster/n2c1"}) {
    EXPECT_NE(std::find(ids.begin(), ids.end(), id), ids.end()) << id;
  }
  // 2 ranks x 2 threads needs 4 cores: not on a 2-core machine.
  EXPECT_EQ(std::find(ids.begin(), ids.end(), "fc3/cluster/n2c2"), ids.end());
  EXPECT_GT(estimate_point_bytes({ModelKind::lenet5, "cluster", 1, 4}, 64, 60000, 10000),
            estimate_point_bytes({ModelKind::lenet5, "cluster", 1, 1}, 64, 60000, 10000));
}

// A deadline (`tune --budget`) ends the rounds where the next would end after it: the first round
// always runs, the points keep the rounds they took, and the sweep is not complete.
// FC-3's serial and stream on one core, 3 rounds of 3 steps, quiet: a sweep of seconds.
SweepOptions three_short_rounds() {
  SweepOptions options;
  options.models = {ModelKind::fc3};
  options.strategies = {"serial", "stream"};
  options.cores = {1};
  options.nodes = {1};
  options.repeat = 3;
  options.warmup = 0;
  options.steps = 3;
  options.synthetic_samples = 256;
  options.quiet = true;
  return options;
}

TEST(SweepRunner, ADeadlineEndsTheRoundsAfterTheFirst) {
  SweepOptions options = three_short_rounds();
  options.pin = false;
  options.deadline_s = now_seconds();  // passed before the first round ends
  const SweepRecord cut = run_sweep(options);
  EXPECT_FALSE(cut.complete);
  EXPECT_FALSE(cut.interrupted);
  ASSERT_EQ(cut.points.size(), 2u);
  for (const PointRecord& p : cut.points) {
    ASSERT_TRUE(p.measured()) << p.id << ": " << p.reason;
    EXPECT_EQ(p.rounds, (std::vector<int>{0})) << p.id;
    EXPECT_EQ(p.rounds_done, 1) << p.id;
  }
  options.deadline_s = now_seconds() + 3600;
  const SweepRecord whole = run_sweep(options);
  EXPECT_TRUE(whole.complete);
  for (const PointRecord& p : whole.points) {
    EXPECT_EQ(p.rounds, (std::vector<int>{0, 1, 2})) << p.id;
    EXPECT_FALSE(p.rounds_done) << p.id;
  }
}

// The deadline holds for the retries of slow repetitions too: a repetition flagged slow (core 0's
// probe before the first round made 3 times slower) is not retried past it, and says so.
TEST(SweepRunner, ADeadlineLeavesSlowRepetitionsUnretried) {
  SweepOptions options = three_short_rounds();
  options.probe_slowdown = parse_probe_slowdown("0:0:3");
  options.deadline_s = now_seconds();  // passed before the first round ends
  const SweepRecord cut = run_sweep(options);
  int warnings = 0;
  for (const PointRecord& p : cut.points) {
    for (const SlowCoreWarningRecord& w : p.slow_core_warnings) {
      ++warnings;
      EXPECT_FALSE(w.retry) << p.id;
      EXPECT_EQ(w.used, "original") << p.id;
      EXPECT_NE(w.message.find("not retried: the deadline"), std::string::npos) << p.id << ": " << w.message;
    }
  }
  EXPECT_GT(warnings, 0) << "the slowed probe flagged no repetition";
}

// A failed job's reason is its own error line, not Open MPI's notes after it; without one, the
// last non-empty line.
TEST(SweepRunner, AFailedJobIsExplainedByItsOwnErrorLine) {
  const test::TempDir temp;
  const auto log = temp.path() / "job.log";
  std::ofstream(log) << "ORTE was unable to reliably start one or more daemons.\n"
                     << "cnnbench: error: lost contact with rank 1 (host h1) during a sum\n"
                     << "[vm:1] 2 more processes have sent help message help-mpi-api.txt\n\n";
  EXPECT_EQ(last_line(log), "cnnbench: error: lost contact with rank 1 (host h1) during a sum");
  std::ofstream(log) << "a line\nthe last line\n  \n";
  EXPECT_EQ(last_line(log), "the last line");
  std::ofstream(log).close();
  EXPECT_EQ(last_line(log), "(no output)");
}

// A sweep killed with SIGKILL cannot remove its scratch folder; the next sweep removes the folders
// of sweeps whose process is gone, and leaves those of running ones (and anything not named like
// a sweep's).
TEST(SweepRunner, RemovesTheScratchOfASweepThatIsGone) {
  const test::TempDir temp;
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  const auto gone = temp.path() / ("cnnbench-sweep-" + std::to_string(child));
  const auto running = temp.path() / ("cnnbench-sweep-" + std::to_string(::getppid()));
  const auto other = temp.path() / "cnnbench-sweep-12x";
  for (const auto& dir : {gone, running, other}) {
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "job.log") << "a line\n";
  }
  const char* before = std::getenv("TMPDIR");
  const std::string saved = before ? before : "";
  ::setenv("TMPDIR", temp.path().c_str(), 1);
  {
    SweepOptions options;
    options.models = {ModelKind::fc3};
    options.strategies = {"serial"};
    options.quiet = true;
    const SweepRunner runner(options);
    EXPECT_FALSE(std::filesystem::exists(gone));
    EXPECT_TRUE(std::filesystem::exists(running / "job.log"));
    EXPECT_TRUE(std::filesystem::exists(other / "job.log"));
    EXPECT_TRUE(std::filesystem::is_directory(temp.path() / ("cnnbench-sweep-" + std::to_string(::getpid()))));
  }
  // Its own goes when it ends.
  EXPECT_FALSE(std::filesystem::exists(temp.path() / ("cnnbench-sweep-" + std::to_string(::getpid()))));
  if (before) {
    ::setenv("TMPDIR", saved.c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }
}

// The PyTorch peers: pytorch at every core count, pytorch-ddp at every node count with one thread
// per rank (so as many processes as ranks, never more).
TEST(SweepPlan, PeersOverCoresAndRanks) {
  SweepOptions options;
  options.models = {ModelKind::fc3};
  options.strategies = {"serial", "pytorch", "pytorch-ddp"};
  std::vector<std::string> ids;
  for (const auto& p : plan_points(options, {1, 2}, {1, 3}, 2)) ids.push_back(p.id());
  const std::vector<std::string> expected = {"fc3/serial/n1c1", "fc3/pytorch/n1c1", "fc3/pytorch/n1c2",
                                             "fc3/pytorch-ddp/n1c1", "fc3/pytorch-ddp/n3c1"};
  EXPECT_EQ(ids, expected);
}

// Time to accuracy trains through run_training's every-N-steps hook: an evaluation after every
// eval_every steps and after the last one, stopping at the first that reaches the target.
TEST(SweepTimeToAccuracy, EvaluatesEveryNStepsAndStopsAtTheTarget) {
  TrainConfig config;
  config.model = ModelKind::fc3;
  config.batch = 32;
  config.pin = false;
  TimeToAccuracyJob job;
  job.config = config;
  job.config["synthetic"] = 512;
  job.eval_every = 5;
  job.max_steps = 12;
  job.target = 1.0;  // not reached in 12 steps: every evaluation is made
  const nlohmann::json all = measure_time_to_accuracy(nlohmann::json(job).get<TimeToAccuracyJob>());
  std::vector<std::int64_t> steps;
  for (const auto& point : all.at("curve")) steps.push_back(point.at("step").get<std::int64_t>());
  if (!all.at("reached").get<bool>()) {
    EXPECT_EQ(steps, (std::vector<std::int64_t>{5, 10, 12}));
    EXPECT_TRUE(all.at("seconds").is_null());
  }
  job.target = 0.01;  // any trained net beats 1%: reached at the first evaluation
  const nlohmann::json first = measure_time_to_accuracy(job);
  EXPECT_TRUE(first.at("reached").get<bool>());
  EXPECT_EQ(first.at("steps").get<std::int64_t>(), 5);
  EXPECT_EQ(first.at("curve").size(), 1u);
  EXPECT_GT(first.at("seconds").get<double>(), 0.0);
}

// Under srun the sweep bounds its cluster points by the allocation's CPUs, read from Slurm's
// SLURM_JOB_CPUS_PER_NODE: groups of CPUS or CPUS(xNODES); anything else reads as unknown (0).
TEST(SweepLauncher, SlurmAllocationCpusFromItsVariable) {
  const char* before = std::getenv("SLURM_JOB_CPUS_PER_NODE");
  const std::string kept = before != nullptr ? before : "";
  const std::vector<std::pair<std::string, int>> cases = {
      {"2", 2}, {"4(x2)", 8}, {"4(x2),2", 10}, {"36,72(x3)", 252}, {"", 0}, {"x", 0},
      {"4(x2", 0}, {"4(y2)", 0}, {"0", 0}, {"-2", 0}, {"2,", 2}, {"4(x2)z", 0}};
  for (const auto& [value, cpus] : cases) {
    ::setenv("SLURM_JOB_CPUS_PER_NODE", value.c_str(), 1);
    EXPECT_EQ(slurm_allocation_cpus(), cpus) << "SLURM_JOB_CPUS_PER_NODE=" << value;
  }
  ::unsetenv("SLURM_JOB_CPUS_PER_NODE");
  EXPECT_EQ(slurm_allocation_cpus(), 0) << "outside an allocation";
  if (before != nullptr) ::setenv("SLURM_JOB_CPUS_PER_NODE", kept.c_str(), 1);
}

// The median repetition by brute force: the one with as many repetitions strictly faster as the
// middle position allows, among equals the first.
std::size_t median_by_counting(const std::vector<double>& times) {
  const std::size_t middle = (times.size() - 1) / 2;
  for (std::size_t i = 0; i < times.size(); ++i) {
    std::size_t faster = 0, equal_before = 0;
    for (std::size_t j = 0; j < times.size(); ++j) {
      faster += times[j] < times[i];
      equal_before += j < i && times[j] == times[i];
    }
    if (faster + equal_before == middle) return i;
  }
  return times.size();
}

TEST(SweepRepetitions, MedianRepetitionIsTheMiddleOneByTime) {
  for (const std::vector<double>& times :
       std::vector<std::vector<double>>{{0.5}, {0.3, 0.1, 0.2}, {0.1, 0.4, 0.3, 0.2}, {0.2, 0.2, 0.1},
                                        {0.9, 0.8, 0.7, 0.6, 0.5}, {0.1, 0.2}, {0.3, 0.3, 0.3, 0.3}}) {
    EXPECT_EQ(median_repetition(times), median_by_counting(times)) << ::testing::PrintToString(times);
  }
  // Of an even count, the faster of the two middle ones: a repetition that ran.
  EXPECT_EQ(median_repetition(std::vector<double>{0.1, 0.4, 0.3, 0.2}), 3u);
  EXPECT_THROW(median_repetition(std::vector<double>{}), Error);
}

// A point keeps the breakdown, straggler and metrics of the repetition whose time is the median,
// not of the last one run.
TEST(SweepRepetitions, PointKeepsTheMedianRepetitionsBreakdown) {
  const std::vector<double> times = {0.31, 0.52, 0.35, 0.44, 0.27};  // the median is neither first nor last
  std::vector<Repetition> timed;
  for (std::size_t i = 0; i < times.size(); ++i) {
    Repetition rep;
    rep.seconds = times[i];
    rep.steps = 10;
    rep.final_loss = static_cast<double>(i);
    rep.time_breakdown = {{"wall_s", times[i] - 0.01}, {"steps", 10}, {"repetition", i}};
    rep.straggler = {{"kind", "thread"}, {"id", static_cast<int>(i)}, {"mean_excess", 1.0}};
    rep.strategy_metrics = {{"repetition", i}};
    timed.push_back(rep);
  }
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const auto median = static_cast<std::size_t>(std::find(times.begin(), times.end(), sorted[2]) - times.begin());
  PointRecord record;
  keep_median_repetition(record, timed);
  ASSERT_TRUE(record.median_repetition.has_value());
  EXPECT_EQ(static_cast<std::size_t>(*record.median_repetition), median);
  EXPECT_EQ(record.time_breakdown, timed[median].time_breakdown);
  EXPECT_EQ(record.straggler, timed[median].straggler);
  EXPECT_EQ(record.strategy_metrics, timed[median].strategy_metrics);
  EXPECT_EQ(record.final_loss, timed[median].final_loss);
  EXPECT_FALSE(record.noise_warning.has_value());  // no descheduled_s: an older report's breakdown
}

nlohmann::json breakdown_with_workers(const std::vector<std::pair<double, double>>& lost_and_wall) {
  nlohmann::json workers = nlohmann::json::array();
  for (std::size_t i = 0; i < lost_and_wall.size(); ++i) {
    workers.push_back({{"kind", "thread"}, {"id", static_cast<int>(i)},
                       {"descheduled_s", lost_and_wall[i].first}, {"wall_s", lost_and_wall[i].second}});
  }
  return {{"wall_s", 1.0}, {"descheduled_s", 0.0}, {"steps", 10}, {"workers", workers}};
}

TEST(SweepRepetitions, NoiseWarningNamesTheWorkerThatLostMostToDescheduling) {
  // 9% and 10% exactly: no warning; above it, the worst worker by fraction (not by seconds).
  EXPECT_FALSE(noise_warning(breakdown_with_workers({{0.09, 1.0}, {0.1, 1.0}})).has_value());
  const auto warning = noise_warning(breakdown_with_workers({{0.3, 2.0}, {0.25, 1.0}, {0.0, 1.0}}));
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("thread 1"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("25%"), std::string::npos) << *warning;
  // A worker of a multi-rank job is named with its rank.
  nlohmann::json ranked = breakdown_with_workers({{0.0, 1.0}, {0.5, 1.0}});
  ranked["workers"][1]["rank"] = 3;
  EXPECT_NE(noise_warning(ranked).value_or("").find("rank 3 thread 1"), std::string::npos);
  // Without workers, the critical path's own figures; without descheduled_s (reports made
  // before it), nothing.
  EXPECT_TRUE(noise_warning({{"wall_s", 2.0}, {"descheduled_s", 0.5}}).has_value());
  EXPECT_FALSE(noise_warning({{"wall_s", 2.0}, {"compute_s", 2.0}, {"workers", nlohmann::json::array()}}).has_value());
  EXPECT_FALSE(noise_warning(nlohmann::json()).has_value());
  nlohmann::json older = breakdown_with_workers({{0.5, 1.0}});
  older["workers"][0].erase("descheduled_s");
  EXPECT_FALSE(noise_warning(older).has_value());
}

TEST(SweepRepetitions, PointKeepsANoiseWarningOfItsMedianRepetition) {
  std::vector<Repetition> timed(3);
  for (std::size_t i = 0; i < timed.size(); ++i) {
    timed[i].seconds = 1.0 + static_cast<double>(i);
    timed[i].time_breakdown = breakdown_with_workers({{i == 1 ? 0.4 : 0.0, 1.0}});
  }
  PointRecord record;
  keep_median_repetition(record, timed);
  ASSERT_TRUE(record.noise_warning.has_value());
  EXPECT_EQ(*record.noise_warning, *noise_warning(timed[1].time_breakdown));
  nlohmann::json written;
  record.status = "ok";
  to_json(written, record);
  EXPECT_EQ(written.at("noise_warning"), *record.noise_warning);
  EXPECT_EQ(written.at("median_repetition"), 1);
}

TEST(SweepPlan, TraceFileNamesFollowThePointIds) {
  EXPECT_EQ(trace_file_name(PointSpec{ModelKind::lenet5, "cluster", 2, 4}), "lenet5-cluster-n4c2.json");
  EXPECT_EQ(trace_file_name(PointSpec{ModelKind::fc3, "serial", 1, 1}), "fc3-serial-n1c1.json");
}


// Probes of two cores over five boundaries: core 1 reads 30% slow in compute at probe 2 and 20%
// slow in memory at probe 4; core 0 never. Made up: no probe is timed here.
CoreProbesRecord made_up_probes() {
  CoreProbesRecord probes;
  probes.threshold = slow_core_threshold;
  for (int probe = 0; probe <= 4; ++probe) {
    probes.probes.push_back({probe, 0, 10.0, 20.0, 0, {}});
    probes.probes.push_back({probe, 1, probe == 2 ? 7.0 : 10.0, probe == 4 ? 16.0 : 20.0, 0, {}});
  }
  probes.medians = core_medians(probes.probes);
  return probes;
}

TEST(SweepCoreProbes, MediansPerCore) {
  const CoreProbesRecord probes = made_up_probes();
  ASSERT_EQ(probes.medians.size(), 2u);
  EXPECT_EQ(probes.medians[1].core, 1);
  EXPECT_DOUBLE_EQ(probes.medians[1].compute_gflops, 10.0);
  EXPECT_DOUBLE_EQ(probes.medians[1].memory_gbps, 20.0);
  const CoreDrop drop = core_drop(probes.probes[5], probes.medians[1]);  // core 1, probe 2
  EXPECT_NEAR(drop.compute, 0.3, 1e-12);
  EXPECT_DOUBLE_EQ(drop.memory, 0.0);
  EXPECT_EQ(drop.which(), "compute");
  EXPECT_TRUE(drop.compute_slow && !drop.memory_slow);
  EXPECT_EQ((CoreDrop{.compute = 0.2, .memory = 0.15, .compute_slow = true, .memory_slow = true}.which()),
            "compute and memory");
  EXPECT_EQ((CoreDrop{.compute = 0.05, .memory = 0.15, .memory_slow = true}.which()), "memory");
  EXPECT_EQ((CoreDrop{.memory = 0.15, .handoff = 0.4, .handoff_probed = true, .memory_slow = true,
                      .handoff_slow = true}.which()),
            "memory and handoff");
  EXPECT_DOUBLE_EQ((CoreDrop{.compute = 0.12, .memory = 0.15, .compute_slow = true}.worst()),
                   0.12);  // the slow rate's drop
  EXPECT_DOUBLE_EQ((CoreDrop{.compute = 0.12, .handoff = 0.5, .handoff_probed = true,
                             .compute_slow = true, .handoff_slow = true}.worst()),
                   0.5);
  // One slow probe in five leaves the spread at zero: the threshold stays at its floor.
  EXPECT_DOUBLE_EQ(probes.medians[1].compute_spread.value_or(-1), 0.0);
  EXPECT_DOUBLE_EQ(probes.medians[1].compute_threshold.value_or(-1), slow_core_threshold);
}

// A rate that spreads over the sweep (a shared machine's memory stream: 21-28 GB/s from one probe
// to the next) marks a core slow only past three of its spreads; a steady rate at 10%. Fewer than
// slow_core_min_probes probes give no spread.
TEST(SweepCoreProbes, ANoisyRateNeedsALargerDropThanASteadyOne) {
  const std::vector<double> memory = {25.8, 23.6, 28.3, 21.4, 26.4, 24.4, 27.5, 24.7};
  std::vector<CoreProbeRecord> probes;
  for (int probe = 0; probe < static_cast<int>(memory.size()); ++probe) {
    probes.push_back({probe, 0, 9.0 + 0.01 * probe, memory[static_cast<std::size_t>(probe)], 0, {}});
  }
  const CoreMedianRecord median = core_medians(probes).at(0);
  ASSERT_TRUE(median.memory_spread && median.memory_threshold && median.compute_threshold);
  EXPECT_GT(*median.memory_spread, 0.05);
  EXPECT_NEAR(*median.memory_threshold, slow_core_spreads * *median.memory_spread, 1e-12);
  EXPECT_DOUBLE_EQ(*median.compute_threshold, slow_core_threshold);
  // 21.4 GB/s is 16% under the median of 25.25: noise for this rate, not a slow core.
  EXPECT_FALSE(core_drop(probes[3], median).slow());
  const CoreDrop halved = core_drop({9, 0, 9.0, 12.0, 0, {}}, median);
  EXPECT_TRUE(halved.memory_slow && !halved.compute_slow);
  // A 12% compute drop is past the steady compute rate's 10%.
  EXPECT_TRUE(core_drop({9, 0, 7.9, 25.0, 0, {}}, median).compute_slow);
  probes.resize(slow_core_min_probes - 1);
  const CoreMedianRecord few = core_medians(probes).at(0);
  EXPECT_FALSE(few.memory_spread || few.memory_threshold);
  EXPECT_TRUE(core_drop(probes[3], few).memory_slow);  // the floor alone
}

// The handoff is a rate like the others, 1 / round trip: core 1's line took 430-460 ns to go to
// core 0 and back, and 900 ns at probe 3 (the cores further apart) is a 51% drop, past its
// threshold; the first core has no handoff and never a handoff drop.
TEST(SweepCoreProbes, ASlowerHandoffMarksTheCore) {
  CoreProbesRecord probes;
  probes.threshold = slow_core_threshold;
  const std::vector<double> round_trip = {430, 445, 460, 900, 440, 450, 435};
  for (int probe = 0; probe < static_cast<int>(round_trip.size()); ++probe) {
    probes.probes.push_back({probe, 0, 10.0, 20.0, 0, {}});
    probes.probes.push_back({probe, 1, 10.0, 20.0, 0, round_trip[static_cast<std::size_t>(probe)]});
  }
  probes.medians = core_medians(probes.probes);
  ASSERT_TRUE(probes.medians[1].handoff_ns && probes.medians[1].handoff_threshold);
  EXPECT_DOUBLE_EQ(*probes.medians[1].handoff_ns, 445.0);
  EXPECT_FALSE(probes.medians[0].handoff_ns);
  const std::vector<int> both = {0, 1};
  const auto slow = slow_probe_around(probes, both, 2);  // probe 3, after round 2
  ASSERT_TRUE(slow);
  EXPECT_EQ(slow->core, 1);
  EXPECT_EQ(slow->probe, 3);
  EXPECT_EQ(slow->drop.which(), "handoff");
  EXPECT_NEAR(slow->drop.worst(), 1 - 445.0 / 900.0, 1e-12);
  EXPECT_FALSE(slow->every_core);
  for (int round : {0, 4, 5}) EXPECT_FALSE(slow_probe_around(probes, both, round)) << round;
  const CoreDrop first = core_drop(probes.probes[6], probes.medians[0]);  // core 0, probe 3
  EXPECT_FALSE(first.handoff_probed || first.handoff_slow);
}

// Every core slow in the same rate at one probe is the machine or its host, not one core.
TEST(SweepCoreProbes, EveryCoreSlowAtOnceIsTheMachine) {
  CoreProbesRecord probes;
  probes.threshold = slow_core_threshold;
  for (int probe = 0; probe <= 5; ++probe) {
    for (int core = 0; core < 2; ++core) {
      const bool slow_memory = probe == 2 || (probe == 4 && core == 1);
      probes.probes.push_back({probe, core, 10.0, slow_memory ? 14.0 : 20.0, 0, {}});
    }
  }
  probes.medians = core_medians(probes.probes);
  const std::vector<int> core1 = {1};
  const auto machine = slow_probe_around(probes, core1, 1);  // probe 2, after round 1
  ASSERT_TRUE(machine);
  EXPECT_EQ(machine->probe, 2);
  EXPECT_TRUE(machine->every_core);
  const auto one = slow_probe_around(probes, core1, 4);  // probe 4, before round 4
  ASSERT_TRUE(one);
  EXPECT_EQ(one->probe, 4);
  EXPECT_FALSE(one->every_core);
}

// A repetition of round r sits between probes r and r + 1: rounds 1 and 2 of a point on core 1 are
// next to probe 2, round 3 next to probe 4 (memory); round 0 and every round on core 0 are not.
TEST(SweepCoreProbes, RepetitionsNextToASlowProbeOfTheirCores) {
  const CoreProbesRecord probes = made_up_probes();
  const std::vector<int> core0 = {0}, core1 = {1}, both = {0, 1};
  EXPECT_FALSE(slow_probe_around(probes, core1, 0));
  for (int round : {1, 2}) {
    const auto slow = slow_probe_around(probes, both, round);
    ASSERT_TRUE(slow) << round;
    EXPECT_EQ(slow->core, 1);
    EXPECT_EQ(slow->probe, 2);
    EXPECT_EQ(slow->drop.which(), "compute");
    EXPECT_FALSE(slow_probe_around(probes, core0, round)) << round;
  }
  const auto memory = slow_probe_around(probes, core1, 3);
  ASSERT_TRUE(memory);
  EXPECT_EQ(memory->probe, 4);
  EXPECT_EQ(memory->drop.which(), "memory");
  EXPECT_NEAR(memory->drop.worst(), 0.2, 1e-12);
  // Within the threshold is normal: 9.5 against a median of 10.
  CoreProbesRecord mild = made_up_probes();
  mild.probes[5].compute_gflops = 9.5;
  mild.probes[9].memory_gbps = 19.0;
  mild.medians = core_medians(mild.probes);
  for (int round = 0; round < 4; ++round) EXPECT_FALSE(slow_probe_around(mild, both, round)) << round;
}

TEST(SweepCoreProbes, TestHookParsesAndRefusesMalformedValues) {
  const ProbeSlowdown both = parse_probe_slowdown("1:2:3");
  EXPECT_EQ(both.core, 1);
  EXPECT_EQ(both.probe, 2);
  EXPECT_DOUBLE_EQ(both.factor, 3.0);
  EXPECT_TRUE(both.compute && both.memory);
  EXPECT_FALSE(both.handoff);
  const ProbeSlowdown memory = parse_probe_slowdown("0:0:1.5:memory");
  EXPECT_TRUE(!memory.compute && memory.memory && !memory.handoff);
  const ProbeSlowdown handoff = parse_probe_slowdown("1:0:2:handoff");
  EXPECT_TRUE(!handoff.compute && !handoff.memory && handoff.handoff);
  for (const char* bad : {"", "1:2", "1:2:0.5", "x:2:3", "1:2:3:disk", "-1:0:2", "1:2:3:compute:x", "1:2:nan"}) {
    EXPECT_THROW(parse_probe_slowdown(bad), Error) << bad;
  }
}

// The probe runs on every core and gives positive rates; a slowdown does more work for the same
// counted work (its rates are not compared here: no timing assertions).
TEST(SweepCoreProbes, ProbeMeasuresEveryCore) {
  CoreProbe probe;
  const CoreSpeed first = probe.measure(0);
  EXPECT_GT(first.compute_gflops, 0);
  EXPECT_GT(first.memory_gbps, 0);
  const CoreSpeed slowed = probe.measure(0, 2.0, 2.0);
  EXPECT_GT(slowed.compute_gflops, 0);
  EXPECT_THROW(probe.measure(0, 0.5, 1.0), Error);
  // A cache line's round trip between core 0 and the last core.
  const int last = machine_topology().cores - 1;
  if (last == 0) GTEST_SKIP() << "one core: no handoff between cores to measure";
  EXPECT_GT(probe.handoff(last, 0).round_trip_ns, 0);
  EXPECT_THROW(probe.handoff(last, 0, 0.5), Error);
}

// The rounds' and probes' fields go to JSON and back unchanged, and a point without them writes
// none of them (older reports read back as they were).
TEST(SweepRecords, RoundsAndSlowCoreWarningsReadBack) {
  PointRecord point;
  point.id = "fc3/stream/n1c2";
  point.times_s = {0.2, 0.3};
  point.time = summarize(point.times_s);
  EXPECT_FALSE(nlohmann::json(point).contains("rounds"));
  EXPECT_FALSE(nlohmann::json(point).contains("slow_core_warnings"));
  point.rounds = {0, 1};
  point.started_s = {1.5, 4.0};
  point.rounds_done = 2;
  SlowCoreWarningRecord warning;
  warning.core = 1;
  warning.round = 1;
  warning.probe = 2;
  warning.drop = warning.compute_drop = 0.3;
  warning.dropped = "compute";
  warning.every_core = true;
  warning.seconds = 0.4;
  warning.ratio = 1.4;
  warning.retry = RetryRecord{0.3, 0.5, 1.8, true};
  warning.used = "retry";
  warning.message = "core 1 was slow";
  point.slow_core_warnings = {warning};
  const nlohmann::json written = point;
  EXPECT_EQ(written.at("rounds"), nlohmann::json({0, 1}));
  EXPECT_EQ(written.at("slow_core_warnings").at(0).at("retry").at("probe_normal"), true);
  EXPECT_EQ(nlohmann::json(written.get<PointRecord>()), written);
  SweepRecord sweep;
  sweep.core_probes = made_up_probes();
  const nlohmann::json report = sweep;
  EXPECT_EQ(report.at("core_probes").at("probes").size(), 10u);
  EXPECT_EQ(nlohmann::json(report.get<SweepRecord>()), report);
}

}  // namespace
}  // namespace cnnbench
