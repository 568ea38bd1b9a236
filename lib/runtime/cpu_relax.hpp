// The pause a spinning thread makes between two polls of a flag: it tells the core that this is
// a spin-wait (cheaper on power, and a sibling hardware thread gets the core's resources).
#pragma once

namespace cnnbench {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace cnnbench
