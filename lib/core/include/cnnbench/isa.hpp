// Which SIMD target the layer kernels run on. The kernels are compiled once per target (Google
// Highway) and the best one the CPU has is used unless a lower one is asked for: one binary serves
// every node of a cluster, and one machine can test every target it can run.
#pragma once

#include <string>
#include <vector>

namespace cnnbench {

// Target names, best first: "avx3_dl" (AVX-512 with VNNI/VBMI2, Ice Lake and Zen 4 on), "avx3"
// (AVX-512 F/BW/DQ/VL), "avx2" (AVX2 + FMA), "sse4", "neon" (ARM), "scalar" (portable C++).
struct IsaInfo {
  std::vector<std::string> compiled;   // targets this build holds kernels for
  std::vector<std::string> supported;  // of those, the ones this CPU can run
  std::string best;                    // the best of `supported`
  std::string active;                  // the one the kernels run on now
};
IsaInfo isa_info();

// The values `--isa` and CNNBENCH_ISA accept: "best" and the compiled targets.
std::vector<std::string> isa_choices();

// Empty when `name` can run here; otherwise one line saying why not (unknown name, not compiled,
// or a target the CPU lacks, naming the CPU's best target).
std::string isa_problem(const std::string& name);

// Runs the kernels on `name` ("best": the CPU's best) from now on. The choice is process-wide, as
// Highway's dispatch is: make it before a run starts, never while kernels run on other threads.
// Throws cnnbench::Error with isa_problem's text when `name` cannot run here.
void use_isa(const std::string& name);

}  // namespace cnnbench
