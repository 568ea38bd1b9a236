// The CPU identity of the report context: /proc/cpuinfo parsed into vendor, family/model/stepping,
// ISA flags and clock, and a table from family/model (or ARM implementer/part) to microarchitecture.
#include "cnnbench/cpu_identity.hpp"

#include <array>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace cnnbench {

namespace {

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r\n");
  return text.substr(first, last - first + 1);
}

// "key : value" lines; the first occurrence of a key wins, which is cpu0's block (a later
// processor of a hybrid or big.LITTLE machine may differ, and cpu0 is what the report names).
std::map<std::string, std::string, std::less<>> first_values(std::string_view cpuinfo) {
  std::map<std::string, std::string, std::less<>> values;
  while (!cpuinfo.empty()) {
    const auto end = cpuinfo.find('\n');
    const std::string_view line = cpuinfo.substr(0, end);
    cpuinfo = end == std::string_view::npos ? std::string_view{} : cpuinfo.substr(end + 1);
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    values.emplace(std::string(trim(line.substr(0, colon))), std::string(trim(line.substr(colon + 1))));
  }
  return values;
}

// "25" or "0x41" (ARM fields are hex); nothing when the text is not a whole number.
std::optional<int> parse_int(std::string_view text) {
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    text.remove_prefix(2);
    base = 16;
  }
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

std::optional<double> parse_double(std::string_view text) {
  const std::string copy(text);
  char* end = nullptr;
  const double value = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size() || !(value > 0)) return std::nullopt;
  return value;
}

// The "@ 2.10GHz" that Intel (and some AMD) model names end with, in MHz.
std::optional<double> nominal_mhz_from_name(std::string_view name) {
  const auto at = name.rfind('@');
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = trim(name.substr(at + 1));
  double scale = 0;
  for (const auto& [unit, factor] : {std::pair{"GHz", 1000.0}, std::pair{"MHz", 1.0}}) {
    const std::string_view u(unit);
    if (rest.size() > u.size() && rest.substr(rest.size() - u.size()) == u) {
      rest = trim(rest.substr(0, rest.size() - u.size()));
      scale = factor;
      break;
    }
  }
  if (scale == 0) return std::nullopt;
  const auto value = parse_double(rest);
  if (!value) return std::nullopt;
  return *value * scale;
}

// The flags a kernel's speed depends on, in cpuinfo's spelling: which SIMD width and which dot
// product and bfloat16 instructions the CPU has.
constexpr std::array<const char*, 9> x86_flags_of_interest = {
    "avx2",     "fma",         "avx512f",     "avx512bw",    "avx512vl",
    "avx512dq", "avx512_vnni", "avx512_bf16", "avx512_vbmi2"};
constexpr std::array<const char*, 4> arm_flags_of_interest = {"asimd", "neon", "sve", "sve2"};

template <std::size_t N>
std::vector<std::string> flags_present(std::string_view line,
                                       const std::array<const char*, N>& of_interest) {
  std::set<std::string> present;
  std::istringstream words{std::string(line)};
  for (std::string word; words >> word;) present.insert(word);
  std::vector<std::string> flags;
  for (const char* flag : of_interest) {
    if (present.count(flag)) flags.emplace_back(flag);
  }
  return flags;
}

struct ModelRange {
  int first, last;
  const char* name;
};

// AMD family 17h-1Ah model ranges, as Linux assigns its ZEN* feature flags (arch/x86/kernel/cpu/amd.c).
constexpr std::array<ModelRange, 5> amd_family_17h = {{{0x00, 0x2f, "Zen/Zen+"},
                                                        {0x30, 0x4f, "Zen 2"},
                                                        {0x60, 0x7f, "Zen 2"},
                                                        {0x90, 0x91, "Zen 2"},
                                                        {0xa0, 0xaf, "Zen 2"}}};
constexpr std::array<ModelRange, 4> amd_family_19h = {{{0x00, 0x0f, "Zen 3"},
                                                        {0x10, 0x1f, "Zen 4"},
                                                        {0x20, 0x5f, "Zen 3"},
                                                        {0x60, 0xaf, "Zen 4"}}};
