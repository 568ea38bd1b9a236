// The pinned worker pool the cluster strategy runs a rank's share of the batch on: a fixed set
// of workers, the calling thread among them, that run tasks in lock step with it.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cnnbench/topology.hpp"

namespace cnnbench {

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

}  // namespace cnnbench
