// Cost models of MPI_Allreduce: the alpha-beta-gamma expressions of the algorithms Open MPI runs
// (Thakur, Rabenseifner & Gropp 2005; Patarasuk & Yuan 2009), Open MPI's silent fallbacks, the
// fit of allreduce-bench's times, and the step time of data-parallel training they predict.
// Pure arithmetic: no MPI. docs/cluster.md ("The communication model") has the formulas.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cnnbench {

// ---- algorithms and Open MPI's fallbacks --------------------------------------------------------

// The allreduce algorithms of Open MPI's tuned component (coll_tuned_allreduce_algorithm ids in
// comments); open_mpi_default is id 0: the component's own decision table chooses.
enum class AllreduceAlgorithm {
  open_mpi_default,    // 0
  basic_linear,        // 1: reduce to rank 0, then broadcast, both linear
  nonoverlapping,      // 2: MPI_Reduce to rank 0, then MPI_Bcast (modelled as binomial trees)
  recursive_doubling,  // 3
  ring,                // 4
  segmented_ring,      // 5
  rabenseifner,        // 6: reduce-scatter by recursive halving, allgather by recursive doubling
  // Not a tuned algorithm: what the libnbc component runs for MPI_Iallreduce when it picks the
  // binomial schedule (coll_libnbc_iallreduce_algorithm 2): a binomial tree reduce to rank 0,
  // then a binomial broadcast in which every rank sends to all its children at once.
  binomial,
};

std::string_view algorithm_name(AllreduceAlgorithm algorithm);  // "ring", "recursive_doubling", ...
// Accepts the names above and "default"; Error listing them otherwise.
AllreduceAlgorithm parse_allreduce_algorithm(std::string_view name);
int open_mpi_algorithm_id(AllreduceAlgorithm algorithm);
// Error for ids Open MPI 4.1 does not have.
AllreduceAlgorithm algorithm_from_open_mpi_id(int id);

// What Open MPI 4.1's tuned component picks for a commutative allreduce (MPI_SUM) of `bytes` on
// `ranks` ranks when nothing is forced: its fixed decision table
// (ompi_coll_tuned_allreduce_intra_dec_fixed, switch points averaged from several clusters).
// Before its fallbacks: algorithm_run applies those.
AllreduceAlgorithm open_mpi_default_choice(int ranks, double bytes);

// What Open MPI 4.1 runs when `asked` is forced for `count` floats on `ranks` ranks: ring falls
// back to recursive doubling when count < ranks; Rabenseifner to basic linear when
// count < 2^floor(lg ranks); the segmented ring to the plain ring when count < ranks x segment
// (a segment of 0 elements, Open MPI's default segment size, means unsegmented: always the ring).
// open_mpi_default runs open_mpi_default_choice (with its segment of 0) and its fallbacks.
AllreduceAlgorithm algorithm_run(AllreduceAlgorithm asked, std::int64_t count, int ranks,
                                 std::int64_t segment_elements = 0);

// MPI_Iallreduce (Open MPI 4.1's libnbc component, nbc_iallreduce.c): unforced it runs the
// binomial schedule when the call is in place (MPI_IN_PLACE, as the cluster strategy calls it),
// on fewer than 4 ranks or below 64 KiB, else Rabenseifner when count >= 2^floor(lg ranks), else
// the ring. Forced (coll_libnbc_iallreduce_algorithm: 1 ring, 2 binomial, 3 Rabenseifner, 4
// recursive doubling), Rabenseifner below that count runs the ring. `asked` is open_mpi_default
// or one of those four.
AllreduceAlgorithm nonblocking_algorithm_run(AllreduceAlgorithm asked, std::int64_t count, int ranks,
                                             bool in_place);
// coll_libnbc_iallreduce_algorithm's id of ring, binomial, rabenseifner, recursive_doubling (0 for
// open_mpi_default); Error for the others, which libnbc does not have.
int libnbc_algorithm_id(AllreduceAlgorithm algorithm);
// The inverse; Error for an id libnbc 4.1 does not have.
AllreduceAlgorithm libnbc_algorithm_from_id(int id);

