// Which CPU a report was measured on: vendor, family/model/stepping, microarchitecture, the ISA
// flags the kernels care about and the clock, read from /proc/cpuinfo (and sysfs for the clock).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace cnnbench {

struct CpuIdentity {
  std::string architecture;  // "x86" or "arm"; "unknown" when cpuinfo says neither
  // "AMD", "Intel", "ARM", "Apple", ...; cpuinfo's own vendor_id when it is not a known one.
  std::string vendor;
  // x86: cpuinfo's "cpu family", "model", "stepping". ARM: "CPU implementer", "CPU part",
  // "CPU revision", and `variant` holds "CPU variant". Empty when cpuinfo does not say.
  std::optional<int> family, model, stepping, variant;
  std::string name;               // the marketing name ("AMD EPYC 9654 96-Core Processor")
  std::string microarchitecture;  // "Zen 4", "Sapphire Rapids", "Neoverse V1", "unknown (...)"
  std::vector<std::string> isa_flags;  // the flags that matter to the kernels, in a fixed order
  std::optional<double> mhz_nominal;   // from the name's "@ 2.10GHz" (sysfs in this_cpu())
  std::optional<double> mhz_current;   // cpu0's "cpu MHz" (sysfs in this_cpu())
};

// Parses the text of /proc/cpuinfo; only cpu0's block counts. Pure, so that tests can feed it
// canned text from machines they do not run on.
CpuIdentity identify_cpu(std::string_view cpuinfo);

// The microarchitecture of an x86 vendor ("AMD", "Intel", "Hygon") family/model/stepping, or of
// an ARM implementer/part; "unknown (family F model M)" when the table has no entry.
std::string x86_microarchitecture(const std::string& vendor, int family, int model, int stepping);
std::string arm_microarchitecture(int implementer, int part);

// This machine's CPU: identify_cpu on /proc/cpuinfo, with the clock taken from
// /sys/devices/system/cpu/cpu0/cpufreq when cpuinfo does not give it.
CpuIdentity this_cpu();

// {"architecture", "vendor", "family", "model", "stepping", ["variant",] "name",
//  "microarchitecture", "isa_flags", "mhz_nominal", "mhz_current"}; unknown numbers are null.
nlohmann::json cpu_identity_json(const CpuIdentity& cpu);

}  // namespace cnnbench
