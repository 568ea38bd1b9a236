// MPI's lifecycle for the cluster strategy (init on first use, finalize or abort at exit) and
// the allreduce micro-benchmark that gives the sweep's alpha-beta communication model.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../rank_group.hpp"
#include "cnnbench/cluster.hpp"
#include "cnnbench/core.hpp"

namespace cnnbench {

namespace {

std::atomic<bool> abort_requested{false};

// MPI_Finalize waits for every rank, so a rank that failed must not call it while the others
// are blocked in a collective: it aborts the job instead, which makes mpirun end every rank.
void finalize_mpi_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (abort_requested.load()) {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    std::fprintf(stderr, "cnnbench: rank %d of %d failed (error above); ending the whole job\n",
                 rank, size);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
}

}  // namespace

void ensure_mpi_initialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
#ifdef OPEN_MPI
  // Open MPI's ranks started by srun itself find each other through srun's PMIx plugin; without
  // it (no PMIX_RANK) MPI_Init aborts with a page about rebuilding Open MPI.
  if (srun_step_tasks() > 0 && std::getenv("PMIX_RANK") == nullptr &&
      std::getenv("PMI_RANK") == nullptr && std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr) {
    fail("started by srun without an MPI plugin: start the ranks with `srun --mpi=pmix` "
         "(`srun --mpi=list` lists the plugins), or with mpirun inside the allocation");
  }
#endif
  // SERIALIZED: whichever worker finishes a layer's gradients may start its allreduce, one
  // thread at a time under the strategy's lock.
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    fail("MPI_Init_thread failed: is Open MPI installed and was the job started with mpirun?");
  }
  std::atexit(finalize_mpi_at_exit);
}

void abort_job_at_exit() { abort_requested.store(true); }

namespace {

struct LineFit {
  double alpha = 0, beta = 0, r2 = 0;
};

// Ordinary least squares of t = alpha + beta * n.
LineFit fit_line(const std::vector<double>& n, const std::vector<double>& t) {
  // Two parameters need two points at least: one size would fit any line through it.
  CNNBENCH_CHECK(n.size() >= 2, "allreduce benchmark: the fit alpha + n*beta needs at least 2 "
                                "message sizes, got " + std::to_string(n.size()));
  const double count = static_cast<double>(n.size());
  double mean_n = 0, mean_t = 0;
  for (std::size_t i = 0; i < n.size(); ++i) {
    mean_n += n[i] / count;
    mean_t += t[i] / count;
  }
  double covariance = 0, variance = 0, total = 0;
  for (std::size_t i = 0; i < n.size(); ++i) {
    covariance += (n[i] - mean_n) * (t[i] - mean_t);
    variance += (n[i] - mean_n) * (n[i] - mean_n);
    total += (t[i] - mean_t) * (t[i] - mean_t);
  }
  LineFit fit;
  fit.beta = variance > 0 ? covariance / variance : 0;
  fit.alpha = mean_t - fit.beta * mean_n;
  double residual = 0;
  for (std::size_t i = 0; i < n.size(); ++i) {
    const double e = t[i] - (fit.alpha + fit.beta * n[i]);
    residual += e * e;
  }
  fit.r2 = total > 0 ? 1.0 - residual / total : 1.0;
  return fit;
}

// Mean seconds per MPI_Allreduce of `count` floats over `repetitions` calls, the slowest rank's.
double time_allreduce(std::vector<float>& buffer, int count, int repetitions) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int r = 0; r < repetitions; ++r) {
    MPI_Allreduce(MPI_IN_PLACE, buffer.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  double seconds = (MPI_Wtime() - start) / repetitions;
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return seconds;
}

}  // namespace

nlohmann::json allreduce_benchmark(const AllreduceBenchConfig& config) {
  CNNBENCH_CHECK(config.min_bytes >= 4 && config.min_bytes <= config.max_bytes,
                 "allreduce benchmark: sizes must satisfy 4 <= min_bytes <= max_bytes, got " +
                     std::to_string(config.min_bytes) + ".." + std::to_string(config.max_bytes));
  CNNBENCH_CHECK(config.max_bytes <= (std::int64_t{1} << 30),
                 "allreduce benchmark: max_bytes above 1 GiB");
  CNNBENCH_CHECK(config.repetitions >= 0 && config.warmup >= 0,
                 "allreduce benchmark: repetitions and warmup must not be negative");
  ensure_mpi_initialized();
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  // A ring allreduce moves 2(p-1)/p of the payload through each rank's link (NCCL's bus bandwidth).
  const double bus_factor = ranks > 1 ? 2.0 * (ranks - 1) / ranks : 0.0;

  std::vector<float> buffer(static_cast<std::size_t>(config.max_bytes / 4), 0.0f);
  std::vector<double> bytes_list, seconds_list;
  nlohmann::json sizes = nlohmann::json::array();
  for (std::int64_t bytes = config.min_bytes; bytes <= config.max_bytes; bytes *= 2) {
    const int count = static_cast<int>(std::max<std::int64_t>(1, bytes / 4));
    if (config.warmup > 0) time_allreduce(buffer, count, config.warmup);
    int repetitions = config.repetitions;
    if (repetitions == 0) {
      // About 5 ms per size, decided from the slowest rank so every rank loops the same count.
      const double probe = time_allreduce(buffer, count, 1);
      repetitions = static_cast<int>(std::clamp(0.005 / std::max(probe, 1e-9), 5.0, 2000.0));
    }
    const double seconds = time_allreduce(buffer, count, repetitions);
    const double payload = 4.0 * count;
    const double algorithm_gbps = payload / seconds / 1e9;
    bytes_list.push_back(payload);
    seconds_list.push_back(seconds);
    sizes.push_back({{"bytes", static_cast<std::int64_t>(payload)},
                     {"seconds", seconds},
                     {"repetitions", repetitions},
                     {"algorithm_gbps", algorithm_gbps},
                     {"bus_gbps", algorithm_gbps * bus_factor}});
  }
  const LineFit fit = fit_line(bytes_list, seconds_list);
  return {{"ranks", ranks},
          {"operation", "MPI_Allreduce(MPI_SUM, MPI_FLOAT), max over ranks of the mean per call"},
          {"sizes", sizes},
          {"fit",
           {{"model", "t(n) = alpha + n * beta, least squares over all sizes"},
            {"alpha_s", fit.alpha},
            {"beta_s_per_byte", fit.beta},
            {"bandwidth_gbps", fit.beta > 0 ? 1e-9 / fit.beta : 0.0},
            {"r2", fit.r2}}}};
}

}  // namespace cnnbench
