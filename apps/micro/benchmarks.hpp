// The groups of micro-benchmarks in cnnbench-micro; main() registers each group before running.
#pragma once

namespace cnnbench::micro {

// Forward and backward of every layer at FC-3's and LeNet-5's shapes, plus the sgemm yardstick.
void register_layer_benchmarks();
// One training step of each whole model (forward + backward + SGD) at batch 16, 64 and 256.
void register_model_benchmarks();

}  // namespace cnnbench::micro
