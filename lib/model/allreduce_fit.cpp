// The fit of measured allreduce times to a link's alpha and beta (cnnbench/collective_model.hpp).
#include "cnnbench/collective_model.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <set>
#include <string>
#include <utility>

#include "cnnbench/core.hpp"

namespace cnnbench {

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

}  // namespace cnnbench
