// The GPU module, libcnnbench-gpu.so: a CPU run maps nothing of CUDA (the module, the CUDA runtime
// and cuBLAS come in only when a run asks for the GPU), and a module that is missing or is not
// one is a clear error naming the file, never a crash. Needs no device.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cnnbench/config.hpp"
#include "cnnbench/data.hpp"
#include "cnnbench/gpu.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/train.hpp"
#include "run_cli.hpp"

namespace cnnbench {
namespace {

namespace fs = std::filesystem;

// The files mapped into this process whose path contains `part`.
std::vector<std::string> mapped_files(const std::string& part) {
  std::ifstream maps("/proc/self/maps");
  std::vector<std::string> files;
  for (std::string line; std::getline(maps, line);) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string file = line.substr(slash);
    if (file.find(part) != std::string::npos &&
        (files.empty() || files.back() != file)) {
      files.push_back(file);
    }
  }
  return files;
}

std::string joined(const std::vector<std::string>& files) {
  std::string text;
  for (const std::string& f : files) text += "\n  " + f;
  return text;
}

void expect_no_cuda_mapped(const std::string& after) {
  for (const char* library : {"libcnnbench-gpu", "libcudart", "libcublas", "libcuda.so"}) {
    const std::vector<std::string> files = mapped_files(library);
    EXPECT_TRUE(files.empty()) << after << " mapped " << library << ":" << joined(files);
  }
}

// The file of the library that holds `symbol`.
fs::path library_of(const void* symbol) {
  Dl_info info{};
  if (dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return {};
  return info.dli_fname;
}

TEST(GpuModule, CpuRunMapsNothingOfCudaUntilTheGpuIsAskedFor) {
  expect_no_cuda_mapped("starting the process");

  TrainConfig config;
  config.model = ModelKind::lenet5;
  config.batch = 16;
  config.pin = false;
  const Dataset data = make_synthetic(64, 3);
  Model model(ModelKind::lenet5);
  init_params(model.params, model.kind, config.seed);
  std::unique_ptr<Strategy> serial = make_strategy("serial");
  serial->prepare(model, data, config);
  const auto order = epoch_order(data.count, config.seed, 0, true);
  serial->run_steps(StepRange{order.data(), 0, 2, 0}, [](std::int64_t, double) {});
  const nlohmann::json context = collect_context();
  const nlohmann::json features = build_features();
  expect_no_cuda_mapped("a serial run and its report context");
  if (CNNBENCH_HAVE_CUDA) {
    EXPECT_EQ(context.at("libraries").at("cuda"), cuda_version_string());
    EXPECT_FALSE(cuda_version_string().empty());
  }

  // The device list loads the module, from the folder libcnnbench is in.
  const GpuRuntime runtime = gpu_runtime();
  if (!CNNBENCH_HAVE_CUDA) {
    EXPECT_TRUE(runtime.module_path.empty()) << runtime.module_path;
    expect_no_cuda_mapped("asking for the devices in a build without CUDA");
    return;
  }
  ASSERT_FALSE(runtime.module_path.empty()) << runtime.unavailable_reason;
  const fs::path libcnnbench = library_of(reinterpret_cast<const void*>(&make_strategy));
  EXPECT_EQ(fs::path(runtime.module_path).parent_path(), libcnnbench.parent_path());
  EXPECT_EQ(mapped_files("libcnnbench-gpu").size(), 1u) << joined(mapped_files("libcnnbench-gpu"));
  EXPECT_FALSE(mapped_files("libcudart").empty());
  EXPECT_FALSE(runtime.runtime_version.empty());
  EXPECT_FALSE(runtime.cublas_version.empty());
  EXPECT_EQ(gpu_info_json().at("module"), runtime.module_path);
}

// CNNBENCH_GPU_MODULE names the module; the run says which file failed and why, and exits 1.
TEST(GpuModule, AMissingModuleIsAnErrorNamingIt) {
  if (!CNNBENCH_HAVE_CUDA) GTEST_SKIP() << "built without CUDA: there is no module to load";
  const std::string missing = "/nonexistent/libcnnbench-gpu.so";
  const std::string env = "CNNBENCH_GPU_MODULE=" + missing;
  const test::CliResult train =
      test::run_cli("train --strategy gpu --synthetic 256 --steps 2 --quiet", env);
  EXPECT_EQ(train.code, 1) << train.output;
  EXPECT_NE(train.output.find("GPU module"), std::string::npos) << train.output;
  EXPECT_NE(train.output.find(missing), std::string::npos) << train.output;

  const test::CliResult info = test::run_cli("info --json", env);
  ASSERT_EQ(info.code, 0) << info.output;
  const nlohmann::json gpu = nlohmann::json::parse(info.output).at("gpu");
  EXPECT_TRUE(gpu.at("devices").empty());
  EXPECT_NE(gpu.at("reason").get<std::string>().find(missing), std::string::npos) << gpu;
  EXPECT_FALSE(gpu.contains("module")) << gpu;

  // A serial run does not look for the module at all.
  const test::CliResult serial = test::run_cli("train --synthetic 256 --steps 2 --quiet", env);
  EXPECT_EQ(serial.code, 0) << serial.output;
}

TEST(GpuModule, ALibraryThatIsNotTheModuleIsRefused) {
  if (!CNNBENCH_HAVE_CUDA) GTEST_SKIP() << "built without CUDA: there is no module to load";
  const fs::path libcnnbench = library_of(reinterpret_cast<const void*>(&make_strategy));
  ASSERT_FALSE(libcnnbench.empty());
  const test::CliResult train = test::run_cli("train --strategy gpu --synthetic 256 --steps 2",
                                              "CNNBENCH_GPU_MODULE=" + libcnnbench.string());
  EXPECT_EQ(train.code, 1) << train.output;
  EXPECT_NE(train.output.find("is not a cnnbench GPU module"), std::string::npos) << train.output;
}

}  // namespace
}  // namespace cnnbench
