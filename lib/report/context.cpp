// The provenance block of every report (the machine from lib/machine, build, library versions,
// environment), the strategies this build has, and JSON output.
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string_view>

#include "cnnbench/config.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/gpu.hpp"
#include "cnnbench/machine.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/topology.hpp"
#include "cnnbench/train.hpp"
#include "core/git_revision.hpp"

#if CNNBENCH_HAVE_MPI
#include <mpi.h>
#endif

extern char** environ;


namespace cnnbench {

namespace {


std::string host_name() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0) return "unknown";
  return name.data();
}

std::string trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return "";
  const auto last = text.find_last_not_of(" \t\r\n");
  return std::string(text.substr(first, last - first + 1));
}

// The flags the library was compiled with: the build type's flags plus -march=native, which
// CMake adds per target rather than through CMAKE_CXX_FLAGS.
std::string compile_flags() {
  std::string flags = trim(CNNBENCH_CXX_FLAGS);
  if (std::string_view(CNNBENCH_NATIVE_ARCH_CFG) == "ON") {
    flags += flags.empty() ? "-march=native" : " -march=native";
  }
  return flags;
}

nlohmann::json string_or_null(const std::string& text) {
  return text.empty() ? nlohmann::json(nullptr) : nlohmann::json(text);
}

// Variables that change how a run behaves: threading of the math libraries, our own settings,
// the MPI job size and the visible GPUs.
bool is_relevant_variable(std::string_view name) {
  for (const std::string_view prefix : {"OPENBLAS_", "OMP_", "GOTO", "CNNBENCH_"}) {
    if (name.substr(0, prefix.size()) == prefix) return true;
  }
  return name == "OMPI_COMM_WORLD_SIZE" || name == "CUDA_VISIBLE_DEVICES";
}

nlohmann::json relevant_environment() {
  nlohmann::json variables = nlohmann::json::object();
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string_view assignment(*entry);
    const auto equals = assignment.find('=');
    if (equals == std::string_view::npos) continue;
    const std::string_view name = assignment.substr(0, equals);
    if (is_relevant_variable(name)) variables[std::string(name)] = assignment.substr(equals + 1);
  }
  return variables;
}

}  // namespace

std::string mpi_version_string() {
#if CNNBENCH_HAVE_MPI
  // MPI_Get_library_version may be called before MPI_Init. Keep the first line only; Open MPI
  // counts the terminating NUL in `length`.
  std::array<char, MPI_MAX_LIBRARY_VERSION_STRING> text{};
  int length = 0;
  if (MPI_Get_library_version(text.data(), &length) != MPI_SUCCESS) return "";
  std::string_view version(text.data(), static_cast<std::size_t>(length));
  version = version.substr(0, version.find('\0'));
  return trim(version.substr(0, version.find('\n')));
#else
  return "";
#endif
}

nlohmann::json build_json() {
  return {{"version", CNNBENCH_VERSION},
          {"type", CNNBENCH_BUILD_TYPE},
          {"compiler", CNNBENCH_CXX_COMPILER},
          {"flags", compile_flags()},
          {"sanitize", CNNBENCH_SANITIZE},
          {"git_sha", build::git_sha},
          {"git_dirty", build::git_dirty}};
}

nlohmann::json collect_context() {
  nlohmann::json context = machine_json();
  context["date"] = utc_now_iso8601();
  context["host"] = host_name();
  context["build"] = build_json();
  context["libraries"] = {{"openblas", trim(blas_version())},
                          {"hwloc", string_or_null(hwloc_version_string())},
                          {"mpi", string_or_null(mpi_version_string())},
                          {"cuda", string_or_null(cuda_version_string())}};
  context["environment"] = relevant_environment();
  return context;
}

nlohmann::json build_features() {
  nlohmann::json features = nlohmann::json::object();
  for (const StrategyInfo& info : list_strategies()) {
    nlohmann::json feature = {{"available", info.available}, {"description", info.description}};
    if (!info.available) feature["reason"] = info.reason;
    features[info.name] = std::move(feature);
  }
  return features;
}

void write_json(const std::filesystem::path& path, const nlohmann::json& value) {
  // Invalid UTF-8 (from an environment variable, say) is replaced, not a reason to lose a report.
  const std::string text =
      value.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (path == "-") {
    errno = 0;
    std::cout << text << std::flush;
    if (!std::cout.good()) {
      fail(std::string("cannot write to standard output") +
           (errno != 0 ? std::string(": ") + std::strerror(errno) : std::string()));
    }
    return;
  }
  write_output(path, text);
}

}  // namespace cnnbench
