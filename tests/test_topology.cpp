// Topology discovery and thread pinning: the core -> PU map is consistent, and a pinned thread
// runs where pin_current_thread says (checked with sched_getcpu and the kernel's affinity mask).
// Pinning always happens in fresh threads so the main thread keeps the whole allowed set.
#include <pthread.h>
#include <sched.h>

#include <barrier>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"
#include "cnnbench/topology.hpp"
#include "cnnbench/train.hpp"

namespace cnnbench {
namespace {

std::set<int> affinity_of_calling_thread() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(::pthread_getaffinity_np(::pthread_self(), sizeof(set), &set), 0);
  std::set<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.insert(cpu);
  }
  return cpus;
}

std::set<int> all_pus(const Topology& topology) {
  std::set<int> pus;
  for (const auto& core : topology.core_pus) pus.insert(core.begin(), core.end());
  return pus;
}

// Spins for a while and counts the readings of sched_getcpu that differ from `pu`.
int readings_elsewhere(int pu) {
  int elsewhere = 0;
  for (int i = 0; i < 20000; ++i) elsewhere += current_cpu() != pu;
  return elsewhere;
}

TEST(Topology, CoreMapIsConsistent) {
  const Topology& topology = machine_topology();
  ASSERT_GE(topology.cores, 1);
  EXPECT_GE(topology.pus, topology.cores);
  EXPECT_GE(topology.packages, 1);
  EXPECT_GE(topology.numa_nodes, 1);
  EXPECT_FALSE(topology.cpu_model.empty());
  EXPECT_FALSE(topology.source.empty());
  ASSERT_EQ(topology.core_pus.size(), static_cast<std::size_t>(topology.cores));

  std::size_t listed = 0;
  for (const auto& core : topology.core_pus) {
    EXPECT_FALSE(core.empty());
    listed += core.size();
  }
  EXPECT_EQ(listed, static_cast<std::size_t>(topology.pus));
  EXPECT_EQ(all_pus(topology).size(), listed) << "a PU belongs to two cores";

  for (const auto& cache : topology.caches) {
    EXPECT_GE(cache.level, 1);
    EXPECT_GT(cache.bytes, 0u);
    EXPECT_GE(cache.count, 1);
    EXPECT_TRUE(cache.type == "data" || cache.type == "instruction" || cache.type == "unified")
        << cache.type;
  }
}

TEST(Topology, OnlyAllowedPusAreListed) {
  const std::set<int> allowed = affinity_of_calling_thread();
  const std::set<int> listed = all_pus(machine_topology());
  for (const int pu : listed) EXPECT_TRUE(allowed.count(pu)) << "PU " << pu << " is not allowed";
  EXPECT_EQ(listed.size(), allowed.size());
}

TEST(Topology, SysfsDiscoveryAgreesWithMachineTopology) {
  const Topology& machine = machine_topology();
  const Topology sysfs = sysfs_topology();
  EXPECT_EQ(sysfs.source, "sysconf");
  EXPECT_EQ(all_pus(sysfs), all_pus(machine));
  EXPECT_EQ(sysfs.pus, machine.pus);
  EXPECT_EQ(sysfs.cores, machine.cores);
  // The same cores, compared as sets: the two may number them differently.
  const std::set<std::vector<int>> sysfs_cores(sysfs.core_pus.begin(), sysfs.core_pus.end());
  const std::set<std::vector<int>> machine_cores(machine.core_pus.begin(), machine.core_pus.end());
  EXPECT_EQ(sysfs_cores, machine_cores);
}

TEST(Topology, JsonMirrorsTheStruct) {
  const Topology& topology = machine_topology();
  const nlohmann::json json = topology_json(topology);
  EXPECT_EQ(json.at("source"), topology.source);
  EXPECT_EQ(json.at("cpu_model"), topology.cpu_model);
  EXPECT_EQ(json.at("packages"), topology.packages);
  EXPECT_EQ(json.at("numa_nodes"), topology.numa_nodes);
  EXPECT_EQ(json.at("cores"), topology.cores);
  EXPECT_EQ(json.at("pus"), topology.pus);
  EXPECT_EQ(json.at("core_pus").get<std::vector<std::vector<int>>>(), topology.core_pus);
  ASSERT_EQ(json.at("caches").size(), topology.caches.size());
  for (std::size_t i = 0; i < topology.caches.size(); ++i) {
    EXPECT_EQ(json["caches"][i].at("level"), topology.caches[i].level);
    EXPECT_EQ(json["caches"][i].at("type"), topology.caches[i].type);
    EXPECT_EQ(json["caches"][i].at("bytes"), topology.caches[i].bytes);
    EXPECT_EQ(json["caches"][i].at("count"), topology.caches[i].count);
  }
}

TEST(Pinning, EachCoreInTurn) {
  const Topology& topology = machine_topology();
  std::thread worker([&] {
    for (int core = 0; core < topology.cores; ++core) {
      const int pu = pin_current_thread(core);
      EXPECT_EQ(pu, topology.core_pus[static_cast<std::size_t>(core)].front());
      EXPECT_EQ(affinity_of_calling_thread(), std::set<int>{pu}) << "core " << core;
      EXPECT_EQ(readings_elsewhere(pu), 0) << "core " << core << " PU " << pu;
    }
  });
  worker.join();
}

