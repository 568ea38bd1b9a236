// The edge-case tables of the CLI: each row is one `cnnbench` invocation a user could type, with
// the exit code, a piece of the message it must print, and every file its folder holds afterwards.
// A row runs in a fresh folder of its own (the working directory too), so a stray write anywhere
// in it, a half-written file or a temp file left behind fails the row.
//
// A table file is `const std::vector<Edge> kEdges = {...}; CNNBENCH_EDGE_TABLE(Suite, kEdges);`.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "run_cli.hpp"
#include "temp_dir.hpp"

namespace cnnbench::test {

struct Edge {
  std::string name;      // the test's name: letters, digits and underscores
  std::string args;      // after `cnnbench`; {dir} stands for the row's folder
  int code = 0;          // the exit code
  std::string message;   // printed somewhere in stdout + stderr ("" = nothing asked)
  std::vector<std::string> files = {};  // the folder's files afterwards, setup's included
  std::string setup = {};  // shell run in the folder first (mkfifo, ln -s, chmod); {cli} = cnnbench
  bool as_user = false;  // run as an unprivileged user (nobody) where the tests run as root
  std::string absent = {};  // must NOT appear in the output ("" = nothing forbidden)
  std::string check = {};   // shell run in the folder afterwards that must exit 0 (modes, links)
};

// gtest names a failing row by this, not by its bytes.
inline void PrintTo(const Edge& edge, std::ostream* out) { *out << edge.name; }

inline std::string substitute(std::string text, const std::string& key, const std::string& value) {
  for (std::size_t at = text.find(key); at != std::string::npos; at = text.find(key, at)) {
    text.replace(at, key.size(), value);
    at += value.size();
  }
  return text;
}

inline std::string substitute_dir(const std::string& text, const std::string& dir) {
  return substitute(text, "{dir}", dir);
}

// Every path below `dir`, relative, sorted; folders end in '/'.
inline std::vector<std::string> files_below(const std::filesystem::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    std::string name = entry.path().lexically_relative(dir).string();
    if (entry.is_directory() && !entry.is_symlink()) name += "/";
    names.insert(name);
  }
  return {names.begin(), names.end()};
}

// What an error must never show a user: a C++ or JSON library's exception text, or a byte that
// is not printable text (a control byte, invalid UTF-8). "" when clean, else what was found.
inline std::string leaked_internals(const std::string& output) {
  for (const char* text : {"std::", "what():", "nlohmann", "json.exception", "terminate called"}) {
    if (output.find(text) != std::string::npos) return std::string("'") + text + "'";
  }
  for (std::size_t i = 0; i < output.size();) {
    const auto byte = static_cast<unsigned char>(output[i]);
    const std::size_t length = byte < 0x80 ? 1 : byte >= 0xf0 && byte <= 0xf4 ? 4
                               : byte >= 0xe0 ? 3 : byte >= 0xc2 ? 2 : 0;
    bool valid = length > 0 && i + length <= output.size();
    for (std::size_t k = 1; valid && k < length; ++k) {
      valid = (static_cast<unsigned char>(output[i + k]) & 0xc0) == 0x80;
    }
    if (length == 1) valid = (byte >= 0x20 && byte != 0x7f) || byte == '\n' || byte == '\t';
    if (!valid) return "byte " + std::to_string(byte) + " at offset " + std::to_string(i);
    i += length;
  }
  return "";
}

inline void run_edge(const Edge& edge) {
  const TempDir temp;
  const std::string dir = temp.path().string();
  std::string prefix = "cd '" + dir + "' &&";
  if (!edge.setup.empty()) {
    prefix += " { " + substitute(substitute_dir(edge.setup, dir), "{cli}", CNNBENCH_CLI) +
              " ; } >/dev/null 2>&1 &&";
  }
  if (edge.as_user && ::geteuid() == 0) {
    std::filesystem::permissions(temp.path(), std::filesystem::perms::all);
  }
  const std::string wrapper =
      edge.as_user && ::geteuid() == 0 ? "setpriv --reuid=65534 --regid=65534 --clear-groups" : "";
  const std::string args = substitute_dir(edge.args, dir);
  const CliResult r = run_cli(args, prefix, wrapper);
  const std::string shown = "cnnbench " + args + "\n--- output:\n" + r.output;
  EXPECT_EQ(r.code, edge.code) << shown;
  if (!edge.message.empty()) {
    EXPECT_NE(r.output.find(edge.message), std::string::npos) << shown;
  }
  if (!edge.absent.empty()) {
    EXPECT_EQ(r.output.find(edge.absent), std::string::npos) << shown;
  }
  // What no user should see: a Python traceback or a C++ exception's type name.
  EXPECT_EQ(r.output.find("Traceback (most recent call last)"), std::string::npos) << shown;
  EXPECT_FALSE(std::regex_search(r.output, std::regex("std::|terminate called|what\\(\\):"))) << shown;
  // An error row: no library's exception text and no raw byte, whatever the input was.
  if (edge.code != 0) {
    EXPECT_EQ(leaked_internals(r.output), "") << shown;
  }
  if (!edge.check.empty()) {
    const std::string command = "cd '" + dir + "' && { " + substitute_dir(edge.check, dir) + " ; }";
    EXPECT_EQ(std::system(command.c_str()), 0) << "check failed: " << edge.check << "\n" << shown;
  }
  std::vector<std::string> expected = edge.files;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(files_below(temp.path()), expected) << shown;
}

class EdgeTest : public ::testing::TestWithParam<Edge> {};

}  // namespace cnnbench::test

// One test per row, named after the row.
#define CNNBENCH_EDGE_TABLE(Suite, table)                                                     \
  class Suite : public ::cnnbench::test::EdgeTest {};                                         \
  TEST_P(Suite, Behaves) { ::cnnbench::test::run_edge(GetParam()); }                         \
  INSTANTIATE_TEST_SUITE_P(Rows, Suite, ::testing::ValuesIn(table),                          \
                           [](const ::testing::TestParamInfo<::cnnbench::test::Edge>& row) { \
                             return row.param.name;                                          \
                           })
