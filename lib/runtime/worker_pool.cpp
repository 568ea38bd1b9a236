// The pinned worker pool: the creating thread is worker 0, the others wait on a generation
// counter (futex-backed std::atomic wait) so that a dispatch costs one wake-up per worker.
#include <pthread.h>
#include <sched.h>

#include <cstring>
#include <utility>

#include "cnnbench/cluster.hpp"
#include "cnnbench/core.hpp"

namespace cnnbench {

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
    cpu_set_t previous;
    CPU_ZERO(&previous);
    if (::pthread_getaffinity_np(::pthread_self(), sizeof(previous), &previous) == 0) {
      saved_affinity_.resize(sizeof(previous));
      std::memcpy(saved_affinity_.data(), &previous, sizeof(previous));
      restore_affinity_ = true;
    }
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
      try {
        if (core >= 0) {
          pins_[w].core = core;
          pins_[w].pu = pin_current_thread(core);
        }
      } catch (...) {
        std::lock_guard lock(start_error_mutex);
        if (!start_error) start_error = std::current_exception();
      }
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
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (auto& thread : threads_) thread.join();
    if (restore_affinity_) {
      cpu_set_t previous;
      std::memcpy(&previous, saved_affinity_.data(), sizeof(previous));
      ::pthread_setaffinity_np(::pthread_self(), sizeof(previous), &previous);
    }
  }
}

void WorkerPool::worker_loop(int worker) {
  // No dispatch can happen before the constructor has returned, so generation 0 is the start.
  std::uint64_t seen = 0;
  for (;;) {
    generation_.wait(seen, std::memory_order_acquire);
    seen = generation_.load(std::memory_order_acquire);
    if (stopping_.load(std::memory_order_acquire)) return;
    try {
      (*body_)(worker);
    } catch (...) {
      std::lock_guard lock(error_mutex_);
      if (!first_error_) first_error_ = std::current_exception();
    }
    if (running_.fetch_sub(1, std::memory_order_acq_rel) == 1) running_.notify_one();
  }
}

void WorkerPool::dispatch(const std::function<void(int worker)>& body) {
  first_error_ = nullptr;
  body_ = &body;
  running_.store(static_cast<int>(workers_) - 1, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  try {
    body(0);
  } catch (...) {
    std::lock_guard lock(error_mutex_);
    if (!first_error_) first_error_ = std::current_exception();
  }
  for (int left = running_.load(std::memory_order_acquire); left > 0;
       left = running_.load(std::memory_order_acquire)) {
    running_.wait(left, std::memory_order_acquire);
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

void WorkerPool::refresh_observed_cpus() {
  dispatch([this](int worker) { pins_[static_cast<std::size_t>(worker)].observed_cpu = current_cpu(); });
}

}  // namespace cnnbench
