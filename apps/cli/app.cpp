// The cnnbench command line as one CLI11 app: the root options and every subcommand. Shared by
// main (which parses and runs) and by the CLI fuzzer (which only parses).
#include <string>

#include "cnnbench/config.hpp"
#include "cnnbench/train.hpp"
#include "commands.hpp"

namespace cnnbench::cli {

namespace {

// CLI11 puts the flag before a validator's message; the spec's messages start with it too.
std::string without_flag(const OptionSpec& spec, const std::string& problem) {
  for (const std::string& lead : {spec.flag() + ": ", spec.flag() + " "}) {
    if (problem.starts_with(lead)) return problem.substr(lead.size());
  }
  return problem;
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
  }
}

void build_app(CLI::App& app, Runner& runner) {
  app.name("cnnbench");
  app.description("cnnbench: parallel training benchmarks for FC-3 and LeNet-5 on MNIST");
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("cnnbench ") + CNNBENCH_VERSION);
  add_train_command(app, runner);
  add_info_command(app, runner);
  add_sweep_command(app, runner);
  add_compare_command(app, runner);
  add_plot_command(app, runner);
  add_allreduce_bench_command(app, runner);
}

}  // namespace cnnbench::cli
