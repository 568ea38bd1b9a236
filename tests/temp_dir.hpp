// Folders under the system's temporary directory for tests that write files: the tests' one way
// to get a clean place to write.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace cnnbench::test {

// The empty folder <temp>/cnnbench-test-<name>, emptied first where an earlier run left it; kept
// afterwards for a look at what the test wrote.
inline std::filesystem::path fresh_temp_dir(const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("cnnbench-test-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// The same folder named after this process, so that two runs of one binary at once keep apart.
inline std::filesystem::path fresh_temp_dir_of_process(const std::string& prefix,
                                                       const std::string& name) {
  return fresh_temp_dir(prefix + std::to_string(::getpid()) + "-" + name);
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
    return std::string(info->test_suite_name()) + "." + info->name();
  }
  std::filesystem::path path_;
};

}  // namespace cnnbench::test
