// The kernels' SIMD targets: what isa_info lists, that use_isa really switches the kernel that
// runs (per family, too), that "highest" is Highway's own rule, the CLI's --isa / CNNBENCH_ISA
// (flag wins, a target the CPU lacks is exit 2 naming its highest), and the cache of `--isa
// best`'s measured choice (used, and ignored when corrupt, foreign or unwritable).
#include <gtest/gtest.h>
#include <hwy/highway.h>

#include <algorithm>
#include <filesystem>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"
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

// Pixels become byte / 255 by division on every target the CPU runs (the vector loops included,
// over every byte value, a tail shorter than a vector and a start off the vector grid): the
// floats of torchvision's ToTensor, whichever target the element-wise family was given.
TEST(Isa, EveryTargetTurnsPixelsIntoToTensorsFloats) {
  RestoreIsa restore;
  std::vector<std::uint8_t> bytes(1 + 2 * 256 + 3);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 7 + i / 256);
  for (const std::string& target : isa_info().supported) {
    use_isa(target);
    std::vector<float> out(bytes.size() - 1, -1.0f);
    pixels_to_unit_floats(out.data(), bytes.data() + 1, out.size());
    for (std::size_t i = 0; i < out.size(); ++i) {
      const float want = static_cast<float>(bytes[i + 1]) / 255.0f;
      ASSERT_EQ(std::memcmp(&out[i], &want, sizeof want), 0)
          << target << ": byte " << int(bytes[i + 1]) << " became " << out[i] << ", not " << want;
    }
  }
}

// Measuring picks, per family, a target the CPU runs (never the portable scalar kernels on a CPU
// with SIMD), and leaves the kernels as they were. A machine too busy to tell gets the highest.
TEST(Isa, MeasuringChoosesSupportedTargetsAndRestoresTheChoice) {
  RestoreIsa restore;
  use_isa("scalar");
  const Calibration calibration = calibrate_kernels(60);
  const KernelChoice& measured = calibration.choice;
  EXPECT_TRUE(measured.how == "measured" || measured.how == "busy") << measured.how;
  EXPECT_GT(measured.calibration_ms, 0);
  EXPECT_FALSE(measured.measured_at.empty());
  ASSERT_EQ(calibration.families.size(), kernel_family_count);
  const bool has_simd = calibration_candidates(isa_info().supported) != std::vector<std::string>{"scalar"};
  for (const std::string& target : measured.targets) {
    EXPECT_TRUE(contains(isa_info().supported, target)) << target;
    if (has_simd) {
      EXPECT_NE(target, "scalar");
    }
  }
  if (calibration.busy()) {
    EXPECT_EQ(measured.targets, highest_kernel_choice().targets);
  }
  EXPECT_EQ(isa_info().active, "scalar");
  EXPECT_EQ(isa_info().requested, "scalar");
}

TEST(Isa, CalibrationLeavesScalarOutWhenTheCpuHasSimd) {
  EXPECT_EQ(calibration_candidates({"avx3_dl", "avx3", "avx2", "sse4", "scalar"}),
            (std::vector<std::string>{"avx3_dl", "avx3", "avx2", "sse4"}));
  EXPECT_EQ(calibration_candidates({"neon", "scalar"}), std::vector<std::string>{"neon"});
  EXPECT_EQ(calibration_candidates({"scalar"}), std::vector<std::string>{"scalar"});
}

// Rounds of ratios around `center`, spread evenly over +-`spread` (n of them).
std::vector<double> rounds_around(double center, double spread, int n = 12) {
  std::vector<double> ratios;
  for (int i = 0; i < n; ++i) ratios.push_back(center - spread + 2 * spread * i / (n - 1));
  return ratios;
}

FamilyCalibration decide(const std::vector<double>& self, const std::vector<CandidateRounds>& others) {
  return decide_family_target(KernelFamily::dense, "avx3_dl", self, others);
}

