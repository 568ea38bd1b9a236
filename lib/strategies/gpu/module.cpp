// The one symbol libcnnbench-gpu.so exports: the table of what the module offers (module.hpp).
#include "module.hpp"

#include "cnnbench/config.hpp"

extern "C" __attribute__((visibility("default"))) const cnnbench::gpu::ModuleTable*
cnnbench_gpu_module() {
  using namespace cnnbench::gpu;
  static const ModuleTable table{module_abi_version, CNNBENCH_VERSION, make_gpu_strategy_on_device,
                                 list_devices, describe_runtime};
  return &table;
}
