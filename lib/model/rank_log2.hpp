// floor(lg p) and ceil(lg p) of a rank count, as the allreduce algorithms count their rounds.
#pragma once

namespace cnnbench {

inline int floor_log2(int p) {
  int steps = 0;
  while ((2 << steps) <= p) ++steps;
  return steps;
}

inline int ceil_log2(int p) {
  int steps = 0;
  while ((1 << steps) < p) ++steps;
  return steps;
}

}  // namespace cnnbench
