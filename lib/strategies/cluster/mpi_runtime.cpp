// MPI's lifecycle for the cluster strategy (init on first use, finalize or abort at exit) and
// the allreduce micro-benchmark that gives the sweep's alpha-beta communication model.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../rank_group.hpp"
#include "cnnbench/cluster.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/quantile.hpp"

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

// What one timed call works on: the allreduce's vector in place, or the exchange's sent and
// received vectors and the rank it swaps them with.
struct CallBuffers {
  std::vector<float> data, received;
  int partner = -1;
};

// One call of what the benchmark measures, on `count` floats.
void call_once(const AllreduceBenchConfig& config, CallBuffers& b, int count) {
  if (config.exchange) {
    MPI_Sendrecv(b.data.data(), count, MPI_FLOAT, b.partner, 0, b.received.data(), count, MPI_FLOAT, b.partner, 0,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  } else if (config.nonblocking) {
    MPI_Request request;
    MPI_Iallreduce(MPI_IN_PLACE, b.data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
  } else {
    MPI_Allreduce(MPI_IN_PLACE, b.data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
}

// Max over ranks of the mean seconds per call of `count` floats over `repetitions` calls.
double time_calls(const AllreduceBenchConfig& config, CallBuffers& b, int count, int repetitions) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int r = 0; r < repetitions; ++r) call_once(config, b, count);
  double seconds = (MPI_Wtime() - start) / repetitions;
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return seconds;
}

// gamma: seconds per byte of the reduction's arithmetic, MPI_Reduce_local (the operation the
// algorithms call on every received block) over the largest size, the median of 5 on this rank.
double reduction_seconds_per_byte(std::vector<float>& buffer, int count) {
  std::vector<float> other(static_cast<std::size_t>(count), 1.0f);
  std::vector<double> samples;
  for (int i = 0; i < 5; ++i) {
    const double start = MPI_Wtime();
    MPI_Reduce_local(other.data(), buffer.data(), count, MPI_FLOAT, MPI_SUM);
    samples.push_back(MPI_Wtime() - start);
  }
  return median(samples) / (4.0 * count);
}

// Every rank's host (CNNBENCH_HOST, else the hostname), in rank order.
std::vector<std::string> rank_hosts(int ranks) {
  constexpr int width = 256;
  std::string mine = this_rank_host();
  mine.resize(width - 1);
  std::vector<char> all(static_cast<std::size_t>(width) * static_cast<std::size_t>(ranks));
  MPI_Allgather(mine.c_str(), width, MPI_CHAR, all.data(), width, MPI_CHAR, MPI_COMM_WORLD);
  std::vector<std::string> hosts;
  for (int r = 0; r < ranks; ++r) hosts.emplace_back(all.data() + static_cast<std::ptrdiff_t>(r) * width);
  return hosts;
}

nlohmann::json network_of(const std::vector<std::string>& hosts) {
  std::vector<std::string> distinct;
  for (const auto& h : hosts) {
    if (std::find(distinct.begin(), distinct.end(), h) == distinct.end()) distinct.push_back(h);
  }
  const char* rate = std::getenv("CNNBENCH_LINK_RATE");
  return {{"transport", distinct.size() > 1 ? "tcp" : "shm"},
          {"hosts", distinct},
          {"rank_hosts", hosts},
          {"link_rate", rate != nullptr && *rate != 0 ? nlohmann::json(rate) : nlohmann::json()}};
}

// An integer setting of Open MPI as the library holds it after MPI_Init (MPI_T control
// variable), so the report says what ran rather than what was asked; null when there is none.
nlohmann::json library_setting(const char* name) {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return nullptr;
  nlohmann::json value = nullptr;
  int index = 0, count = 0;
  MPI_T_cvar_handle handle;
  if (MPI_T_cvar_get_index(name, &index) == MPI_SUCCESS &&
      MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
    long long read = 0;  // zeroed: a bool setting fills only its first byte
    if (count == 1 && MPI_T_cvar_read(handle, &read) == MPI_SUCCESS) value = static_cast<int>(read);
    MPI_T_cvar_handle_free(&handle);
  }
  MPI_T_finalize();
  return value;
}

std::string operation_name(const AllreduceBenchConfig& config) {
  if (config.exchange) {
    return "MPI_Sendrecv(MPI_FLOAT) of the size each way between rank r and rank r ^ 1, every pair at once";
  }
  return config.nonblocking ? "MPI_Iallreduce(MPI_IN_PLACE, MPI_SUM, MPI_FLOAT) and MPI_Wait"
                            : "MPI_Allreduce(MPI_IN_PLACE, MPI_SUM, MPI_FLOAT)";
}

}  // namespace

nlohmann::json allreduce_benchmark(const AllreduceBenchConfig& config) {
  CNNBENCH_CHECK(config.min_bytes >= 4 && config.min_bytes <= config.max_bytes,
                 "allreduce benchmark: sizes must satisfy 4 <= min_bytes <= max_bytes, got " +
                     std::to_string(config.min_bytes) + ".." + std::to_string(config.max_bytes));
  CNNBENCH_CHECK(config.max_bytes <= (std::int64_t{1} << 30),
                 "allreduce benchmark: max_bytes above 1 GiB");
  CNNBENCH_CHECK(config.repetitions >= 0 && config.warmup >= 0 && config.samples >= 1,
                 "allreduce benchmark: repetitions and warmup must not be negative, samples >= 1");
  CNNBENCH_CHECK(!(config.exchange && config.nonblocking), "allreduce benchmark: an exchange is not an allreduce");
  ensure_mpi_initialized();
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  CNNBENCH_CHECK(!config.exchange || ranks % 2 == 0,
                 "exchange benchmark: rank r swaps with rank r ^ 1, and " + std::to_string(ranks) +
                     " ranks leave the last one without a partner");
  // A ring allreduce moves 2(p-1)/p of the payload through each rank's link (NCCL's bus
  // bandwidth); an exchange moves the payload once each way.
  const double bus_factor = config.exchange ? 1.0 : ranks > 1 ? 2.0 * (ranks - 1) / ranks : 0.0;

  const auto largest_count = static_cast<std::size_t>(config.max_bytes / 4);
  CallBuffers buffers{std::vector<float>(largest_count, 0.0f),
                      std::vector<float>(config.exchange ? largest_count : 0, 0.0f), rank ^ 1};
  nlohmann::json sizes = nlohmann::json::array();
  for (std::int64_t bytes = config.min_bytes; bytes <= config.max_bytes; bytes *= 2) {
    const int count = static_cast<int>(std::max<std::int64_t>(1, bytes / 4));
    if (config.warmup > 0) time_calls(config, buffers, count, config.warmup);
    int repetitions = config.repetitions;
    if (repetitions == 0) {
      // About 5 ms per sample, decided from the slowest rank so every rank loops the same count.
      const double probe = time_calls(config, buffers, count, 1);
      repetitions = static_cast<int>(std::clamp(0.005 / std::max(probe, 1e-9), 3.0, 2000.0));
    }
    std::vector<double> samples;
    for (int s = 0; s < config.samples; ++s) {
      samples.push_back(time_calls(config, buffers, count, repetitions));
    }
    std::sort(samples.begin(), samples.end());  // front and back are the extremes
    const double seconds = median(samples);
    const double payload = 4.0 * count;
    const double algorithm_gbps = payload / seconds / 1e9;
    sizes.push_back({{"bytes", static_cast<std::int64_t>(payload)},
                     {"count", count},
                     {"seconds", seconds},
                     {"seconds_q1", quantile(samples, 0.25)},
                     {"seconds_q3", quantile(samples, 0.75)},
                     {"seconds_min", samples.front()},
                     {"seconds_max", samples.back()},
                     {"samples", config.samples},
                     {"repetitions", repetitions},
                     {"algorithm_gbps", algorithm_gbps},
                     {"bus_gbps", algorithm_gbps * bus_factor}});
  }
  const auto largest = static_cast<int>(largest_count);
  return {{"ranks", ranks},
          {"operation", operation_name(config) + ", per sample the max over ranks of the mean per call; "
                                                 "seconds is the median of the samples"},
          {"nonblocking", config.nonblocking},
          {"exchange", config.exchange},
          {"sizes", sizes},
          {"reduction", {{"gamma_s_per_byte", reduction_seconds_per_byte(buffers.data, largest)},
                         {"bytes", 4.0 * largest},
                         {"how", "MPI_Reduce_local(MPI_SUM, MPI_FLOAT) on rank 0's core, median of 5"}}},
          {"network", network_of(rank_hosts(ranks))},
          {"open_mpi", {{"coll_tuned_use_dynamic_rules", library_setting("coll_tuned_use_dynamic_rules")},
                        {"coll_tuned_allreduce_algorithm", library_setting("coll_tuned_allreduce_algorithm")},
                        {"coll_tuned_allreduce_algorithm_segmentsize",
                         library_setting("coll_tuned_allreduce_algorithm_segmentsize")},
                        {"coll_libnbc_iallreduce_algorithm", library_setting("coll_libnbc_iallreduce_algorithm")}}}};
}

}  // namespace cnnbench
