// The allreduce cost model: algorithms' alpha-beta-gamma costs and Open MPI's choices and
// fallbacks. The fit of measured times is allreduce_fit.cpp, the step prediction step_prediction.cpp.
#include "cnnbench/collective_model.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <string>
#include <utility>

#include "cnnbench/core.hpp"
#include "rank_log2.hpp"
#include "cnnbench/link_simulation.hpp"

namespace cnnbench {

namespace {

struct AlgorithmEntry {
  AllreduceAlgorithm algorithm;
  std::string_view name;
  int open_mpi_id;
};
constexpr std::array<AlgorithmEntry, 8> algorithm_table{{
    {AllreduceAlgorithm::open_mpi_default, "default", 0},
    {AllreduceAlgorithm::basic_linear, "basic_linear", 1},
    {AllreduceAlgorithm::nonoverlapping, "nonoverlapping", 2},
    {AllreduceAlgorithm::recursive_doubling, "recursive_doubling", 3},
    {AllreduceAlgorithm::ring, "ring", 4},
    {AllreduceAlgorithm::segmented_ring, "segmented_ring", 5},
    {AllreduceAlgorithm::rabenseifner, "rabenseifner", 6},
    {AllreduceAlgorithm::binomial, "binomial", -1},  // libnbc's, no tuned id
}};

const AlgorithmEntry& entry_of(AllreduceAlgorithm algorithm) {
  for (const auto& e : algorithm_table) {
    if (e.algorithm == algorithm) return e;
  }
  fail("unknown allreduce algorithm");
}

// The flat algorithms cheapest_allreduce compares, in tie-breaking order.
constexpr std::array<AllreduceAlgorithm, 3> flat_candidates{
    AllreduceAlgorithm::ring, AllreduceAlgorithm::recursive_doubling, AllreduceAlgorithm::rabenseifner};

double ring_seconds(double p, double n, const CollectiveCost& c) {
  return 2 * (p - 1) * c.message_seconds(n / p) + (p - 1) / p * n * c.gamma_s_per_byte;
}

// Open MPI folds the r extra ranks of a non-power of two in first: in recursive doubling an
// extra rank sends its whole vector to its neighbour, which reduces it, and gets the result back
// last. Rabenseifner exchanges halves instead (both reduce one half, the extra rank sends its
// reduced half back), then sends the extra rank the result.
double recursive_doubling_seconds(int ranks, double n, const CollectiveCost& c) {
  const int steps = floor_log2(ranks);
  const bool folded = (1 << steps) != ranks;
  return steps * c.exchange_seconds(n) + (folded ? 2 : 0) * c.message_seconds(n) +
         (steps + (folded ? 1 : 0)) * n * c.gamma_s_per_byte;
}

double rabenseifner_seconds(int ranks, double n, const CollectiveCost& c) {
  const int steps = floor_log2(ranks);
  const double q = static_cast<double>(1 << steps);
  // Halving exchanges n/2, n/4 ... n/q, doubling the same back: 2 lg q exchanges, 2(q-1)/q n bytes.
  double seconds = (q - 1) / q * n * c.gamma_s_per_byte;
  for (int k = 1; k <= steps; ++k) seconds += 2 * c.exchange_seconds(n / double(1 << k));
  if (q != ranks) {
    seconds += 2 * c.message_seconds(n / 2) + 0.5 * n * c.gamma_s_per_byte;
    seconds += c.message_seconds(n);
  }
  return seconds;
}

double basic_linear_seconds(double p, double n, const CollectiveCost& c) {
  return 2 * (p - 1) * c.message_seconds(n) + (p - 1) * n * c.gamma_s_per_byte;
}

// A reduce to rank 0 and a broadcast from it, each a binomial tree of ceil(lg p) rounds (what
// Open MPI's own reduce and broadcast run for the small messages the decision table sends here).
double nonoverlapping_seconds(int ranks, double n, const CollectiveCost& c) {
  const double rounds = ceil_log2(ranks);
  return 2 * rounds * c.message_seconds(n) + rounds * n * c.gamma_s_per_byte;
}

// libnbc's binomial allreduce (allred_sched_diss) on ranks that each have their own link. The
// reduce: in round r, every multiple of 2^r receives its neighbour 2^(r-1) up and reduces it. The
// broadcast: a rank holding the result sends it to all its children (vrank + 2^r for each 2^r
// above it) at once, so those messages share its link and arrive together.
double binomial_seconds(int ranks, double n, const CollectiveCost& c) {
  const double message = c.message_seconds(n), shared_beta = n * c.link_for(n).beta_s_per_byte;
  const int rounds = ceil_log2(ranks);
  std::vector<double> ready(static_cast<std::size_t>(ranks), 0.0);
  for (int r = 1; r <= rounds; ++r) {
    for (int v = 0; v + (1 << (r - 1)) < ranks; v += 1 << r) {
      const auto child = static_cast<std::size_t>(v + (1 << (r - 1)));
      ready[static_cast<std::size_t>(v)] =
          std::max(ready[static_cast<std::size_t>(v)], ready[child]) + message + n * c.gamma_s_per_byte;
    }
  }
  std::vector<double> arrival(static_cast<std::size_t>(ranks), 0.0);
  arrival[0] = ready[0];
  for (int v = 0; v < ranks; ++v) {
    std::vector<int> children;
    for (int r = 0; r < rounds; ++r) {
      if (v < (1 << r) && v + (1 << r) < ranks) children.push_back(v + (1 << r));
    }
    if (children.empty()) continue;
    double start = arrival[static_cast<std::size_t>(v)];
    for (int child : children) start = std::max(start, ready[static_cast<std::size_t>(child)]);
    const double done = start + message + (static_cast<double>(children.size()) - 1) * shared_beta;
    for (int child : children) arrival[static_cast<std::size_t>(child)] = done;
  }
  return *std::max_element(arrival.begin(), arrival.end());
}

// One row of Open MPI 4.1's fixed allreduce decision for commutative operations: below
// `ranks_below` ranks, the algorithm id of the first `bytes_below` the message is under (the
// last entry's bound is infinite).
struct DecisionRow {
  int ranks_below;
  std::array<std::pair<double, int>, 7> sizes;  // {bytes below, Open MPI id}; unused: {0, 0}
};
constexpr double any_size = 1e300;
// ompi/mca/coll/tuned/coll_tuned_decision_fixed.c (v4.1.4), commutative branch.
constexpr std::array<DecisionRow, 11> open_mpi_decision{{
    {4, {{{8, 4}, {4096, 3}, {8192, 4}, {16384, 3}, {65536, 4}, {262144, 5}, {any_size, 6}}}},
    {8, {{{16, 4}, {8192, 3}, {any_size, 6}}}},
    {16, {{{8192, 3}, {any_size, 6}}}},
    {32, {{{64, 5}, {4096, 3}, {any_size, 6}}}},
    {64, {{{128, 5}, {any_size, 6}}}},
    {128, {{{262144, 3}, {any_size, 6}}}},
    {256, {{{131072, 2}, {262144, 3}, {any_size, 6}}}},
    {512, {{{4096, 2}, {any_size, 6}}}},
    {2048, {{{2048, 2}, {16384, 3}, {any_size, 6}}}},
    {4096, {{{2048, 2}, {4096, 5}, {16384, 3}, {any_size, 6}}}},
    {std::numeric_limits<int>::max(), {{{2048, 2}, {16384, 5}, {32768, 3}, {any_size, 6}}}},
}};

}  // namespace

const LinkCost& CollectiveCost::link_for(double bytes) const {
  return rendezvous && bytes > eager_limit_bytes ? *rendezvous : link;
}

double CollectiveCost::message_seconds(double bytes) const {
  return link_for(bytes).alpha_s + bytes * link_for(bytes).beta_s_per_byte;
}

double CollectiveCost::exchange_seconds(double bytes) const {
  return exchange ? exchange->seconds(bytes) : message_seconds(bytes);
}

ExchangeCurve::ExchangeCurve(std::vector<SizeTime> points) : points_(std::move(points)) {
  std::sort(points_.begin(), points_.end(), [](const SizeTime& a, const SizeTime& b) { return a.bytes < b.bytes; });
  for (std::size_t i = 0; i < points_.size(); ++i) {
    const SizeTime& p = points_[i];
    CNNBENCH_CHECK(p.bytes > 0 && std::isfinite(p.bytes) && p.seconds >= 0 && std::isfinite(p.seconds),
                   "exchange curve: size " + std::to_string(p.bytes) + " has time " + std::to_string(p.seconds) +
                       " (sizes must be positive, times finite and not negative)");
    CNNBENCH_CHECK(i == 0 || p.bytes > points_[i - 1].bytes,
                   "exchange curve: size " + std::to_string(p.bytes) + " is measured twice");
  }
  CNNBENCH_CHECK(points_.size() >= 2, "exchange curve: needs at least 2 sizes, got " + std::to_string(points_.size()));
}

double ExchangeCurve::seconds(double bytes) const {
  // The segment whose line prices `bytes`: the one containing it, or the end segment past an end.
  const auto above = std::upper_bound(points_.begin() + 1, points_.end() - 1, bytes,
                                      [](double b, const SizeTime& p) { return b < p.bytes; });
  const SizeTime& left = *(above - 1);
  const SizeTime& right = *above;
  const double slope = (right.seconds - left.seconds) / (right.bytes - left.bytes);
  return std::max(0.0, left.seconds + (bytes - left.bytes) * slope);
}

std::string_view algorithm_name(AllreduceAlgorithm algorithm) { return entry_of(algorithm).name; }

std::string_view rule_name(AllreduceRule rule) {
  switch (rule) {
    case AllreduceRule::cheapest:
      return "cheapest";
    case AllreduceRule::open_mpi_default:
      return "open_mpi_default";
    case AllreduceRule::open_mpi_iallreduce_in_place:
      return "open_mpi_iallreduce_in_place";
  }
  fail("unknown allreduce rule");
}

AllreduceAlgorithm parse_allreduce_algorithm(std::string_view name) {
  std::string known;
  for (const auto& e : algorithm_table) {
    if (e.name == name) return e.algorithm;
    known += (known.empty() ? "" : ", ") + std::string(e.name);
  }
  fail("unknown allreduce algorithm '" + std::string(name) + "' (known: " + known + ")");
}

int open_mpi_algorithm_id(AllreduceAlgorithm algorithm) { return entry_of(algorithm).open_mpi_id; }

AllreduceAlgorithm algorithm_from_open_mpi_id(int id) {
  for (const auto& e : algorithm_table) {
    if (e.open_mpi_id == id) return e.algorithm;
  }
  fail("Open MPI allreduce algorithm id " + std::to_string(id) +
       " is not modelled (known: 0 default, 1 basic linear, 2 nonoverlapping, 3 recursive doubling, 4 "
       "ring, 5 segmented ring, 6 Rabenseifner)");
}

AllreduceAlgorithm open_mpi_default_choice(int ranks, double bytes) {
  CNNBENCH_CHECK(ranks >= 1 && bytes >= 0, "Open MPI's choice needs ranks >= 1 and bytes >= 0");
  for (const DecisionRow& row : open_mpi_decision) {
    if (ranks >= row.ranks_below) continue;
    for (const auto& [below, id] : row.sizes) {
      if (bytes < below) return algorithm_from_open_mpi_id(id);
    }
  }
  fail("Open MPI's allreduce decision table has no row for " + std::to_string(ranks) + " ranks");
}

AllreduceAlgorithm algorithm_run(AllreduceAlgorithm asked, std::int64_t count, int ranks,
                                 std::int64_t segment_elements) {
  CNNBENCH_CHECK(count >= 1 && ranks >= 1, "algorithm_run needs count >= 1 and ranks >= 1");
  switch (asked) {
    case AllreduceAlgorithm::open_mpi_default:
      // The table's segmented ring gets a segment of 0: the plain ring.
      return algorithm_run(open_mpi_default_choice(ranks, 4.0 * double(count)), count, ranks);
    case AllreduceAlgorithm::segmented_ring:
      // An unsegmented segment is the whole vector: count < ranks x count always holds.
      if (segment_elements <= 0 || segment_elements >= count || count < ranks * segment_elements) {
        return algorithm_run(AllreduceAlgorithm::ring, count, ranks);
      }
      return asked;
    case AllreduceAlgorithm::ring:
      return count < ranks ? AllreduceAlgorithm::recursive_doubling : asked;
    case AllreduceAlgorithm::rabenseifner:
      return count < (std::int64_t{1} << floor_log2(ranks)) ? AllreduceAlgorithm::basic_linear : asked;
    default:
      return asked;
  }
}

AllreduceAlgorithm nonblocking_algorithm_run(AllreduceAlgorithm asked, std::int64_t count, int ranks,
                                             bool in_place) {
  CNNBENCH_CHECK(count >= 1 && ranks >= 1, "nonblocking_algorithm_run needs count >= 1 and ranks >= 1");
  const bool halving_fits = count >= (std::int64_t{1} << floor_log2(ranks));
  switch (asked) {
    case AllreduceAlgorithm::open_mpi_default:
      if (in_place || ranks < 4 || 4 * count < 65536) return AllreduceAlgorithm::binomial;
      return halving_fits ? AllreduceAlgorithm::rabenseifner : AllreduceAlgorithm::ring;
    case AllreduceAlgorithm::rabenseifner:
      return halving_fits ? asked : AllreduceAlgorithm::ring;
    case AllreduceAlgorithm::ring:
    case AllreduceAlgorithm::binomial:
    case AllreduceAlgorithm::recursive_doubling:
      return asked;
    default:
      fail("MPI_Iallreduce (libnbc) has no " + std::string(algorithm_name(asked)) +
           " algorithm (it has ring, binomial, rabenseifner, recursive_doubling)");
  }
}

int libnbc_algorithm_id(AllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllreduceAlgorithm::open_mpi_default:
      return 0;
    case AllreduceAlgorithm::ring:
      return 1;
    case AllreduceAlgorithm::binomial:
      return 2;
    case AllreduceAlgorithm::rabenseifner:
      return 3;
    case AllreduceAlgorithm::recursive_doubling:
      return 4;
    default:
      fail("MPI_Iallreduce (libnbc) has no " + std::string(algorithm_name(algorithm)) +
           " algorithm (it has ring, binomial, rabenseifner, recursive_doubling)");
  }
}