constexpr std::array<ModelRange, 6> amd_family_1ah = {{{0x00, 0x2f, "Zen 5"},
                                                        {0x40, 0x4f, "Zen 5"},
                                                        {0x60, 0x7f, "Zen 5"},
                                                        {0x50, 0x5f, "Zen 6"},
                                                        {0x90, 0xaf, "Zen 6"},
                                                        {0xc0, 0xcf, "Zen 6"}}};

template <std::size_t N>
const char* find_range(const std::array<ModelRange, N>& table, int model) {
  for (const ModelRange& r : table) {
    if (model >= r.first && model <= r.last) return r.name;
  }
  return nullptr;
}

struct Entry {
  int key;
  const char* name;
};

// Intel family 6 models (Linux's arch/x86/include/asm/intel-family.h). 0x55 is resolved by
// stepping below: Skylake-SP, Cascade Lake and Cooper Lake share it.
constexpr std::array<Entry, 50> intel_family_6 = {{
    {0x1a, "Nehalem"},          {0x1e, "Nehalem"},          {0x1f, "Nehalem"},
    {0x2e, "Nehalem-EX"},       {0x25, "Westmere"},         {0x2c, "Westmere-EP"},
    {0x2f, "Westmere-EX"},      {0x2a, "Sandy Bridge"},     {0x2d, "Sandy Bridge-EP"},
    {0x3a, "Ivy Bridge"},       {0x3e, "Ivy Bridge-EP"},    {0x3c, "Haswell"},
    {0x3f, "Haswell-EP"},       {0x45, "Haswell"},          {0x46, "Haswell"},
    {0x3d, "Broadwell"},        {0x47, "Broadwell"},        {0x4f, "Broadwell-EP"},
    {0x56, "Broadwell-DE"},     {0x4e, "Skylake"},          {0x5e, "Skylake"},
    {0x8e, "Kaby Lake"},        {0x9e, "Coffee Lake"},      {0xa5, "Comet Lake"},
    {0xa6, "Comet Lake"},       {0x66, "Cannon Lake"},      {0x6a, "Ice Lake-SP"},
    {0x6c, "Ice Lake-SP"},      {0x7d, "Ice Lake"},         {0x7e, "Ice Lake"},
    {0xa7, "Rocket Lake"},      {0x8c, "Tiger Lake"},       {0x8d, "Tiger Lake"},
    {0x8f, "Sapphire Rapids"},  {0xcf, "Emerald Rapids"},   {0xad, "Granite Rapids"},
    {0xae, "Granite Rapids"},   {0x97, "Alder Lake"},       {0x9a, "Alder Lake"},
    {0xb7, "Raptor Lake"},      {0xba, "Raptor Lake"},      {0xbf, "Raptor Lake"},
    {0xaa, "Meteor Lake"},      {0xac, "Meteor Lake"},      {0xc5, "Arrow Lake"},
    {0xc6, "Arrow Lake"},       {0xb5, "Arrow Lake"},       {0xbd, "Lunar Lake"},
    {0xaf, "Sierra Forest"},    {0x57, "Knights Landing"},
}};

// ARM Ltd. (implementer 0x41) parts.
constexpr std::array<Entry, 19> arm_parts = {{
    {0xd03, "Cortex-A53"},  {0xd05, "Cortex-A55"},  {0xd07, "Cortex-A57"},  {0xd08, "Cortex-A72"},
    {0xd09, "Cortex-A73"},  {0xd0a, "Cortex-A75"},  {0xd0b, "Cortex-A76"},  {0xd0c, "Neoverse N1"},
    {0xd0d, "Cortex-A77"},  {0xd40, "Neoverse V1"}, {0xd41, "Cortex-A78"},  {0xd44, "Cortex-X1"},
    {0xd46, "Cortex-A510"}, {0xd47, "Cortex-A710"}, {0xd48, "Cortex-X2"},   {0xd49, "Neoverse N2"},
    {0xd4f, "Neoverse V2"}, {0xd84, "Neoverse V3"}, {0xd8e, "Neoverse N3"},
}};
constexpr std::array<Entry, 4> apple_parts = {{
    {0x022, "Apple M1 (Icestorm)"},   {0x023, "Apple M1 (Firestorm)"},
    {0x032, "Apple M2 (Blizzard)"},   {0x033, "Apple M2 (Avalanche)"},
}};

