// Prints what the ARM check runs on: the CPU features the (emulated) CPU reports and the SIMD
// targets cnnbench compiled and can run there (the ones the tests loop over).
#include <sys/auxv.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cnnbench/isa.hpp"

namespace {
std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}
}  // namespace

int main() {
  const unsigned long hwcap = getauxval(AT_HWCAP);
  std::vector<std::string> features;
  // Bits of AT_HWCAP on arm64 (linux/arch/arm64/include/uapi/asm/hwcap.h).
  const struct {
    unsigned bit;
    const char* name;
  } bits[] = {{0, "fp"},     {1, "asimd"},   {3, "aes"},     {7, "crc32"},
              {9, "fphp"},   {10, "asimdhp"}, {20, "asimddp"}, {22, "sve"}};
  for (const auto& b : bits) {
    if (hwcap & (1UL << b.bit)) features.emplace_back(b.name);
  }
  const cnnbench::IsaInfo info = cnnbench::isa_info();
  std::printf("isa_probe: hwcaps: %s\n", join(features).c_str());
  std::printf("isa_probe: SIMD targets compiled: %s\n", join(info.compiled).c_str());
  std::printf("isa_probe: SIMD targets the tests run (supported): %s (highest %s)\n",
              join(info.supported).c_str(), info.highest.c_str());
  return info.supported.empty() ? 1 : 0;
}
