// The kernels' SIMD target: what isa_info lists, that use_isa really switches the kernel that runs,
// and the CLI's --isa / CNNBENCH_ISA (flag wins, a target the CPU lacks is exit 2 naming its best).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/isa.hpp"
#include "cnnbench/layers.hpp"
#include "isa_targets.hpp"
#include "run_cli.hpp"

namespace cnnbench {
namespace {

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

TEST(Isa, ListsCompiledSupportedAndActiveTargets) {
  const IsaInfo info = isa_info();
  ASSERT_FALSE(info.supported.empty());
  EXPECT_TRUE(contains(info.compiled, "scalar"));
  EXPECT_TRUE(contains(info.supported, "scalar"));
  for (const std::string& name : info.supported) EXPECT_TRUE(contains(info.compiled, name)) << name;
  EXPECT_EQ(info.best, info.supported.front()) << "targets are listed best first";
  EXPECT_TRUE(contains(info.supported, info.active));
  EXPECT_EQ(isa_choices().front(), "best");
}

TEST(Isa, UseIsaSwitchesAndBestSwitchesBack) {
  const IsaInfo before = isa_info();
  use_isa("scalar");
  EXPECT_EQ(isa_info().active, "scalar");
  use_isa("best");
  EXPECT_EQ(isa_info().active, before.best);
  use_isa(before.active);
}

TEST(Isa, BadNamesAndMissingTargetsAreRejectedWithTheReason) {
  EXPECT_EQ(isa_problem("best"), "");
  EXPECT_EQ(isa_problem(isa_info().best), "");
  const std::string unknown = isa_problem("avx9");
  EXPECT_NE(unknown.find("unknown SIMD target 'avx9'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("scalar"), std::string::npos) << "lists the choices: " << unknown;
  EXPECT_THROW(use_isa("avx9"), Error);
  const std::string missing = unsupported_target();
  if (missing.empty()) GTEST_SKIP() << "this CPU runs every compiled target";
  const std::string problem = isa_problem(missing);
  EXPECT_NE(problem.find("its best is '" + isa_info().best + "'"), std::string::npos) << problem;
  EXPECT_THROW(use_isa(missing), Error);
}

// The portable target has no fused multiply-add; a best target with FMA (AVX2, AVX-512, NEON)
// rounds the same sums differently. Different bits prove the dispatch really changed kernels.
TEST(Isa, AForcedTargetRunsItsOwnKernel) {
  const IsaInfo info = isa_info();
  if (info.best == "sse4" || info.best == "scalar") GTEST_SKIP() << "best target has no FMA";
  const int B = 16, in = 300, out = 100;
  Rng rng(3);
  std::vector<float> inp(std::size_t(B) * in), weight(std::size_t(out) * in), bias(out);
  for (auto* v : {&inp, &weight, &bias}) {
    for (auto& x : *v) x = rng.uniform(-1.0f, 1.0f);
  }
  std::vector<float> on_best(std::size_t(B) * out), on_scalar(on_best.size()), again(on_best.size());
  use_isa("best");
  dense_forward(on_best.data(), inp.data(), weight.data(), bias.data(), B, in, out);
  use_isa("scalar");
  dense_forward(on_scalar.data(), inp.data(), weight.data(), bias.data(), B, in, out);
  use_isa("best");
  dense_forward(again.data(), inp.data(), weight.data(), bias.data(), B, in, out);
  use_isa(info.active);
  EXPECT_NE(on_best, on_scalar);
  EXPECT_EQ(on_best, again) << "one target gives the same bits every time";
}

TEST(IsaCli, FlagAndEnvironmentChooseTheTargetAndTheFlagWins) {
  const std::string run = "train --model fc3 --synthetic 256 --steps 2 --batch 16 --report -";
  const auto scalar = test::run_cli(run + " --isa scalar --quiet");
  ASSERT_EQ(scalar.code, 0) << scalar.output;
  EXPECT_NE(scalar.output.find("\"target\": \"scalar\""), std::string::npos) << scalar.output;
  const auto from_env = test::run_cli(run + " --quiet", "CNNBENCH_ISA=scalar");
  ASSERT_EQ(from_env.code, 0) << from_env.output;
  EXPECT_NE(from_env.output.find("\"target\": \"scalar\""), std::string::npos);
  const auto flag_wins = test::run_cli(run + " --isa best --quiet", "CNNBENCH_ISA=scalar");
  ASSERT_EQ(flag_wins.code, 0) << flag_wins.output;
  EXPECT_NE(flag_wins.output.find("\"target\": \"" + isa_info().best + "\""), std::string::npos);
}

TEST(IsaCli, ATargetTheCpuLacksIsAUsageError) {
  const auto unknown = test::run_cli("train --model fc3 --synthetic 64 --steps 1 --isa avx9");
  EXPECT_EQ(unknown.code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("unknown SIMD target 'avx9'"), std::string::npos) << unknown.output;
  const std::string missing = unsupported_target();
  if (missing.empty()) GTEST_SKIP() << "this CPU runs every compiled target";
  const auto lacking = test::run_cli("train --model fc3 --synthetic 64 --steps 1 --isa " + missing);
  EXPECT_EQ(lacking.code, 2) << lacking.output;
  EXPECT_NE(lacking.output.find("its best is '" + isa_info().best + "'"), std::string::npos)
      << lacking.output;
  const auto in_env = test::run_cli("train --model fc3 --synthetic 64 --steps 1",
                                    "CNNBENCH_ISA=" + missing);
  EXPECT_EQ(in_env.code, 2) << in_env.output;
}

}  // namespace
}  // namespace cnnbench
