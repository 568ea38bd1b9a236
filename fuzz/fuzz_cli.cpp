// libFuzzer target for the command line: the input is split at NUL bytes into argv and parsed by
// the same CLI11 app as `cnnbench`, without running the chosen command. A usage error must be a
// CLI::ParseError (exit 2 in main); anything else escaping parse() would crash the real CLI.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  constexpr std::size_t kMaxArguments = 64;
  std::vector<std::string> arguments{"cnnbench"};
  std::string current;
  for (std::size_t i = 0; i < size && arguments.size() < kMaxArguments; ++i) {
    if (data[i] == 0) {
      arguments.push_back(current);
      current.clear();
    } else {
      current.push_back(static_cast<char>(data[i]));
    }
  }
  if (!current.empty() && arguments.size() < kMaxArguments) arguments.push_back(current);
  std::vector<char*> argv;
  for (std::string& a : arguments) argv.push_back(a.data());
  argv.push_back(nullptr);

  CLI::App app;
  cnnbench::cli::Runner runner;
  cnnbench::cli::build_app(app, runner);
  try {
    app.parse(static_cast<int>(arguments.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    // The message main would print (help text included), into a sink.
    std::ostringstream sink;
    app.exit(e, sink, sink);
  }
  return 0;
}
