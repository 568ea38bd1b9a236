// The Python scripts under plots/ that `plot` and `report` run: where to find them and how to run
// one with the interpreter that has matplotlib.
#pragma once

#include <sys/types.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "cnnbench/core.hpp"

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

// The files a script reads besides the report: itself, and the module and profiles beside it
// (html_report.py imports plot_report.py, which reads fabric_profiles.json). No output may be one
// of them (check_outputs): `report --script X --out X` would replace the generator with its page.
// `given` says whether the script came from --script (named so in a message) or was found.
std::vector<InputPath> script_inputs(const std::filesystem::path& script, bool given);

// What a file was before a script ran (its identity and last change), to tell whether the script
// wrote it.
struct FileStamp {
  bool exists = false;
  dev_t device = 0;
  ino_t inode = 0;
  std::int64_t modified_ns = 0, size = 0;
};
FileStamp file_stamp(const std::filesystem::path& file);

// Error (exit 1) unless the script that exited 0 wrote `file`: it exists, is not what it was
// `before`, is not empty and ends with `ending` (trailing whitespace aside). An empty or cut file
// is removed. A device or FIFO is not read back. `script` names the script in the message.
void check_script_output(const std::filesystem::path& file, const FileStamp& before, std::string_view ending,
                         const std::filesystem::path& script);

// A private folder in the temporary directory (PREFIX.XXXXXX) for what cnnbench and a script
// hand each other, removed with everything in it.
struct ScratchFolder {
  std::filesystem::path path;
  explicit ScratchFolder(const std::string& prefix);
  ~ScratchFolder();
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
};

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
