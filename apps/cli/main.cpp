// cnnbench: benchmarks of parallel training strategies for FC-3 and LeNet-5 on MNIST.
// Exit codes: 0 success, 1 runtime error, 2 usage error; each error is "cnnbench: error: ..." on stderr.
// Every message leaves through here: no exception's type name, no library's exception text and
// no raw control or invalid byte reaches the user, and a failed write to standard output is an
// error (exit 1) for every command.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include <nlohmann/json.hpp>

#include "cnnbench/core.hpp"
#include "commands.hpp"

namespace {

void print_error(const std::string& message) {
  std::fflush(stdout);
  std::cerr << "cnnbench: error: " << cnnbench::printable_text(message) << "\n";
}

// nlohmann's "[json.exception.type_error.302] type must be number, but is string" without its
// bracketed name: a JSON value that cnnbench did not check itself.
std::string without_library_prefix(const std::string& text) {
  const std::size_t end = text.find("] ");
  return text.starts_with("[json.exception.") && end != std::string::npos ? text.substr(end + 2) : text;
}

// Exit 1 when what was printed to standard output could not be written (a full disk, a closed
// pipe); a command that failed already has said why.
int with_stdout_checked(int code) {
  errno = 0;
  std::cout.flush();
  const bool failed = std::fflush(stdout) != 0 || std::ferror(stdout) != 0 || !std::cout.good();
  if (!failed || code != 0) return code;
  const int error = errno;
  std::cerr << "cnnbench: error: cannot write to standard output"
            << (error != 0 ? std::string(": ") + std::strerror(error) : std::string()) << "\n";
  return 1;
}

int run(int argc, char** argv) {
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
  } catch (const cnnbench::UsageError& e) {
    print_error(e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    print_error("out of memory: the run asked for more than this machine could give (" +
                cnnbench::gigabytes_text(static_cast<double>(cnnbench::available_memory_bytes())) +
                " free when it failed); try a smaller --batch or --synthetic");
    return 1;
  } catch (const nlohmann::json::exception& e) {
    print_error("unexpected JSON value: " + without_library_prefix(e.what()));
    return 1;
  } catch (const std::exception& e) {
    print_error(e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) { return with_stdout_checked(run(argc, argv)); }
