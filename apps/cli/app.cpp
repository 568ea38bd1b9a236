// The cnnbench command line as one CLI11 app: the root options and every subcommand. Shared by
// main (which parses and runs) and by the CLI fuzzer (which only parses).
#include <string>

#include "cnnbench/config.hpp"
#include "cnnbench/isa.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/train.hpp"
#include "commands.hpp"
#include "input_rules.hpp"

namespace cnnbench::cli {

namespace {

// CLI11 puts the flag before a validator's message; the spec's messages start with it too.
std::string without_flag(const OptionSpec& spec, const std::string& problem) {
  for (const std::string& lead : {spec.flag() + ": ", spec.flag() + " "}) {
    if (problem.starts_with(lead)) return problem.substr(lead.size());
  }
  return problem;
}

// --version: the release, the revision and how this binary was built.
std::string version_text() {
  const nlohmann::json build = build_json();
  std::string revision = build.at("git_sha").get<std::string>();
  if (build.at("git_dirty").get<bool>()) revision += " (dirty)";
  std::string targets;
  for (const std::string& target : isa_info().compiled) targets += (targets.empty() ? "" : " ") + target;
  const std::string sanitize = build.at("sanitize").get<std::string>();
  return "cnnbench " + build.at("version").get<std::string>() + "\ngit " + revision + "\nbuild " +
         build.at("type").get<std::string>() + ", " + build.at("compiler").get<std::string>() +
         ", flags " + build.at("flags").get<std::string>() +
         (sanitize.empty() ? "" : ", sanitizers " + sanitize) + "\nSIMD targets " + targets +
         "\nCUDA " + (CNNBENCH_HAVE_CUDA ? "on" : "off") + ", MPI " +
         (CNNBENCH_HAVE_MPI ? "on" : "off") + ", hwloc " + (CNNBENCH_HAVE_HWLOC ? "on" : "off");
}

}  // namespace

void add_strategy_option_flags(CLI::App* cmd, std::map<std::string, std::string>& values,
                               OptionFlags which) {
  for (const OptionSpec* spec : strategy_option_specs()) {
    if (which == OptionFlags::sweep && !spec->in_sweep) continue;
    std::string& value = values[spec->name];
    const std::string shown = which == OptionFlags::sweep && !spec->sweep_default.empty()
                                  ? spec->sweep_default
                                  : spec->default_text();
    if (which == OptionFlags::sweep) value = spec->sweep_default;
    CLI::Option* option = cmd->add_option(spec->flag(), value, spec->help_text())
                              ->type_name(spec->value_name)
                              ->default_str(shown);
    if (spec->kind != OptionKind::text && spec->kind != OptionKind::part_factor) {
      const auto problem = [spec](const std::string& text) {
        return without_flag(*spec, option_value_problem(*spec, text));
      };
      option->check(CLI::Validator(problem, "", spec->name));
    }
    if (spec->output_file) option->check(output_path_rule(OutputKind::file));
    if (spec->value_name == "LIST") {
      option->transform(CLI::Validator(
          [spec](std::string& list) {
            list = drop_repeated_keys(spec->flag(), list);
            return std::string();
          },
          "", spec->name + " repeats"));
    }
  }
}

void build_app(CLI::App& app, Runner& runner) {
  app.name("cnnbench");
  app.description("cnnbench: parallel training benchmarks for FC-3 and LeNet-5 on MNIST");
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text, "Print the version, git revision and build, and exit");
  app.failure_message(failure_message);
  add_train_command(app, runner);
  add_info_command(app, runner);
  add_calibrate_command(app, runner);
  add_sweep_command(app, runner);
  add_tune_command(app, runner);
  add_compare_command(app, runner);
  add_plot_command(app, runner);
  add_report_command(app, runner);
  add_allreduce_bench_command(app, runner);
  add_scaling_model_command(app, runner);
  add_completion_command(app, runner);
  add_man_command(app, runner);
}

}  // namespace cnnbench::cli
