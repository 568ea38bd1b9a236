// The cnnbench command line as one CLI11 app: the root options and every subcommand. Shared by
// main (which parses and runs) and by the CLI fuzzer (which only parses).
#include <string>

#include "cnnbench/config.hpp"
#include "commands.hpp"

namespace cnnbench::cli {

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
