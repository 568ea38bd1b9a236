// cnnbench: benchmarks of parallel training strategies for FC-3 and LeNet-5 on MNIST.
// Exit codes: 0 success, 1 runtime error, 2 usage error; each error is "cnnbench: error: ..." on stderr.
#include <cstdio>
#include <exception>
#include <iostream>

#include "cnnbench/core.hpp"
#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app;
  cnnbench::cli::Runner runner;
  cnnbench::cli::build_app(app, runner);
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
