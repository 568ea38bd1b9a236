// The pinned worker pool: the creating thread is worker 0, the others wait on a generation
// counter. Waits spin briefly (steps follow each other within microseconds, and a futex wake-up
// costs tens of them) and only then block in a futex-backed std::atomic wait.
#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <mutex>
#include <utility>

#include "cnnbench/core.hpp"
#include "cnnbench/worker_pool.hpp"
#include "cpu_relax.hpp"

namespace cnnbench {

namespace {

// How long a waiting worker (or the dispatching thread) polls before it sleeps: longer than the
// gap between two dispatches of one training step, short enough to give the core away between
// runs.
constexpr auto spin_budget = std::chrono::microseconds(200);

// Runs work(); an exception it throws is kept in first_error unless another thread's came first,
// for the dispatching thread to rethrow once every worker is done.
template <class Work>
void run_keeping_first_error(std::mutex& error_mutex, std::exception_ptr& first_error,
                             const Work& work) {
  try {
    work();
  } catch (...) {
    std::lock_guard lock(error_mutex);
    if (!first_error) first_error = std::current_exception();
  }
}

// Waits until `value` differs from `old` and returns the new value: polls with a pause first,
// then blocks.
template <class T>
T wait_for_change(const std::atomic<T>& value, T old) {
  const auto give_up = std::chrono::steady_clock::now() + spin_budget;
  for (int round = 1;; ++round) {
    const T now = value.load(std::memory_order_acquire);
    if (now != old) return now;
    cpu_relax();
    if (round % 64 == 0 && std::chrono::steady_clock::now() > give_up) break;
  }
  for (T now = value.load(std::memory_order_acquire);; now = value.load(std::memory_order_acquire)) {
    if (now != old) return now;
    value.wait(old, std::memory_order_acquire);
  }
}

}  // namespace

WorkerPool::WorkerPool(int workers, std::vector<int> cores, std::string name_prefix)
    : workers_(static_cast<std::size_t>(workers)) {
  CNNBENCH_CHECK(workers >= 1, "a worker pool needs at least one worker, got " +
                                   std::to_string(workers));
  CNNBENCH_CHECK(cores.empty() || cores.size() == workers_,
                 "a worker pool of " + std::to_string(workers) + " workers got " +
                     std::to_string(cores.size()) + " cores to pin them to");
  pins_.resize(workers_);
  for (std::size_t w = 0; w < workers_; ++w) pins_[w].worker = name_prefix + std::to_string(w);

  if (!cores.empty()) {
    caller_affinity_.emplace();
    pins_[0].core = cores[0];
    pins_[0].pu = pin_current_thread(cores[0]);
  }

  // Each thread pins itself before it reports ready, so a pinning error surfaces here.
  std::atomic<int> started{0};
  std::mutex start_error_mutex;
  std::exception_ptr start_error;
  for (std::size_t w = 1; w < workers_; ++w) {
    const int core = cores.empty() ? -1 : cores[w];
    threads_.emplace_back([this, w, core, &started, &start_error_mutex, &start_error] {
      run_keeping_first_error(start_error_mutex, start_error, [&] {
        if (core >= 0) {
          pins_[w].core = core;
          pins_[w].pu = pin_current_thread(core);
        }
      });
      started.fetch_add(1, std::memory_order_release);
      started.notify_one();
      worker_loop(static_cast<int>(w));
    });
  }
  const int expected = static_cast<int>(workers_) - 1;
  for (int seen = started.load(std::memory_order_acquire); seen < expected;
       seen = started.load(std::memory_order_acquire)) {
    started.wait(seen, std::memory_order_acquire);
  }
  if (start_error) {
    stop();  // joins the threads and restores the affinity before the error leaves
    std::rethrow_exception(start_error);
  }
}

WorkerPool::~WorkerPool() { stop(); }

void WorkerPool::stop() {
  if (!stopping_.exchange(true)) {
    generation_.fetch_add(2, std::memory_order_release);
    generation_.notify_all();
    for (auto& thread : threads_) thread.join();
    caller_affinity_.reset();
  }
}

void WorkerPool::worker_loop(int worker) {
  // No dispatch can happen before the constructor has returned, so generation 0 is the start.
  std::uint64_t seen = 0;
  for (;;) {
    seen = wait_for_change(generation_, seen);
    if (stopping_.load(std::memory_order_acquire)) return;
    if (seen & 1) {  // run_tasks_anywhere: the caller waits for tasks, not for this worker
      claim_and_run_tasks(seen);
      continue;
    }
    run_keeping_first_error(error_mutex_, first_error_, [&] { (*body_)(worker); });
    if (running_.fetch_sub(1, std::memory_order_acq_rel) == 1) running_.notify_one();
  }
}

void WorkerPool::dispatch(const std::function<void(int worker)>& body) {
  first_error_ = nullptr;
  body_ = &body;
  running_.store(static_cast<int>(workers_) - 1, std::memory_order_release);
  generation_.store(((generation_.load(std::memory_order_relaxed) >> 1) + 1) << 1,
                    std::memory_order_release);
  generation_.notify_all();
  run_keeping_first_error(error_mutex_, first_error_, [&] { body(0); });
  for (int left = running_.load(std::memory_order_acquire); left > 0;) {
    left = wait_for_change(running_, left);
  }
  body_ = nullptr;
  if (first_error_) std::rethrow_exception(std::exchange(first_error_, nullptr));
}

void WorkerPool::run_on_each(const std::function<void(int worker)>& task) { dispatch(task); }

void WorkerPool::run_tasks(int count, const std::function<void(int index, int worker)>& task) {
  std::atomic<int> next{0};
  dispatch([&](int worker) {
    for (int index = next.fetch_add(1, std::memory_order_relaxed); index < count;
         index = next.fetch_add(1, std::memory_order_relaxed)) {
      task(index, worker);
    }
  });
}

// Claims and runs tasks of dispatch `generation` until none is left; false when a task threw.
bool WorkerPool::claim_and_run_tasks(std::uint64_t generation) {
  const std::uint64_t tag = (generation & 0xffffffffu) << 32;
  std::uint64_t word = claim_.load(std::memory_order_acquire);
  for (;;) {
    const auto count = static_cast<int>((word >> 16) & 0xffffu);
    const auto next = static_cast<int>(word & 0xffffu);
    if ((word & ~std::uint64_t{0xffffffffu}) != tag || next >= count) return true;
    if (!claim_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      continue;
    }
    // The dispatch cannot end before this task is counted done, so task_ is still its task.
    run_keeping_first_error(error_mutex_, first_error_, [&] { (*task_)(next); });
    if (tasks_done_.fetch_add(1, std::memory_order_acq_rel) + 1 == count) tasks_done_.notify_one();
    word = claim_.load(std::memory_order_acquire);
  }
}

void WorkerPool::run_tasks_anywhere(int count, const std::function<void(int index)>& task) {
  CNNBENCH_CHECK(count >= 0 && count < 65536,
                 "a worker pool dispatch takes 0..65535 tasks, got " + std::to_string(count));
  if (count == 0) return;
  first_error_ = nullptr;
  task_ = &task;
  tasks_done_.store(0, std::memory_order_relaxed);
  const std::uint64_t generation =
      (((generation_.load(std::memory_order_relaxed) >> 1) + 1) << 1) | 1;
  claim_.store(((generation & 0xffffffffu) << 32) | (std::uint64_t(count) << 16),
               std::memory_order_release);
  generation_.store(generation, std::memory_order_release);
  generation_.notify_all();
  claim_and_run_tasks(generation);
  for (int done = tasks_done_.load(std::memory_order_acquire); done < count;) {
    done = wait_for_change(tasks_done_, done);
  }
  task_ = nullptr;
  if (first_error_) std::rethrow_exception(std::exchange(first_error_, nullptr));
}

void WorkerPool::refresh_observed_cpus() {
  dispatch([this](int worker) { pins_[static_cast<std::size_t>(worker)].observed_cpu = current_cpu(); });
}

}  // namespace cnnbench
