// The machine's part of a report's context (cnnbench/machine.hpp).
#include "cnnbench/machine.hpp"

#include <string>
#include <string_view>

#include "cnnbench/core.hpp"
#include "cnnbench/cpu_identity.hpp"
#include "cnnbench/isa.hpp"
#include "cnnbench/layers.hpp"
#include "cnnbench/topology.hpp"

namespace cnnbench {

namespace {

std::string trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return "";
  const auto last = text.find_last_not_of(" \t\r\n");
  return std::string(text.substr(first, last - first + 1));
}

}  // namespace

nlohmann::json simd_json() {
  const IsaInfo isa = isa_info();
  nlohmann::json kernels = nlohmann::json::object();
  for (KernelFamily family : kernel_families) {
    kernels[kernel_family_name(family)] = isa.choice.targets[static_cast<std::size_t>(family)];
  }
  nlohmann::json simd = {{"target", isa.active},
                         {"highest", isa.highest},
                         {"requested", isa.requested},
                         {"kernels", kernels},
                         {"choice", isa.choice.how},
                         {"compiled", isa.compiled},
                         {"supported", isa.supported},
                         {"dense_all_on_sgemm", dense_all_on_sgemm()}};
  if (isa.choice.how == "measured" || isa.choice.how == "cached" || isa.choice.how == "busy") {
    simd["calibration_ms"] = isa.choice.calibration_ms;
    if (!isa.choice.measured_at.empty()) simd["calibrated_at"] = isa.choice.measured_at;
  }
  return simd;
}


nlohmann::json machine_json() {
  const Topology& topology = machine_topology();
  const std::string core_type = trim(blas_core_name());
  return {
      {"cpu_model", topology.cpu_model},
      {"cpu", cpu_identity_json(this_cpu())},
      {"simd", simd_json()},
      {"cores", topology.cores},
      {"pus", topology.pus},
      {"topology", topology_json(topology)},
      // The configuration string stays in the context's libraries.openblas; the core type is
      // what OpenBLAS chose for this CPU (or was told by OPENBLAS_CORETYPE), which sets its
      // sgemm kernels.
      {"openblas", {{"core_type", core_type.empty() ? nlohmann::json(nullptr) : nlohmann::json(core_type)}}},
  };
}

}  // namespace cnnbench
