// The allreduce cost model: algorithms' alpha-beta-gamma costs, Open MPI's fallbacks, the fit of
// measured times and the step-time prediction built on them.
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

// ---- fit -----------------------------------------------------------------------------------------

namespace {

FitLine weighted_line(std::span<const SizeTime> points) {
  double sw = 0, swn = 0, swnn = 0, swt = 0, swnt = 0;
  for (const SizeTime& p : points) {
    const double w = 1.0 / (p.seconds * p.seconds);
    sw += w;
    swn += w * p.bytes;
    swnn += w * p.bytes * p.bytes;
    swt += w * p.seconds;
    swnt += w * p.bytes * p.seconds;
  }
  FitLine line;
  const double determinant = sw * swnn - swn * swn;
  line.beta_s_per_byte = determinant > 0 ? (sw * swnt - swn * swt) / determinant : 0;
  line.alpha_s = (swt - line.beta_s_per_byte * swn) / sw;
  // A negative latency or bandwidth cost means nothing physical (noise, or sizes far from the
  // axis): the best line with that term held at zero instead, and the fit says so.
  if (line.alpha_s < 0) {
    line = {0, swnt / swnn, 0, 0, true};
  } else if (line.beta_s_per_byte < 0) {
    line = {swt / sw, 0, 0, 0, true};
  }
  line.from_bytes = points.front().bytes;
  line.to_bytes = points.back().bytes;
  return line;
}

double line_seconds(const FitLine& line, double bytes) { return line.alpha_s + bytes * line.beta_s_per_byte; }

double piecewise_seconds(const std::vector<FitLine>& pieces, double bytes) {
  for (const FitLine& piece : pieces) {
    if (bytes <= piece.to_bytes) return line_seconds(piece, bytes);
  }
  return line_seconds(pieces.back(), bytes);
}

double rms_relative(std::span<const SizeTime> points, const std::vector<FitLine>& pieces) {
  double squares = 0;
  for (const SizeTime& p : points) {
    const double r = (piecewise_seconds(pieces, p.bytes) - p.seconds) / p.seconds;
    squares += r * r;
  }
  return std::sqrt(squares / static_cast<double>(points.size()));
}

// The coefficients of alpha_e, beta_e, alpha_r, beta_r in one allreduce's time: its cost at a unit
// of each term alone.
using ProtocolTerms = std::array<double, 4>;
ProtocolTerms protocol_terms(const AlgorithmTime& time, double eager_limit_bytes) {
  ProtocolTerms terms{};
  for (std::size_t i = 0; i < terms.size(); ++i) {
    CollectiveCost unit({i == 0 ? 1.0 : 0.0, i == 1 ? 1.0 : 0.0}, 0);
    unit.rendezvous = LinkCost{i == 2 ? 1.0 : 0.0, i == 3 ? 1.0 : 0.0};
    unit.eager_limit_bytes = eager_limit_bytes;
    terms[i] = allreduce_seconds(time.algorithm, time.ranks, time.bytes, unit);
  }
  return terms;
}

// Least squares of rows x = targets with only the terms in the bit set `free` (the others 0), by
// the normal equations of the columns scaled to unit length (a count of messages and a count of
// bytes differ by 10^6); nullopt when those columns are dependent.
std::optional<ProtocolTerms> solve_terms(const std::vector<ProtocolTerms>& rows,
                                         const std::vector<double>& targets, unsigned free) {
  std::vector<std::size_t> columns;
  for (std::size_t c = 0; c < 4; ++c) {
    if (free & (1u << c)) columns.push_back(c);
  }
  const std::size_t k = columns.size();
  std::vector<double> scale(k, 0.0);
  for (std::size_t j = 0; j < k; ++j) {
    for (const ProtocolTerms& row : rows) scale[j] += row[columns[j]] * row[columns[j]];
    if (scale[j] <= 0) return std::nullopt;
    scale[j] = std::sqrt(scale[j]);
  }
  std::vector<std::vector<double>> normal(k, std::vector<double>(k + 1, 0.0));  // [N | A^T b]
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t i = 0; i < k; ++i) {
      const double a = rows[r][columns[i]] / scale[i];
      for (std::size_t j = 0; j < k; ++j) normal[i][j] += a * rows[r][columns[j]] / scale[j];
      normal[i][k] += a * targets[r];
    }
  }
  for (std::size_t i = 0; i < k; ++i) {  // Gauss-Jordan with partial pivoting
    std::size_t pivot = i;
    for (std::size_t r = i + 1; r < k; ++r) {
      if (std::abs(normal[r][i]) > std::abs(normal[pivot][i])) pivot = r;
    }
    if (std::abs(normal[pivot][i]) < 1e-12) return std::nullopt;
    std::swap(normal[i], normal[pivot]);
    for (std::size_t r = 0; r < k; ++r) {
      if (r == i) continue;
      const double factor = normal[r][i] / normal[i][i];
      for (std::size_t j = i; j <= k; ++j) normal[r][j] -= factor * normal[i][j];
    }
  }
  ProtocolTerms x{};
  for (std::size_t i = 0; i < k; ++i) x[columns[i]] = normal[i][k] / normal[i][i] / scale[i];
  return x;
}

}  // namespace

