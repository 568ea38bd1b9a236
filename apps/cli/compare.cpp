// `cnnbench compare BASE.json NEW.json`: per point ratio of median times and a Mann-Whitney U test
// on the raw repetitions. Exit 0: no regression; 1: a point is slower beyond the threshold and the
// difference is beyond noise (or, with too few repetitions to tell, the threshold alone says so),
// a report that cannot be read, a report that is incomplete or has failed or diverged points; 2: usage error, reports with no point in common, or (--strict, --same-machine)
// reports whose machines or settings differ. PyTorch peer points are printed, marked, and make no
// exit code.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/sweep.hpp"
#include "commands.hpp"

namespace cnnbench::cli {

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
  // A bare 5 would tolerate a 500% slowdown: almost surely 5% was meant.
  if (!percent && value > 1) {
    char meaning[96];
    std::snprintf(meaning, sizeof meaning, "'%s' would mean %g%%; write %s%% (or %g) for %s percent",
                  text.c_str(), 100 * value, text.c_str(), value / 100, text.c_str());
    throw CLI::ValidationError("--threshold", meaning);
  }
  return percent ? value / 100.0 : value;
}

namespace {

struct CompareArgs {
  std::string base, candidate;
  std::string threshold = "5%";
  double alpha = 0.05;
  bool json = false;
  bool same_machine = false;  // machine or build differences are an error, not a warning
  bool strict = false;        // ... and so are differences in the settings
};

// "fc3/serial/n1c1, fc3/blas/n1c2 and 3 more", or "no measured point".
std::string ids_text(const std::vector<PointRecord>& points) {
  if (points.empty()) return "no measured point";
  std::string text;
  for (std::size_t i = 0; i < points.size() && i < 3; ++i) text += (i ? ", " : "") + points[i].id;
  if (points.size() > 3) text += " and " + std::to_string(points.size() - 3) + " more";
  return text;
}

void print_table(const Comparison& comparison) {
  std::printf("%-24s %12s %12s %8s %9s  %s\n", "point", "base med s", "new med s", "ratio", "p-value", "verdict");
  bool threshold_only = false, peers = false;
  for (const ComparedPoint& c : comparison.points) {
    std::printf("%-24s %12.4f %12.4f %8.3f %9.4f%s %s%s\n", printable_text(c.id).c_str(), c.base_median_s,
                c.new_median_s, c.ratio, c.p_value, c.decided_by_threshold ? "*" : " ",
                comparison_verdict(c, comparison.threshold), c.peer ? " (peer)" : "");
    peers = peers || c.peer;
    threshold_only = threshold_only || c.decided_by_threshold;
  }
  if (std::any_of(comparison.points.begin(), comparison.points.end(),
                  [](const ComparedPoint& c) { return c.work_scale != 1.0; })) {
    std::printf("new times are scaled to the base's steps x batch per repetition (runs of different length)\n");
  }
  for (const auto& id : comparison.only_in_base) std::printf("%-24s only in the base report\n", printable_text(id).c_str());
  for (const auto& id : comparison.only_in_new) std::printf("%-24s only in the new report\n", printable_text(id).c_str());
  if (peers) {
    std::printf("(peer): a PyTorch peer point, shown for comparison; it does not count towards the exit code\n");
  }
  if (threshold_only) {
    std::printf("* too few repetitions for the rank test to reach p < %.3g: the threshold alone decides\n",
                comparison.alpha);
  }
  if (std::any_of(comparison.points.begin(), comparison.points.end(), [&](const ComparedPoint& c) {
        return !c.decided_by_threshold && !c.significant && std::abs(c.ratio - 1.0) > comparison.threshold;
      })) {
    std::printf("noise: beyond the threshold but not significant (p >= %.3g): the repetitions overlap\n",
                comparison.alpha);
  }
  std::printf("%s\n", printable_text(comparison_summary(comparison)).c_str());
}

// Differences between the reports on stderr (so that --json output stays one parseable
// document): warnings, or under --strict / --same-machine an error. False when refused.
bool report_differences(const Comparison& comparison, const CompareArgs& a) {
  std::vector<std::string> lines;
  // A report's text is anyone's: its control bytes are shown escaped, never sent to the terminal.
  for (const ReportDifference& d : comparison.machine_differences) lines.push_back(printable_text(d.describe()));
  const std::size_t machine = lines.size();
  for (const ReportDifference& d : comparison.config_differences) lines.push_back(printable_text(d.describe()));
  if (lines.empty()) return true;
  std::fflush(stdout);
  const bool refuse = a.strict || (a.same_machine && machine > 0);
  if (refuse) {
    std::cerr << "cnnbench: error: " << (a.strict ? "--strict" : "--same-machine")
              << ", but the reports were measured on different machines, builds or settings:\n";
    for (const std::string& line : lines) std::cerr << "  " << line << "\n";
    std::cerr << "compare them without " << (a.strict ? "--strict" : "--same-machine")
              << " to see the times anyway\n";
    return false;
  }
  for (const std::string& line : lines) std::cerr << "cnnbench: warning: the reports differ in " << line << "\n";
  std::cerr << "cnnbench: warning: differences in time may come from the "
            << (machine > 0 ? "machine, build or settings" : "settings") << ", not the code\n";
  return true;
}

int run_compare(const CompareArgs& a) {
  const double threshold = parse_threshold(a.threshold);
  const nlohmann::json base = read_report(a.base);
  const nlohmann::json candidate = read_report(a.candidate);
  const Comparison comparison = compare_reports(base, candidate, threshold, a.alpha);
  // A gate that compared nothing must not pass: no point in common is a usage error.
  if (comparison.points.empty() && comparison.unfinished.empty()) {
    throw UsageError("nothing to compare: base has " + ids_text(report_points(base)) +
                     ", new has " + ids_text(report_points(candidate)) +
                     " (compare reports of the same models, strategies, cores and nodes)");
  }
  // A refusal is not a verdict on the code: exit 2, apart from a regression's 1.
  if (!report_differences(comparison, a)) return 2;
  if (a.json) {
    write_json("-", comparison_json(comparison));
  } else {
    print_table(comparison);
  }
  if (!comparison.unfinished.empty()) {
    std::fflush(stdout);
    std::cerr << "cnnbench: error: the reports do not hold a whole measurement:\n";
    for (const std::string& line : comparison.unfinished) std::cerr << "  " << printable_text(line) << "\n";
    return 1;
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
                "refuse (exit 2) when the reports differ in CPU, core count, SIMD target, OpenBLAS "
                "core type, compiler or build flags, instead of warning");
  cmd->add_flag("--strict", args->strict,
                "refuse (exit 2) when the reports differ in machine, build or settings (batch, steps, "
                "data, learning rate, strategy options...), instead of warning");
  cmd->callback([args, &runner] {
    parse_threshold(args->threshold);  // a bad threshold is a usage error (exit 2)
    runner = [args] { return run_compare(*args); };
  });
}

}  // namespace cnnbench::cli
