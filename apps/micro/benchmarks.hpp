// The groups of micro-benchmarks in cnnbench-micro; main() registers each group before running.
#pragma once

namespace cnnbench::micro {

// Forward and backward of every layer at FC-3's and LeNet-5's shapes, plus the sgemm yardstick.
void register_layer_benchmarks();
// One training step of each whole model (forward + backward + SGD) at batch 16, 64 and 256.
void register_model_benchmarks();
// The layers of register_layer_benchmarks() on oneDNN ("onednn_..." rows), where the build found
// it (CNNBENCH_HAVE_DNNL, apps/CMakeLists.txt); nothing otherwise.
#ifdef CNNBENCH_HAVE_DNNL
void register_onednn_benchmarks();
#else
inline void register_onednn_benchmarks() {}
#endif

}  // namespace cnnbench::micro
