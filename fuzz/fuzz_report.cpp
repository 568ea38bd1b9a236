// libFuzzer target for the report reader behind `cnnbench compare` and `plot`: any bytes either
// load or throw cnnbench::Error, and what read_report accepts must be safe to compare. A JSON
// type or range error escaping report_points / compare_reports means the reader let through a
// field they rely on.
#include <cstddef>
#include <cstdint>

#include "cnnbench/core.hpp"
#include "cnnbench/sweep.hpp"
#include "fuzz_input_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const cnnbench::fuzz::InputFile file("report.json");
  const auto report =
      file.read_back(data, size, [](const auto& path) { return cnnbench::read_report(path); });
  if (!report) return 0;
  (void)cnnbench::report_points(*report);
  const cnnbench::Comparison comparison = cnnbench::compare_reports(*report, *report, 0.05, 0.05);
  (void)cnnbench::comparison_json(comparison).dump();
  return 0;
}
