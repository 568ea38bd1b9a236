// identify_cpu on canned /proc/cpuinfo text from machines the tests do not run on: vendor,
// family/model/stepping, the microarchitecture table, the ISA flags and the clock.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cnnbench/cpu_identity.hpp"

namespace cnnbench {
namespace {

using Flags = std::vector<std::string>;

// One x86 processor block as Linux prints it (tabs before the colons, as the kernel writes them).
std::string x86_block(int processor, const std::string& vendor_id, int family, int model,
                      int stepping, const std::string& name, const std::string& mhz,
                      const std::string& flags) {
  return "processor\t: " + std::to_string(processor) + "\nvendor_id\t: " + vendor_id +
         "\ncpu family\t: " + std::to_string(family) + "\nmodel\t\t: " + std::to_string(model) +
         "\nmodel name\t: " + name + "\nstepping\t: " + std::to_string(stepping) +
         "\nmicrocode\t: 0xa0011d1\ncpu MHz\t\t: " + mhz +
         "\ncache size\t: 512 KB\nflags\t\t: " + flags + "\nbogomips\t: 4890.80\n\n";
}

const std::string zen3_flags =
    "fpu vme de pse tsc msr pae mce cx8 apic sse sse2 ht syscall nx mmxext pdpe1gb rdtscp lm "
    "pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx f16c rdrand "
    "hypervisor bmi1 avx2 smep bmi2 erms invpcid rdseed adx smap clflushopt clwb sha_ni vaes "
    "vpclmulqdq rdpid fsrm";
const std::string zen4_flags = zen3_flags +
                               " avx512f avx512dq avx512ifma avx512cd avx512bw avx512vl "
                               "avx512_bf16 avx512vbmi avx512_vbmi2 gfni avx512_vnni "
                               "avx512_bitalg avx512_vpopcntdq";

TEST(CpuIdentity, Zen3FromEpyc7763) {
  const std::string text =
      x86_block(0, "AuthenticAMD", 25, 1, 1, "AMD EPYC 7763 64-Core Processor", "2445.404",
                zen3_flags) +
      x86_block(1, "AuthenticAMD", 25, 1, 1, "AMD EPYC 7763 64-Core Processor", "3000.000",
                zen3_flags);
  const CpuIdentity cpu = identify_cpu(text);
  EXPECT_EQ(cpu.architecture, "x86");
  EXPECT_EQ(cpu.vendor, "AMD");
  EXPECT_EQ(cpu.family, 25);
  EXPECT_EQ(cpu.model, 1);
  EXPECT_EQ(cpu.stepping, 1);
  EXPECT_FALSE(cpu.variant.has_value());
  EXPECT_EQ(cpu.name, "AMD EPYC 7763 64-Core Processor");
  EXPECT_EQ(cpu.microarchitecture, "Zen 3");
  EXPECT_EQ(cpu.isa_flags, (Flags{"avx2", "fma"}));
  EXPECT_FALSE(cpu.mhz_nominal.has_value());  // AMD names carry no "@ x.xxGHz"
  ASSERT_TRUE(cpu.mhz_current.has_value());
  EXPECT_DOUBLE_EQ(*cpu.mhz_current, 2445.404);  // cpu0's, not cpu1's
}

TEST(CpuIdentity, Zen4FromEpyc9654) {
  const CpuIdentity cpu = identify_cpu(x86_block(0, "AuthenticAMD", 25, 17, 1,
                                                 "AMD EPYC 9654 96-Core Processor", "2400.000",
                                                 zen4_flags));
  EXPECT_EQ(cpu.vendor, "AMD");
  EXPECT_EQ(cpu.model, 17);
  EXPECT_EQ(cpu.microarchitecture, "Zen 4");
  // In the fixed order, whatever the order in cpuinfo; avx512vbmi (no 2) is not among them.
  EXPECT_EQ(cpu.isa_flags, (Flags{"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq",
                                  "avx512_vnni", "avx512_bf16", "avx512_vbmi2"}));
}

TEST(CpuIdentity, Zen5FromEpyc9755) {
  const CpuIdentity cpu = identify_cpu(x86_block(0, "AuthenticAMD", 26, 2, 1,
                                                 "AMD EPYC 9755 128-Core Processor", "2700.000",
                                                 zen4_flags));
  EXPECT_EQ(cpu.family, 26);
  EXPECT_EQ(cpu.model, 2);
  EXPECT_EQ(cpu.microarchitecture, "Zen 5");
}

TEST(CpuIdentity, IntelSapphireRapidsAndTheNominalClockInTheName) {
  const CpuIdentity cpu = identify_cpu(x86_block(
      0, "GenuineIntel", 6, 143, 8, "Intel(R) Xeon(R) Gold 6438Y+ @ 2.00GHz", "800.000",
      zen4_flags + " amx_bf16 amx_tile amx_int8"));
  EXPECT_EQ(cpu.vendor, "Intel");
  EXPECT_EQ(cpu.family, 6);
  EXPECT_EQ(cpu.model, 0x8f);
  EXPECT_EQ(cpu.stepping, 8);
  EXPECT_EQ(cpu.microarchitecture, "Sapphire Rapids");
  ASSERT_TRUE(cpu.mhz_nominal.has_value());
  EXPECT_DOUBLE_EQ(*cpu.mhz_nominal, 2000.0);
  ASSERT_TRUE(cpu.mhz_current.has_value());
  EXPECT_DOUBLE_EQ(*cpu.mhz_current, 800.0);
}

// A KVM guest on a Sapphire Rapids host that reports model 167 (Rocket Lake, which has no AMX):
// the name keeps both what the flags and what the model say, so no report calls it Rocket Lake.
TEST(CpuIdentity, AmxFlagsOutweighAClientModelNumber) {
  const std::string amx = zen4_flags + " amx_bf16 avx512_fp16 amx_tile amx_int8";
  const CpuIdentity guest = identify_cpu(
      x86_block(0, "GenuineIntel", 6, 167, 1, "Intel(R) Xeon(R) Processor", "2600.000", amx));
  EXPECT_EQ(guest.microarchitecture,
            "Sapphire Rapids or later (AMX flags; the CPUID model 167 would be Rocket Lake)");
  const std::string i9 = "11th Gen Intel(R) Core(TM) i9-11900K";
  const CpuIdentity rocket_lake =
      identify_cpu(x86_block(0, "GenuineIntel", 6, 167, 1, i9, "3500.000", zen4_flags));
  EXPECT_EQ(rocket_lake.microarchitecture, "Rocket Lake");
  const CpuIdentity granite = identify_cpu(
      x86_block(0, "GenuineIntel", 6, 0xad, 1, "Intel(R) Xeon(R) 6972P", "2400.000", amx));
  EXPECT_EQ(granite.microarchitecture, "Granite Rapids");
}

TEST(CpuIdentity, IntelModel85IsSplitByStepping) {
  EXPECT_EQ(x86_microarchitecture("Intel", 6, 0x55, 4), "Skylake-SP");
  EXPECT_EQ(x86_microarchitecture("Intel", 6, 0x55, 7), "Cascade Lake");
  EXPECT_EQ(x86_microarchitecture("Intel", 6, 0x55, 11), "Cooper Lake");
  EXPECT_EQ(x86_microarchitecture("Intel", 6, 0xcf, 2), "Emerald Rapids");
  EXPECT_EQ(x86_microarchitecture("Intel", 6, 0xad, 1), "Granite Rapids");
  EXPECT_EQ(x86_microarchitecture("Intel", 6, 0x6a, 6), "Ice Lake-SP");
  // AMD's family 17h: Zen/Zen+ below model 0x30, Zen 2 from it (Rome is 0x31).
  EXPECT_EQ(x86_microarchitecture("AMD", 23, 0x01, 2), "Zen/Zen+");
  EXPECT_EQ(x86_microarchitecture("AMD", 23, 0x31, 0), "Zen 2");
  // The same family/model numbers mean nothing for another vendor.
  EXPECT_EQ(x86_microarchitecture("Intel", 25, 1, 1), "unknown (family 25 model 1)");
}

TEST(CpuIdentity, NeoverseV1FromGraviton3) {
  const std::string block =
      "BogoMIPS\t: 2100.00\n"
      "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid "
      "asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat "
      "ilrcpc flagm ssbs paca pacg dcpodp svei8mm svebf16 i8mm bf16 dgh rng\n"
      "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0xd40\n"
      "CPU revision\t: 1\n\n";
  const CpuIdentity cpu = identify_cpu("processor\t: 0\n" + block + "processor\t: 1\n" + block);
  EXPECT_EQ(cpu.architecture, "arm");
  EXPECT_EQ(cpu.vendor, "ARM");
  EXPECT_EQ(cpu.family, 0x41);
  EXPECT_EQ(cpu.model, 0xd40);
  EXPECT_EQ(cpu.variant, 1);
  EXPECT_EQ(cpu.stepping, 1);
  EXPECT_EQ(cpu.microarchitecture, "Neoverse V1");
  EXPECT_EQ(cpu.name, "Neoverse V1");  // ARM kernels print no model name
  // sve but not sve2: "svei8mm" and "svebf16" are other flags.
  EXPECT_EQ(cpu.isa_flags, (Flags{"asimd", "sve"}));
  EXPECT_FALSE(cpu.mhz_nominal.has_value());
  EXPECT_FALSE(cpu.mhz_current.has_value());

  const nlohmann::json json = cpu_identity_json(cpu);
  EXPECT_EQ(json.at("family"), 0x41);
  EXPECT_EQ(json.at("variant"), 1);
  EXPECT_TRUE(json.at("mhz_current").is_null());
}

TEST(CpuIdentity, UnknownCpusSayWhatTheyAre) {
  const CpuIdentity via = identify_cpu(
      x86_block(0, "CentaurHauls", 7, 91, 0, "ZHAOXIN KaiXian KX-6640MA@2.2GHz", "2200.000",
                "sse4_2 avx avx2"));
  EXPECT_EQ(via.vendor, "CentaurHauls");
  EXPECT_EQ(via.microarchitecture, "unknown (family 7 model 91)");
  EXPECT_EQ(via.isa_flags, (Flags{"avx2"}));
  ASSERT_TRUE(via.mhz_nominal.has_value());
  EXPECT_DOUBLE_EQ(*via.mhz_nominal, 2200.0);

  EXPECT_EQ(arm_microarchitecture(0x41, 0xfff), "unknown (implementer 0x41 part 0xfff)");
  EXPECT_EQ(arm_microarchitecture(0x61, 0x999), "Apple silicon (part 0x999)");

  const CpuIdentity nothing = identify_cpu("");
  EXPECT_EQ(nothing.architecture, "unknown");
  EXPECT_EQ(nothing.vendor, "unknown");
  EXPECT_EQ(nothing.microarchitecture, "unknown");
  EXPECT_FALSE(nothing.family.has_value());
  EXPECT_TRUE(nothing.isa_flags.empty());
  EXPECT_TRUE(cpu_identity_json(nothing).at("family").is_null());
}

// this_cpu() is identify_cpu on this machine's /proc/cpuinfo, with only the clock filled in
// from sysfs.
TEST(CpuIdentity, ThisCpuMatchesProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  if (!in) GTEST_SKIP() << "no /proc/cpuinfo here";
  std::ostringstream text;
  text << in.rdbuf();
  const CpuIdentity expected = identify_cpu(text.str());
  const CpuIdentity here = this_cpu();
  EXPECT_EQ(here.vendor, expected.vendor);
  EXPECT_EQ(here.family, expected.family);
  EXPECT_EQ(here.model, expected.model);
  EXPECT_EQ(here.microarchitecture, expected.microarchitecture);
  EXPECT_EQ(here.isa_flags, expected.isa_flags);
#if defined(__x86_64__)
  EXPECT_EQ(here.architecture, "x86");
  EXPECT_NE(here.vendor, "unknown");
#endif
}

}  // namespace
}  // namespace cnnbench