template <std::size_t N>
const char* find_entry(const std::array<Entry, N>& table, int key) {
  for (const Entry& e : table) {
    if (e.key == key) return e.name;
  }
  return nullptr;
}

// Intel server parts with AMX. A hypervisor may pass the host's AMX flags through while it
// reports another model number (a Sapphire Rapids guest that says model 0xa7, Rocket Lake, which
// has no AMX): the flags are then the truer witness, and the name says so.
constexpr std::array<const char*, 3> intel_amx_parts = {"Sapphire Rapids", "Emerald Rapids",
                                                        "Granite Rapids"};

std::string checked_against_flags(const std::string& vendor, const std::string& by_model,
                                  int model, std::string_view flags) {
  if (vendor != "Intel" || by_model.rfind("unknown", 0) == 0) return by_model;
  std::istringstream words{std::string(flags)};
  bool amx = false;
  for (std::string word; words >> word;) amx = amx || word == "amx_tile";
  if (!amx) return by_model;
  for (const char* part : intel_amx_parts) {
    if (by_model == part) return by_model;
  }
  return "Sapphire Rapids or later (AMX flags; the CPUID model " + std::to_string(model) +
         " would be " + by_model + ")";
}

std::string hex(int value, int digits) {
  std::array<char, 16> text{};
  std::snprintf(text.data(), text.size(), "0x%0*x", digits, static_cast<unsigned>(value));
  return text.data();
}

std::string x86_vendor_name(const std::string& vendor_id) {
  if (vendor_id == "AuthenticAMD") return "AMD";
  if (vendor_id == "GenuineIntel") return "Intel";
  if (vendor_id == "HygonGenuine") return "Hygon";
  return vendor_id.empty() ? "unknown" : vendor_id;
}

std::string arm_vendor_name(int implementer) {
  switch (implementer) {
    case 0x41: return "ARM";
    case 0x46: return "Fujitsu";
    case 0x48: return "HiSilicon";
    case 0x4e: return "NVIDIA";
    case 0x51: return "Qualcomm";
    case 0x61: return "Apple";
    case 0xc0: return "Ampere";
    default: return "implementer " + hex(implementer, 2);
  }
}

// A sysfs frequency in kHz, as MHz; nothing when the file is missing (VMs, containers).
std::optional<double> sysfs_mhz(const char* path) {
  std::ifstream in(path);
  double khz = 0;
  if (!(in >> khz) || !(khz > 0)) return std::nullopt;
  return khz / 1000.0;
}

nlohmann::json optional_json(const std::optional<int>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}
nlohmann::json optional_json(const std::optional<double>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

}  // namespace

std::string x86_microarchitecture(const std::string& vendor, int family, int model, int stepping) {
  const char* name = nullptr;
  if (vendor == "AMD") {
    if (family == 0x17) name = find_range(amd_family_17h, model);
    if (family == 0x19) name = find_range(amd_family_19h, model);
    if (family == 0x1a) name = find_range(amd_family_1ah, model);
  } else if (vendor == "Hygon" && family == 0x18) {
    name = "Zen (Hygon Dhyana)";
  } else if (vendor == "Intel" && family == 6) {
    if (model == 0x55) {
      name = stepping >= 10 ? "Cooper Lake" : stepping >= 5 ? "Cascade Lake" : "Skylake-SP";
    } else {
      name = find_entry(intel_family_6, model);
    }
  }
  if (name != nullptr) return name;
  return "unknown (family " + std::to_string(family) + " model " + std::to_string(model) + ")";
}

