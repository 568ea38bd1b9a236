// Replays the committed fuzz corpora (fuzz/corpus/<target>/, seeds and every input a fuzzer once
// crashed on) through the readers, in every build: each file must either load consistently or be
// refused with a cnnbench::Error, never crash, hang or throw anything else.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <typeinfo>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/checkpoint.hpp"
#include "cnnbench/safetensors.hpp"
#include "cnnbench/sweep.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;

const fs::path kCorpora = fs::path(CNNBENCH_SOURCE_DIR) / "fuzz" / "corpus";

std::vector<fs::path> corpus_files(const std::string& target) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(kCorpora / target)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

enum class Outcome { loaded, refused };

// Runs one reader on one file; a failure of the invariant or a foreign exception fails the test.
Outcome replay(const fs::path& file, const std::function<void()>& read) {
  try {
    read();
    return Outcome::loaded;
  } catch (const cnnbench::Error&) {
    return Outcome::refused;
  } catch (const std::exception& e) {
    ADD_FAILURE() << file << ": threw a " << typeid(e).name() << " instead of cnnbench::Error: " << e.what();
  }
  return Outcome::refused;
}

TEST(FuzzRegressions, IdxCorpusLoadsOrIsRefused) {
  int loaded = 0, refused = 0;
  for (const fs::path& file : corpus_files("idx")) {
    const std::string bytes = cnnbench::read_file(file);
    const int rank = bytes.size() >= 4 && bytes[3] >= 1 && bytes[3] <= 4 ? bytes[3] : 3;
    const Outcome outcome = replay(file, [&] {
      const cnnbench::IdxArray array = cnnbench::read_idx(file, rank);
      std::size_t elements = 1;
      for (const std::uint32_t d : array.dims) elements *= d;
      EXPECT_EQ(array.data.size(), elements) << file;
      EXPECT_EQ(4 + 4 * array.dims.size() + array.data.size(), bytes.size()) << file;
      EXPECT_EQ(std::memcmp(array.data.data(), bytes.data() + 4 + 4 * rank, array.data.size()), 0) << file;
    });
    (outcome == Outcome::loaded ? loaded : refused)++;
  }
  // The seeds hold both kinds, so a reader that refuses everything (or nothing) fails here.
  EXPECT_GT(loaded, 0);
  EXPECT_GT(refused, 0);
}

TEST(FuzzRegressions, SafetensorsCorpusLoadsOrIsRefused) {
  const fs::path rewritten = cnnbench::test::fresh_temp_dir("fuzz") / "rewritten.safetensors";
  int loaded = 0, refused = 0;
  for (const fs::path& file : corpus_files("safetensors")) {
    const Outcome outcome = replay(file, [&] {
      const cnnbench::SafetensorsFile content = cnnbench::read_safetensors(file);
      // What loads writes back and reads back to the same names, shapes and bytes.
      cnnbench::write_safetensors(rewritten, content);
      const cnnbench::SafetensorsFile again = cnnbench::read_safetensors(rewritten);
      EXPECT_EQ(again.metadata, content.metadata) << file;
      ASSERT_EQ(again.tensors.size(), content.tensors.size()) << file;
      for (std::size_t i = 0; i < again.tensors.size(); ++i) {
        EXPECT_EQ(again.tensors[i].name, content.tensors[i].name) << file;
        EXPECT_EQ(again.tensors[i].shape, content.tensors[i].shape) << file;
        const std::size_t bytes = content.tensors[i].data.size() * sizeof(float);
        EXPECT_TRUE(bytes == 0 || std::memcmp(again.tensors[i].data.data(),
                                              content.tensors[i].data.data(), bytes) == 0)
            << file;
      }
    });
    (outcome == Outcome::loaded ? loaded : refused)++;
    for (const cnnbench::ModelKind kind : {cnnbench::ModelKind::fc3, cnnbench::ModelKind::lenet5}) {
      cnnbench::Model model(kind);
      replay(file, [&] { cnnbench::load_checkpoint(file, model); });
    }
  }
  EXPECT_GT(loaded, 0);
  EXPECT_GT(refused, 0);
}

// What read_report accepts must be safe for compare: no JSON type error may escape it later.
TEST(FuzzRegressions, ReportCorpusLoadsOrIsRefused) {
  int loaded = 0, refused = 0;
  for (const fs::path& file : corpus_files("report")) {
    const Outcome outcome = replay(file, [&] {
      const nlohmann::json report = cnnbench::read_report(file);
      (void)cnnbench::report_points(report);
      (void)cnnbench::comparison_json(cnnbench::compare_reports(report, report, 0.05, 0.05)).dump();
    });
    (outcome == Outcome::loaded ? loaded : refused)++;
  }
  EXPECT_GT(loaded, 0);
  EXPECT_GT(refused, 0);
}

}  // namespace
