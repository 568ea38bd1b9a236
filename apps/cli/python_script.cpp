// Finding and running the plots/ scripts (python_script.hpp).
#include "python_script.hpp"

#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "cnnbench/core.hpp"
#include "input_rules.hpp"

extern char** environ;

namespace cnnbench::cli {

std::filesystem::path find_plots_script(const PlotsScript& script, const std::string& given) {
  if (!given.empty()) return given;
  if (const char* env = std::getenv(script.env_variable); env != nullptr && *env != 0) {
    const std::string problem = path_kind_problem(env, PathKind::file, true);
    if (!problem.empty()) fail_usage(std::string(script.env_variable) + "=" + problem);
    return env;
  }
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe");
  for (auto dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    const auto candidate = dir / "plots" / script.name;
    if (std::filesystem::exists(candidate)) return candidate;
    if (dir == dir.root_path()) break;
  }
  const auto installed = exe.parent_path().parent_path() / "share" / "cnnbench" / script.name;
  if (std::filesystem::exists(installed)) return installed;
  fail(std::string("cannot find plots/") + script.name + " above " + exe.parent_path().string() +
       " nor in share/cnnbench; pass --script PATH or set " + script.env_variable);
}

std::vector<InputPath> script_inputs(const std::filesystem::path& script, bool given) {
  std::vector<InputPath> inputs = {{given ? "--script" : "the script", script}};
  for (const char* beside : {"plot_report.py", "fabric_profiles.json"}) {
    const std::filesystem::path file = script.parent_path() / beside;
    std::error_code error;
    if (file.filename() != script.filename() && std::filesystem::exists(file, error)) {
      inputs.push_back({"the script's module", file});
    }
  }
  return inputs;
}

FileStamp file_stamp(const std::filesystem::path& file) {
  struct stat info {};
  if (::stat(file.c_str(), &info) != 0) return {};
  return {.exists = true,
          .device = info.st_dev,
          .inode = info.st_ino,
          .modified_ns = std::int64_t{info.st_mtim.tv_sec} * 1'000'000'000 + info.st_mtim.tv_nsec,
          .size = info.st_size};
}

void check_script_output(const std::filesystem::path& file, const FileStamp& before, std::string_view ending,
                         const std::filesystem::path& script) {
  const std::string what = script.filename().string() + " exited 0 but " + file.string();
  const FileStamp after = file_stamp(file);
  if (!after.exists) fail(what + " does not exist: no output was written");
  struct stat info {};
  if (::stat(file.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) return;  // a device or FIFO
  if (before.exists && before.device == after.device && before.inode == after.inode &&
      before.modified_ns == after.modified_ns && before.size == after.size) {
    fail(what + " is unchanged: no output was written");
  }
  // What the script left broken is removed: no half-written output stays behind.
  const auto broken = [&](const std::string& why) {
    std::error_code ignored;
    std::filesystem::remove(file, ignored);
    fail(what + why);
  };
  if (after.size == 0) broken(" is empty");
  std::ifstream in(file, std::ios::binary);
  const std::int64_t tail = std::min<std::int64_t>(after.size, 4096);
  std::string last(static_cast<std::size_t>(tail), '\0');
  in.seekg(after.size - tail);
  in.read(last.data(), tail);
  last.resize(static_cast<std::size_t>(in.gcount()));
  while (!last.empty() && std::isspace(static_cast<unsigned char>(last.back()))) last.pop_back();
  if (!ending.empty() && !last.ends_with(ending)) broken(" is cut short: it does not end as a whole file does");
}

ScratchFolder::ScratchFolder(const std::string& prefix) {
  std::string pattern = (std::filesystem::temp_directory_path() / (prefix + ".XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) fail("cannot create a folder in " + pattern + ": " + std::strerror(errno));
  path = pattern;
}

ScratchFolder::~ScratchFolder() {
  std::error_code ignored;
  std::filesystem::remove_all(path, ignored);
}

void add_script_options(CLI::App& cmd, const PlotsScript& script, const std::string& what,
                        std::string& given_script, std::string& python) {
  cmd.add_option("--script", given_script,
                 what + " (default: $" + script.env_variable + ", else plots/" + script.name + ")")
      ->check(input_path_rule(PathKind::file, true));
  cmd.add_option("--python", python,
                 "Python interpreter with matplotlib (default /usr/bin/python3)");
}

int run_plots_script(const std::filesystem::path& script, const std::vector<std::string>& arguments,
                     const std::string& python_given) {
  const std::string python = !python_given.empty()                         ? python_given
                             : std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3"
                                                                           : "python3";
  ::setenv("CNNBENCH_EXECUTABLE", std::filesystem::read_symlink("/proc/self/exe").c_str(), 1);
  std::vector<std::string> words = {python, script.string()};
  words.insert(words.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int started = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  if (started != 0) {
    fail("cannot run " + python + " (" + std::strerror(started) +
         "): install python3 with matplotlib (Debian: apt-get install python3-matplotlib)");
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) fail("waiting for " + script.filename().string() + ": " + std::strerror(errno));
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code == missing_matplotlib_exit) {
    fail(python + " has no matplotlib: install it (Debian: apt-get install python3-matplotlib)");
  }
  if (code == reported_error_exit) return 1;
  if (code != 0) fail(script.string() + " failed with exit code " + std::to_string(code));
  return 0;
}

}  // namespace cnnbench::cli
