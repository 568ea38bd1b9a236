// The numbers a sweep reports about scaling: speedup, efficiency, Karp-Flatt, the Amdahl fit,
// the Mann-Whitney U rank test and the ring-allreduce model behind the cluster prediction.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/sweep.hpp"

namespace cnnbench {

double speedup(double serial_seconds, double parallel_seconds) {
  CNNBENCH_CHECK(serial_seconds > 0 && parallel_seconds > 0,
                 "speedup needs positive times, got " + std::to_string(serial_seconds) + " and " +
                     std::to_string(parallel_seconds));
  return serial_seconds / parallel_seconds;
}

double efficiency(double speedup_value, int cores) {
  CNNBENCH_CHECK(cores >= 1, "efficiency needs at least one core");
  return speedup_value / cores;
}

double karp_flatt(double speedup_value, int cores) {
  CNNBENCH_CHECK(cores > 1, "the Karp-Flatt serial fraction needs p > 1 (at p = 1 it is 0/0)");
  CNNBENCH_CHECK(speedup_value > 0, "the Karp-Flatt serial fraction needs a positive speedup");
  const double p = cores;
  return (1.0 / speedup_value - 1.0 / p) / (1.0 - 1.0 / p);
}

double amdahl_speedup(double serial_fraction, double cores) {
  return 1.0 / (serial_fraction + (1.0 - serial_fraction) / cores);
}

AmdahlFit fit_amdahl(std::span<const int> cores, std::span<const double> speedups) {
  CNNBENCH_CHECK(cores.size() == speedups.size(), "Amdahl fit: cores and speedups differ in length");
  double sum_xy = 0, sum_xx = 0;
  AmdahlFit fit;
  for (std::size_t i = 0; i < cores.size(); ++i) {
    if (cores[i] <= 1) continue;
    CNNBENCH_CHECK(speedups[i] > 0, "Amdahl fit: speedups must be positive");
    const double x = 1.0 - 1.0 / cores[i];
    const double y = 1.0 / speedups[i] - 1.0 / cores[i];
    sum_xy += x * y;
    sum_xx += x * x;
    ++fit.points;
  }
  CNNBENCH_CHECK(fit.points > 0, "Amdahl fit: no point with more than one core");
  fit.serial_fraction = sum_xy / sum_xx;
  double squared = 0;
  for (std::size_t i = 0; i < cores.size(); ++i) {
    if (cores[i] <= 1) continue;
    const double error = 1.0 / amdahl_speedup(fit.serial_fraction, cores[i]) - 1.0 / speedups[i];
    squared += error * error;
  }
  fit.rmse = std::sqrt(squared / fit.points);
  return fit;
}

namespace {

// Mid-ranks (1-based, ties share their mean rank) of the pooled sample.
std::vector<double> pooled_ranks(const std::vector<double>& pooled, double* tie_term) {
  const std::size_t n = pooled.size();
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t i, std::size_t j) { return pooled[i] < pooled[j]; });
  std::vector<double> ranks(n);
  *tie_term = 0;
  for (std::size_t start = 0; start < n;) {
    std::size_t end = start + 1;
    while (end < n && pooled[order[end]] == pooled[order[start]]) ++end;
    const double mid_rank = 0.5 * static_cast<double>(start + 1 + end);
    for (std::size_t k = start; k < end; ++k) ranks[order[k]] = mid_rank;
    const double t = static_cast<double>(end - start);
    *tie_term += t * t * t - t;
    start = end;
  }
  return ranks;
}