std::string arm_microarchitecture(int implementer, int part) {
  const char* name = nullptr;
  if (implementer == 0x41) name = find_entry(arm_parts, part);
  if (implementer == 0x46 && part == 0x001) name = "A64FX";
  if (implementer == 0x48 && part == 0xd01) name = "TaiShan v110";
  if (implementer == 0x61) {
    name = find_entry(apple_parts, part);
    if (name == nullptr) return "Apple silicon (part " + hex(part, 3) + ")";
  }
  if (name != nullptr) return name;
  return "unknown (implementer " + hex(implementer, 2) + " part " + hex(part, 3) + ")";
}

CpuIdentity identify_cpu(std::string_view cpuinfo) {
  const auto values = first_values(cpuinfo);
  const auto value = [&](std::string_view key) -> std::string {
    const auto it = values.find(key);
    return it == values.end() ? std::string() : it->second;
  };
  const auto number = [&](std::string_view key) { return parse_int(value(key)); };

  CpuIdentity cpu;
  if (values.count("vendor_id")) {
    cpu.architecture = "x86";
    cpu.vendor = x86_vendor_name(value("vendor_id"));
    cpu.family = number("cpu family");
    cpu.model = number("model");
    cpu.stepping = number("stepping");
    cpu.name = value("model name");
    cpu.isa_flags = flags_present(value("flags"), x86_flags_of_interest);
    cpu.microarchitecture =
        cpu.family && cpu.model
            ? checked_against_flags(cpu.vendor,
                                    x86_microarchitecture(cpu.vendor, *cpu.family, *cpu.model,
                                                          cpu.stepping.value_or(0)),
                                    *cpu.model, value("flags"))
            : "unknown";
  } else if (values.count("CPU implementer")) {
    cpu.architecture = "arm";
    cpu.family = number("CPU implementer");
    cpu.model = number("CPU part");
    cpu.stepping = number("CPU revision");
    cpu.variant = number("CPU variant");
    cpu.vendor = cpu.family ? arm_vendor_name(*cpu.family) : "unknown";
    cpu.isa_flags = flags_present(value("Features"), arm_flags_of_interest);
    cpu.microarchitecture =
        cpu.family && cpu.model ? arm_microarchitecture(*cpu.family, *cpu.model) : "unknown";
    // ARM kernels print no model name; the microarchitecture is the best name there is.
    cpu.name = values.count("model name") ? value("model name") : cpu.microarchitecture;
  } else {
    cpu.architecture = "unknown";
    cpu.vendor = "unknown";
    cpu.name = values.count("model name") ? value("model name") : value("Processor");
    cpu.microarchitecture = "unknown";
  }
  cpu.mhz_nominal = nominal_mhz_from_name(cpu.name);
  cpu.mhz_current = parse_double(value("cpu MHz"));
  return cpu;
}

CpuIdentity this_cpu() {
  std::ifstream in("/proc/cpuinfo");
  std::ostringstream text;
  text << in.rdbuf();
  CpuIdentity cpu = identify_cpu(text.str());
  const char* const cpufreq = "/sys/devices/system/cpu/cpu0/cpufreq/";
  if (!cpu.mhz_nominal) {
    cpu.mhz_nominal = sysfs_mhz((std::string(cpufreq) + "base_frequency").c_str());
  }
  if (!cpu.mhz_nominal) {
    cpu.mhz_nominal = sysfs_mhz((std::string(cpufreq) + "cpuinfo_max_freq").c_str());
  }
  if (!cpu.mhz_current) {
    cpu.mhz_current = sysfs_mhz((std::string(cpufreq) + "scaling_cur_freq").c_str());
  }
  return cpu;
}

nlohmann::json cpu_identity_json(const CpuIdentity& cpu) {
  nlohmann::json json = {{"architecture", cpu.architecture},
                         {"vendor", cpu.vendor},
                         {"family", optional_json(cpu.family)},
                         {"model", optional_json(cpu.model)},
                         {"stepping", optional_json(cpu.stepping)},
                         {"name", cpu.name},
                         {"microarchitecture", cpu.microarchitecture},
                         {"isa_flags", cpu.isa_flags},
                         {"mhz_nominal", optional_json(cpu.mhz_nominal)},
                         {"mhz_current", optional_json(cpu.mhz_current)}};
  if (cpu.variant) json["variant"] = *cpu.variant;
  return json;
}

}  // namespace cnnbench
