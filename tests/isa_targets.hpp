// Runs a check once per SIMD target this CPU supports, with the kernels narrowed to that target,
// so that every target's kernels meet the same oracle on whatever machine runs the tests.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "cnnbench/isa.hpp"

namespace cnnbench {

// Afterwards the choice in use before is restored as it was (CNNBENCH_ISA may have made it).
inline void for_each_supported_isa(const std::function<void()>& check) {
  const IsaInfo info = isa_info();
  struct Restore {
    KernelChoice choice;
    std::string requested;
    ~Restore() { use_kernel_choice(choice, requested); }
  } restore{info.choice, info.requested};
  ASSERT_FALSE(info.supported.empty());
  for (const std::string& isa : info.supported) {
    SCOPED_TRACE("SIMD target " + isa);
    use_kernel_choice(forced_kernel_choice(isa), isa);
    ASSERT_EQ(isa_info().active, isa);
    check();
  }
}

}  // namespace cnnbench