// The default keeps every tie and near-tie; a target clearly faster in most rounds replaces it;
// the median's own uncertainty (noise over the root of the rounds) can raise the bar; too few
// quiet rounds or too much noise decide nothing.
TEST(Isa, ATargetReplacesTheDefaultOnlyWhenClearlyFaster) {
  const auto quiet = rounds_around(1.0, 0.005);
  EXPECT_EQ(decide(quiet, {{"avx3", rounds_around(0.99, 0.005)}}).chosen, "avx3_dl") << "1% is a tie";
  EXPECT_EQ(decide(quiet, {{"avx2", rounds_around(0.97, 0.005)}}).chosen, "avx3_dl") << "3% too";
  EXPECT_EQ(decide(quiet, {{"avx2", rounds_around(0.90, 0.01)}}).chosen, "avx2");
  EXPECT_EQ(decide(quiet, {{"avx3", rounds_around(0.90, 0.01)}, {"avx2", rounds_around(0.80, 0.01)}}).chosen,
            "avx2")
      << "the lowest median of those clearly faster";
  // Faster in the median but slower in more than a round of four: no.
  std::vector<double> mixed = rounds_around(0.85, 0.01);
  for (int i = 0; i < 4; ++i) mixed[std::size_t(i)] = 1.05;
  EXPECT_EQ(decide(quiet, {{"avx2", mixed}}).chosen, "avx3_dl");
  // 9 rounds with 15% noise: the bar is 2 x 0.15 / 3 = 10%; 8% faster is not enough, 15% is.
  const auto noisy = rounds_around(1.0, 0.2, min_counted_rounds);
  const FamilyCalibration at_noise = decide(noisy, {{"avx2", rounds_around(0.92, 0.01, min_counted_rounds)}});
  EXPECT_NEAR(at_noise.noise, 0.15, 0.03);
  EXPECT_TRUE(at_noise.decided);
  EXPECT_EQ(at_noise.chosen, "avx3_dl");
  EXPECT_EQ(decide(noisy, {{"avx2", rounds_around(0.85, 0.01, min_counted_rounds)}}).chosen, "avx2");
  // A target timed out of the race (fewer rounds than the default) cannot win.
  EXPECT_EQ(decide(quiet, {{"sse4", rounds_around(0.5, 0.01, 3)}}).chosen, "avx3_dl");
  // Too noisy, or too few quiet rounds: undecided, the default.
  const FamilyCalibration busy = decide(rounds_around(1.0, 0.5), {{"avx2", rounds_around(0.5, 0.01)}});
  EXPECT_FALSE(busy.decided);
  EXPECT_EQ(busy.chosen, "avx3_dl");
  const FamilyCalibration few = decide(rounds_around(1.0, 0.001, min_counted_rounds - 1),
                                       {{"avx2", rounds_around(0.5, 0.01, min_counted_rounds - 1)}});
  EXPECT_FALSE(few.decided);
  EXPECT_EQ(few.chosen, "avx3_dl");
  // The margins name every candidate with its median.
  const FamilyCalibration two = decide(quiet, {{"avx3", rounds_around(1.01, 0.0)}, {"avx2", rounds_around(1.2, 0.0)}});
  ASSERT_EQ(two.margins.size(), 2u);
  EXPECT_EQ(two.margins[1].target, "avx2");
  EXPECT_NEAR(two.margins[1].median_ratio, 1.2, 1e-12);
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

  static bool busy(const Run& r) { return r.simd.is_object() && r.simd.value("choice", "") == "busy"; }

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
  if (busy(first)) GTEST_SKIP() << "the machine was too busy to calibrate: " << first.notes;
  EXPECT_EQ(first.simd.at("choice"), "measured") << first.simd;
  EXPECT_FALSE(first.simd.at("calibrated_at").get<std::string>().empty());
  EXPECT_EQ(first.simd.at("requested"), "best");
  EXPECT_GT(first.simd.at("calibration_ms").get<double>(), 0);
  const fs::path file = only_cache_file();
  const nlohmann::json cached = nlohmann::json::parse(read(file));
  EXPECT_EQ(cached.at("kernels"), first.simd.at("kernels"));

  const Run second = run();
  ASSERT_EQ(second.code, 0) << second.notes;
  EXPECT_EQ(second.simd.at("choice"), "cached") << second.simd;
  EXPECT_EQ(second.simd.at("kernels"), first.simd.at("kernels"));
  EXPECT_EQ(second.simd.at("calibrated_at"), first.simd.at("calibrated_at"));
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
  if (a.at("choice") == "busy" || b.at("choice") == "busy") {
    // A busy calibration's marker gives the other process the same default.
    EXPECT_EQ(a.at("choice"), b.at("choice"));
    GTEST_SKIP() << "the machine was too busy to calibrate";
  }
  const std::multiset<std::string> choices = {a.at("choice"), b.at("choice")};
  EXPECT_EQ(choices, (std::multiset<std::string>{"cached", "measured"}));
}