ProtocolFit fit_protocol(std::span<const AlgorithmTime> times, double gamma_s_per_byte,
                         double eager_limit_bytes) {
  std::vector<ProtocolTerms> rows;
  std::vector<double> targets;
  std::set<std::pair<int, double>> eager_sizes, rendezvous_sizes;  // (algorithm, bytes) carrying each
  for (const AlgorithmTime& t : times) {
    CNNBENCH_CHECK(t.algorithm != AllreduceAlgorithm::open_mpi_default,
                   "protocol fit: name the algorithm that ran, not Open MPI's default");
    CNNBENCH_CHECK(t.bytes > 0 && t.seconds > 0 && std::isfinite(t.seconds) && t.ranks > 1,
                   "protocol fit: every time needs ranks > 1, bytes > 0 and seconds > 0");
    ProtocolTerms terms = protocol_terms(t, eager_limit_bytes);
    const double reduction = allreduce_seconds(t.algorithm, t.ranks, t.bytes, CollectiveCost({0, 0}, gamma_s_per_byte));
    if (terms[1] > 0) eager_sizes.insert({open_mpi_algorithm_id(t.algorithm), t.bytes});
    if (terms[3] > 0) rendezvous_sizes.insert({open_mpi_algorithm_id(t.algorithm), t.bytes});
    for (double& term : terms) term /= t.seconds;  // weights 1/t^2: relative error
    rows.push_back(terms);
    targets.push_back((t.seconds - reduction) / t.seconds);
  }
  if (eager_sizes.size() < 2 || rendezvous_sizes.size() < 2) {
    fail("protocol fit: needs allreduces whose messages are at most the eager limit (" +
         std::to_string(static_cast<long long>(eager_limit_bytes)) + " bytes) at 2 sizes or more, and "
         "allreduces with messages above it at 2 sizes or more; got " + std::to_string(eager_sizes.size()) +
         " and " + std::to_string(rendezvous_sizes.size()));
  }
  // Every subset of the four terms left free, the others held at 0: the best fit whose terms are
  // all >= 0 (four terms: sixteen small solves).
  std::optional<ProtocolTerms> best;
  double best_squares = 0;
  unsigned best_free = 0;
  for (unsigned free = 1; free < 16; ++free) {
    const std::optional<ProtocolTerms> x = solve_terms(rows, targets, free);
    if (!x || std::any_of(x->begin(), x->end(), [](double v) { return v < 0; })) continue;
    double squares = 0;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      double model = 0;
      for (std::size_t c = 0; c < 4; ++c) model += rows[r][c] * (*x)[c];
      squares += (model - targets[r]) * (model - targets[r]);
    }
    if (!best || squares < best_squares - 1e-15) {
      best = x;
      best_squares = squares;
      best_free = free;
    }
  }
  CNNBENCH_CHECK(best.has_value(), "protocol fit: no fit with every term >= 0");
  ProtocolFit fit;
  fit.cost = CollectiveCost({(*best)[0], (*best)[1]}, gamma_s_per_byte);
  fit.cost.rendezvous = LinkCost{(*best)[2], (*best)[3]};
  fit.cost.eager_limit_bytes = eager_limit_bytes;
  fit.constrained = best_free != 15;
  double squares = 0;
  for (const AlgorithmTime& t : times) {
    const double r = (allreduce_seconds(t.algorithm, t.ranks, t.bytes, fit.cost) - t.seconds) / t.seconds;
    fit.relative_residuals.push_back(r);
    squares += r * r;
  }
  fit.rms_relative_residual = std::sqrt(squares / static_cast<double>(times.size()));
  return fit;
}

