// The thread and core counts the many-core tests run: every one from 1 to `most`, or under
// ThreadSanitizer (which slows oversubscribed threads most) a spread of them, so that the
// sanitizer job on a 2-core machine stays within minutes.
#pragma once

#include <algorithm>
#include <thread>
#include <vector>

#if defined(__SANITIZE_THREAD__)
#define CNNBENCH_TESTS_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CNNBENCH_TESTS_UNDER_TSAN 1
#endif
#endif

namespace cnnbench::testing {

// Whether a test may run `threads` spin-waiting threads here. Under ThreadSanitizer, threads that
// spin on an oversubscribed machine slow down far beyond their number: on 2 cores the stream on 7
// threads took 4 s, on 16 threads 400 s (and starved the tests beside it). The sanitizer job keeps
// to 4 threads a hardware thread (8 at least); the regular build runs every count.
inline bool runs_here(int threads) {
#ifdef CNNBENCH_TESTS_UNDER_TSAN
  const int hardware = static_cast<int>(std::thread::hardware_concurrency());
  return threads <= std::max(8, 4 * hardware);
#else
  (void)threads;
  return true;
#endif
}

inline std::vector<int> counts_up_to(int most) {
  std::vector<int> counts;
#ifdef CNNBENCH_TESTS_UNDER_TSAN
  for (const int count : {1, 2, 3, 7, most}) {
    if (count <= most && runs_here(count) && (counts.empty() || count > counts.back()))
      counts.push_back(count);
  }
#else
  for (int count = 1; count <= most; ++count) counts.push_back(count);
#endif
  return counts;
}

}  // namespace cnnbench::testing
