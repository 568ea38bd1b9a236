// The kernels' SIMD targets: what isa_info lists, that use_isa really switches the kernel that
// runs (per family, too), that "highest" is Highway's own rule, the CLI's --isa / CNNBENCH_ISA
// (flag wins, a target the CPU lacks is exit 2 naming its highest), and the cache of `--isa
// best`'s measured choice (used, and ignored when corrupt, foreign or unwritable).
#include <gtest/gtest.h>
#include <hwy/highway.h>

#include <algorithm>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/isa_choice.hpp"
#include "cnnbench/layers.hpp"
#include "isa_targets.hpp"
#include "run_cli.hpp"
#include "temp_dir.hpp"

namespace cnnbench {
namespace {

namespace fs = std::filesystem;

bool contains(const std::vector<std::string>& list, const std::string& name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

// A compiled target this CPU cannot run, or "" when it runs them all.
std::string unsupported_target() {
  const IsaInfo info = isa_info();
  for (const std::string& name : info.compiled) {
    if (!contains(info.supported, name)) return name;
  }
  return "";
}

bool has_fma(const std::string& target) { return target != "sse4" && target != "scalar"; }

// Restores the choice in use when the test started (CNNBENCH_ISA may have made it).
struct RestoreIsa {
  std::string requested = isa_info().requested;
  ~RestoreIsa() { use_isa(requested); }
};

std::vector<float> random_floats(std::size_t n, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.uniform(-1.0f, 1.0f);
  return v;
}

// One dense layer and one first convolution, each on whatever target its family runs on now.
struct KernelOutputs {
  std::vector<float> dense, conv;
};
KernelOutputs run_dense_and_conv() {
  const int B = 16, in = 300, out = 100, K = 6, side = 28;
  const auto inp = random_floats(std::size_t(B) * in, 3), weight = random_floats(std::size_t(out) * in, 4),
             bias = random_floats(out, 5);
  const auto image = random_floats(std::size_t(B) * side * side, 6),
             filters = random_floats(K * 25, 7), filter_bias = random_floats(K, 8);
  KernelOutputs o{std::vector<float>(std::size_t(B) * out), std::vector<float>(std::size_t(B) * K * side * side)};
  dense_forward(o.dense.data(), inp.data(), weight.data(), bias.data(), B, in, out,
                DenseBackend::own_only);
  conv5x5_pad2_relu_forward(o.conv.data(), image.data(), filters.data(), filter_bias.data(), B, K,
                            side, side);
  return o;
}

TEST(Isa, ListsCompiledSupportedAndActiveTargets) {
  const IsaInfo info = isa_info();
  ASSERT_FALSE(info.supported.empty());
  EXPECT_TRUE(contains(info.compiled, "scalar"));
  EXPECT_TRUE(contains(info.supported, "scalar"));
  for (const std::string& name : info.supported) EXPECT_TRUE(contains(info.compiled, name)) << name;
  EXPECT_EQ(info.highest, info.supported.front()) << "targets are listed highest first";
  for (const std::string& target : info.choice.targets) EXPECT_TRUE(contains(info.supported, target));
  EXPECT_EQ(isa_choices().at(0), "best");
  EXPECT_EQ(isa_choices().at(1), "highest");
}

TEST(Isa, UseIsaSwitchesEveryFamilyAndSaysHow) {
  RestoreIsa restore;
  use_isa("scalar");
  EXPECT_EQ(isa_info().active, "scalar");
  EXPECT_EQ(isa_info().choice.how, "forced");
  use_isa("highest");
  EXPECT_EQ(isa_info().active, isa_info().highest);
  EXPECT_EQ(isa_info().choice.how, "highest");
  EXPECT_EQ(isa_info().requested, "highest");
}

// Highway's own dispatch, with nothing disabled, picks the table slot "highest" uses, for every
// family.
TEST(Isa, HighestIsHighwaysRule) {
  RestoreIsa restore;
  use_isa("highest");
  hwy::DisableTargets(0);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  const std::size_t highway_slot = hwy::GetChosenTarget().GetIndex();
  for (KernelFamily family : kernel_families) {
    EXPECT_EQ(kernel_table_index(family), highway_slot) << kernel_family_name(family);
  }
  use_isa("scalar");
  EXPECT_NE(kernel_table_index(KernelFamily::dense), highway_slot)
      << "a forced target moves off Highway's slot (unless the CPU has no SIMD at all)";
}

TEST(Isa, BadNamesAndMissingTargetsAreRejectedWithTheReason) {
  EXPECT_EQ(isa_problem("best"), "");
  EXPECT_EQ(isa_problem("highest"), "");
  EXPECT_EQ(isa_problem(isa_info().highest), "");
  const std::string unknown = isa_problem("avx9");
  EXPECT_NE(unknown.find("unknown SIMD target 'avx9'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("scalar"), std::string::npos) << "lists the choices: " << unknown;
  EXPECT_THROW(use_isa("avx9"), Error);
  KernelChoice table = highest_kernel_choice();
  table.targets[std::size_t(KernelFamily::pool)] = "avx9";
  EXPECT_THROW(use_kernel_choice(table, "table"), Error);
  const std::string missing = unsupported_target();
  if (missing.empty()) GTEST_SKIP() << "this CPU runs every compiled target";
  const std::string problem = isa_problem(missing);
  EXPECT_NE(problem.find("its highest is '" + isa_info().highest + "'"), std::string::npos) << problem;
  EXPECT_THROW(use_isa(missing), Error);
}

// The portable target has no fused multiply-add; a highest target with FMA (AVX2, AVX-512, NEON)
// rounds the same sums differently. Different bits prove the dispatch really changed kernels.
TEST(Isa, AForcedTargetRunsItsOwnKernel) {
  const IsaInfo info = isa_info();
  if (!has_fma(info.highest)) GTEST_SKIP() << "highest target has no FMA";
  RestoreIsa restore;
  use_isa("highest");
  const KernelOutputs on_highest = run_dense_and_conv();
  use_isa("scalar");
  const KernelOutputs on_scalar = run_dense_and_conv();
  use_isa("highest");
  const KernelOutputs again = run_dense_and_conv();
  EXPECT_NE(on_highest.dense, on_scalar.dense);
  EXPECT_NE(on_highest.conv, on_scalar.conv);
  EXPECT_EQ(on_highest.dense, again.dense) << "one target gives the same bits every time";
  EXPECT_EQ(on_highest.conv, again.conv);
}

// A table with dense on the portable target and the convolutions on the highest: each kernel
// gives exactly the bits of a run forced onto its family's target.
TEST(Isa, EachFamilyRunsOnItsOwnTarget) {
  const IsaInfo info = isa_info();
  if (!has_fma(info.highest)) GTEST_SKIP() << "highest target has no FMA";
  RestoreIsa restore;
  use_isa("scalar");
  const KernelOutputs on_scalar = run_dense_and_conv();
  use_isa("highest");
  const KernelOutputs on_highest = run_dense_and_conv();
  ASSERT_NE(on_scalar.dense, on_highest.dense);
  ASSERT_NE(on_scalar.conv, on_highest.conv);

  KernelChoice table = highest_kernel_choice();
  table.targets[std::size_t(KernelFamily::dense)] = "scalar";
  table.how = "forced";
  use_kernel_choice(table, "table");
  EXPECT_EQ(isa_info().active, "mixed");
  const KernelOutputs mixed = run_dense_and_conv();
  EXPECT_EQ(mixed.dense, on_scalar.dense);
  EXPECT_EQ(mixed.conv, on_highest.conv);
}

// Measuring picks, per family, a target the CPU runs, and leaves the kernels as they were.
TEST(Isa, MeasuringChoosesSupportedTargetsAndRestoresTheChoice) {
  RestoreIsa restore;
  use_isa("scalar");
  const KernelChoice measured = measure_fastest_kernels(30);
  EXPECT_EQ(measured.how, "measured");
  EXPECT_GT(measured.calibration_ms, 0);
  for (const std::string& target : measured.targets) {
    EXPECT_TRUE(contains(isa_info().supported, target)) << target;
  }
  EXPECT_EQ(isa_info().active, "scalar");
  EXPECT_EQ(isa_info().requested, "scalar");
}

// Within 2% of the fastest is a tie: the narrowest vectors among the tied win, and of two
// targets of the same width the faster; a target outside the tie never wins.
TEST(Isa, TiesGoToTheNarrowerVectorsAndEqualWidthsToTheFaster) {
  const std::vector<std::string> targets = {"avx3_dl", "avx3", "avx2", "sse4", "scalar"};
  EXPECT_EQ(tied_target_choice(targets, {1.00, 1.01, 1.015, 1.5, 2.0}), "avx2");
  EXPECT_EQ(tied_target_choice(targets, {1.00, 1.01, 1.05, 1.5, 2.0}), "avx3_dl");
  EXPECT_EQ(tied_target_choice(targets, {1.01, 1.00, 1.05, 1.5, 2.0}), "avx3");
  EXPECT_EQ(tied_target_choice(targets, {1.00, 1.01, 1.05, 1.5, 1.019}), "scalar");
  EXPECT_EQ(tied_target_choice(targets, {1.30, 1.20, 1.10, 1.00, 1.03}), "sse4");
  EXPECT_EQ(tied_target_choice({"avx2"}, {0.5}), "avx2");
  EXPECT_THROW(tied_target_choice(targets, {1.0}), Error);
}

TEST(IsaCli, FlagAndEnvironmentChooseTheTargetAndTheFlagWins) {
  const std::string run = "train --model fc3 --synthetic 256 --steps 2 --batch 16 --report -";
  const auto scalar = test::run_cli(run + " --isa scalar --quiet");
  ASSERT_EQ(scalar.code, 0) << scalar.output;
  EXPECT_NE(scalar.output.find("\"target\": \"scalar\""), std::string::npos) << scalar.output;
  const auto from_env = test::run_cli(run + " --quiet", "CNNBENCH_ISA=scalar");
  ASSERT_EQ(from_env.code, 0) << from_env.output;
  EXPECT_NE(from_env.output.find("\"target\": \"scalar\""), std::string::npos);
  const auto flag_wins = test::run_cli(run + " --isa highest --quiet", "CNNBENCH_ISA=scalar");
  ASSERT_EQ(flag_wins.code, 0) << flag_wins.output;
  EXPECT_NE(flag_wins.output.find("\"target\": \"" + isa_info().highest + "\""), std::string::npos);
  EXPECT_NE(flag_wins.output.find("\"choice\": \"highest\""), std::string::npos);
}

TEST(IsaCli, ATargetTheCpuLacksIsAUsageError) {
  const auto unknown = test::run_cli("train --model fc3 --synthetic 64 --steps 1 --isa avx9");
  EXPECT_EQ(unknown.code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("unknown SIMD target 'avx9'"), std::string::npos) << unknown.output;
  const std::string missing = unsupported_target();
  if (missing.empty()) GTEST_SKIP() << "this CPU runs every compiled target";
  const auto lacking = test::run_cli("train --model fc3 --synthetic 64 --steps 1 --isa " + missing);
  EXPECT_EQ(lacking.code, 2) << lacking.output;
  EXPECT_NE(lacking.output.find("its highest is '" + isa_info().highest + "'"), std::string::npos)
      << lacking.output;
  const auto in_env = test::run_cli("train --model fc3 --synthetic 64 --steps 1",
                                    "CNNBENCH_ISA=" + missing);
  EXPECT_EQ(in_env.code, 2) << in_env.output;
}

// `--isa best` runs of the CLI with their cache under `cache_home`.
class IsaCache : public ::testing::Test {
 protected:
  struct Run {
    int code;
    nlohmann::json simd;  // context.simd of the report
    std::string notes;    // what went to stderr
    nlohmann::json report;
  };

  // A two-step FC-3 run; its report (stdout) and its notes (stderr) apart.
  Run run(const std::string& environment = "") const {
    const fs::path notes = temp.path() / "notes.txt";
    const auto result = test::run_cli(
        "train --model fc3 --synthetic 256 --steps 2 --batch 16 --quiet --isa best --report - 2>" +
            notes.string(),
        "CNNBENCH_ISA= XDG_CACHE_HOME=" + cache_home.string() + " " + environment);
    Run r{result.code, nullptr, read(notes), nlohmann::json::parse(result.output, nullptr, false)};
    if (r.report.is_object()) r.simd = r.report.at("context").at("simd");
    return r;
  }

  static std::string read(const fs::path& file) {
    std::ifstream in(file);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::vector<fs::path> cache_files() const {
    std::vector<fs::path> files;
    const fs::path folder = cache_home / "cnnbench";
    if (!fs::is_directory(folder)) return files;
    for (const auto& entry : fs::directory_iterator(folder)) {
      if (entry.path().extension() == ".json") files.push_back(entry.path());  // not the .lock
    }
    return files;
  }

  fs::path only_cache_file() const {
    const auto files = cache_files();
    EXPECT_EQ(files.size(), 1u);
    return files.empty() ? fs::path() : files.front();
  }

  test::TempDir temp;
  fs::path cache_home = temp.path() / "cache";
};

TEST_F(IsaCache, ASecondRunTakesTheCachedChoiceAndTheSameBits) {
  const Run first = run();
  ASSERT_EQ(first.code, 0) << first.notes;
  EXPECT_EQ(first.simd.at("choice"), "measured") << first.simd;
  EXPECT_EQ(first.simd.at("requested"), "best");
  EXPECT_GT(first.simd.at("calibration_ms").get<double>(), 0);
  const fs::path file = only_cache_file();
  const nlohmann::json cached = nlohmann::json::parse(read(file));
  EXPECT_EQ(cached.at("kernels"), first.simd.at("kernels"));

  const Run second = run();
  ASSERT_EQ(second.code, 0) << second.notes;
  EXPECT_EQ(second.simd.at("choice"), "cached") << second.simd;
  EXPECT_EQ(second.simd.at("kernels"), first.simd.at("kernels"));
  EXPECT_EQ(second.notes, "");
  EXPECT_EQ(second.report.at("loss_curve"), first.report.at("loss_curve"));
  EXPECT_EQ(second.report.at("metrics").at("final_loss"), first.report.at("metrics").at("final_loss"));
}

// Two processes starting together (two ranks on one node): one measures, the other waits for it
// and takes its choice from the cache, so both run the same kernels.
TEST_F(IsaCache, ProcessesStartingTogetherMeasureOnce) {
  const std::string environment = "CNNBENCH_ISA= XDG_CACHE_HOME=" + cache_home.string();
  const std::string train = std::string(CNNBENCH_CLI) +
                            " train --model fc3 --synthetic 256 --steps 2 --batch 16 --quiet "
                            "--isa best --report ";
  const fs::path first = temp.path() / "first.json", second = temp.path() / "second.json";
  const std::string both = environment + " " + train + first.string() + " & " + environment +
                           " " + train + second.string() + "; wait";
  ASSERT_EQ(std::system(both.c_str()), 0);
  const nlohmann::json a = nlohmann::json::parse(read(first)).at("context").at("simd");
  const nlohmann::json b = nlohmann::json::parse(read(second)).at("context").at("simd");
  EXPECT_EQ(a.at("kernels"), b.at("kernels"));
  const std::multiset<std::string> choices = {a.at("choice"), b.at("choice")};
  EXPECT_EQ(choices, (std::multiset<std::string>{"cached", "measured"}));
}

TEST_F(IsaCache, ACorruptCacheIsIgnoredWithANoteAndReplaced) {
  ASSERT_EQ(run().code, 0);
  const fs::path file = only_cache_file();
  std::ofstream(file) << "{\"kernels\": [";
  const Run again = run();
  ASSERT_EQ(again.code, 0) << again.notes;
  EXPECT_EQ(again.simd.at("choice"), "measured");
  EXPECT_NE(again.notes.find("ignoring " + file.string()), std::string::npos) << again.notes;
  EXPECT_NE(again.notes.find("corrupt"), std::string::npos) << again.notes;
  EXPECT_EQ(std::count(again.notes.begin(), again.notes.end(), '\n'), 1) << again.notes;
  EXPECT_EQ(run().simd.at("choice"), "cached") << "the measured choice replaced the corrupt file";
}

TEST_F(IsaCache, ACacheOfAnotherCpuIsIgnored) {
  ASSERT_EQ(run().code, 0);
  const fs::path file = only_cache_file();
  nlohmann::json cached = nlohmann::json::parse(read(file));
  nlohmann::json& model = cached.at("identity").at("cpu").at("model");
  model = model.is_number() ? nlohmann::json(model.get<int>() + 1) : nlohmann::json(1);
  std::ofstream(file) << cached.dump(2);
  const Run again = run();
  ASSERT_EQ(again.code, 0) << again.notes;
  EXPECT_EQ(again.simd.at("choice"), "measured");
  EXPECT_NE(again.notes.find("another CPU"), std::string::npos) << again.notes;
}

TEST_F(IsaCache, AnUnwritableCacheStillRunsAndMeasuresEachTime) {
  std::ofstream(temp.path() / "not-a-folder") << "x";
  cache_home = temp.path() / "not-a-folder";  // cnnbench/ cannot be made under a file, even by root
  for (int i = 0; i < 2; ++i) {
    const Run r = run();
    ASSERT_EQ(r.code, 0) << r.notes;
    EXPECT_EQ(r.simd.at("choice"), "measured");
    EXPECT_NE(r.notes.find("cannot cache the kernel choice"), std::string::npos) << r.notes;
  }
}

TEST_F(IsaCache, OffMeasuresAndWritesNothing) {
  const Run r = run("CNNBENCH_ISA_CACHE=off");
  ASSERT_EQ(r.code, 0) << r.notes;
  EXPECT_EQ(r.simd.at("choice"), "measured");
  EXPECT_TRUE(cache_files().empty());
}

TEST_F(IsaCache, InfoSaysWhereTheChoiceCameFrom) {
  const std::string info = "info --isa best";
  const std::string environment = "CNNBENCH_ISA= XDG_CACHE_HOME=" + cache_home.string();
  const auto first = test::run_cli(info, environment);
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_NE(first.output.find("fastest, measured now in "), std::string::npos) << first.output;
  const auto second = test::run_cli(info, environment);
  EXPECT_NE(second.output.find("fastest, cached (measured in "), std::string::npos) << second.output;
  for (KernelFamily family : kernel_families) {
    EXPECT_NE(second.output.find(std::string("  ") + kernel_family_name(family) + " "),
              std::string::npos)
        << second.output;
  }
}

}  // namespace
}  // namespace cnnbench