AllreduceAlgorithm libnbc_algorithm_from_id(int id) {
  for (AllreduceAlgorithm a : {AllreduceAlgorithm::open_mpi_default, AllreduceAlgorithm::ring, AllreduceAlgorithm::binomial,
                               AllreduceAlgorithm::rabenseifner, AllreduceAlgorithm::recursive_doubling}) {
    if (libnbc_algorithm_id(a) == id) return a;
  }
  fail("coll_libnbc_iallreduce_algorithm " + std::to_string(id) +
       " is not an algorithm of Open MPI 4.1's libnbc (0 default, 1 ring, 2 binomial, 3 rabenseifner, 4 "
       "recursive doubling)");
}

AllreduceAlgorithm algorithm_by_rule(AllreduceRule rule, int ranks, double bytes, const CollectiveCost& cost,
                                     AllreduceAlgorithm asked) {
  const auto count = std::max<std::int64_t>(1, static_cast<std::int64_t>(bytes / 4));
  switch (rule) {
    case AllreduceRule::cheapest:
      return parse_allreduce_algorithm(cheapest_allreduce(ranks, bytes, cost).algorithm);
    case AllreduceRule::open_mpi_default:
      return algorithm_run(AllreduceAlgorithm::open_mpi_default, count, ranks);
    case AllreduceRule::open_mpi_iallreduce_in_place:
      return nonblocking_algorithm_run(asked, count, ranks, true);
  }
  fail("unknown allreduce rule");
}

