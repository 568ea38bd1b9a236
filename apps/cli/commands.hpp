// The cnnbench subcommands. Each registers itself on the root app; when it is the chosen one its
// callback stores the function that runs it, and main turns errors into exit codes.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cnnbench/core.hpp"

namespace cnnbench::cli {

using Runner = std::function<int()>;  // returns the process exit code

// The root app with every subcommand registered; parsing stores the chosen command in runner.
void build_app(CLI::App& app, Runner& runner);

void add_train_command(CLI::App& root, Runner& runner);
void add_info_command(CLI::App& root, Runner& runner);
void add_calibrate_command(CLI::App& root, Runner& runner);
void add_sweep_command(CLI::App& root, Runner& runner);
void add_tune_command(CLI::App& root, Runner& runner);
void add_compare_command(CLI::App& root, Runner& runner);
void add_plot_command(CLI::App& root, Runner& runner);
void add_report_command(CLI::App& root, Runner& runner);
void add_allreduce_bench_command(CLI::App& root, Runner& runner);
void add_scaling_model_command(CLI::App& root, Runner& runner);
void add_completion_command(CLI::App& root, Runner& runner);
void add_man_command(CLI::App& root, Runner& runner);

// One HTML page of a sweep report (`report`, `sweep --html`; apps/cli/report.cpp).
struct HtmlReportRequest {
  std::string sweep;     // the sweep report
  std::string baseline;  // "" or an older report to compare against (compare's verdicts)
  std::string out = "report.html";
  double threshold = 0.05, alpha = 0.05;  // compare's defaults
};
// Before any work, besides check_outputs: the page's path names a file, not a folder ("out/" would
// leave a file named "out"). `option` names it in the message ("--out", "--html").
void check_page_name(const std::string& path, const std::string& option);
// compare's and report's --threshold: "5%" or "0.05" -> 0.05; anything else is a usage error.
double parse_threshold(const std::string& text);
// Writes the page with plots/html_report.py (`script`, `python`: "" for the defaults); returns the
// exit code, 1 after the generator reported an error of its own.
int write_html_report(const HtmlReportRequest& request, const std::string& script = "",
                      const std::string& python = "");

// One flag per strategy option (strategy_option_specs()), storing into values[name]; "" means not
// given. The sweep gets only the options it passes on, with its own defaults. Choices and numbers
// are checked here (a usage error); free text is the strategy's to check.
enum class OptionFlags { train, sweep };
void add_strategy_option_flags(CLI::App* cmd, std::map<std::string, std::string>& values,
                               OptionFlags which);

// --isa TARGET on cmd, validated against this CPU; the caller applies it with cnnbench::use_isa
// before the run.
CLI::Option* add_isa_option(CLI::App* cmd, std::string& isa);
// In the command's callback: without --isa, CNNBENCH_ISA (when set) chooses the target, checked as
// the flag is, with the variable named in the message (exit 2). Commands without --isa ignore it.
void take_isa_from_environment(const CLI::App* cmd, std::string& isa);
// The kernel cache `isa` reads (--isa best), as an input no output may name, by any spelling;
// none for another target or without a cache.
std::vector<InputPath> isa_inputs(const std::string& isa);

}  // namespace cnnbench::cli