TEST_F(IsaCache, ACorruptCacheIsIgnoredWithANoteAndReplaced) {
  const Run first = run();
  ASSERT_EQ(first.code, 0);
  if (busy(first)) GTEST_SKIP() << "the machine was too busy to calibrate: " << first.notes;
  const fs::path file = only_cache_file();
  std::ofstream(file) << "{\"kernels\": [";
  const Run again = run();
  ASSERT_EQ(again.code, 0) << again.notes;
  if (busy(again)) GTEST_SKIP() << "the machine was too busy to calibrate: " << again.notes;
  EXPECT_EQ(again.simd.at("choice"), "measured");
  EXPECT_NE(again.notes.find("ignoring " + file.string()), std::string::npos) << again.notes;
  EXPECT_NE(again.notes.find("corrupt"), std::string::npos) << again.notes;
  EXPECT_EQ(std::count(again.notes.begin(), again.notes.end(), '\n'), 1) << again.notes;
  EXPECT_EQ(run().simd.at("choice"), "cached") << "the measured choice replaced the corrupt file";
}

TEST_F(IsaCache, ACacheOfAnotherCpuIsIgnored) {
  const Run first = run();
  ASSERT_EQ(first.code, 0);
  if (busy(first)) GTEST_SKIP() << "the machine was too busy to calibrate: " << first.notes;
  const fs::path file = only_cache_file();
  nlohmann::json cached = nlohmann::json::parse(read(file));
  nlohmann::json& model = cached.at("identity").at("cpu").at("model");
  model = model.is_number() ? nlohmann::json(model.get<int>() + 1) : nlohmann::json(1);
  std::ofstream(file) << cached.dump(2);
  const Run again = run();
  ASSERT_EQ(again.code, 0) << again.notes;
  EXPECT_NE(again.notes.find("another CPU"), std::string::npos) << again.notes;
  if (busy(again)) GTEST_SKIP() << "the machine was too busy to calibrate: " << again.notes;
  EXPECT_EQ(again.simd.at("choice"), "measured");
}

TEST_F(IsaCache, AnUnwritableCacheStillRunsAndMeasuresEachTime) {
  std::ofstream(temp.path() / "not-a-folder") << "x";
  cache_home = temp.path() / "not-a-folder";  // cnnbench/ cannot be made under a file, even by root
  for (int i = 0; i < 2; ++i) {
    const Run r = run();
    ASSERT_EQ(r.code, 0) << r.notes;
    EXPECT_TRUE(r.simd.at("choice") == "measured" || busy(r)) << r.simd;
    EXPECT_NE(r.notes.find("cannot cache the kernel choice"), std::string::npos) << r.notes;
  }
}

TEST_F(IsaCache, OffMeasuresAndWritesNothing) {
  const Run r = run("CNNBENCH_ISA_CACHE=off");
  ASSERT_EQ(r.code, 0) << r.notes;
  EXPECT_TRUE(r.simd.at("choice") == "measured" || busy(r)) << r.simd;
  EXPECT_TRUE(cache_files().empty());
}

