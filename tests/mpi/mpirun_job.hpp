// Starting jobs under mpirun from a test and waiting for them with a deadline: the MPI tests'
// shared launcher (each tests/mpi/test_*.cpp is its own binary and includes this).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cnnbench/core.hpp"

extern char** environ;

namespace cnnbench::test {

// CNNBENCH_MPIRUN_FLAGS as words, whether CMake joined them with ';' or spaces.
inline std::vector<std::string> mpirun_flags() {
  std::vector<std::string> flags;
  std::istringstream words(CNNBENCH_MPIRUN_FLAGS);
  std::string word;
  while (std::getline(words, word, ';')) {
    std::istringstream parts(word);
    for (std::string part; parts >> part;) flags.push_back(part);
  }
  return flags;
}

// Starts argv[0] with argv and the current environment plus `extra_environment`, stdout and
// stderr into `log`; returns the pid.
inline pid_t spawn_logged(std::vector<std::string> args, const std::vector<std::string>& extra_environment,
                          const std::filesystem::path& log) {
  std::vector<std::string> environment;
  for (char** e = environ; *e != nullptr; ++e) environment.emplace_back(*e);
  environment.insert(environment.end(), extra_environment.begin(), extra_environment.end());
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : environment) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int status = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (status != 0) throw Error("cannot start " + args[0] + ": " + std::strerror(status));
  return pid;
}

// mpirun with the build's flags, --bind-to none and -np ranks, then the command.
inline std::vector<std::string> mpirun_command(int ranks, const std::vector<std::string>& command) {
  std::vector<std::string> args = {CNNBENCH_MPIRUN};
  for (const auto& flag : mpirun_flags()) args.push_back(flag);
  args.insert(args.end(), {"--bind-to", "none", "-np", std::to_string(ranks)});
  args.insert(args.end(), command.begin(), command.end());
  return args;
}

struct Ended {
  bool in_time = false;
  int exit_code = -1;
  double seconds = 0;
};

// Waits for the job up to `limit` seconds; past it, kills mpirun (which stops its ranks).
inline Ended wait_for(pid_t pid, double limit) {
  const double start = now_seconds();
  Ended ended;
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      ended.in_time = true;
      ended.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (now_seconds() - start > limit) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ended.seconds = now_seconds() - start;
  return ended;
}


}  // namespace cnnbench::test
