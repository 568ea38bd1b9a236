// cnnbench: benchmarks of parallel training strategies for FC-3 and LeNet-5 on MNIST.
// Exit codes: 0 success, 1 runtime error (one line on stderr), 2 usage error (CLI11's message).
#include <cstdio>
#include <exception>
#include <iostream>

#include "cnnbench/config.hpp"
#include "cnnbench/core.hpp"
#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"cnnbench: parallel training benchmarks for FC-3 and LeNet-5 on MNIST", "cnnbench"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("cnnbench ") + CNNBENCH_VERSION);
  cnnbench::cli::Runner runner;
  cnnbench::cli::add_train_command(app, runner);
  cnnbench::cli::add_info_command(app, runner);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    return runner ? runner() : 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "cnnbench: error: " << e.what() << "\n";
    return 1;
  }
}