// ---- costs --------------------------------------------------------------------------------------

// Hockney's point-to-point cost: a message of m bytes takes alpha + m beta.
struct LinkCost {
  double alpha_s = 0;
  double beta_s_per_byte = 0;
};
struct SizeTime {
  double bytes = 0;
  double seconds = 0;
};
// The measured time of one pairwise exchange (allreduce-bench --exchange): two ranks send each
// other m bytes at once, as in a round of recursive doubling or Rabenseifner. Over links where the
// two directions do not overlap (Open MPI's rendezvous over tbf-shaped TCP) it is near twice a
// one-way message, which no single alpha + m beta describes. Piecewise linear in m between the
// measured sizes, extended past either end along the line of the two nearest, never negative.
class ExchangeCurve {
 public:
  // Error unless at least 2 distinct sizes, every size > 0 and every time finite and >= 0.
  explicit ExchangeCurve(std::vector<SizeTime> points);
  double seconds(double bytes) const;
  const std::vector<SizeTime>& points() const { return points_; }  // by size

 private:
  std::vector<SizeTime> points_;
};

// A link plus gamma, the seconds per byte of the reduction's arithmetic on one rank.
struct CollectiveCost {
  CollectiveCost() = default;
  CollectiveCost(LinkCost point_to_point, double gamma) : link(point_to_point), gamma_s_per_byte(gamma) {}
  LinkCost link;  // every message, or those up to eager_limit_bytes when `rendezvous` is set
  double gamma_s_per_byte = 0;
  // Open MPI's TCP transport sends a message up to its eager limit (btl_tcp_eager_limit, 64 KiB)
  // at once, a longer one by rendezvous (a handshake, then the data): with this set, a message
  // above eager_limit_bytes costs rendezvous.alpha_s + m rendezvous.beta_s_per_byte.
  std::optional<LinkCost> rendezvous;
  double eager_limit_bytes = 64 * 1024;
  // When measured: what a pairwise exchange costs (recursive doubling's and Rabenseifner's rounds).
  std::optional<ExchangeCurve> exchange;
  const LinkCost& link_for(double bytes) const;  // `link`, or `rendezvous` above the eager limit
  double message_seconds(double bytes) const;     // one message of `bytes` on the critical path
  // Two ranks sending each other `bytes` at once: the exchange curve, else one message.
  double exchange_seconds(double bytes) const;
};

// Seconds of one allreduce of `bytes` over `ranks` ranks by `algorithm` (open_mpi_default: the
// algorithm_run of `bytes` / 4 floats). Non-powers of two as Open MPI does them: recursive
// doubling and Rabenseifner fold the r = p - 2^floor(lg p) extra ranks into their neighbours
// first and send them the result last. Their pairwise rounds cost exchange_seconds, the fold-in
// and fold-out (one-way) message_seconds.
double allreduce_seconds(AllreduceAlgorithm algorithm, int ranks, double bytes,
                         const CollectiveCost& cost);

// A link shaped by a tbf token bucket (scripts/emulate-hosts.sh): tokens refill at the rate up
// to the burst; a message passes at the link's own speed while there are tokens.
struct TokenBucket {
  double burst_bytes = 0;
  double rate_bytes_per_s = 0;
};

struct HierarchicalFabric {
  int nodes = 1;
  int ranks_per_node = 1;
  CollectiveCost network;
  CollectiveCost shared_memory;
  // A token-bucket-shaped network, one rank per node: `uncapped` is the same link without the
  // cap. predict_step then simulates the step over the shaped links (simulate_steps,
  // cnnbench/link_simulation.hpp) instead of pricing `network`.
  std::optional<TokenBucket> token_bucket;
  std::optional<CollectiveCost> uncapped;
};
// Two levels: a binomial reduce over shared memory inside each node, an allreduce among the node
// leaders over the network (the cheapest of ring, recursive doubling, Rabenseifner), a binomial
// broadcast inside each node.
double hierarchical_allreduce_seconds(const HierarchicalFabric& fabric, double bytes);

