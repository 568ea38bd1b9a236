// WorkerPool: every worker runs each dispatch exactly once, task scheduling (also by whichever
// workers are awake) covers every index exactly once, errors reach the caller, and pinned workers
// run where the pin map says.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/worker_pool.hpp"

namespace cnnbench {
namespace {

const int widths[] = {1, 2, 3, 4, 7};

TEST(WorkerPool, RunOnEachRunsEveryWorkerOncePerDispatch) {
  for (const int width : widths) {
    WorkerPool pool(width, {}, "test/worker");
    ASSERT_EQ(pool.size(), width);
    std::vector<std::atomic<int>> runs(static_cast<std::size_t>(width));
    const int dispatches = 500;
    for (int d = 0; d < dispatches; ++d) {
      pool.run_on_each([&](int worker) { runs[static_cast<std::size_t>(worker)].fetch_add(1); });
    }
    for (int w = 0; w < width; ++w) {
      EXPECT_EQ(runs[static_cast<std::size_t>(w)].load(), dispatches) << "width " << width << " worker " << w;
    }
  }
}

TEST(WorkerPool, WorkerZeroIsTheCallingThread) {
  WorkerPool pool(3, {}, "test/worker");
  std::thread::id seen;
  pool.run_on_each([&](int worker) {
    if (worker == 0) seen = std::this_thread::get_id();
  });
  EXPECT_EQ(seen, std::this_thread::get_id());
}

TEST(WorkerPool, RunTasksCoversEveryIndexExactlyOnce) {
  for (const int width : widths) {
    WorkerPool pool(width, {}, "test/worker");
    for (const int count : {0, 1, 2, 7, 64, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<std::size_t>(count));
      std::atomic<bool> bad_worker{false};
      pool.run_tasks(count, [&](int index, int worker) {
        if (worker < 0 || worker >= width) bad_worker = true;
        hits[static_cast<std::size_t>(index)].fetch_add(1);
      });
      EXPECT_FALSE(bad_worker.load());
      for (int i = 0; i < count; ++i) {
        ASSERT_EQ(hits[static_cast<std::size_t>(i)].load(), 1)
            << "width " << width << " count " << count << " index " << i;
      }
    }
  }
}

// run_tasks_anywhere returns without waiting for workers that have not woken up, so dispatches
// overlap a late worker's wake-up: interleave both kinds of dispatch, with random task lengths,
// and check that no task is lost, repeated, or run after its dispatch returned.
TEST(WorkerPool, RunTasksAnywhereRunsEveryTaskOnceAndOnlyDuringItsDispatch) {
  Rng rng(11);
  for (const int width : widths) {
    WorkerPool pool(width, {}, "test/worker");
    std::atomic<bool> open{false};
    std::atomic<int> late{0};
    for (int dispatch = 0; dispatch < 300; ++dispatch) {
      const int count = 1 + static_cast<int>(rng.uniform(0.0f, 9.0f));
      const int spin = static_cast<int>(rng.uniform(0.0f, 2000.0f));
      std::vector<std::atomic<int>> hits(static_cast<std::size_t>(count));
      open = true;
      pool.run_tasks_anywhere(count, [&](int index) {
        if (!open.load()) late.fetch_add(1);
        std::atomic<int> work{0};  // a task of random length
        for (int k = 0; k < spin; ++k) work.fetch_add(1, std::memory_order_relaxed);
        hits[static_cast<std::size_t>(index)].fetch_add(1);
      });
      open = false;
      for (int i = 0; i < count; ++i) {
        ASSERT_EQ(hits[static_cast<std::size_t>(i)].load(), 1)
            << "width " << width << " dispatch " << dispatch << " task " << i;
      }
      if (dispatch % 3 == 0) {
        std::vector<std::atomic<int>> runs(static_cast<std::size_t>(width));
        pool.run_on_each([&](int worker) { runs[static_cast<std::size_t>(worker)].fetch_add(1); });
        for (int w = 0; w < width; ++w) ASSERT_EQ(runs[static_cast<std::size_t>(w)].load(), 1);
      }
    }
    EXPECT_EQ(late.load(), 0) << "width " << width;
    EXPECT_THROW(pool.run_tasks_anywhere(5, [](int index) {
                   if (index == 3) throw std::runtime_error("task 3 failed");
                 }),
                 std::runtime_error);
    std::atomic<int> after{0};
    pool.run_tasks_anywhere(4, [&](int) { after.fetch_add(1); });  // still usable after a throw
    EXPECT_EQ(after.load(), 4);
  }
}

TEST(WorkerPool, ParallelSumMatchesSerialSum) {
  // Each worker sums a fixed slice; the slices are then added in worker order: the oracle is the
  // same fixed-order sum done on one thread, which must match bit for bit.
  std::vector<float> values(100003);
  Rng rng(7);
  for (auto& v : values) v = rng.uniform(-1.0f, 1.0f);
  for (const int width : widths) {
    WorkerPool pool(width, {}, "test/worker");
    std::vector<float> partial(static_cast<std::size_t>(width));
    const std::size_t chunk = (values.size() + static_cast<std::size_t>(width) - 1) / static_cast<std::size_t>(width);
    const auto slice_sum = [&](std::size_t w) {
      const std::size_t begin = std::min(values.size(), w * chunk);
      const std::size_t end = std::min(values.size(), begin + chunk);
      return std::accumulate(values.begin() + static_cast<std::ptrdiff_t>(begin),
                             values.begin() + static_cast<std::ptrdiff_t>(end), 0.0f);
    };
    pool.run_on_each([&](int worker) {
      partial[static_cast<std::size_t>(worker)] = slice_sum(static_cast<std::size_t>(worker));
    });
    float parallel = 0, serial = 0;
    for (int w = 0; w < width; ++w) {
      parallel += partial[static_cast<std::size_t>(w)];
      serial += slice_sum(static_cast<std::size_t>(w));
    }
    EXPECT_EQ(parallel, serial) << "width " << width;
  }
}

TEST(WorkerPool, FirstErrorReachesTheCallerAndThePoolStaysUsable) {
  for (const int width : widths) {
    WorkerPool pool(width, {}, "test/worker");
    const int failing = width - 1;
    EXPECT_THROW(pool.run_on_each([&](int worker) {
      if (worker == failing) throw Error("worker failed");
    }),
                 Error);
    EXPECT_THROW(pool.run_tasks(10, [](int index, int) {
      if (index == 3) throw std::runtime_error("task 3 failed");
    }),
                 std::runtime_error);
    std::atomic<int> runs{0};
    pool.run_on_each([&](int) { runs.fetch_add(1); });
    EXPECT_EQ(runs.load(), width);
  }
}

TEST(WorkerPool, PinnedWorkersRunOnTheirPu) {
  const int cores = machine_topology().cores;
  ASSERT_GT(cores, 0);
  for (const int width : widths) {
    std::vector<int> plan(static_cast<std::size_t>(width));
    std::iota(plan.begin(), plan.end(), 0);  // wraps modulo the core count when oversubscribed
    WorkerPool pool(width, plan, "test/thread");
    pool.refresh_observed_cpus();
    const auto pins = pool.pin_records();
    ASSERT_EQ(pins.size(), static_cast<std::size_t>(width));
    for (int w = 0; w < width; ++w) {
      const auto& pin = pins[static_cast<std::size_t>(w)];
      EXPECT_EQ(pin.worker, "test/thread" + std::to_string(w));
      EXPECT_EQ(pin.core, w);
      EXPECT_GE(pin.pu, 0);
      EXPECT_EQ(pin.observed_cpu, pin.pu) << "worker " << w << " is bound to one PU";
    }
  }
}

TEST(WorkerPool, CallingThreadGetsItsAffinityBack) {
  cpu_set_t before;
  CPU_ZERO(&before);
  ASSERT_EQ(::pthread_getaffinity_np(::pthread_self(), sizeof(before), &before), 0);
  {
    WorkerPool pool(2, {0, 1}, "test/thread");
    pool.run_on_each([](int) {});
  }
  cpu_set_t after;
  CPU_ZERO(&after);
  ASSERT_EQ(::pthread_getaffinity_np(::pthread_self(), sizeof(after), &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
}

TEST(WorkerPool, RejectsBadSizes) {
  EXPECT_THROW(WorkerPool(0, {}, "x"), Error);
  EXPECT_THROW(WorkerPool(2, {0}, "x"), Error);
}

}  // namespace
}  // namespace cnnbench
