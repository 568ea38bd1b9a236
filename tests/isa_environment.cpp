// Linked into every test binary: CNNBENCH_ISA chooses the kernels' SIMD target for the whole
// binary, as it does for the CLI, so `CNNBENCH_ISA=sse4 ctest -R models` runs the model tests on
// SSE4's kernels. A target this CPU cannot run stops the binary with the reason.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "cnnbench/isa_choice.hpp"

namespace {

class IsaFromEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* isa = std::getenv("CNNBENCH_ISA");
    if (isa == nullptr || *isa == '\0') return;
    const std::string problem = cnnbench::isa_problem(isa);
    if (!problem.empty()) {
      std::fprintf(stderr, "CNNBENCH_ISA: %s\n", problem.c_str());
      std::exit(2);
    }
    cnnbench::use_isa(isa);
    std::fprintf(stderr, "kernels on SIMD target %s (CNNBENCH_ISA)\n",
                 cnnbench::isa_info().active.c_str());
  }
};

[[maybe_unused]] const auto* const registered =
    ::testing::AddGlobalTestEnvironment(new IsaFromEnvironment);

}  // namespace
