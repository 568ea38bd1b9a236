// Spawning the sweep's launched jobs (posix_spawn) and waiting for them.
#include "subprocess.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "cnnbench/core.hpp"

extern char** environ;

namespace cnnbench {

std::string last_line(const std::filesystem::path& log) {
  std::string text;
  try {
    text = read_file(log);
  } catch (const Error&) {
    return "(no output)";
  }
  std::istringstream lines(text);
  std::string line, last = "(no output)", error;
  while (std::getline(lines, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
    if (line.starts_with("cnnbench: error: ")) error = line;
  }
  return error.empty() ? last : error;
}

int run_logged(const std::vector<std::string>& args, const std::filesystem::path& log,
               const std::function<bool()>& stop_requested) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  // In the scratch folder, so that files a job leaves behind (a checkpoint of an interrupted run)
  // go away with it; every path handed to the job is absolute.
  posix_spawn_file_actions_addchdir_np(&actions, log.parent_path().c_str());
  std::vector<std::string> words = args;
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int status = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (status != 0) fail("cannot start " + args[0] + ": " + std::strerror(status));
  bool stop_sent = false;
  for (;;) {
    int wait_status = 0;
    const pid_t done = ::waitpid(pid, &wait_status, WNOHANG);
    if (done == pid) {
      return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
    }
    if (done < 0 && errno != EINTR) fail(std::string("waiting for ") + args[0] + ": " + std::strerror(errno));
    if (!stop_sent && stop_requested && stop_requested()) {
      ::kill(pid, SIGTERM);
      stop_sent = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace cnnbench
