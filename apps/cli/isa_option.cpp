// The --isa option of train, sweep and info: which SIMD target the kernels run on. CNNBENCH_ISA gives
// the same choice from the environment; the flag wins. A target this CPU cannot run is a usage
// error (exit 2) naming the CPU's highest target, and the variable when the value came from it.
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "cnnbench/isa.hpp"
#include "cnnbench/isa_choice.hpp"
#include "commands.hpp"

namespace cnnbench::cli {

CLI::Option* add_isa_option(CLI::App* cmd, std::string& isa) {
  std::string names;
  for (const std::string& name : isa_choices()) {
    if (name != "best" && name != "highest") names += (names.empty() ? "" : ", ") + name;
  }
  return cmd
      ->add_option("--isa", isa,
                   "SIMD target of the kernels: best (the fastest per kernel family, measured once per "
                   "CPU and build and cached), highest (the highest the CPU runs), or one of " +
                       names + " (default: best; env CNNBENCH_ISA)")
      ->check(CLI::Validator([](std::string& value) { return isa_problem(value); }, "TARGET",
                             "isa"))
      ->capture_default_str();
}

void take_isa_from_environment(const CLI::App* cmd, std::string& isa) {
  if (cmd->count("--isa") > 0) return;
  const char* value = std::getenv("CNNBENCH_ISA");
  if (value == nullptr || *value == 0) return;
  const std::string problem = isa_problem(value);
  if (!problem.empty()) {
    throw CLI::ValidationError(std::string("CNNBENCH_ISA=") + value + ": " + problem);
  }
  isa = value;
}

std::vector<InputPath> isa_inputs(const std::string& isa) {
  if (isa != "best") return {};
  const std::optional<std::string> cache = kernel_cache_path();
  if (!cache) return {};
  return {{"the kernel cache that --isa best reads", *cache}};
}

}  // namespace cnnbench::cli
