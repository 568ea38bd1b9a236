// The machine's measured SGEMM peak (OpenBLAS, single core or all cores): the yardstick that run
// reports divide their achieved GFLOP/s by.
#include <cblas.h>

#include <algorithm>

#include "cnnbench/core.hpp"
#include "cnnbench/machine.hpp"

namespace cnnbench {

nlohmann::json measure_sgemm_peak(int threads, double seconds) {
  CNNBENCH_CHECK(threads > 0, "sgemm peak: threads must be positive");
  // 1024^3 is large enough to run at OpenBLAS's full rate and short enough (~20 ms per product on
  // one core) for a 0.3 s measurement to take the best of several.
  constexpr int n = 1024;
  const int previous_threads = blas_threads();
  set_blas_threads(threads);
  aligned_vector<float> a(std::size_t(n) * n), b(std::size_t(n) * n), c(std::size_t(n) * n);
  Rng rng(7);
  for (auto& v : a) v = rng.uniform(-1.0f, 1.0f);
  for (auto& v : b) v = rng.uniform(-1.0f, 1.0f);
  const auto product = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  };
  product();  // warm-up: threads started, pages touched
  double best = 1e300;
  int repetitions = 0;
  const double start = now_seconds();
  do {
    const double t0 = now_seconds();
    product();
    best = std::min(best, now_seconds() - t0);
    ++repetitions;
  } while (now_seconds() - start < seconds || repetitions < 3);
  set_blas_threads(previous_threads);
  const double flops = 2.0 * n * n * n;
  return {{"threads", threads}, {"gflops", flops / best / 1e9}, {"n", n},
          {"repetitions", repetitions}, {"best_seconds", best}};
}

}  // namespace cnnbench