double allreduce_seconds(AllreduceAlgorithm algorithm, int ranks, double bytes,
                         const CollectiveCost& cost) {
  CNNBENCH_CHECK(ranks >= 1 && bytes >= 0, "allreduce cost needs ranks >= 1 and bytes >= 0");
  if (ranks == 1) return 0;
  const double p = ranks;
  switch (algorithm) {
    case AllreduceAlgorithm::ring:
    case AllreduceAlgorithm::segmented_ring:  // the ring's volume; segments only add latency
      return ring_seconds(p, bytes, cost);
    case AllreduceAlgorithm::recursive_doubling:
      return recursive_doubling_seconds(ranks, bytes, cost);
    case AllreduceAlgorithm::rabenseifner:
      return rabenseifner_seconds(ranks, bytes, cost);
    case AllreduceAlgorithm::basic_linear:
      return basic_linear_seconds(p, bytes, cost);
    case AllreduceAlgorithm::nonoverlapping:
      return nonoverlapping_seconds(ranks, bytes, cost);
    case AllreduceAlgorithm::binomial:
      return binomial_seconds(ranks, bytes, cost);
    case AllreduceAlgorithm::open_mpi_default: {
      const auto count = std::max<std::int64_t>(1, static_cast<std::int64_t>(bytes / 4));
      return allreduce_seconds(algorithm_run(algorithm, count, ranks), ranks, bytes, cost);
    }
  }
  fail("unknown allreduce algorithm");
}

