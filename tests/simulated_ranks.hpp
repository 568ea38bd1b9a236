// Ranks of a job simulated in one process: each rank is a thread holding a RankGroup whose
// collectives meet the other ranks' at a barrier and read their buffers. Sums add in rank order,
// a started sum runs when the rank waits for it, and every call is logged, so a test can check
// what a strategy asked of its ranks. A rank that fails breaks the barrier instead of leaving
// the others blocked.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "../lib/strategies/rank_group.hpp"
#include "cnnbench/balance.hpp"
#include "cnnbench/core.hpp"

namespace cnnbench::testing {

// What the ranks share: the barrier and each rank's contribution to the collective under way.
class SimulatedJob {
 public:
  // `ranks` ranks, `ranks_per_node` to a machine (rank r is on machine r / ranks_per_node).
  explicit SimulatedJob(int ranks, int ranks_per_node = 1)
      : ranks_(ranks), ranks_per_node_(ranks_per_node), slots_(static_cast<std::size_t>(ranks)) {}

  int ranks() const { return ranks_; }
  int ranks_per_node() const { return ranks_per_node_; }

  // Every rank posts `mine`; `body(slots)` runs on each rank once all have posted, while the
  // others' contributions are still there to read.
  void collective(int rank, const void* mine, const std::function<void(const std::vector<const void*>&)>& body) {
    slots_[static_cast<std::size_t>(rank)] = mine;
    arrive_and_wait();
    body(slots_);
    arrive_and_wait();  // nobody reuses its slot before everyone has read it
  }

  // A rank failed: every rank blocked in a collective (now or later) gets an Error.
  void break_barrier() {
    std::lock_guard lock(mutex_);
    broken_ = true;
    changed_.notify_all();
  }

 private:
  void arrive_and_wait() {
    std::unique_lock lock(mutex_);
    if (broken_) fail("another simulated rank failed");
    const std::uint64_t phase = phase_;
    if (++arrived_ == ranks_) {
      arrived_ = 0;
      ++phase_;
      changed_.notify_all();
      return;
    }
    changed_.wait(lock, [&] { return phase_ != phase || broken_; });
    if (phase_ == phase) fail("another simulated rank failed");
  }

  const int ranks_, ranks_per_node_;
  std::vector<const void*> slots_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  std::uint64_t phase_ = 0;
  bool broken_ = false;
};

// One call a simulated rank received (sums only: what the tests look at).
struct GroupCall {
  std::string what;  // "sum", "start_sum", "wait_for_sums", "sum_in_rank_order", "start_sum_of_own_segment", "start_share_segments"
  std::size_t count = 0;
  bool is_double = false;
  const void* data = nullptr;
};

class SimulatedRank final : public RankGroup {
 public:
  SimulatedRank(SimulatedJob& job, int rank) : job_(job), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return job_.ranks(); }
  int node_rank() const override { return rank_ % job_.ranks_per_node(); }
  int node_size() const override {
    const int first = rank_ - node_rank();
    return std::min(job_.ranks_per_node(), job_.ranks() - first);
  }
  bool any_thread_may_call() const override { return true; }

  void sum_in_rank_order(float* data, std::size_t count) override {
    sum_now("sum_in_rank_order", data, count);
  }
  void sum_in_rank_order(double* data, std::size_t count) override {
    sum_now("sum_in_rank_order", data, count);
  }
  void sum(float* data, std::size_t count) override { sum_now("sum", data, count); }
  void sum(double* data, std::size_t count) override { sum_now("sum", data, count); }
  void start_sum(float* data, std::size_t count) override { start(data, count); }
  void start_sum(double* data, std::size_t count) override { start(data, count); }
  // Run when the rank waits, like the started sums: each reads the other ranks' buffers.
  void start_sum_of_own_segment(const float* data, std::size_t count, float* own) override {
    log({"start_sum_of_own_segment", count, false, data});
    started_.push_back([this, data, count, own] {
      const EvenShare mine = even_share(static_cast<int>(count), size(), rank_);
      job_.collective(rank_, data, [&](const std::vector<const void*>& slots) {
        for (int i = 0; i < mine.count; ++i) {
          float total = static_cast<const float*>(slots[0])[mine.offset + i];
          for (std::size_t r = 1; r < slots.size(); ++r) total += static_cast<const float*>(slots[r])[mine.offset + i];
          own[i] = total;
        }
      });
    });
  }
  void start_share_segments(float* data, std::size_t count) override {
    log({"start_share_segments", count, false, data});
    started_.push_back([this, data, count] {
      job_.collective(rank_, data, [&](const std::vector<const void*>& slots) {
        for (int r = 0; r < size(); ++r) {
          if (r == rank_) continue;  // a rank reads only the others' own segments, never writes them
          const EvenShare theirs = even_share(static_cast<int>(count), size(), r);
          const float* from = static_cast<const float*>(slots[static_cast<std::size_t>(r)]) + theirs.offset;
          std::copy(from, from + theirs.count, data + theirs.offset);
        }
      });
    });
  }
  bool progress_sums() override { return started_.empty(); }
  void wait_for_sums() override {
    log({"wait_for_sums", started_.size(), false, nullptr});
    for (const auto& run : started_) run();  // in the order they were started, as on every rank
    started_.clear();
  }