double AllreduceFit::seconds(double bytes) const { return piecewise_seconds(pieces, bytes); }

double tbf_burst_bytes(double rate_bits_per_s) { return std::max(67000.0, 0.004 * rate_bits_per_s / 8); }

AllreduceFit fit_allreduce(std::span<const SizeTime> points, const FitOptions& options) {
  AllreduceFit fit;
  const double burst = options.link_rate_bits_per_s ? tbf_burst_bytes(*options.link_rate_bits_per_s) : 0;
  for (const SizeTime& p : points) {
    CNNBENCH_CHECK(p.bytes > 0 && p.seconds > 0 && std::isfinite(p.seconds),
                   "allreduce fit: size " + std::to_string(p.bytes) + " has time " +
                       std::to_string(p.seconds) + " (sizes and times must be positive)");
    if (p.bytes <= burst) {
      fit.excluded_bytes.push_back(p.bytes);
    } else {
      fit.used.push_back(p);
    }
  }
  std::sort(fit.used.begin(), fit.used.end(), [](const SizeTime& a, const SizeTime& b) { return a.bytes < b.bytes; });
  if (fit.used.size() < 3) {
    fail("allreduce fit: " + std::to_string(fit.used.size()) + " message size(s) to fit (of " +
         std::to_string(points.size()) + " measured" +
         (fit.excluded_bytes.empty() ? std::string()
                                     : ", " + std::to_string(fit.excluded_bytes.size()) +
                                           " inside the link's tbf burst of " +
                                           std::to_string(static_cast<long long>(burst)) + " bytes") +
         "); alpha + n*beta needs at least 3 to say anything about its error: measure more sizes "
         "(--min-bytes/--max-bytes)");
  }
  fit.line = weighted_line(fit.used);
  fit.pieces = {fit.line};
  fit.line_rms_relative_residual = rms_relative(fit.used, fit.pieces);
  fit.rms_relative_residual = fit.line_rms_relative_residual;

  const auto split = std::find_if(fit.used.begin(), fit.used.end(),
                                  [&](const SizeTime& p) { return p.bytes > options.eager_limit_bytes; });
  const auto below = static_cast<std::size_t>(split - fit.used.begin());
  if (below >= 3 && fit.used.size() - below >= 3) {
    const std::span<const SizeTime> all(fit.used);
    const std::vector<FitLine> pieces{weighted_line(all.first(below)), weighted_line(all.subspan(below))};
    const double rms = rms_relative(fit.used, pieces);
    if (rms < options.piecewise_keep_ratio * fit.line_rms_relative_residual) {
      fit.pieces = pieces;
      fit.rms_relative_residual = rms;
    }
  }
  for (const SizeTime& p : fit.used) fit.relative_residuals.push_back((fit.seconds(p.bytes) - p.seconds) / p.seconds);
  return fit;
}

std::optional<double> parse_tc_rate(std::string_view rate) {
  double value = 0;
  const auto [end, error] = std::from_chars(rate.data(), rate.data() + rate.size(), value);
  if (error != std::errc() || value <= 0) return std::nullopt;
  const std::string_view unit(end, static_cast<std::size_t>(rate.data() + rate.size() - end));
  constexpr std::array<std::pair<std::string_view, double>, 9> units{{{"bit", 1},
                                                                       {"kbit", 1e3},
                                                                       {"mbit", 1e6},
                                                                       {"gbit", 1e9},
                                                                       {"tbit", 1e12},
                                                                       {"bps", 8},
                                                                       {"kbps", 8e3},
                                                                       {"mbps", 8e6},
                                                                       {"gbps", 8e9}}};
  for (const auto& [name, factor] : units) {
    if (unit == name) return value * factor;
  }
  return std::nullopt;
}

