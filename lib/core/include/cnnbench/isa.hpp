// Which SIMD target the layer kernels run on. The kernels are compiled once per target (Google
// Highway) and each family of kernels runs on one of the targets the CPU has: one binary serves
// every node of a cluster, and one machine can test every target it can run.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

namespace cnnbench {

// The families of kernels that choose their target independently: the widest target is not the
// fastest for every kernel on every CPU (Zen 4 runs 512-bit vectors on 256-bit datapaths).
enum class KernelFamily { conv_forward, conv_backward, dense, pool, activation, sgd };
inline constexpr std::size_t kernel_family_count = 6;
inline constexpr std::array<KernelFamily, kernel_family_count> kernel_families = {
    KernelFamily::conv_forward, KernelFamily::conv_backward, KernelFamily::dense,
    KernelFamily::pool,         KernelFamily::activation,    KernelFamily::sgd};
const char* kernel_family_name(KernelFamily family);  // "conv_forward", ... (report keys)

// A target name per family, indexed by KernelFamily.
using KernelTargets = std::array<std::string, kernel_family_count>;

// How the targets in use were chosen: "highest" (Highway's rule: the highest target the CPU
// runs, for every family), "forced" (one target or a table given by the caller), "measured"
// (timed now, `calibration_ms` long), "cached" (timed by an earlier run on this CPU and build, at
// `measured_at`) or "busy" (--isa best on a machine too busy to time: the highest, for now).
struct KernelChoice {
  KernelTargets targets;
  std::string how = "highest";
  double calibration_ms = 0;
  std::string measured_at;  // UTC, ISO 8601: when the measurement behind measured/cached/busy ran
};

// Target names, highest first: "avx3_dl" (AVX-512 with VNNI/VBMI2, Ice Lake and Zen 4 on),
// "avx3" (AVX-512 F/BW/DQ/VL), "avx2" (AVX2 + FMA), "sse4", "neon" (ARM), "scalar" (portable C++).
struct IsaInfo {
  std::vector<std::string> compiled;   // targets this build holds kernels for
  std::vector<std::string> supported;  // of those, the ones this CPU can run
  std::string highest;                 // the highest of `supported`: Highway's choice
  // The target every family runs on now, or "mixed" when the families differ.
  std::string active;
  std::string requested;  // what use_isa was last given ("highest" before any call)
  KernelChoice choice;    // the target of each family and how it was chosen
};
IsaInfo isa_info();

// The values `--isa` and CNNBENCH_ISA accept: "best", "highest" and the compiled targets.
std::vector<std::string> isa_choices();

// Empty when `name` can run here; otherwise one line saying why not (unknown name, not compiled,
// or a target the CPU lacks, naming the CPU's highest target).
std::string isa_problem(const std::string& name);

// The choice Highway's rule makes, and the one that runs target `name` for every family.
KernelChoice highest_kernel_choice();
KernelChoice forced_kernel_choice(const std::string& name);

// Runs each family on its target in `choice` from now on; `requested` is what isa_info reports
// as asked for. Process-wide, as Highway's dispatch is: made before a run starts, never while
// kernels run on other threads. Throws cnnbench::Error (isa_problem's text) for a target that
// cannot run here.
void use_kernel_choice(const KernelChoice& choice, const std::string& requested);

// The index into a Highway dispatch table (HWY_EXPORT) of the target `family` runs on; the
// kernels call through it (layers/kernel_dispatch.h).
std::size_t kernel_table_index(KernelFamily family);

}  // namespace cnnbench
