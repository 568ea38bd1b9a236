// libcnnbench's side of the GPU module (module.hpp): libcnnbench-gpu.so is loaded the first time a
// run asks for the GPU (the gpu strategy, the device list of `cnnbench info`), as ggml loads its
// backends, so that a CPU run maps nothing of the CUDA runtime or cuBLAS. The module is looked
// for at CNNBENCH_GPU_MODULE when that is set, else next to libcnnbench, else in the installed
// library folder; it stays loaded until the process ends (its strategies live in it).
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "../factories.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/gpu.hpp"
#include "module.hpp"

namespace cnnbench {

namespace {

namespace fs = std::filesystem;

struct LoadedModule {
  const gpu::ModuleTable* table = nullptr;
  std::string path;   // the file it came from
  std::string error;  // why there is no table
};

// An object of libcnnbench, whose address dladdr maps back to libcnnbench's file.
const char libcnnbench_anchor = 0;

// The file CNNBENCH_GPU_MODULE names, or nullptr.
const char* chosen_module() {
  const char* chosen = std::getenv("CNNBENCH_GPU_MODULE");
  return chosen && *chosen ? chosen : nullptr;
}

std::vector<fs::path> module_candidates() {
  if (const char* chosen = chosen_module()) return {chosen};
  std::vector<fs::path> paths;
  Dl_info self{};
  if (dladdr(&libcnnbench_anchor, &self) != 0 && self.dli_fname != nullptr) {
    paths.push_back(fs::path(self.dli_fname).parent_path() / CNNBENCH_GPU_MODULE_FILE);
  }
  const fs::path installed = fs::path(CNNBENCH_GPU_MODULE_DIR) / CNNBENCH_GPU_MODULE_FILE;
  if (paths.empty() || paths.front() != installed) paths.push_back(installed);
  return paths;
}

LoadedModule load_from(const fs::path& path) {
  LoadedModule out{nullptr, path.string(), ""};
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    out.error = dlerror();
    return out;
  }
  using Entry = const gpu::ModuleTable* (*)();
  const auto entry = reinterpret_cast<Entry>(dlsym(handle, "cnnbench_gpu_module"));
  if (entry == nullptr) {
    out.error = out.path + " is not a cnnbench GPU module (no cnnbench_gpu_module symbol)";
    dlclose(handle);
    return out;
  }
  const gpu::ModuleTable* table = entry();
  if (table->abi_version != gpu::module_abi_version ||
      std::string(table->library_version) != CNNBENCH_VERSION) {
    out.error = out.path + " was built with cnnbench " + table->library_version +
                " (module interface " + std::to_string(table->abi_version) +
                "), this libcnnbench is " + CNNBENCH_VERSION + " (module interface " +
                std::to_string(gpu::module_abi_version) + ")";
    return out;  // not closed: its static objects may already be registered for exit
  }
  out.table = table;
  return out;
}

// The first candidate that exists is the module: one that exists but fails to load is an error,
// never a reason to load another build's module from further down the list.
LoadedModule load_module() {
  const std::vector<fs::path> paths = module_candidates();
  std::string looked_in;
  for (const fs::path& path : paths) {
    std::error_code ignored;
    if (!fs::exists(path, ignored)) {
      looked_in += (looked_in.empty() ? "" : ", ") + path.string();
      continue;
    }
    return load_from(path);
  }
  if (chosen_module()) return {nullptr, "", "no file at CNNBENCH_GPU_MODULE=" + looked_in};
  return {nullptr, "", std::string(CNNBENCH_GPU_MODULE_FILE) + " not found (looked for " +
                           looked_in + "; CNNBENCH_GPU_MODULE may name another path)"};
}

const LoadedModule& gpu_module() {
  static const LoadedModule loaded = load_module();
  return loaded;
}

}  // namespace

std::unique_ptr<Strategy> make_gpu_strategy() {
  const LoadedModule& module = gpu_module();
  if (module.table == nullptr) {
    fail("strategy 'gpu' cannot start: the GPU module is not loaded: " + module.error);
  }
  return module.table->make_strategy();
}

std::vector<GpuDevice> list_gpu_devices() {
  const LoadedModule& module = gpu_module();
  return module.table ? module.table->list_devices() : std::vector<GpuDevice>{};
}

GpuRuntime gpu_runtime() {
  const LoadedModule& module = gpu_module();
  GpuRuntime out;
  if (module.table == nullptr) {
    out.unavailable_reason = "the GPU module is not loaded: " + module.error;
    return out;
  }
  out = module.table->runtime();
  out.module_path = module.path;
  return out;
}

// The toolkit the module was compiled with: a report of a CPU run names it without loading CUDA.
std::string cuda_version_string() { return CNNBENCH_CUDA_TOOLKIT_VERSION; }

}  // namespace cnnbench
