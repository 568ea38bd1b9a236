// The readers under test take a path, so each fuzz input is written to one file per process
// (in $TMPDIR, removed at exit) and read back from there.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace cnnbench::fuzz {

class InputFile {
 public:
  explicit InputFile(const std::string& name_suffix)
      : path_(std::filesystem::temp_directory_path() /
              ("cnnbench-fuzz-" + std::to_string(::getpid()) + "-" + name_suffix)) {}
  ~InputFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::filesystem::path& write(const std::uint8_t* data, std::size_t size) const {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    out.close();
    if (!out) std::abort();  // the fuzzer's own temp folder failing is not a finding
    return path_;
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace cnnbench::fuzz