struct AllreduceChoice {
  std::string algorithm;  // algorithm_name(), or "hierarchical"
  double seconds = 0;
};
// The cheapest flat algorithm (ring, recursive doubling, Rabenseifner) for `bytes` on `ranks`;
// ties go to the earlier of that list.
AllreduceChoice cheapest_allreduce(int ranks, double bytes, const CollectiveCost& cost);
// The same over nodes x ranks_per_node, with the hierarchical scheme as a fourth candidate when
// ranks_per_node > 1 (flat algorithms then run over the network's cost: the worst link).
AllreduceChoice cheapest_allreduce(const HierarchicalFabric& fabric, double bytes);

struct Crossover {
  double bytes = 0;  // the cheapest changes between just below and just above this size
  std::string below, above;
};
// Every size in [min_bytes, max_bytes] where cheapest_allreduce changes its answer, to 0.1%.
std::vector<Crossover> allreduce_crossovers(int ranks, const CollectiveCost& cost, double min_bytes,
                                            double max_bytes);

// The link cost behind a whole-allreduce fit t(n) = A + n B measured at `ranks` with
// `algorithm` (ring for open_mpi_default, as its large messages run): the inverse of
// allreduce_seconds for the point-to-point part.
LinkCost link_cost_from_fit(AllreduceAlgorithm algorithm, int ranks, double fit_alpha_s,
                            double fit_beta_s_per_byte, double gamma_s_per_byte);
// Why a link cost inverted from a fit over message sizes [from_bytes, to_bytes] is no physical
// link (a negative latency, or a byte that costs nothing or less), naming the sizes to measure
// instead; empty when it is one. Small messages hide the bandwidth term under the latency and the
// reduction's own cost, and large ones the latency under the bytes.
std::string unphysical_link_reason(const LinkCost& link, double from_bytes, double to_bytes);

// ---- fitting allreduce-bench's times -------------------------------------------------------------

struct FitLine {
  double alpha_s = 0;
  double beta_s_per_byte = 0;
  double from_bytes = 0, to_bytes = 0;  // the sizes it was fitted over
  bool constrained = false;  // the free fit's alpha or beta came out negative: refitted with it at 0
};
struct FitOptions {
  // Open MPI's TCP transport sends up to 64 KiB eagerly (btl_tcp_eager_limit), longer messages
  // by rendezvous: a kink in t(n) there.
  double eager_limit_bytes = 64 * 1024;
  // The tbf rate of the link (bits/s), when known: sizes inside its burst pass at the host's
  // speed, not the link's, and are left out.
  std::optional<double> link_rate_bits_per_s;
  // The piecewise fit is kept when its RMS relative residual is below this share of the line's.
  double piecewise_keep_ratio = 0.7;
};
struct AllreduceFit {
  FitLine line;                   // one line through every size used
  std::vector<FitLine> pieces;    // {line}, or {below, above} the eager limit when kept
  std::vector<SizeTime> used;     // the sizes fitted
  std::vector<double> relative_residuals;  // (model - measured) / measured per used size
  double rms_relative_residual = 0;        // of the model kept (pieces)
  double line_rms_relative_residual = 0;   // of the one line
  std::vector<double> excluded_bytes;      // sizes inside the tbf burst
  double seconds(double bytes) const;      // the model kept
};
// tbf's bucket as scripts/emulate-hosts.sh sets it: 67000 bytes or 4 ms at the rate.
double tbf_burst_bytes(double rate_bits_per_s);
// Weighted least squares with weights 1/t^2 (minimising relative error). Error when fewer than 3
// sizes remain, naming how many were measured and how many the burst left out.
AllreduceFit fit_allreduce(std::span<const SizeTime> points, const FitOptions& options = {});
// "1gbit", "100mbit", "500kbit", "10gbit", "2500000bit" (tc's units) in bits/s; nullopt for
// anything else (an unknown rate is not guessed).
std::optional<double> parse_tc_rate(std::string_view rate);

