// The thread and core counts the many-core tests run: every one from 1 to `most`, or under
// ThreadSanitizer (which slows oversubscribed threads most) a spread of them, so that the
// sanitizer job on a 2-core machine stays within minutes.
#pragma once

#include <vector>

#if defined(__SANITIZE_THREAD__)
#define CNNBENCH_TESTS_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CNNBENCH_TESTS_UNDER_TSAN 1
#endif
#endif

namespace cnnbench::testing {

inline std::vector<int> counts_up_to(int most) {
  std::vector<int> counts;
#ifdef CNNBENCH_TESTS_UNDER_TSAN
  for (const int count : {1, 2, 3, 7, most}) {
    if (count <= most && (counts.empty() || count > counts.back())) counts.push_back(count);
  }
#else
  for (int count = 1; count <= most; ++count) counts.push_back(count);
#endif
  return counts;
}

}  // namespace cnnbench::testing
