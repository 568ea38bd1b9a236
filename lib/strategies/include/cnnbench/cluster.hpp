// The data-parallel cluster strategy's public pieces: the pinned worker pool every rank runs its
// share of the batch on, how a global batch is cut into shares, and the allreduce micro-benchmark.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cnnbench/topology.hpp"
#include "cnnbench/train.hpp"

namespace cnnbench {

// ---- worker pool (always built) ----------------------------------------------------------------

// A fixed set of pinned workers that run tasks in lock step with the calling thread. Worker 0 is
// the thread that created the pool (so it may make MPI calls on an MPI_THREAD_FUNNELED library);
// workers 1..size-1 are threads of the pool. With pinning, worker w is bound to cores[w] for the
// pool's whole life; the creating thread gets its previous affinity back when the pool is destroyed.
class WorkerPool {
 public:
  // cores: one logical core index per worker (size = number of workers), or empty + workers > 0
  // for unpinned workers. name_prefix + w names worker w in the pin map ("cluster/rank0/thread").
  WorkerPool(int workers, std::vector<int> cores, std::string name_prefix);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int size() const { return static_cast<int>(workers_); }

  // Runs task(w) once on every worker w and returns when all have finished. The first exception
  // a task throws is rethrown here, after every worker has finished.
  void run_on_each(const std::function<void(int worker)>& task);
  // Task scheduling: runs task(index, worker) for index 0..count-1; idle workers take the next
  // index from a shared counter, so uneven tasks even out. Same exception rule.
  void run_tasks(int count, const std::function<void(int index, int worker)>& task);
  // Runs task(index) for index 0..count-1 on whichever workers are awake: the calling thread
  // takes tasks too and the call returns when every task has finished, without waiting for a
  // worker that has not woken up (on a loaded machine one may be off its core for milliseconds).
  // Results must not depend on which worker ran a task. Same exception rule. count < 65536.
  void run_tasks_anywhere(int count, const std::function<void(int index)>& task);

  // Where each worker is bound and, as of the last refresh_observed_cpus(), where it ran.
  std::vector<PinRecord> pin_records() const { return pins_; }
  void refresh_observed_cpus();

 private:
  void worker_loop(int worker);
  void stop();
  void dispatch(const std::function<void(int worker)>& body);

  std::size_t workers_;
  std::vector<PinRecord> pins_;
  std::vector<std::thread> threads_;
  std::optional<AffinityGuard> caller_affinity_;  // the creating thread runs as worker 0

  bool claim_and_run_tasks(std::uint64_t generation);

  const std::function<void(int)>* body_ = nullptr;
  // Bumped by 2 per dispatch; the low bit set marks a run_tasks_anywhere dispatch.
  std::atomic<std::uint64_t> generation_{0};
  // run_tasks_anywhere: (generation << 32) | (count << 16) | next unclaimed index. A worker
  // claims by compare-exchange, so one that wakes after its dispatch ended claims nothing.
  std::atomic<std::uint64_t> claim_{0};
  std::atomic<int> tasks_done_{0};
  const std::function<void(int)>* task_ = nullptr;
  std::atomic<int> running_{0};
  std::atomic<bool> stopping_{false};
  std::mutex error_mutex_;
  std::exception_ptr first_error_;
};

// ---- the cluster strategy's pieces: only in builds with MPI (CNNBENCH_HAVE_MPI) ----------------

// Batch shares: pure arithmetic.

// Cuts `total` items into `parts` contiguous shares as evenly as possible: the first
// total % parts shares get one more. Sizes only; offsets are the running sum.
std::vector<int> split_evenly(int total, int parts);

// Re-sizes shares of `total` items in proportion to each part's measured throughput (items/s),
// with at least `minimum` items per part, by largest remainder (ties to the lower index), so
// every rank computes the same answer from the same inputs. Non-positive or non-finite
// throughputs are treated as the mean of the valid ones (or an even split if none is valid).
// No part gets more than `maximum` (what its buffers hold); a part the proportional split would
// push past it is held there and the others share the rest by the same rule.
std::vector<int> balance_shares(int total, const std::vector<double>& throughputs, int minimum,
                                int maximum = std::numeric_limits<int>::max());

// One move of dynamic balancing towards equal compute times: when the slowest part took more
// than (1 + tolerance) times the fastest part's `seconds`, samples go from the slowest to the
// fastest, as many as would make the two take equally long at their measured seconds per sample,
// keeping shares within [minimum, maximum]; otherwise the shares stay. Balancing times rather
// than sharing by throughput stays put under a fixed per-part cost (zeroing a gradient buffer):
// there, the smaller part's throughput looks lower and sharing by throughput shrinks it further.
std::vector<int> equalize_times(std::vector<int> shares, const std::vector<double>& seconds,
                                int minimum, int maximum, double tolerance);

// --slowdown N:FACTOR, for testing balancing: part N (a rank of the cluster strategy, a copy of
// the stream strategy's net) computes FACTOR (1..1000) times slower. Error naming --slowdown.
struct Slowdown {
  int part = -1;  // -1: none
  double factor = 1.0;
};
Slowdown parse_slowdown(const std::string& value);

// config.options of --strategy cluster, validated: unknown keys or bad values -> Error naming
// the CLI flag (--overlap, --balance, --slowdown).
struct ClusterOptions {
  bool overlap = true;
  bool dynamic_balance = false;
  int slow_rank = -1;          // --slowdown RANK:FACTOR; -1: none
  double slow_factor = 1.0;    // >= 1: that rank's compute takes this many times longer
};
ClusterOptions parse_cluster_options(const TrainConfig& config);

// Initialises MPI (MPI_THREAD_SERIALIZED) unless already done and registers MPI_Finalize at exit.
// Without mpirun this is a one-rank world. After a failure was reported with abort_job_at_exit,
// exit ends the whole job with MPI_Abort instead of finalising (which would wait on live ranks).
void ensure_mpi_initialized();
void abort_job_at_exit();

struct AllreduceBenchConfig {
  std::int64_t min_bytes = 4;
  std::int64_t max_bytes = 4 << 20;
  int repetitions = 0;   // per size; 0: chosen per size so each size takes a few milliseconds
  int warmup = 3;
};
// Collective over MPI_COMM_WORLD: every rank must call it. Times MPI_Allreduce(SUM, float) for
// sizes min_bytes, 2*min_bytes, ... max_bytes (max over ranks of the per-call mean), fits
// t(n) = alpha + n * beta by least squares, and returns the same JSON on every rank:
// {"ranks", "sizes": [{"bytes", "seconds", "algorithm_gbps", "bus_gbps"}...],
//  "fit": {"alpha_s", "beta_s_per_byte", "r2"}}.
nlohmann::json allreduce_benchmark(const AllreduceBenchConfig& config = {});

}  // namespace cnnbench
