// The Python scripts under plots/ that `plot` and `report` run: where to find them and how to run
// one with the interpreter that has matplotlib.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>
#include <vector>

namespace cnnbench::cli {

// The exit codes the scripts use when matplotlib cannot be imported, and after they printed a
// "cnnbench: error: ..." line of their own.
constexpr int missing_matplotlib_exit = 3;
constexpr int reported_error_exit = 4;

// One of the scripts: its file name under plots/ and the environment variable that overrides it.
struct PlotsScript {
  const char* name;
  const char* env_variable;
};

// `given`, else $ENV_VARIABLE, else plots/NAME in a folder above the binary (a build tree inside
// the source tree), else the installed share/cnnbench/NAME. The variable is checked as a flag is,
// and named in the message (a usage error, exit 2).
std::filesystem::path find_plots_script(const PlotsScript& script, const std::string& given);

// A command's --script (into `given_script`; `what` names the script in the help) and --python
// (into `python`), the choices find_plots_script and run_plots_script take.
void add_script_options(CLI::App& cmd, const PlotsScript& script, const std::string& what,
                        std::string& given_script, std::string& python);

// Runs `script` with `arguments` under `python` (empty: /usr/bin/python3 where it exists, which
// is where Debian puts matplotlib, else python3), with CNNBENCH_EXECUTABLE naming this cnnbench
// (the scaling-prediction plot asks it for its curves). Returns 0, or 1 after the script reported
// an error of its own; anything else is an Error that says what to install or what failed.
int run_plots_script(const std::filesystem::path& script, const std::vector<std::string>& arguments,
                     const std::string& python);

}  // namespace cnnbench::cli