// ---- step prediction -------------------------------------------------------------------------------

namespace {

// What Open MPI runs unforced over every rank of the fabric (the network's cost: its worst link).
AllreduceChoice open_mpi_allreduce(const StepModel& model, const HierarchicalFabric& fabric, double bytes) {
  const int ranks = fabric.nodes * fabric.ranks_per_node;
  const AllreduceAlgorithm run = algorithm_by_rule(model.rule, ranks, bytes, fabric.network, model.iallreduce_asked);
  return {std::string(algorithm_name(run)), allreduce_seconds(run, ranks, bytes, fabric.network)};
}

StepPrediction predict_step_on(const StepModel& model, Scaling scaling, const HierarchicalFabric& fabric) {
  StepPrediction out;
  out.nodes = fabric.nodes;
  out.compute_s = scaling == Scaling::strong ? model.serial_step_s / fabric.nodes : model.serial_step_s;
  double largest = 0;
  for (double bytes : model.bucket_bytes) {
    const AllreduceChoice choice = model.rule == AllreduceRule::cheapest
                                       ? cheapest_allreduce(fabric, bytes)
                                       : open_mpi_allreduce(model, fabric, bytes);
    out.communication_s += choice.seconds;
    if (bytes >= largest) {
      largest = bytes;
      out.algorithm = choice.algorithm;
    }
  }
  out.exposed_s = out.communication_s * (1 - model.hidden_fraction);
  out.step_s = out.compute_s + out.exposed_s;
  out.efficiency = scaling == Scaling::strong ? model.serial_step_s / (fabric.nodes * out.step_s)
                                              : model.serial_step_s / out.step_s;
  return out;
}

}  // namespace

StepPrediction predict_step(const StepModel& model, Scaling scaling, const HierarchicalFabric& fabric) {
  CNNBENCH_CHECK(model.serial_step_s > 0, "step prediction needs a positive serial step time");
  CNNBENCH_CHECK(model.hidden_fraction >= 0 && model.hidden_fraction <= 1,
                 "step prediction: the hidden fraction must lie in [0, 1], got " +
                     std::to_string(model.hidden_fraction));
  if (!fabric.token_bucket || !fabric.uncapped) return predict_step_on(model, scaling, fabric);
  CNNBENCH_CHECK(fabric.ranks_per_node == 1, "step prediction over a token bucket: one rank per node only");
  StepPrediction out = predict_step_on(model, scaling, fabric);  // compute, algorithm
  StarNetwork star;
  star.hosts = fabric.nodes;
  star.link = *fabric.uncapped;
  star.shaping = ShapedLink{fabric.token_bucket->rate_bytes_per_s, fabric.token_bucket->burst_bytes};
  std::vector<std::pair<AllreduceAlgorithm, double>> allreduces;
  for (double bytes : model.bucket_bytes) {
    allreduces.emplace_back(algorithm_by_rule(model.rule, fabric.nodes, bytes, star.link, model.iallreduce_asked), bytes);
  }
  out.communication_s = simulate_steps(star, out.compute_s, allreduces).communication_s;
  out.exposed_s = (1 - model.hidden_fraction) * out.communication_s;
  out.step_s = out.compute_s + out.exposed_s;
  out.efficiency = scaling == Scaling::strong ? model.serial_step_s / (fabric.nodes * out.step_s)
                                              : model.serial_step_s / out.step_s;
  out.simulated = true;
  return out;
}

std::optional<int> nodes_below_half_efficiency(const StepModel& model, Scaling scaling,
                                               HierarchicalFabric fabric, int max_nodes) {
  for (int nodes = 2; nodes <= max_nodes; ++nodes) {
    fabric.nodes = nodes;
    if (predict_step(model, scaling, fabric).efficiency < 0.5) return nodes;
  }
  return std::nullopt;
}

}  // namespace cnnbench