TEST_F(IsaCache, InfoSaysWhereTheChoiceCameFromAndWhen) {
  const std::string info = "info --isa best";
  const std::string environment = "CNNBENCH_ISA= XDG_CACHE_HOME=" + cache_home.string();
  const auto first = test::run_cli(info, environment);
  ASSERT_EQ(first.code, 0) << first.output;
  if (first.output.find("too busy") != std::string::npos) GTEST_SKIP() << "too busy to calibrate";
  EXPECT_NE(first.output.find("measured now in "), std::string::npos) << first.output;
  const auto second = test::run_cli(info, environment);
  const nlohmann::json cached = nlohmann::json::parse(read(only_cache_file()));
  EXPECT_NE(second.output.find("cached from " + cached.at("measured_at").get<std::string>() +
                               " (measured in "),
            std::string::npos)
      << second.output;
  for (KernelFamily family : kernel_families) {
    EXPECT_NE(second.output.find(std::string("  ") + kernel_family_name(family) + " "),
              std::string::npos)
        << second.output;
  }
}

// A busy calibration's marker keeps the highest target, without measuring, until it lapses; then
// the next run measures again.
TEST_F(IsaCache, ABusyMarkerKeepsTheDefaultUntilItLapses) {
  const Run first = run();
  ASSERT_EQ(first.code, 0) << first.notes;
  const fs::path file = only_cache_file();
  nlohmann::json cached = nlohmann::json::parse(read(file));
  cached["busy"] = true;
  cached["busy_until_epoch_s"] = 4.0e9;  // 2096
  std::ofstream(file) << cached.dump(2);
  const Run marked = run();
  ASSERT_EQ(marked.code, 0) << marked.notes;
  EXPECT_EQ(marked.simd.at("choice"), "busy") << marked.simd;
  EXPECT_EQ(marked.simd.at("target"), isa_info().highest) << marked.simd;
  EXPECT_EQ(marked.notes, "");
  cached["busy_until_epoch_s"] = 1.0e9;  // 2001
  std::ofstream(file) << cached.dump(2);
  const Run lapsed = run();
  ASSERT_EQ(lapsed.code, 0) << lapsed.notes;
  EXPECT_TRUE(lapsed.simd.at("choice") == "measured" || busy(lapsed)) << lapsed.simd;
}

// `calibrate` measures whatever the cache holds, shows every family's margins, and (unless too
// busy: exit 1, the cache as it was) writes the choice that `--isa best` then takes.
TEST_F(IsaCache, CalibrateMeasuresAgainAndWritesTheCache) {
  const std::string environment = "CNNBENCH_ISA= XDG_CACHE_HOME=" + cache_home.string();
  const auto shown = test::run_cli("calibrate --json", environment);
  ASSERT_TRUE(shown.code == 0 || shown.code == 1) << shown.output;
  const nlohmann::json calibration = nlohmann::json::parse(shown.output);
  ASSERT_EQ(calibration.at("families").size(), kernel_family_count) << shown.output;
  for (const auto& [family, f] : calibration.at("families").items()) {
    EXPECT_EQ(f.at("default"), isa_info().highest) << family;
    EXPECT_NE(f.at("chosen"), "scalar") << family;
    EXPECT_GE(f.at("counted_rounds").get<int>(), 0) << family;
    for (const auto& [target, margin] : f.at("margins").items()) {
      EXPECT_GT(margin.at("median_ratio").get<double>(), 0) << family << " " << target;
    }
  }
  if (shown.code == 1) {
    EXPECT_EQ(calibration.at("choice"), "busy");
    EXPECT_TRUE(calibration.at("cache").is_null());
    EXPECT_TRUE(cache_files().empty());
    GTEST_SKIP() << "the machine was too busy to calibrate";
  }
  EXPECT_EQ(calibration.at("cache"), only_cache_file().string());
  const Run r = run();
  ASSERT_EQ(r.code, 0) << r.notes;
  EXPECT_EQ(r.simd.at("choice"), "cached");
  EXPECT_EQ(r.simd.at("calibrated_at"), calibration.at("calibrated_at"));
  const auto text = test::run_cli("calibrate", environment);
  ASSERT_TRUE(text.code == 0 || text.code == 1) << text.output;
  for (KernelFamily family : kernel_families) {
    EXPECT_NE(text.output.find(std::string(kernel_family_name(family)) + " "), std::string::npos)
        << text.output;
  }
}

}  // namespace
}  // namespace cnnbench
