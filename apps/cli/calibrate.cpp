// `cnnbench calibrate`: times the kernel targets again on purpose, shows each family's margins
// (every candidate's time over the default's, and the noise of the default against itself), and
// writes the choice `--isa best` then takes. A machine too busy to tell leaves the cache as it was.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cnnbench/isa_choice.hpp"
#include "cnnbench/report.hpp"
#include "commands.hpp"

namespace cnnbench::cli {

namespace {

struct CalibrateOptions {
  bool json = false;
};

std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", 100 * fraction);
  return text;
}

// One line per family: chosen target, noise, counted/disturbed rounds, then each candidate's
// median ratio to the default ("avx2 1.183").
void print_calibration(std::ostream& out, const Calibration& calibration) {
  char line[256];
  std::snprintf(line, sizeof line, "%-14s %-8s %-8s %6s %8s  %s\n", "family", "chosen", "default",
                "noise", "rounds", "time over the default's (median of the counted rounds)");
  out << line;
  for (const FamilyCalibration& f : calibration.families) {
    std::string margins;
    for (const TargetMargin& m : f.margins) {
      char item[64];
      std::snprintf(item, sizeof item, "%s%s %.3f", margins.empty() ? "" : ", ", m.target.c_str(),
                    m.median_ratio);
      margins += item;
    }
    const std::string rounds = std::to_string(f.counted_rounds) + "/" +
                               std::to_string(f.counted_rounds + f.disturbed_rounds);
    std::snprintf(line, sizeof line, "%-14s %-8s %-8s %6s %8s  %s%s\n",
                  kernel_family_name(f.family), f.chosen.c_str(), f.default_target.c_str(),
                  percent(f.noise).c_str(), rounds.c_str(), margins.empty() ? "-" : margins.c_str(),
                  f.decided ? "" : "  (undecided: too noisy)");
    out << line;
  }
  out << "A target replaces the default only when its median is below 1 - max(" +
             percent(win_margin) + ", 2 x noise / sqrt(rounds)) and it won three rounds of four; rounds counted " +
             "of those run (a round the OS interrupted is not counted).\n";
}

int run_calibrate(const CalibrateOptions& options) {
  const Calibration calibration = recalibrate_and_cache();
  const std::optional<std::string> cache = kernel_cache_path();
  const bool written = cache && !calibration.busy();
  if (options.json) {
    write_json("-", {{"choice", calibration.choice.how},
                     {"calibration_ms", calibration.choice.calibration_ms},
                     {"calibrated_at", calibration.choice.measured_at},
                     {"families", calibration_json(calibration)},
                     {"cache", written ? nlohmann::json(*cache) : nlohmann::json()}});
  } else {
    print_calibration(std::cout, calibration);
    char took[64];
    std::snprintf(took, sizeof took, "%.0f ms", calibration.choice.calibration_ms);
    if (calibration.busy()) {
      std::cout << "too busy to decide (" << took << "): nothing cached; `--isa best` runs the "
                << "highest target until a calibration decides\n";
    } else if (written) {
      std::cout << "measured in " << took << "; `--isa best` takes this choice from "
                << *cache << "\n";
    } else {
      std::cout << "measured in " << took << "; not cached (CNNBENCH_ISA_CACHE=off or no home "
                << "folder): each `--isa best` run measures again\n";
    }
  }
  std::cout << std::flush;
  return calibration.busy() ? 1 : 0;
}

}  // namespace

void add_calibrate_command(CLI::App& root, Runner& runner) {
  auto options = std::make_shared<CalibrateOptions>();
  CLI::App* calibrate = root.add_subcommand(
      "calibrate",
      "Time every SIMD target of this CPU on each kernel family again, show the margins, and "
      "cache the choice --isa best takes (exit 1, nothing cached, when the machine is too busy "
      "to tell)");
  calibrate->add_flag("--json", options->json, "Print the calibration as JSON");
  calibrate->callback([&runner, options] {
    runner = [options] { return run_calibrate(*options); };
  });
}

}  // namespace cnnbench::cli