double hierarchical_allreduce_seconds(const HierarchicalFabric& fabric, double bytes) {
  CNNBENCH_CHECK(fabric.nodes >= 1 && fabric.ranks_per_node >= 1,
                 "hierarchical allreduce needs nodes >= 1 and ranks_per_node >= 1");
  const double levels = ceil_log2(fabric.ranks_per_node);
  const LinkCost& shm = fabric.shared_memory.link;
  const double reduce = levels * (shm.alpha_s + bytes * shm.beta_s_per_byte +
                                  bytes * fabric.shared_memory.gamma_s_per_byte);
  const double broadcast = levels * (shm.alpha_s + bytes * shm.beta_s_per_byte);
  return reduce + cheapest_allreduce(fabric.nodes, bytes, fabric.network).seconds + broadcast;
}

// Cheaper than `best` by more than rounding: equal formulas (the ring and Rabenseifner move the
// same bytes, and on a link without alpha cost the same at a power of two) stay a tie, which the
// earlier candidate keeps, instead of flipping with the last bit from one size to the next.
namespace {
bool clearly_cheaper(double seconds, const AllreduceChoice& best) {
  return best.algorithm.empty() || seconds < best.seconds * (1 - 1e-9);
}
}  // namespace

AllreduceChoice cheapest_allreduce(int ranks, double bytes, const CollectiveCost& cost) {
  AllreduceChoice best;
  for (AllreduceAlgorithm a : flat_candidates) {
    const double seconds = allreduce_seconds(a, ranks, bytes, cost);
    if (clearly_cheaper(seconds, best)) best = {std::string(algorithm_name(a)), seconds};
  }
  return best;
}

