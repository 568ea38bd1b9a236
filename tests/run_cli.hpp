// Running the `cnnbench` executable from a test through a shell, with its exit code and everything
// it printed: the CLI and fault tests' shared launcher.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace cnnbench::test {

struct CliResult {
  int code = -1;       // exit status; 128 + N when killed by signal N; -1 when popen failed
  std::string output;  // stdout and stderr together
};

// Runs `cnnbench args`; `prefix` runs before the CLI in the same shell (environment, ulimit, trap),
// `wrapper` is the command that runs it (setpriv ...). stderr joins stdout before `args`, so a
// redirection in them (">/dev/full") moves stdout alone.
inline CliResult run_cli(const std::string& args, const std::string& prefix = "",
                         const std::string& wrapper = "") {
  const std::string command =
      prefix + " exec " + wrapper + " " + CNNBENCH_CLI + " 2>&1 " + args;
  CliResult result;
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return result;
  std::array<char, 4096> buffer{};
  std::size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  result.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace cnnbench::test
