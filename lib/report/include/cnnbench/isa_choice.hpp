// Choosing the kernels' SIMD targets: "best" times every target the CPU runs on each kernel family
// with the models' own shapes and keeps the fastest, once per CPU and build (the choice is cached
// under $XDG_CACHE_HOME/cnnbench/), so that every later run, rerun and resume takes the same
// kernels without paying for the timing again.
#pragma once

#include <string>
#include <vector>

#include "cnnbench/isa.hpp"

namespace cnnbench {

// "best": the fastest target per family (from the cache, else measured now and cached; measured
// once per process at most); "highest": Highway's rule; a target name: that target everywhere.
// Throws cnnbench::Error (isa_problem's text) when `name` cannot run here. A cache that cannot be
// read or written costs a note on stderr and a calibration, never the run. CNNBENCH_ISA_CACHE=off
// skips the cache (every process measures).
void use_isa(const std::string& name);

// Times each supported target on each family, in turns, for about `budget_ms` in all on the
// calling thread, and returns the fastest per family (how = "measured"), ties broken by
// tied_target_choice. The choice in use before is restored.
KernelChoice measure_fastest_kernels(double budget_ms);

// A target's vector width in bits (avx3_dl and avx3 512, avx2 256, sse4 and neon 128, scalar 0).
int vector_bits(const std::string& target);

// Of `targets` and their `seconds` (same order), those within 2% of the fastest tie. The tie goes
// to the narrowest vectors, because a wider unit can cost what one family's timing does not see
// (clock licences, power shared with the other kernels). Of equal widths (avx3 and avx3_dl) the
// faster wins. Throws cnnbench::Error unless there is one time per target.
std::string tied_target_choice(const std::vector<std::string>& targets, const std::vector<double>& seconds);

}  // namespace cnnbench