// counts[u] = number of ways n1 of the ranks 1..n1+n2 give U = u (the classic recursion
// f(n1, n2, u) = f(n1-1, n2, u-n2) + f(n1, n2-1, u)), as probabilities.
std::vector<double> exact_u_distribution(int n1, int n2) {
  // table[i][j] is the distribution for sizes (i, j); built up to (n1, n2).
  std::vector<std::vector<std::vector<double>>> table(
      static_cast<std::size_t>(n1 + 1), std::vector<std::vector<double>>(static_cast<std::size_t>(n2 + 1)));
  for (int i = 0; i <= n1; ++i) {
    for (int j = 0; j <= n2; ++j) {
      auto& d = table[i][j];
      d.assign(static_cast<std::size_t>(i * j + 1), 0.0);
      if (i == 0 || j == 0) {
        d[0] = 1;
        continue;
      }
      // The largest pooled value belongs to sample 1 (beats all j of sample 2) or to sample 2.
      const auto& with_first = table[i - 1][j];
      const auto& with_second = table[i][j - 1];
      for (std::size_t u = 0; u < with_first.size(); ++u) d[u + static_cast<std::size_t>(j)] += with_first[u];
      for (std::size_t u = 0; u < with_second.size(); ++u) d[u] += with_second[u];
    }
  }
  std::vector<double> counts = table[n1][n2];
  const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
  for (double& c : counts) c /= total;
  return counts;
}

double normal_upper_tail(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }

}  // namespace

MannWhitney mann_whitney_u(std::span<const double> a, std::span<const double> b) {
  CNNBENCH_CHECK(!a.empty() && !b.empty(), "Mann-Whitney U needs two non-empty samples");
  const int n1 = static_cast<int>(a.size()), n2 = static_cast<int>(b.size());
  std::vector<double> pooled(a.begin(), a.end());
  pooled.insert(pooled.end(), b.begin(), b.end());
  for (double v : pooled) CNNBENCH_CHECK(std::isfinite(v), "Mann-Whitney U: a value is not finite");
  double tie_term = 0;
  const std::vector<double> ranks = pooled_ranks(pooled, &tie_term);
  const double rank_sum_a = std::accumulate(ranks.begin(), ranks.begin() + n1, 0.0);

  MannWhitney result;
  result.u = rank_sum_a - 0.5 * n1 * (n1 + 1.0);
  const double mean_u = 0.5 * n1 * n2;

  if (tie_term == 0 && n1 + n2 <= 30) {
    const std::vector<double> distribution = exact_u_distribution(n1, n2);
    const auto u = static_cast<std::size_t>(std::llround(result.u));
    const double lower = std::accumulate(distribution.begin(), distribution.begin() + static_cast<std::ptrdiff_t>(u) + 1, 0.0);
    const double upper = std::accumulate(distribution.begin() + static_cast<std::ptrdiff_t>(u), distribution.end(), 0.0);
    result.p_value = std::min(1.0, 2.0 * std::min(lower, upper));
    result.min_p_value = std::min(1.0, 2.0 * distribution.front());
    result.exact = true;
    return result;
  }

  const double n = n1 + n2;
  const double variance = n1 * n2 / 12.0 * ((n + 1.0) - tie_term / (n * (n - 1.0)));
  if (variance <= 0) {  // every value equal: no evidence of a difference
    result.p_value = 1;
    result.min_p_value = 1;
    return result;
  }
  const double sd = std::sqrt(variance);
  const double z = std::max(0.0, std::abs(result.u - mean_u) - 0.5) / sd;
  result.p_value = std::min(1.0, 2.0 * normal_upper_tail(z));
  const double z_extreme = std::max(0.0, mean_u - 0.5) / sd;
  result.min_p_value = std::min(1.0, 2.0 * normal_upper_tail(z_extreme));
  return result;
}

double predicted_step_seconds(double one_node_step_seconds, int batch, int nodes,
                              double gradient_bytes, const CollectiveCost& cost) {
  CNNBENCH_CHECK(batch > 0 && nodes > 0, "prediction needs a positive batch and node count");
  const double samples_per_node = std::ceil(static_cast<double>(batch) / nodes);
  return one_node_step_seconds * samples_per_node / batch +
         allreduce_seconds(AllreduceAlgorithm::ring, nodes, gradient_bytes, cost);
}

}  // namespace cnnbench