TEST(Pinning, CoreNumbersWrapAround) {
  const Topology& topology = machine_topology();
  std::thread worker([&] {
    for (int core = 0; core < 3 * topology.cores; ++core) {
      const int expected =
          topology.core_pus[static_cast<std::size_t>(core % topology.cores)].front();
      EXPECT_EQ(pin_current_thread(core), expected) << "core " << core;
      EXPECT_EQ(current_cpu(), expected) << "core " << core;
    }
  });
  worker.join();
}

TEST(Pinning, NegativeCoreIsAnError) {
  std::thread worker([] { EXPECT_THROW(pin_current_thread(-1), Error); });
  worker.join();
}

// Several threads pin at once; with more threads than cores they share cores round-robin.
class ConcurrentPinning : public ::testing::TestWithParam<int> {};

TEST_P(ConcurrentPinning, EveryThreadRunsOnItsPu) {
  const int width = GetParam();
  const Topology& topology = machine_topology();
  std::vector<int> bound(static_cast<std::size_t>(width), -1);
  std::vector<int> elsewhere(static_cast<std::size_t>(width), -1);
  std::vector<std::set<int>> masks(static_cast<std::size_t>(width));
  std::barrier all_pinned(width);
  std::vector<std::thread> threads;
  for (int i = 0; i < width; ++i) {
    threads.emplace_back([&, i] {
      const auto slot = static_cast<std::size_t>(i);
      bound[slot] = pin_current_thread(i);
      all_pinned.arrive_and_wait();  // every thread is pinned while the others check
      masks[slot] = affinity_of_calling_thread();
      elsewhere[slot] = readings_elsewhere(bound[slot]);
    });
  }
  for (auto& thread : threads) thread.join();
  for (int i = 0; i < width; ++i) {
    const auto slot = static_cast<std::size_t>(i);
    const int expected = topology.core_pus[static_cast<std::size_t>(i % topology.cores)].front();
    EXPECT_EQ(bound[slot], expected) << "thread " << i;
    EXPECT_EQ(masks[slot], std::set<int>{expected}) << "thread " << i;
    EXPECT_EQ(elsewhere[slot], 0) << "thread " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Widths, ConcurrentPinning, ::testing::Values(1, 2, 3, 4, 7, 16));

TEST(Pinning, CurrentCpuIsAnAllowedPu) {
  const int cpu = current_cpu();
  ASSERT_GE(cpu, 0);
  EXPECT_TRUE(all_pus(machine_topology()).count(cpu));
}

TEST(PinMap, KeepsEveryRecordInOrder) {
  const std::vector<PinRecord> records = {{"stream/core0", 0, 3, 3}, {"serial", -1, -1, 5}};
  const nlohmann::json map = pin_map_json(records);
  ASSERT_EQ(map.size(), records.size());
  for (std::size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(map[i].size(), 4u);
    EXPECT_EQ(map[i].at("worker"), records[i].worker);
    EXPECT_EQ(map[i].at("core"), records[i].core);
    EXPECT_EQ(map[i].at("pu"), records[i].pu);
    EXPECT_EQ(map[i].at("observed_cpu"), records[i].observed_cpu);
  }
  EXPECT_TRUE(pin_map_json({}).is_array());
  EXPECT_TRUE(pin_map_json({}).empty());
}

// The guard puts the mask back, whatever pinning happened in between.
TEST(Pinning, AffinityGuardRestoresTheMask) {
  const std::set<int> before = affinity_of_calling_thread();
  if (before.size() < 2) GTEST_SKIP() << "needs two or more allowed CPUs to tell pinned from not";
  {
    AffinityGuard guard;
    pin_current_thread(1);
    EXPECT_EQ(affinity_of_calling_thread().size(), 1u);
  }
  EXPECT_EQ(affinity_of_calling_thread(), before);
}

// A strategy that pins the caller's thread gives it its mask back: otherwise everything the
// thread starts afterwards (a sweep's mpirun jobs) inherits one core and sees a one-core machine.
TEST(Pinning, PinnedTrainingRunsGiveTheCallersThreadItsAffinityBack) {
  const std::set<int> before = affinity_of_calling_thread();
  if (before.size() < 2) GTEST_SKIP() << "needs two or more allowed CPUs to tell pinned from not";
  const Dataset data = make_synthetic(128, 3);
  for (const StrategyInfo& info : list_strategies()) {
    if (!info.available || info.name == "gpu") continue;  // gpu: no device here to train on
    TrainConfig config;
    config.model = ModelKind::fc3;
    config.strategy = info.name;
    config.batch = 32;
    config.steps = 2;
    config.threads = 2;
    config.pin = true;
    run_training(config, data, {});
    EXPECT_EQ(affinity_of_calling_thread(), before) << info.name;
  }
}

}  // namespace
}  // namespace cnnbench
