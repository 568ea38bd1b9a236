// Folders under the system's temporary directory for tests that write files: the tests' one way
// to get a clean place to write.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace cnnbench::test {

// The folders fresh_temp_dir made, removed when the test binary exits (set CNNBENCH_KEEP_TEST_DIRS
// to keep them for a look at what the tests wrote).
class TempDirsOfThisProcess {
 public:
  void add(const std::filesystem::path& dir) { dirs_.push_back(dir); }
  ~TempDirsOfThisProcess() {
    // A forked child that exits normally must not take its parent's folders with it.
    if (::getpid() != owner_ || std::getenv("CNNBENCH_KEEP_TEST_DIRS") != nullptr) return;
    for (const std::filesystem::path& dir : dirs_) {
      std::error_code ignored;
      std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ignored);
      std::filesystem::remove_all(dir, ignored);
    }
  }

 private:
  pid_t owner_ = ::getpid();
  std::vector<std::filesystem::path> dirs_;
};

// The empty folder <temp>/cnnbench-test-<pid>-<name>: named after this process, so that two
// runs of one test binary at once (two build trees, a sanitizer build beside the plain one) keep
// apart.
inline std::filesystem::path fresh_temp_dir(const std::string& name) {
  static TempDirsOfThisProcess made;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("cnnbench-test-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  made.add(dir);
  return dir;
}

// The same with a prefix before the name.
inline std::filesystem::path fresh_temp_dir_of_process(const std::string& prefix,
                                                       const std::string& name) {
  return fresh_temp_dir(prefix + name);
}

// A fresh folder for the running test (cnnbench-test-<pid>-<suite>.<test>), removed when it ends,
// also where the test took its permissions away.
class TempDir {
 public:
  TempDir() : path_(fresh_temp_dir_of_process("", running_test())) {}
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ignored);
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  static std::string running_test() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    // Parameterised tests are named "Rows/Suite.Case/Name": one folder, not a tree of them.
    std::string name = std::string(info->test_suite_name()) + "." + info->name();
    for (char& c : name) c = c == '/' ? '_' : c;
    return name;
  }
  std::filesystem::path path_;
};

}  // namespace cnnbench::test