  std::vector<std::string> gather_to_all(const std::string& mine) override {
    std::vector<std::string> all;
    job_.collective(rank_, &mine, [&](const std::vector<const void*>& slots) {
      for (const void* slot : slots) all.push_back(*static_cast<const std::string*>(slot));
    });
    return all;
  }

  std::vector<int> gather_on_node(const std::vector<int>& mine) override {
    std::vector<int> all;
    job_.collective(rank_, &mine, [&](const std::vector<const void*>& slots) {
      const int first = rank_ - node_rank();
      for (int r = first; r < first + node_size(); ++r) {
        const auto& theirs = *static_cast<const std::vector<int>*>(slots[static_cast<std::size_t>(r)]);
        all.insert(all.end(), theirs.begin(), theirs.end());
      }
    });
    return all;
  }

  bool any_rank(bool mine) override {
    bool any = false;
    job_.collective(rank_, &mine, [&](const std::vector<const void*>& slots) {
      for (const void* slot : slots) any = any || *static_cast<const bool*>(slot);
    });
    return any;
  }

  void end_job_after_error(const std::string&) override { job_.break_barrier(); }
  void end_job_at_exit() override { job_.break_barrier(); }

  std::vector<GroupCall> calls() const {
    std::lock_guard lock(log_mutex_);
    return calls_;
  }

 private:
  // ((v_0 + v_1) + v_2) + ... into every rank's buffer.
  template <class T>
  void sum_now(const char* what, T* data, std::size_t count) {
    if (what != nullptr) log({what, count, std::is_same_v<T, double>, data});
    std::vector<T> total(count);
    job_.collective(rank_, data, [&](const std::vector<const void*>& slots) {
      for (std::size_t r = 0; r < slots.size(); ++r) {
        const T* theirs = static_cast<const T*>(slots[r]);
        for (std::size_t i = 0; i < count; ++i) total[i] = r == 0 ? theirs[i] : total[i] + theirs[i];
      }
    });
    std::copy(total.begin(), total.end(), data);
  }

  // Started sums run, unlogged, when the rank waits for them.
  template <class T>
  void start(T* data, std::size_t count) {
    log({"start_sum", count, std::is_same_v<T, double>, data});
    started_.push_back([this, data, count] { sum_now<T>(nullptr, data, count); });
  }

  void log(GroupCall call) {
    std::lock_guard lock(log_mutex_);
    calls_.push_back(std::move(call));
  }

  SimulatedJob& job_;
  const int rank_;
  std::vector<std::function<void()>> started_;  // callers hold their own lock (the interface's rule)
  mutable std::mutex log_mutex_;
  std::vector<GroupCall> calls_;
};

// Runs body(rank, group) on `ranks` threads, one per simulated rank, and rethrows the first
// error a rank raised after every rank has ended. A rank's group outlives its body only when
// the body hands it on (the strategy keeps its group).
inline void run_simulated_ranks(SimulatedJob& job,
                                const std::function<void(int rank, std::unique_ptr<SimulatedRank>)>& body) {
  std::vector<std::thread> threads;
  std::mutex error_mutex;
  std::exception_ptr first_error;
  for (int rank = 0; rank < job.ranks(); ++rank) {
    threads.emplace_back([&, rank] {
      try {
        body(rank, std::make_unique<SimulatedRank>(job, rank));
      } catch (...) {
        job.break_barrier();
        std::lock_guard lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace cnnbench::testing
