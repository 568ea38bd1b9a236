// The readers under test take a path, so each fuzz input is written to one file per process
// (in $TMPDIR, removed at exit) and read back from there.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>

#include "cnnbench/core.hpp"

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

  // Writes the input and reads it back with read(path): what that returns, or nothing where it
  // rejects the input with a cnnbench::Error, a fine outcome for any bytes.
  template <class Read>
  auto read_back(const std::uint8_t* data, std::size_t size, Read read) const
      -> std::optional<decltype(read(std::declval<const std::filesystem::path&>()))> {
    write(data, size);
    try {
      return read(path_);
    } catch (const cnnbench::Error&) {
      return std::nullopt;
    }
  }

 private:
  std::filesystem::path path_;
};

}  // namespace cnnbench::fuzz
