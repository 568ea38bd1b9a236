// The machine a run measures: its part of every report's context (the CPU, the cores, the
// kernels' SIMD targets, OpenBLAS's core type) and the SGEMM peak that achieved GFLOP/s are
// divided by. The CPU's identity is cpu_identity.hpp, the kernel target choice isa_choice.hpp.
#pragma once

#include <nlohmann/json.hpp>

namespace cnnbench {

// {"cpu_model", "cpu" (cpu_identity_json), "simd" (simd_json), "cores", "pus", "topology",
//  "openblas": {"core_type"}}: the context's keys that describe the machine.
nlohmann::json machine_json();

// The SIMD target each kernel family runs on and how it was chosen, and the targets this build
// and this CPU offer: {target, highest, requested, kernels, choice, compiled, supported,
// dense_all_on_sgemm[, calibration_ms, calibrated_at]}.
nlohmann::json simd_json();

// OpenBLAS SGEMM (1024^3) on `threads` threads, best of repeated products over about `seconds`:
// {"threads", "gflops", "n", "repetitions", "best_seconds"}. Restores the BLAS thread count.
nlohmann::json measure_sgemm_peak(int threads, double seconds);

}  // namespace cnnbench
