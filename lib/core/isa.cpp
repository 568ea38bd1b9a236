// The kernels' SIMD targets: one index into Highway's dispatch tables per kernel family, which the
// kernels call through instead of HWY_DYNAMIC_DISPATCH's single process-wide index.
#include "cnnbench/isa.hpp"

#include <hwy/highway.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "cnnbench/core.hpp"

namespace cnnbench {

namespace {

struct Target {
  const char* name;
  std::int64_t bits;
};

// Highest first. "scalar" is Highway's portable fallback (EMU128, or SCALAR where that is built).
constexpr std::array<Target, 6> targets = {{{"avx3_dl", HWY_AVX3_DL},
                                            {"avx3", HWY_AVX3},
                                            {"avx2", HWY_AVX2},
                                            {"sse4", HWY_SSE4},
                                            {"neon", HWY_NEON},
                                            {"scalar", HWY_EMU128 | HWY_SCALAR}}};

// The targets the CPU runs, with nothing disabled.
std::int64_t cpu_targets() {
  static const std::int64_t bits = [] {
    hwy::DisableTargets(0);
    return hwy::SupportedTargets();
  }();
  return bits;
}

const Target* find_target(const std::string& name) {
  for (const Target& t : targets) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

bool compiled(const Target& t) { return (t.bits & HWY_TARGETS) != 0; }
bool runs_here(const Target& t) { return (t.bits & HWY_TARGETS & cpu_targets()) != 0; }

std::string highest_name() {
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

// A target's slot in an HWY_EXPORT table, by Highway's own layout (hwy/targets.h): slot 0 is the
// initialising trampoline, then one per dynamic target, the portable fallback last.
std::size_t table_index(const Target& t) {
  const std::int64_t bit = t.bits & HWY_TARGETS;
  const std::int64_t lowest = bit & -bit;
  if (lowest & (HWY_EMU128 | HWY_SCALAR)) return HWY_MAX_DYNAMIC_TARGETS + 1;
  return hwy::Num0BitsBelowLS1Bit_Nonzero64(static_cast<std::uint64_t>(HWY_CHOSEN_TARGET_SHIFT(lowest)));
}

// Slots in use, by family; read by every kernel call, written only by use_kernel_choice.
std::array<std::atomic<std::size_t>, kernel_family_count> slots;
std::once_flag slots_initialised;
std::mutex choice_mutex;
KernelChoice current_choice;
std::string current_request = "highest";

void initialise_slots() {
  std::call_once(slots_initialised, [] {
    const std::size_t slot = table_index(*find_target(highest_name()));
    for (auto& s : slots) s.store(slot);
    current_choice = highest_kernel_choice();
  });
}

}  // namespace

const char* kernel_family_name(KernelFamily family) {
  switch (family) {
    case KernelFamily::conv_forward: return "conv_forward";
    case KernelFamily::conv_backward: return "conv_backward";
    case KernelFamily::dense: return "dense";
    case KernelFamily::pool: return "pool";
    case KernelFamily::activation: return "activation";
    case KernelFamily::sgd: return "sgd";
  }
  return "unknown";
}

IsaInfo isa_info() {
  initialise_slots();
  IsaInfo info;
  for (const Target& t : targets) {
    if (compiled(t)) info.compiled.emplace_back(t.name);
    if (runs_here(t)) info.supported.emplace_back(t.name);
  }
  info.highest = highest_name();
  std::lock_guard lock(choice_mutex);
  info.choice = current_choice;
  info.requested = current_request;
  info.active = info.choice.targets.front();
  for (const std::string& target : info.choice.targets) {
    if (target != info.active) info.active = "mixed";
  }
  return info;
}

std::vector<std::string> isa_choices() {
  std::vector<std::string> choices{"best", "highest"};
  for (const Target& t : targets) {
    if (compiled(t)) choices.emplace_back(t.name);
  }
  return choices;
}

std::string isa_problem(const std::string& name) {
  if (name == "best" || name == "highest") return {};
  const Target* t = find_target(name);
  if (!t) {
    std::string list;
    for (const std::string& c : isa_choices()) list += (list.empty() ? "" : ", ") + c;
    return "unknown SIMD target '" + name + "' (choose from " + list + ")";
  }
  if (!compiled(*t)) return "SIMD target '" + name + "' is not compiled into this build";
  if (!runs_here(*t)) {
    return "this CPU cannot run SIMD target '" + name + "': its highest is '" + highest_name() +
           "' (it runs " + cpu_list() + ")";
  }
  return {};
}

KernelChoice highest_kernel_choice() {
  KernelChoice choice = forced_kernel_choice(highest_name());
  choice.how = "highest";
  return choice;
}

KernelChoice forced_kernel_choice(const std::string& name) {
  KernelChoice choice;
  choice.targets.fill(name);
  choice.how = "forced";
  return choice;
}

void use_kernel_choice(const KernelChoice& choice, const std::string& requested) {
  initialise_slots();
  std::array<std::size_t, kernel_family_count> chosen{};
  for (std::size_t f = 0; f < kernel_family_count; ++f) {
    const std::string& name = choice.targets[f];
    const std::string problem = name == "best" || name == "highest"
                                    ? "'" + name + "' is not a target"
                                    : isa_problem(name);
    CNNBENCH_CHECK(problem.empty(), std::string(kernel_family_name(kernel_families[f])) + ": " + problem);
    chosen[f] = table_index(*find_target(name));
  }
  std::lock_guard lock(choice_mutex);
  for (std::size_t f = 0; f < kernel_family_count; ++f) slots[f].store(chosen[f]);
  current_choice = choice;
  current_request = requested;
}

std::size_t kernel_table_index(KernelFamily family) {
  initialise_slots();
  return slots[static_cast<std::size_t>(family)].load(std::memory_order_relaxed);
}

}  // namespace cnnbench