// One measured allreduce for fit_protocol: the algorithm Open MPI ran, on how many ranks.
struct AlgorithmTime {
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::ring;  // as run (not open_mpi_default)
  int ranks = 2;
  double bytes = 0;
  double seconds = 0;
};
struct ProtocolFit {
  CollectiveCost cost;                     // link (eager) and rendezvous, gamma as given
  std::vector<double> relative_residuals;  // (model - measured) / measured, per time
  double rms_relative_residual = 0;
  bool constrained = false;                // a term came out negative and was held at 0
};
// One link with a per-message protocol fitted jointly to allreduces of several algorithms and
// sizes on one fabric: each time is the sum of its algorithm's critical-path messages, each
// eager (alpha_e + m beta_e) or rendezvous (alpha_r + m beta_r) by its size, plus the reduction
// at the known gamma. Weighted least squares (weights 1/t^2), every term >= 0. Error unless each
// protocol carries messages of at least 2 distinct sizes.
ProtocolFit fit_protocol(std::span<const AlgorithmTime> times, double gamma_s_per_byte,
                         double eager_limit_bytes = 64 * 1024);

// ---- step-time prediction -----------------------------------------------------------------------

enum class Scaling {
  strong,  // the global batch stays: each of p nodes computes batch/p samples
  weak,    // the batch per node stays: compute per step is constant
};
// Which algorithm prices each allreduce: the cheapest the model knows (what a tuned library
// could reach), or what Open MPI 4.1 runs unforced (open_mpi_default_choice and its fallbacks,
// flat over every rank): how a measured run of the cluster strategy was made.
// open_mpi_iallreduce_in_place: what libnbc runs for an in-place MPI_Iallreduce, the call the
// cluster strategy makes for every bucket (nonblocking_algorithm_run).
enum class AllreduceRule { cheapest, open_mpi_default, open_mpi_iallreduce_in_place };
// "cheapest", "open_mpi_default", "open_mpi_iallreduce_in_place"
std::string_view rule_name(AllreduceRule rule);
// The algorithm `rule` runs for one allreduce of `bytes` over `ranks` flat ranks (cheapest: the
// cheapest at `cost`); `asked` is what libnbc was asked for (open_mpi_iallreduce_in_place only).
AllreduceAlgorithm algorithm_by_rule(AllreduceRule rule, int ranks, double bytes, const CollectiveCost& cost,
                                     AllreduceAlgorithm asked = AllreduceAlgorithm::open_mpi_default);

struct StepModel {
  double serial_step_s = 0;             // one node's step over the whole batch (strong) / its batch (weak)
  std::vector<double> bucket_bytes;     // the gradient buckets, one allreduce each per step
  double hidden_fraction = 0;           // measured share of communication hidden behind backward
  AllreduceRule rule = AllreduceRule::cheapest;
  // open_mpi_iallreduce_in_place: the algorithm libnbc was asked for (its own choice by default).
  AllreduceAlgorithm iallreduce_asked = AllreduceAlgorithm::open_mpi_default;
  // The part of serial_step_s every node does whole whatever its share of the batch (the
  // optimizer's step over every parameter): strong scaling does not divide it by the nodes.
  double replicated_s = 0;
  // The share of a core each rank's thread gets, in (0, 1]: ranks that share one machine's cores
  // (emulated hosts, more threads than cores) compute 1 / core_share times slower.
  double core_share = 1;
};
struct StepPrediction {
  int nodes = 1;
  double compute_s = 0, communication_s = 0, exposed_s = 0, step_s = 0;
  double efficiency = 1;  // compute of one node over nodes x this step (strong), or its step over this one (weak)
  std::string algorithm;  // the one the rule picked for the largest bucket
  bool simulated = false;  // by the link simulation (HierarchicalFabric::token_bucket)
};
// step = compute + (1 - hidden) x communication; compute = ((serial - replicated) / nodes +
// replicated) / core_share (strong) or serial / core_share (weak); communication is the sum of the
// buckets' allreduces, or over a token bucket the simulated step less compute.
StepPrediction predict_step(const StepModel& model, Scaling scaling, const HierarchicalFabric& fabric);
// The smallest node count in 2..max_nodes whose efficiency falls below 50%; nullopt when none.
std::optional<int> nodes_below_half_efficiency(const StepModel& model, Scaling scaling,
                                               HierarchicalFabric fabric, int max_nodes);

}  // namespace cnnbench
