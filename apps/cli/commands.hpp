// The cnnbench subcommands. Each registers itself on the root app; when it is the chosen one its
// callback stores the function that runs it, and main turns errors into exit codes.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace cnnbench::cli {

using Runner = std::function<int()>;  // returns the process exit code

void add_train_command(CLI::App& root, Runner& runner);
void add_info_command(CLI::App& root, Runner& runner);

}  // namespace cnnbench::cli
