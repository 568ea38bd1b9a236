// `cnnbench plot REPORT.json --out DIR`: draws a sweep report's plots (PNG + SVG) with
// plots/plot_report.py, found next to the source tree the binary was built from or installed;
// `cnnbench plot --trace TRACE.json --out DIR` a Gantt chart of one step of a train --trace.
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "cnnbench/core.hpp"
#include "cnnbench/sweep.hpp"
#include "commands.hpp"
#include "input_rules.hpp"

extern char** environ;

namespace cnnbench::cli {

namespace {

struct PlotArgs {
  std::string report;
  std::string trace;  // --trace: a Chrome trace instead of a sweep report
  std::string out = "plots";
  std::string script;
  std::string python;  // empty: the system's /usr/bin/python3 (where Debian puts matplotlib), else python3
};

// The exit codes plot_report.py uses when matplotlib cannot be imported, and after it printed a
// "cnnbench: error: ..." line of its own.
constexpr int missing_matplotlib_exit = 3;
constexpr int reported_error_exit = 4;

// --script, else $CNNBENCH_PLOT_SCRIPT, else plots/plot_report.py in a folder above the binary
// (a build tree inside the source tree), else the installed share/cnnbench/plot_report.py.
// The variable is checked as --script is, and named in the message (a usage error, exit 2).
std::filesystem::path find_plot_script(const std::string& given) {
  if (!given.empty()) return given;
  if (const char* env = std::getenv("CNNBENCH_PLOT_SCRIPT"); env != nullptr && *env != 0) {
    const std::string problem = path_kind_problem(env, PathKind::file, true);
    if (!problem.empty()) fail_usage("CNNBENCH_PLOT_SCRIPT=" + problem);
    return env;
  }
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe");
  for (auto dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    const auto candidate = dir / "plots" / "plot_report.py";
    if (std::filesystem::exists(candidate)) return candidate;
    if (dir == dir.root_path()) break;
  }
  const auto installed = exe.parent_path().parent_path() / "share" / "cnnbench" / "plot_report.py";
  if (std::filesystem::exists(installed)) return installed;
  fail("cannot find plots/plot_report.py above " + exe.parent_path().string() +
       " nor in share/cnnbench; pass --script PATH or set CNNBENCH_PLOT_SCRIPT");
}

// The images plots/plot_report.py writes into --out, without their .png/.svg: a sweep report's,
// or NAME-gantt for a trace NAME.json.
std::vector<std::string> plot_names(const PlotArgs& a) {
  if (!a.trace.empty()) return {std::filesystem::path(a.trace).stem().string() + "-gantt"};
  return {"speedup", "efficiency", "throughput", "time_to_accuracy", "scaling_prediction", "breakdown"};
}

// The script's command line: a sweep report, or --trace FILE, into --out.
std::vector<std::string> script_words(const PlotArgs& a) {
  if (!a.trace.empty()) return {"--trace", a.trace, "--out", a.out};
  const nlohmann::json report = read_report(a.report);
  if (report.at("kind") != "sweep") fail(a.report + ": plot draws sweep reports, this is a single run report");
  return {a.report, "--out", a.out};
}

int run_plot(const PlotArgs& a) {
  // The script reads a trace itself and says what is wrong with one; a report is read here.
  std::vector<std::string> arguments = script_words(a);
  // None of the images may be the file they are drawn from.
  std::vector<std::string> files;
  for (const std::string& name : plot_names(a)) {
    for (const char* ext : {".png", ".svg"}) files.push_back(name + ext);
  }
  const std::string input = a.trace.empty() ? a.report : a.trace;
  check_outputs({{.option = "--out", .path = a.out, .folder = true, .files = files}},
                {{a.trace.empty() ? "REPORT" : "--trace", input}});
  const std::filesystem::path script = find_plot_script(a.script);
  check_output_folder(a.out, "--out");
  const std::string python =
      !a.python.empty() ? a.python : std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  // The scaling-prediction plot asks this cnnbench for its curves (cnnbench scaling-model).
  ::setenv("CNNBENCH_EXECUTABLE", std::filesystem::read_symlink("/proc/self/exe").c_str(), 1);
  std::vector<std::string> words = {python, script.string()};
  words.insert(words.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int started = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  if (started != 0) {
    fail("cannot run " + python + " (" + std::strerror(started) +
         "): install python3 with matplotlib (Debian: apt-get install python3-matplotlib)");
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) fail(std::string("waiting for the plot script: ") + std::strerror(errno));
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code == missing_matplotlib_exit) {
    fail(python + " has no matplotlib: install it (Debian: apt-get install python3-matplotlib)");
  }
  if (code == reported_error_exit) return 1;
  if (code != 0) fail(script.string() + " failed with exit code " + std::to_string(code));
  return 0;
}

}  // namespace

void add_plot_command(CLI::App& root, Runner& runner) {
  auto args = std::make_shared<PlotArgs>();
  CLI::App* cmd = root.add_subcommand(
      "plot", "Draw a sweep report's plots, or one step of a trace as a Gantt chart (PNG + SVG) with matplotlib");
  // Not CLI::ExistingFile: a missing report is a runtime error (exit 1) as in compare.
  CLI::Option* report = cmd->add_option("REPORT", args->report, "sweep report (JSON)");
  cmd->add_option("--trace", args->trace,
                  "a Chrome trace (train --trace, sweep --trace-dir): draw one step of it per "
                  "track as NAME-gantt.png/.svg instead of a report's plots")
      ->excludes(report);
  cmd->add_option("--out", args->out, "folder for the images")
      ->check(output_path_rule(OutputKind::folder))
      ->capture_default_str();
  cmd->add_option("--script", args->script,
                  "plot script (default: $CNNBENCH_PLOT_SCRIPT, else plots/plot_report.py)")
      ->check(input_path_rule(PathKind::file, true));
  cmd->add_option("--python", args->python, "Python interpreter with matplotlib (default /usr/bin/python3)");
  cmd->callback([args, &runner] {
    if (args->report.empty() && args->trace.empty()) {
      throw CLI::RequiredError("REPORT (or --trace FILE)");
    }
    runner = [args] { return run_plot(*args); };
  });
}

}  // namespace cnnbench::cli
