// The kernels' SIMD target: Highway's run-time dispatch, narrowed on request with
// hwy::DisableTargets (which every HWY_DYNAMIC_DISPATCH call then respects).
#include "cnnbench/isa.hpp"

#include <hwy/highway.h>

#include <array>
#include <cstdint>
#include <mutex>
#include <utility>

#include "cnnbench/core.hpp"

namespace cnnbench {

namespace {

struct Target {
  const char* name;
  std::int64_t bits;
};

// Best first. "scalar" is Highway's portable fallback (EMU128, or SCALAR where that is built).
constexpr std::array<Target, 6> targets = {{{"avx3_dl", HWY_AVX3_DL},
                                            {"avx3", HWY_AVX3},
                                            {"avx2", HWY_AVX2},
                                            {"sse4", HWY_SSE4},
                                            {"neon", HWY_NEON},
                                            {"scalar", HWY_EMU128 | HWY_SCALAR}}};

// The targets the CPU runs, read once before any narrowing (hwy::SupportedTargets() returns the
// narrowed set afterwards).
std::int64_t cpu_targets() {
  static const std::int64_t bits = [] {
    hwy::DisableTargets(0);
    return hwy::SupportedTargets();
  }();
  return bits;
}

std::mutex choice_mutex;
std::string active_name = "best";

const Target* find_target(const std::string& name) {
  for (const Target& t : targets) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

bool compiled(const Target& t) { return (t.bits & HWY_TARGETS) != 0; }
bool runs_here(const Target& t) { return (t.bits & HWY_TARGETS & cpu_targets()) != 0; }

std::string best_name() {
  for (const Target& t : targets) {
    if (runs_here(t)) return t.name;
  }
  return "scalar";
}

std::string cpu_list() {
  std::string list;
  for (const Target& t : targets) {
    if (runs_here(t)) list += (list.empty() ? "" : ", ") + std::string(t.name);
  }
  return list;
}

}  // namespace

IsaInfo isa_info() {
  IsaInfo info;
  for (const Target& t : targets) {
    if (compiled(t)) info.compiled.emplace_back(t.name);
    if (runs_here(t)) info.supported.emplace_back(t.name);
  }
  info.best = best_name();
  std::lock_guard lock(choice_mutex);
  info.active = active_name == "best" ? info.best : active_name;
  return info;
}

std::vector<std::string> isa_choices() {
  std::vector<std::string> choices{"best"};
  for (const Target& t : targets) {
    if (compiled(t)) choices.emplace_back(t.name);
  }
  return choices;
}

std::string isa_problem(const std::string& name) {
  if (name == "best") return {};
  const Target* t = find_target(name);
  if (!t) {
    std::string list;
    for (const std::string& c : isa_choices()) list += (list.empty() ? "" : ", ") + c;
    return "unknown SIMD target '" + name + "' (choose from " + list + ")";
  }
  if (!compiled(*t)) return "SIMD target '" + name + "' is not compiled into this build";
  if (!runs_here(*t)) {
    return "this CPU cannot run SIMD target '" + name + "': its best is '" + best_name() +
           "' (it runs " + cpu_list() + ")";
  }
  return {};
}

void use_isa(const std::string& name) {
  const std::string problem = isa_problem(name);
  CNNBENCH_CHECK(problem.empty(), problem);
  std::int64_t disabled = 0;
  if (name != "best") {
    // Every target better than the one asked for; the lowest set bit of its mask is the best.
    const std::int64_t chosen = find_target(name)->bits & HWY_TARGETS & cpu_targets();
    const std::int64_t lowest = chosen & -chosen;
    disabled = lowest - 1;
  }
  std::lock_guard lock(choice_mutex);
  cpu_targets();
  hwy::DisableTargets(disabled);
  active_name = name;
}

}  // namespace cnnbench
