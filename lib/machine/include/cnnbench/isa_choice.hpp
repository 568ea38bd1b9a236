// Choosing the kernels' SIMD targets: "best" times every target the CPU runs on each kernel family
// with the models' own shapes, in paired rounds against the highest target, and keeps the highest
// unless another is faster by more than the rounds' own noise; once per CPU and build (the choice
// is cached under $XDG_CACHE_HOME/cnnbench/), so that every later run, rerun and resume takes the
// same kernels without paying for the timing again, and load at the moment of measuring cannot
// make two users of one CPU train different bits (docs/design.md, "Kernel targets").
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cnnbench/isa.hpp"

namespace cnnbench {

// "best": per family, the default (the highest target the CPU runs) unless a calibration showed
// another target clearly faster (from the cache, else measured now and cached; measured once per
// process at most); "highest": Highway's rule; a target name: that target everywhere. A machine
// too busy to calibrate gets the default, a note on stderr, and a cache entry saying so that
// lapses after busy_retry_seconds (so that the ranks of one start agree, and a later run measures
// again). Throws cnnbench::Error (isa_problem's text) when `name` cannot run here. A cache that
// cannot be read or written costs a note on stderr and a calibration, never the run.
// CNNBENCH_ISA_CACHE=off skips the cache (every process measures).
void use_isa(const std::string& name);
inline constexpr double busy_retry_seconds = 600;

// One kernel family's calibration. Each round times the default target (the highest the CPU
// runs) twice and every other candidate once, in a rotating order; a round in which the OS took
// the thread's core for more than 3% of a timing (thread CPU time against wall time) is
// disturbed and not counted. `ratio` is a candidate's time over the default's in one counted
// round; the default against itself gives the noise.
struct TargetMargin {
  std::string target;
  double median_ratio = 1;  // median over the counted rounds of time / the default's time
  double upper_quartile_ratio = 1;
};
struct FamilyCalibration {
  KernelFamily family = KernelFamily::dense;
  std::string chosen;                  // the default when not `decided`
  std::string default_target;
  std::vector<TargetMargin> margins;   // the candidates other than the default
  double noise = 0;     // 75th percentile of |the default's second time / its first - 1|
  int counted_rounds = 0, disturbed_rounds = 0;
  bool decided = false;  // false: too few quiet rounds, or noise above busy_noise
};

// What a calibration decides from its rounds (pure: unit-tested on made-up rounds). A candidate
// replaces the default only when its median ratio is below 1 - max(5%, 2 x noise / sqrt(rounds))
// (twice the median's own uncertainty) and it was faster in three rounds of four (upper
// quartile below 1); of several, the lowest median wins. Ties, and a family that cannot be
// decided (fewer than min_counted_rounds, or single rounds noisier than busy_noise), keep the
// default. The 5% keeps near-ties with the default: a family a few percent faster elsewhere is a
// smaller share of a step still, and a margin that narrow flips with the load.
inline constexpr int min_counted_rounds = 9;
inline constexpr double busy_noise = 0.20;
inline constexpr double win_margin = 0.05;
struct CandidateRounds {
  std::string target;
  std::vector<double> ratios;  // one per counted round
};
FamilyCalibration decide_family_target(KernelFamily family, const std::string& default_target,
                                       const std::vector<double>& self_ratios,
                                       const std::vector<CandidateRounds>& candidates);

// The candidates of a calibration: the supported targets, highest first, without the portable
// scalar kernels when the CPU has any SIMD target (they are the oracle, never the fast choice).
std::vector<std::string> calibration_candidates(const std::vector<std::string>& supported);

// A whole calibration: every family measured on the calling thread for about `budget_ms` (up to
// twice that while rounds are disturbed). `choice.how` is "measured", or "busy" (every family on
// the default) when some family could not be decided. The choice in use before is restored.
struct Calibration {
  KernelChoice choice;
  std::vector<FamilyCalibration> families;
  bool busy() const { return choice.how == "busy"; }
};
Calibration calibrate_kernels(double budget_ms);
inline constexpr double calibration_budget_ms = 600;

// `cnnbench calibrate`: measures now, whatever the cache holds, and caches the choice unless the
// machine was too busy to decide (then the cache is left as it was).
Calibration recalibrate_and_cache();

// The kernel cache file of this CPU, build and OpenBLAS kernel set; none when caching is off
// (CNNBENCH_ISA_CACHE=off) or there is no home folder for it.
std::optional<std::string> kernel_cache_path();

// The calibration as JSON (the cache file's "families", `calibrate --json`).
nlohmann::json calibration_json(const Calibration& calibration);

}  // namespace cnnbench
