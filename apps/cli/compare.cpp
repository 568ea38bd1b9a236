// `cnnbench compare BASE.json NEW.json`: per point ratio of median times and a Mann-Whitney U test
// on the raw repetitions. Exit 0: no regression; 1: a point is slower beyond the threshold and the
// difference is beyond noise; 2: usage error, a report that cannot be read, or (--same-machine)
// reports measured on different CPUs, SIMD targets or builds.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cnnbench/core.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/sweep.hpp"
#include "commands.hpp"

namespace cnnbench::cli {

namespace {

struct CompareArgs {
  std::string base, candidate;
  std::string threshold = "5%";
  double alpha = 0.05;
  bool json = false;
  bool same_machine = false;  // machine or build differences are an error, not a warning
};

// "5%" or "0.05" -> 0.05.
double parse_threshold(const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  const bool percent = !text.empty() && text.back() == '%';
  const std::string number = percent ? text.substr(0, text.size() - 1) : text;
  try {
    value = std::stod(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != number.size() || number.empty() || !(value >= 0)) {
    throw CLI::ValidationError("--threshold", "expected a non-negative number like 5% or 0.05, got '" + text + "'");
  }
  return percent ? value / 100.0 : value;
}

const char* verdict(const ComparedPoint& c) {
  if (c.regression) return "REGRESSION";
  if (c.improvement) return "faster";
  if (!c.significant) return "noise";
  return "same";
}

void print_table(const Comparison& comparison) {
  std::printf("%-24s %12s %12s %8s %9s  %s\n", "point", "base med s", "new med s", "ratio", "p-value", "verdict");
  bool threshold_only = false;
  for (const ComparedPoint& c : comparison.points) {
    std::printf("%-24s %12.4f %12.4f %8.3f %9.4f%s %s\n", c.id.c_str(), c.base_median_s,
                c.new_median_s, c.ratio, c.test.p_value, c.decided_by_threshold ? "*" : " ", verdict(c));
    threshold_only = threshold_only || c.decided_by_threshold;
  }
  if (std::any_of(comparison.points.begin(), comparison.points.end(),
                  [](const ComparedPoint& c) { return c.work_scale != 1.0; })) {
    std::printf("new times are scaled to the base's steps x batch per repetition (runs of different length)\n");
  }
  for (const auto& id : comparison.only_in_base) std::printf("%-24s only in the base report\n", id.c_str());
  for (const auto& id : comparison.only_in_new) std::printf("%-24s only in the new report\n", id.c_str());
  if (threshold_only) {
    std::printf("* too few repetitions for the rank test to reach p < %.3g: the threshold alone decides\n",
                comparison.alpha);
  }
  if (comparison.any_regression()) {
    std::printf("regression: at least one point is more than %.1f%% slower and the difference is beyond noise\n",
                100 * comparison.threshold);
  } else {
    std::printf("no regression beyond %.1f%%\n", 100 * comparison.threshold);
  }
}

int run_compare(const CompareArgs& a) {
  const double threshold = parse_threshold(a.threshold);
  nlohmann::json base, candidate;
  try {
    base = read_report(a.base);
    candidate = read_report(a.candidate);
  } catch (const Error& e) {
    std::fflush(stdout);
    std::cerr << "cnnbench: error: " << e.what() << "\n";
    return 2;
  }
  const Comparison comparison = compare_reports(base, candidate, threshold, a.alpha);
  // On stderr, so that --json output stays one parseable document.
  if (!comparison.machine_differences.empty()) {
    std::fflush(stdout);
    if (a.same_machine) {
      std::cerr << "cnnbench: error: --same-machine, but the reports were measured on different "
                   "machines or builds:\n";
      for (const MachineDifference& d : comparison.machine_differences) {
        std::cerr << "  " << d.describe() << "\n";
      }
      std::cerr << "compare them without --same-machine to see the times anyway\n";
      return 2;
    }
    for (const MachineDifference& d : comparison.machine_differences) {
      std::cerr << "cnnbench: warning: the reports differ in " << d.describe() << "\n";
    }
    std::cerr << "cnnbench: warning: differences in time may come from the machine or build, not "
                 "the code\n";
  }
  if (a.json) {
    write_json("-", comparison_json(comparison));
  } else {
    print_table(comparison);
  }
  return comparison.any_regression() ? 1 : 0;
}

}  // namespace

void add_compare_command(CLI::App& root, Runner& runner) {
  auto args = std::make_shared<CompareArgs>();
  CLI::App* cmd = root.add_subcommand(
      "compare", "Compare two sweep (or run) reports point by point; exit 1 on a significant regression");
  cmd->add_option("BASE", args->base, "the reference report")->required();
  cmd->add_option("NEW", args->candidate, "the report to check")->required();
  cmd->add_option("--threshold", args->threshold, "slowdown tolerated, e.g. 5% or 0.05")
      ->capture_default_str();
  cmd->add_option("--alpha", args->alpha, "significance level of the Mann-Whitney U test")
      ->check(CLI::Range(1e-9, 0.5))
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "print the comparison as JSON");
  cmd->add_flag("--same-machine", args->same_machine,
                "fail (exit 2) when the reports differ in CPU, core count, SIMD target, OpenBLAS "
                "core type, compiler or build flags, instead of warning");
  cmd->callback([args, &runner] {
    parse_threshold(args->threshold);  // a bad threshold is a usage error (exit 2)
    runner = [args] { return run_compare(*args); };
  });
}

}  // namespace cnnbench::cli