AllreduceChoice cheapest_allreduce(const HierarchicalFabric& fabric, double bytes) {
  AllreduceChoice best = cheapest_allreduce(fabric.nodes * fabric.ranks_per_node, bytes, fabric.network);
  if (fabric.ranks_per_node > 1) {
    const double seconds = hierarchical_allreduce_seconds(fabric, bytes);
    if (clearly_cheaper(seconds, best)) best = {"hierarchical", seconds};
  }
  return best;
}

std::vector<Crossover> allreduce_crossovers(int ranks, const CollectiveCost& cost, double min_bytes,
                                            double max_bytes) {
  CNNBENCH_CHECK(min_bytes > 0 && min_bytes < max_bytes, "crossovers need 0 < min_bytes < max_bytes");
  std::vector<Crossover> found;
  const double step = std::pow(2.0, 1.0 / 16);  // 16 probes per doubling, then bisection
  double low = min_bytes;
  std::string low_name = cheapest_allreduce(ranks, low, cost).algorithm;
  while (low < max_bytes) {
    double high = std::min(low * step, max_bytes);
    const std::string high_name = cheapest_allreduce(ranks, high, cost).algorithm;
    if (high_name != low_name) {
      double a = low, b = high;
      while (b / a > 1.001) {
        const double mid = std::sqrt(a * b);
        (cheapest_allreduce(ranks, mid, cost).algorithm == low_name ? a : b) = mid;
      }
      found.push_back({std::sqrt(a * b), low_name, high_name});
    }
    low = high;
    low_name = high_name;
  }
  return found;
}

LinkCost link_cost_from_fit(AllreduceAlgorithm algorithm, int ranks, double fit_alpha_s,
                            double fit_beta_s_per_byte, double gamma_s_per_byte) {
  CNNBENCH_CHECK(ranks > 1, "a link cost needs an allreduce measured on more than one rank");
  // The fit's A and B are the algorithm's coefficients of 1 and n: divide them back out.
  const CollectiveCost unit_alpha{{1, 0}, 0}, unit_beta{{0, 1}, 0}, unit_gamma{{0, 0}, 1};
  const AllreduceAlgorithm modelled =
      algorithm == AllreduceAlgorithm::open_mpi_default ? AllreduceAlgorithm::ring : algorithm;
  const double alpha_coefficient = allreduce_seconds(modelled, ranks, 0, unit_alpha);
  const double beta_coefficient = allreduce_seconds(modelled, ranks, 1, unit_beta);
  const double gamma_coefficient = allreduce_seconds(modelled, ranks, 1, unit_gamma);
  return {fit_alpha_s / alpha_coefficient,
          (fit_beta_s_per_byte - gamma_coefficient * gamma_s_per_byte) / beta_coefficient};
}

std::string unphysical_link_reason(const LinkCost& link, double from_bytes, double to_bytes) {
  const auto bytes = [](double n) { return std::to_string(static_cast<long long>(n)); };
  const auto format_number = [](double x) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3g", x);
    return std::string(text);
  };
  const std::string range = " over " + bytes(from_bytes) + ".." + bytes(to_bytes) + " bytes";
  if (!std::isfinite(link.beta_s_per_byte) || link.beta_s_per_byte <= 0) {
    return "the fit's link costs " + format_number(link.beta_s_per_byte) +
           " s per byte" + range + ", which no link does: these sizes are too small for the bytes "
           "to show past the latency; measure up to 1 MiB or more (--max-bytes 1048576)";
  }
  if (!std::isfinite(link.alpha_s) || link.alpha_s < 0) {
    return "the fit's link latency is " + format_number(link.alpha_s) + " s" + range +
           ", which no link has: the smallest size is too large for the latency to show; "
           "measure from 8 bytes (--min-bytes 8)";
  }
  return {};
}

}  // namespace cnnbench
