// How a batch is cut into shares and how dynamic balancing re-sizes them (balance.hpp).
#include "cnnbench/balance.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "cnnbench/core.hpp"

namespace cnnbench {

std::vector<int> split_evenly(int total, int parts) {
  CNNBENCH_CHECK(parts > 0, "cannot split into " + std::to_string(parts) + " parts");
  CNNBENCH_CHECK(total >= 0, "cannot split a negative count " + std::to_string(total));
  std::vector<int> shares(static_cast<std::size_t>(parts), total / parts);
  for (int p = 0; p < total % parts; ++p) ++shares[static_cast<std::size_t>(p)];
  return shares;
}

EvenShare even_share(int total, int parts, int part) {
  CNNBENCH_CHECK(part >= 0 && part < parts, "share " + std::to_string(part) + " of " +
                                                std::to_string(parts) + " does not exist");
  const std::vector<int> shares = split_evenly(total, parts);
  int offset = 0;
  for (int p = 0; p < part; ++p) offset += shares[static_cast<std::size_t>(p)];
  return {offset, shares[static_cast<std::size_t>(part)]};
}

namespace {

// `total` over the parts by speed, at least `minimum` each, by largest remainder (ties to the
// lower index).
std::vector<int> proportional_shares(int total, const std::vector<double>& speed, int minimum) {
  const int spare = total - minimum * static_cast<int>(speed.size());
  const double speed_sum = std::accumulate(speed.begin(), speed.end(), 0.0);
  std::vector<int> shares(speed.size(), minimum);
  std::vector<double> remainder(speed.size());
  int given = 0;
  for (std::size_t p = 0; p < speed.size(); ++p) {
    const double exact = spare * speed[p] / speed_sum;
    const int whole = std::min(spare - given, static_cast<int>(std::floor(exact)));
    shares[p] += whole;
    given += whole;
    remainder[p] = exact - whole;
  }
  std::vector<std::size_t> by_remainder(speed.size());
  std::iota(by_remainder.begin(), by_remainder.end(), std::size_t{0});
  std::stable_sort(by_remainder.begin(), by_remainder.end(),
                   [&](std::size_t a, std::size_t b) { return remainder[a] > remainder[b]; });
  for (std::size_t k = 0; given < spare; k = (k + 1) % by_remainder.size(), ++given) {
    ++shares[by_remainder[k]];
  }
  return shares;
}

}  // namespace

std::vector<int> balance_shares(int total, const std::vector<double>& throughputs, int minimum,
                                int maximum) {
  const int parts = static_cast<int>(throughputs.size());
  CNNBENCH_CHECK(parts > 0, "cannot balance a batch over zero parts");
  CNNBENCH_CHECK(minimum >= 0 && static_cast<long long>(minimum) * parts <= total,
                 "cannot give each of " + std::to_string(parts) + " parts at least " +
                     std::to_string(minimum) + " of " + std::to_string(total) + " samples");
  CNNBENCH_CHECK(maximum >= minimum && static_cast<long long>(maximum) * parts >= total,
                 "cannot fit " + std::to_string(total) + " samples into " + std::to_string(parts) +
                     " parts of at most " + std::to_string(maximum));

  // Parts without a usable measurement count as average ones.
  double valid_sum = 0;
  int valid = 0;
  for (const double t : throughputs) {
    if (std::isfinite(t) && t > 0) {
      valid_sum += t;
      ++valid;
    }
  }
  std::vector<double> speed(throughputs.size(), 1.0);
  for (std::size_t p = 0; valid > 0 && p < speed.size(); ++p) {
    const double t = throughputs[p];
    speed[p] = (std::isfinite(t) && t > 0) ? t : valid_sum / valid;
  }

  // Parts the split would push past the maximum are held there; the rest is split again over
  // the others. Each round holds at least one more part, so this ends within `parts` rounds.
  std::vector<int> shares(speed.size(), 0);
  std::vector<bool> held(speed.size(), false);
  int held_total = 0;
  for (;;) {
    std::vector<double> free_speed;
    std::vector<std::size_t> free_parts;
    for (std::size_t p = 0; p < speed.size(); ++p) {
      if (!held[p]) {
        free_speed.push_back(speed[p]);
        free_parts.push_back(p);
      }
    }
    const std::vector<int> split = valid > 0 ? proportional_shares(total - held_total, free_speed, minimum)
                                             : split_evenly(total - held_total, static_cast<int>(free_parts.size()));
    bool capped = false;
    for (std::size_t k = 0; k < free_parts.size(); ++k) {
      shares[free_parts[k]] = split[k];
      if (split[k] > maximum) {
        held[free_parts[k]] = true;
        shares[free_parts[k]] = maximum;
        held_total += maximum;
        capped = true;
      }
    }
    if (!capped) return shares;
  }
}

std::vector<int> equalize_times(std::vector<int> shares, const std::vector<double>& seconds,
                                int minimum, int maximum, double tolerance, int granule) {
  CNNBENCH_CHECK(granule >= 1, "equalize_times: a granule of " + std::to_string(granule) + " samples");
  CNNBENCH_CHECK(shares.size() == seconds.size() && !shares.empty(),
                 "equalize_times: one measured time per share is needed");
  std::size_t slow = 0, fast = 0;
  for (std::size_t p = 0; p < shares.size(); ++p) {
    if (!std::isfinite(seconds[p]) || seconds[p] < 0) return shares;  // nothing to go by
    if (seconds[p] > seconds[slow]) slow = p;
    if (seconds[p] < seconds[fast]) fast = p;
  }
  const double t_slow = seconds[slow], t_fast = seconds[fast];
  if (slow == fast || shares[slow] <= 0 || t_slow <= t_fast * (1 + tolerance)) return shares;
  const double per_sample_slow = t_slow / shares[slow];
  const double per_sample_fast = shares[fast] > 0 ? t_fast / shares[fast] : per_sample_slow;
  // (n_s - k) p_s = (n_f + k) p_f
  const double exact = (t_slow - t_fast) / (per_sample_slow + per_sample_fast);
  int move = granule == 1 ? std::max(1, static_cast<int>(std::floor(exact)))
                           : granule * static_cast<int>(std::lround(exact / granule));
  move = std::min({move, shares[slow] - minimum, maximum - shares[fast]});
  move -= move % granule;
  if (move <= 0) return shares;
  shares[slow] -= move;
  shares[fast] += move;
  return shares;
}

}  // namespace cnnbench
