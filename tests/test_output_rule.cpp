// The output rule's refusal of existing files (check_outputs, lib/core/output.cpp): an existing
// regular file, however named, is refused unless its output says replace, with the option, the
// path and the advice; devices, standard output and new files are not; a clash --force cannot fix
// is said first; a probed folder must take a file. The commands' use of it: test_cli_edges_force.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cnnbench/core.hpp"
#include "temp_dir.hpp"

namespace cnnbench {
namespace {

namespace fs = std::filesystem;

// The message check_outputs fails with, "" when it accepts the outputs.
std::string refusal(const std::vector<OutputPath>& outputs, const std::vector<InputPath>& inputs = {}) {
  try {
    check_outputs(outputs, inputs);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  return names;
}

class OutputRule : public ::testing::Test {
 protected:
  void old_file(const fs::path& path) { std::ofstream(path) << "old\n"; }
  test::TempDir temp;
  fs::path dir = temp.path();
};

TEST_F(OutputRule, AnExistingFileIsRefusedAndKept) {
  const fs::path report = dir / "r.json";
  old_file(report);
  EXPECT_EQ(refusal({{.option = "--report", .path = report}}),
            "--report " + report.string() + ": already exists; pass --force to overwrite it");
  EXPECT_EQ(read_file(report), "old\n");
  EXPECT_EQ(entries(dir), std::vector<std::string>{"r.json"});
}

TEST_F(OutputRule, ReplaceAllowsIt) {
  old_file(dir / "r.json");
  EXPECT_EQ(refusal({{.option = "--report", .path = dir / "r.json", .replace = true}}), "");
}

TEST_F(OutputRule, TheAdviceEndsTheMessage) {
  old_file(dir / "s.json");
  EXPECT_EQ(refusal({{.option = "--out", .path = dir / "s.json", .advice = "pass --resume or --force"}}),
            "--out " + (dir / "s.json").string() + ": already exists; pass --resume or --force");
}

TEST_F(OutputRule, NewFilesDevicesAndStandardOutputAreNotReplaced) {
  EXPECT_EQ(refusal({{.option = "--report", .path = dir / "new.json"},
                     {.option = "--save", .path = "/dev/null"},
                     {.option = "--trace", .path = "-"}}),
            "");
}

TEST_F(OutputRule, AnyNameOfAnExistingFileCounts) {
  old_file(dir / "r.json");
  fs::create_symlink("r.json", dir / "link.json");
  EXPECT_NE(refusal({{.option = "--report", .path = dir / "link.json"}}).find("link.json: already exists"),
            std::string::npos);
  fs::create_hard_link(dir / "r.json", dir / "other.json");
  EXPECT_NE(refusal({{.option = "--report", .path = dir / "other.json"}}).find("already exists"), std::string::npos);
  std::ofstream(dir / "empty.json").close();
  EXPECT_NE(refusal({{.option = "--report", .path = dir / "empty.json"}}).find("already exists"), std::string::npos);
  // A dangling link's target is a new file.
  fs::create_symlink("missing.json", dir / "dangling.json");
  EXPECT_EQ(refusal({{.option = "--report", .path = dir / "dangling.json"}}), "");
  EXPECT_EQ(read_file(dir / "r.json"), "old\n");
}

TEST_F(OutputRule, AFolderIsRefusedForTheFilesItWillWriteOnly) {
  fs::create_directories(dir / "img");
  old_file(dir / "img" / "notes.txt");
  const OutputPath images = {.option = "--out", .path = dir / "img", .folder = true, .files = {"a.png", "b.png"}};
  EXPECT_EQ(refusal({images}), "");
  old_file(dir / "img" / "b.png");
  EXPECT_EQ(refusal({images}), "--out " + (dir / "img").string() + ": " + (dir / "img" / "b.png").string() +
                                   " already exists; pass --force to overwrite it");
  OutputPath forced = images;
  forced.replace = true;
  EXPECT_EQ(refusal({forced}), "");
}

// --force cannot make an input an output: that is said, not "pass --force".
TEST_F(OutputRule, AClashForceCannotFixIsSaidFirst) {
  old_file(dir / "ck.st");
  const std::string message = refusal({{.option = "--report", .path = dir / "ck.st"}}, {{"--resume", dir / "ck.st"}});
  EXPECT_NE(message.find("the same file as --resume"), std::string::npos) << message;
  old_file(dir / "x");
  const std::string twice = refusal({{.option = "--report", .path = dir / "x"}, {.option = "--save", .path = dir / "x"}});
  EXPECT_NE(twice.find("--save " + (dir / "x").string() + ": the same file as --report"), std::string::npos) << twice;
}

TEST_F(OutputRule, SameFileByAnySpelling) {
  old_file(dir / "x");
  fs::create_symlink("x", dir / "link");
  EXPECT_TRUE(same_file(dir / "x", dir / "." / "x"));
  EXPECT_TRUE(same_file(dir / "link", dir / "x"));
  EXPECT_TRUE(same_file(dir / "new", dir / "sub" / ".." / "new"));
  EXPECT_FALSE(same_file(dir / "x", dir / "y"));
}

TEST_F(OutputRule, AProbedFolderLeavesNothingBehind) {
  EXPECT_EQ(refusal({{.option = "--trace-dir", .path = dir / "t", .folder = true, .probe = true},
                     {.option = "--html", .path = dir / "page.html", .probe = true}}),
            "");
  EXPECT_TRUE(entries(dir).empty()) << entries(dir).front();
}

// /proc takes no new file, even from root, whose access(2) says it may write there (the probe
// says so then; for anyone else access(2) does first).
TEST_F(OutputRule, AProbedFolderMustTakeAFile) {
  const std::string page = refusal({{.option = "--html", .path = "/proc/cnnbench.html", .probe = true}});
  EXPECT_EQ(page.rfind("--html /proc/cnnbench.html: cannot ", 0), 0u) << page;
  EXPECT_NE(page.find(" /proc: "), std::string::npos) << page;
  const std::string traces =
      refusal({{.option = "--trace-dir", .path = "/proc/cnnbench/traces", .folder = true, .probe = true}});
  EXPECT_EQ(traces.rfind("--trace-dir /proc/cnnbench/traces: cannot ", 0), 0u) << traces;
  if (::geteuid() == 0) {
    EXPECT_NE(page.find("cannot create a file in /proc: "), std::string::npos) << page;
  }
}

TEST_F(OutputRule, AReadOnlyFolderIsRefused) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into a read-only folder";
  fs::create_directories(dir / "ro");
  fs::permissions(dir / "ro", fs::perms::owner_read | fs::perms::owner_exec);
  const std::string message = refusal({{.option = "--trace-dir", .path = dir / "ro" / "t", .folder = true, .probe = true}});
  EXPECT_NE(message.find("cannot write into " + (dir / "ro").string()), std::string::npos) << message;
  EXPECT_TRUE(entries(dir / "ro").empty());
}

}  // namespace
}  // namespace cnnbench
