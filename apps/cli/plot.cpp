// `cnnbench plot REPORT.json --out DIR`: draws a sweep report's plots (PNG + SVG) with
// plots/plot_report.py, found next to the source tree the binary was built from or installed;
// `cnnbench plot --trace TRACE.json --out DIR` a Gantt chart of one step of a train --trace.
#include <algorithm>
#include <cctype>
#include <fstream>
#include <iostream>

#include "cnnbench/core.hpp"
#include "cnnbench/sweep.hpp"
#include "commands.hpp"
#include "input_rules.hpp"
#include "python_script.hpp"

namespace cnnbench::cli {

namespace {

using nlohmann::json;

constexpr PlotsScript plot_script{.name = "plot_report.py", .env_variable = "CNNBENCH_PLOT_SCRIPT"};

struct PlotArgs {
  std::string report;
  std::string trace;  // --trace: a Chrome trace instead of a sweep report
  std::string out = "plots";
  std::string script;
  std::string python;  // empty: the system's /usr/bin/python3 (where Debian puts matplotlib), else python3
  bool force = false;
};

// A name the script gave an image: a file name of letters, digits, '-' and '_' (it lands in --out).
bool plain_image_name(const json& name) {
  if (!name.is_string()) return false;
  const std::string& text = name.get_ref<const std::string&>();
  return !text.empty() && text.size() <= 100 && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_';
  });
}

// The images plots/plot_report.py writes into --out, without their .png/.svg, into `names`:
// NAME-gantt for a trace NAME.json; a sweep report's as the script names them when asked
// (--names FILE), since a figure too large for one page goes to NAME-1, NAME-2, ... and only the
// script lays it out. Returns 0, or 1 after the script reported an error of its own.
int plot_names(const PlotArgs& a, const std::filesystem::path& script, std::vector<std::string>& names) {
  if (!a.trace.empty()) {
    names = {std::filesystem::path(a.trace).stem().string() + "-gantt"};
    return 0;
  }
  const ScratchFolder scratch("cnnbench-plot");
  const std::filesystem::path list = scratch.path / "names.json";
  const int code = run_plots_script(script, {a.report, "--out", a.out, "--names", list.string()}, a.python);
  if (code != 0) return code;
  const std::string what = script.filename().string() + " exited 0 but ";
  std::ifstream in(list);
  const json given = in ? json::parse(in, nullptr, false) : json();
  if (!given.is_array() || given.empty()) fail(what + "named no images (--names writes a JSON list of them)");
  for (const json& name : given) {
    if (!plain_image_name(name)) {
      fail(what + "named an image " + printable_text(name.dump().substr(0, 100)) + ", not a plain file name");
    }
    names.push_back(name.get<std::string>());
  }
  return 0;
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
  const std::filesystem::path script = find_plots_script(plot_script, a.script);
  const std::string input = a.trace.empty() ? a.report : a.trace;
  std::vector<InputPath> inputs = script_inputs(script, !a.script.empty());
  inputs.push_back({a.trace.empty() ? "REPORT" : "--trace", input});
  // The folder before the script is asked anything; then the images it names.
  check_outputs({{.option = "--out", .path = a.out, .folder = true}}, inputs);
  std::vector<std::string> names;
  if (const int code = plot_names(a, script, names); code != 0) return code;
  // None of the images may be the file they are drawn from, nor replace one without --force.
  std::vector<std::string> files;
  for (const std::string& name : names) {
    for (const char* ext : {".png", ".svg"}) files.push_back(name + ext);
  }
  check_outputs({{.option = "--out", .path = a.out, .folder = true, .files = files, .replace = a.force}}, inputs);
  const std::filesystem::path out = a.out;
  std::vector<FileStamp> before;
  for (const std::string& file : files) before.push_back(file_stamp(out / file));
  const int code = run_plots_script(script, arguments, a.python);
  if (code != 0) return code;
  // Each image whole: a PNG ends with its IEND chunk, an SVG with its closing tag.
  for (std::size_t i = 0; i < files.size(); ++i) {
    const bool png = files[i].ends_with(".png");
    check_script_output(out / files[i], before[i], png ? std::string_view("IEND\xae\x42\x60\x82", 8) : "</svg>",
                        script);
  }
  for (const std::string& name : names) std::cout << "wrote " << (out / name).string() << ".png and .svg\n";
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
  add_force_flag(cmd, args->force, "image in --out");
  add_script_options(*cmd, plot_script, "plot script", args->script, args->python);
  cmd->callback([args, &runner] {
    if (args->report.empty() && args->trace.empty()) {
      throw CLI::RequiredError("REPORT (or --trace FILE)");
    }
    runner = [args] { return run_plot(*args); };
  });
}

}  // namespace cnnbench::cli
