// `cnnbench info`: what this build contains and what machine it runs on, as an aligned text
// block or (--json) as the report's context plus the strategy list.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cnnbench/gpu.hpp"
#include "cnnbench/isa_choice.hpp"
#include "cnnbench/machine.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/topology.hpp"
#include "cnnbench/train.hpp"
#include "commands.hpp"

namespace cnnbench::cli {

namespace {

struct InfoOptions {
  bool json = false;
  bool peak = false;      // measure OpenBLAS SGEMM on one core and on all cores
  std::string isa = "best";  // the target the kernels would run on, as train's --isa
};

constexpr int label_width = 14;
constexpr std::size_t line_width = 96;

void print_heading(std::ostream& out, const std::string& title) { out << title << "\n"; }

void print_row(std::ostream& out, const std::string& label, const std::string& value) {
  std::string padded = "  " + label;
  padded.resize(std::max<std::size_t>(padded.size() + 1, label_width + 2), ' ');
  out << padded << value << "\n";
}

// Items joined by `separator`, wrapped so that continuation lines line up under the first.
void print_wrapped_row(std::ostream& out, const std::string& label,
                       const std::vector<std::string>& items, const std::string& separator) {
  std::string line;
  bool first_line = true;
  const auto flush = [&] {
    print_row(out, first_line ? label : "", line);
    first_line = false;
    line.clear();
  };
  for (const auto& item : items) {
    if (!line.empty() &&
        label_width + 2 + line.size() + separator.size() + item.size() > line_width) {
      line += separator.substr(0, separator.find_last_not_of(' ') + 1);
      flush();
    }
    line += (line.empty() ? "" : separator) + item;
  }
  if (!line.empty() || first_line) flush();
}

std::string text_or_dash(const nlohmann::json& value) {
  return value.is_string() && !value.get<std::string>().empty() ? value.get<std::string>() : "-";
}

std::string format_bytes(std::uint64_t bytes) {
  if (bytes >= (1ULL << 30) && bytes % (1ULL << 30) == 0)
    return std::to_string(bytes >> 30) + " GiB";
  if (bytes >= (1ULL << 20) && bytes % (1ULL << 20) == 0)
    return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1ULL << 10) && bytes % (1ULL << 10) == 0)
    return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

// "L1d 48 KiB x2", "L3 32 MiB x1".
std::string describe_cache(const nlohmann::json& cache) {
  const std::string type = cache.at("type");
  const std::string suffix = type == "data" ? "d" : type == "instruction" ? "i" : "";
  return "L" + std::to_string(cache.at("level").get<int>()) + suffix + " " +
         format_bytes(cache.at("bytes").get<std::uint64_t>()) + " x" +
         std::to_string(cache.at("count").get<int>());
}

void print_build(std::ostream& out, const nlohmann::json& build) {
  std::string revision = build.at("git_sha").get<std::string>();
  if (build.at("git_dirty").get<bool>()) revision += " (dirty)";
  print_heading(out, "cnnbench " + build.at("version").get<std::string>());
  print_row(out, "build type", text_or_dash(build.at("type")));
  print_row(out, "compiler", text_or_dash(build.at("compiler")));
  print_row(out, "flags", text_or_dash(build.at("flags")));
  const std::string sanitize = build.at("sanitize");
  print_row(out, "sanitizers", sanitize.empty() ? "none" : sanitize);
  print_row(out, "git", revision);
}

void print_strategies(std::ostream& out) {
  print_heading(out, "strategies");
  for (const StrategyInfo& info : list_strategies()) {
    print_row(out, info.name, info.available ? "yes  " + info.description : "no   " + info.reason);
  }
}

void print_libraries(std::ostream& out, const nlohmann::json& libraries) {
  print_heading(out, "libraries");
  print_row(out, "OpenBLAS", text_or_dash(libraries.at("openblas")));
  print_row(out, "hwloc", text_or_dash(libraries.at("hwloc")));
  print_row(out, "MPI", text_or_dash(libraries.at("mpi")));
  print_row(out, "CUDA", text_or_dash(libraries.at("cuda")));
}

std::string number_or_dash(const nlohmann::json& value, bool as_hex) {
  if (!value.is_number_integer()) return "-";
  std::ostringstream text;
  if (as_hex) text << "0x" << std::hex;
  text << value.get<long>();
  return text.str();
}

std::string megahertz_or_dash(const nlohmann::json& value) {
  if (!value.is_number()) return "-";
  return std::to_string(static_cast<long>(value.get<double>() + 0.5)) + " MHz";
}

// "AMD family 25 model 1 stepping 1" or, on ARM, "ARM implementer 0x41 part 0xd40 r1p1".
std::string describe_cpu_id(const nlohmann::json& cpu) {
  const std::string vendor = text_or_dash(cpu.at("vendor"));
  if (cpu.at("architecture") == "arm") {
    return vendor + " implementer " + number_or_dash(cpu.at("family"), true) + " part " +
           number_or_dash(cpu.at("model"), true) + " r" +
           number_or_dash(cpu.value("variant", nlohmann::json()), false) + "p" +
           number_or_dash(cpu.at("stepping"), false);
  }
  return vendor + " family " + number_or_dash(cpu.at("family"), false) + " model " +
         number_or_dash(cpu.at("model"), false) + " stepping " +
         number_or_dash(cpu.at("stepping"), false);
}

void print_cpu(std::ostream& out, const nlohmann::json& cpu) {
  print_row(out, "CPU id", describe_cpu_id(cpu));
  print_row(out, "microarch", text_or_dash(cpu.at("microarchitecture")));
  std::vector<std::string> flags = cpu.at("isa_flags").get<std::vector<std::string>>();
  if (flags.empty()) flags.push_back("none of those cnnbench looks for");
  print_wrapped_row(out, "ISA flags", flags, " ");
  print_row(out, "clock", "nominal " + megahertz_or_dash(cpu.at("mhz_nominal")) + ", now " +
                              megahertz_or_dash(cpu.at("mhz_current")));
}

// How the kernel families' targets were chosen: "measured now in 612 ms", "cached from
// 2026-12-06T01:23:45Z (measured in 612 ms)", "highest", "forced", or the busy fallback.
std::string choice_text(const nlohmann::json& simd) {
  const std::string how = simd.value("choice", "");
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.0f ms", simd.value("calibration_ms", 0.0));
  const nlohmann::json when = simd.value("calibrated_at", nlohmann::json());
  const std::string at = when.is_string() ? when.get<std::string>() : "an earlier run";
  if (how == "measured") return "measured now in " + std::string(ms) + " (the highest unless another is clearly faster)";
  if (how == "cached") return "cached from " + at + " (measured in " + std::string(ms) + "; `cnnbench calibrate` measures again)";
  if (how == "busy") return "the highest: the machine was too busy to time the kernels at " + at + " (measured again later, or with `cnnbench calibrate`)";
  if (how == "highest") return "highest the CPU runs (Highway's rule)";
  return how;
}

// Which kernels run: the SIMD target of each kernel family and how it was chosen, among those
// built and those this CPU can run, and the kernel set OpenBLAS picked.
void print_kernels(std::ostream& out, const nlohmann::json& context) {
  const nlohmann::json& simd = context.at("simd");
  print_heading(out, "kernels");
  print_row(out, "SIMD in use", simd.at("target").get<std::string>());
  if (simd.contains("kernels")) {
    print_row(out, "chosen as", choice_text(simd));
    const std::string how = simd.value("choice", "");
    if (how == "measured" || how == "cached" || how == "busy") {
      const std::optional<std::string> cache = kernel_cache_path();
      print_row(out, "kernel cache", cache ? printable_text(*cache) : "off (CNNBENCH_ISA_CACHE=off, or no cache folder)");
    }
    for (const auto& [family, target] : simd.at("kernels").items()) {
      print_row(out, family, target.get<std::string>());
    }
  }
  print_wrapped_row(out, "CPU supports", simd.at("supported").get<std::vector<std::string>>(), " ");
  print_wrapped_row(out, "compiled", simd.at("compiled").get<std::vector<std::string>>(), " ");
  print_row(out, "OpenBLAS", text_or_dash(context.at("openblas").at("core_type")));
  const std::string target =
      simd.contains("kernels") ? simd.at("kernels").at("dense").get<std::string>()
                               : simd.at("target").get<std::string>();
  const std::string why = target == "sse4" || target == "scalar"
                              ? target + " has no fused multiply-add"
                              : target + " is narrower than OpenBLAS's " +
                                    text_or_dash(context.at("openblas").at("core_type")) +
                                    " kernels; OPENBLAS_CORETYPE can narrow those";
  print_row(out, "sgemm dense",
            simd.value("dense_all_on_sgemm", false)
                ? "every dense layer (" + why + ")"
                : "none (every layer on the own kernels)");
}

void print_machine(std::ostream& out, const nlohmann::json& context) {
  const nlohmann::json& topology = context.at("topology");
  print_heading(out, "machine");
  print_row(out, "host", context.at("host").get<std::string>());
  print_row(out, "CPU", topology.at("cpu_model").get<std::string>());
  print_cpu(out, context.at("cpu"));
  std::ostringstream counts;
  counts << "packages " << topology.at("packages") << ", NUMA nodes " << topology.at("numa_nodes")
         << ", usable cores " << topology.at("cores") << ", PUs " << topology.at("pus");
  print_row(out, "layout", counts.str());

  std::vector<std::string> caches;
  for (const auto& cache : topology.at("caches")) caches.push_back(describe_cache(cache));
  if (caches.empty()) caches.push_back("-");
  print_wrapped_row(out, "caches", caches, ", ");

  // core:PU[,PU...], the logical core numbers that --threads and pinning use.
  std::vector<std::string> pin_targets;
  int core = 0;
  for (const auto& pus : topology.at("core_pus")) {
    std::string item = std::to_string(core++) + ":";
    for (std::size_t i = 0; i < pus.size(); ++i) item += (i ? "," : "") + pus[i].dump();
    pin_targets.push_back(item);
  }
  print_wrapped_row(out, "core:PUs", pin_targets, " ");
  print_row(out, "discovered by", topology.at("source").get<std::string>());
}

void print_environment(std::ostream& out, const nlohmann::json& environment) {
  if (environment.empty()) return;
  print_heading(out, "environment");
  // NAME=value, since variable names are longer than the label column.
  for (const auto& variable : environment.items()) {
    out << "  " << variable.key() << "=" << variable.value().get<std::string>() << "\n";
  }
}

// "one core 93.1 GFLOP/s (1024^3 sgemm, best of 14)".
std::string describe_peak(const nlohmann::json& peak) {
  std::ostringstream text;
  text.setf(std::ios::fixed);
  text.precision(1);
  text << peak.at("gflops").get<double>() << " GFLOP/s (" << peak.at("threads").get<int>()
       << " thread" << (peak.at("threads").get<int>() == 1 ? "" : "s") << ", "
       << peak.at("n").get<int>() << "^3 sgemm, best of " << peak.at("repetitions").get<int>()
       << ")";
  return text.str();
}

void print_gpus(std::ostream& out, const nlohmann::json& gpu) {
  print_heading(out, "GPUs");
  if (gpu.contains("reason")) print_row(out, "none", gpu.at("reason").get<std::string>());
  for (const auto& d : gpu.at("devices")) {
    std::ostringstream text;
    text << d.at("name").get<std::string>() << ", sm_" << d.at("compute_capability").get<std::string>()
         << ", " << d.at("memory_bytes").get<std::uint64_t>() / (1024 * 1024) << " MiB, "
         << d.at("multiprocessors").get<int>() << " SMs, " << d.at("pci_bus_id").get<std::string>();
    print_row(out, "device " + std::to_string(d.at("index").get<int>()), text.str());
  }
  if (!gpu.at("runtime").get<std::string>().empty()) {
    print_row(out, "CUDA runtime", gpu.at("runtime").get<std::string>());
  }
  if (gpu.contains("module")) print_row(out, "module", gpu.at("module").get<std::string>());
}

int run_info(const InfoOptions& options) {
  use_isa(options.isa);
  nlohmann::json info = {
      {"context", collect_context()}, {"features", build_features()}, {"gpu", gpu_info_json()}};
  if (options.peak) {
    const int cores = std::max(1, info.at("context").at("topology").at("cores").get<int>());
    info["peak"] = {{"single_core", measure_sgemm_peak(1, 1.0)},
                    {"all_cores", measure_sgemm_peak(cores, 1.0)}};
  }
  if (options.json) {
    write_json("-", info);
    return 0;
  }
  const nlohmann::json& context = info.at("context");
  print_build(std::cout, context.at("build"));
  print_strategies(std::cout);
  print_libraries(std::cout, context.at("libraries"));
  print_machine(std::cout, context);
  print_kernels(std::cout, context);
  print_environment(std::cout, context.at("environment"));
  print_gpus(std::cout, info.at("gpu"));
  if (options.peak) {
    print_heading(std::cout, "measured peak");
    print_row(std::cout, "one core", describe_peak(info.at("peak").at("single_core")));
    print_row(std::cout, "all cores", describe_peak(info.at("peak").at("all_cores")));
  }
  std::cout << std::flush;
  return 0;
}

}  // namespace

void add_info_command(CLI::App& root, Runner& runner) {
  auto options = std::make_shared<InfoOptions>();
  CLI::App* info = root.add_subcommand(
      "info",
      "Show the build (version, strategies, libraries), the machine (CPU, microarchitecture, "
      "cores, caches) and the kernels' SIMD target");
  info->add_flag("--json", options->json, "Print the report context and strategy list as JSON");
  info->add_flag("--peak", options->peak,
                 "Measure OpenBLAS SGEMM GFLOP/s on one core and on all cores (about 2 s)");
  add_isa_option(info, options->isa);
  info->callback([&runner, info, options] {
    take_isa_from_environment(info, options->isa);
    runner = [options] { return run_info(*options); };
  });
}

}  // namespace cnnbench::cli
