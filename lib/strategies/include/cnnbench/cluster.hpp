// The data-parallel cluster strategy's public pieces: its options (--overlap, --balance,
// --slowdown, --node-update, --rank-update), MPI's lifecycle and the allreduce micro-benchmark. The worker pool a rank runs
// on is in worker_pool.hpp, how a batch is cut into shares in balance.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cnnbench/train.hpp"

namespace cnnbench {

// --slowdown N:FACTOR, for testing balancing: part N (a rank of the cluster strategy, a copy of
// the stream strategy's net) computes FACTOR (1..1000) times slower. Error naming --slowdown.
struct Slowdown {
  int part = -1;  // -1: none
  double factor = 1.0;
};
Slowdown parse_slowdown(const std::string& value);

// How a rank's threads step the model on the node's gradient (docs/cluster.md, "Inside a rank").
// replicas: every thread steps its own copy of the whole model; slices: each thread steps its
// slice of one shared model. Both compute the same bits. factors (one rank of several threads):
// one shared model as with slices, but f1.weight's gradient, the first dense layer's, is never
// summed from the threads' buffers: backward leaves it, and thread t computes its rows from
// every thread's input and output gradient of f1 (their sufficient factors) over the whole
// batch, in sample order, the bits serial computes there; the other tensors are summed in slices.
enum class NodeUpdate { replicas, slices, factors };
const char* node_update_name(NodeUpdate update);
// The design --node-update auto takes for `threads` threads per rank of a job of `ranks` ranks:
// factors where the model's first layer is dense (FC-3) and one rank has several threads, else
// replicas while the parameters fit replica_max_bytes, else slices. A rule of the model and the
// shape, never of a timing, so reruns take the same design. Measured on 2 cores (1 x 2,
// docs/cluster.md): factors ran FC-3 at 1.7-1.8x serial against replicas' 1.5-1.6x (the threads
// move activations, not FC-3's 1 MB of gradients and weights, between the cores); for LeNet-5,
// whose f1 comes after the convolutions and whose forward then reads every row of it, replicas
// beat both factors and slices. The bound keeps T replicas of a larger model (weights and
// momentum each) from multiplying its memory; no model measured here reaches it.
NodeUpdate auto_node_update(ModelKind kind, std::size_t parameters, int ranks, int threads);
inline constexpr std::size_t replica_max_bytes = std::size_t{16} << 20;

// How the ranks step the model on the batch's gradient (docs/cluster.md, "Across ranks").
// replicated: every rank receives the whole sum and steps the whole model; sharded: each rank
// receives the sum of its own segment of every bucket, steps that segment, and the ranks then
// share the new weights (a reduce-scatter, the update, an allgather: the same bytes as the ring
// allreduce, 1/ranks of the update). Both compute the same bits on 2 ranks; on more, sharded
// sums in rank order and replicated as MPI's allreduce does.
enum class RankUpdate { replicated, sharded };
const char* rank_update_name(RankUpdate update);

// config.options of --strategy cluster, validated: unknown keys or bad values -> Error naming
// the CLI flag (--overlap, --balance, --slowdown, --node-update).
struct ClusterOptions {
  bool overlap = true;
  bool dynamic_balance = false;
  int slow_rank = -1;          // --slowdown RANK:FACTOR; -1: none
  double slow_factor = 1.0;    // >= 1: that rank's compute takes this many times longer
  std::optional<NodeUpdate> node_update;  // --node-update; nothing (auto): the model's rule
  RankUpdate rank_update = RankUpdate::replicated;  // --rank-update
  double comm_timeout_s = 30;  // --comm-timeout: how long a collective waits for the other ranks
};
ClusterOptions parse_cluster_options(const TrainConfig& config);

// The bytes of each allreduce one step of --strategy cluster makes across ranks: with overlap on
// one per gradient bucket (layers merged into buckets of at least 64 KiB), with it off one sum of
// the whole gradient. What the communication model prices a step by.
std::vector<double> allreduce_schedule_bytes(ModelKind kind, bool overlap);
// The same allreduces with the model's first layer among each one's tensors: backward finishes
// that layer last of them, so the allreduce starts when backward has done it ("c1" for the whole
// gradient without overlap). In the model's layer order, the reverse of backward's.
struct ScheduledAllreduce {
  double bytes = 0;
  std::string first_layer;
};
std::vector<ScheduledAllreduce> allreduce_schedule(ModelKind kind, bool overlap);

// ---- only in builds with MPI (CNNBENCH_HAVE_MPI) ----------------------------------------------

// Initialises MPI (MPI_THREAD_SERIALIZED) unless already done and registers MPI_Finalize at exit.
// Without mpirun this is a one-rank world. After a failure was reported with abort_job_at_exit,
// exit ends the whole job with MPI_Abort instead of finalising (which would wait on live ranks).
void ensure_mpi_initialized();
void abort_job_at_exit();

struct AllreduceBenchConfig {
  std::int64_t min_bytes = 4;
  std::int64_t max_bytes = 4 << 20;
  int repetitions = 0;   // calls per sample; 0: chosen per size so each sample takes about 5 ms
  int warmup = 3;
  int samples = 5;       // timed samples per size; the median is reported
  bool nonblocking = false;  // MPI_Iallreduce in place and MPI_Wait, as the cluster strategy calls it
  // Instead of an allreduce, MPI_Sendrecv of the size both ways between rank r and r ^ 1, every
  // pair at once: the pairwise round of recursive doubling and Rabenseifner. Even rank counts only.
  bool exchange = false;
};
// Collective over MPI_COMM_WORLD: every rank must call it. Times MPI_Allreduce(SUM, float) (or
// the exchange) for sizes min_bytes, 2*min_bytes, ... max_bytes, `samples` times each (per sample
// the max over ranks of the per-call mean), and returns the same JSON on every rank:
// {"ranks", "operation", "nonblocking", "exchange", "sizes": [{"bytes", "count", "seconds"
//  (median), "seconds_q1", "seconds_q3", "seconds_min", "seconds_max", "algorithm_gbps",
//  "bus_gbps"}...], "reduction": {"gamma_s_per_byte"}, "network": {"transport", "hosts",
//  "rank_hosts", "link_rate"}, "open_mpi": {the coll_tuned and libnbc allreduce settings in
//  effect}}. Fitting is the caller's (cnnbench/collective_model.hpp).
nlohmann::json allreduce_benchmark(const AllreduceBenchConfig& config = {});

}  // namespace cnnbench
