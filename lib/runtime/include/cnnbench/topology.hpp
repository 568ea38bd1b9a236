// The machine's topology (hwloc when built with it, a sysfs/sysconf fallback otherwise) and
// thread pinning: every worker of every strategy is bound to one core and says where it runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace cnnbench {

struct CacheLevel {
  int level = 0;             // 1, 2, 3
  std::string type;          // "data", "instruction", "unified"
  std::uint64_t bytes = 0;
  int count = 0;             // how many of them on the machine
};

struct Topology {
  std::string cpu_model;
  int packages = 0;
  int numa_nodes = 0;
  int cores = 0;             // physical cores
  int pus = 0;               // hardware threads
  std::vector<std::vector<int>> core_pus;  // core (logical index) -> OS indices of its PUs
  std::vector<CacheLevel> caches;
  std::string source;        // "hwloc 2.9.0" or "sysconf"
};

const Topology& machine_topology();  // discovered once
// Discovery from sysfs, sysconf and /proc/cpuinfo: what machine_topology() uses in builds
// without hwloc (public so that tests can hold it against hwloc's view).
Topology sysfs_topology();
// The hwloc library release in use ("2.9.0"), "" in builds without hwloc.
std::string hwloc_version_string();
nlohmann::json topology_json(const Topology& topology);

// Binds the calling thread to core `core` (logical index, taken modulo the core count) and
// returns the OS index of the PU it is bound to. Error when the OS refuses.
int pin_current_thread(int core);
// Saves the calling thread's CPU affinity and puts it back on destruction (on that thread, from
// whichever thread destroys it). Whoever pins a thread it does not own, such as the caller's, holds
// one: a thread left pinned to core 0 passes that mask on to every thread and process it starts
// later (a sweep's MPI jobs would then see a one-core machine).
class AffinityGuard {
 public:
  AffinityGuard();
  ~AffinityGuard();
  AffinityGuard(const AffinityGuard&) = delete;
  AffinityGuard& operator=(const AffinityGuard&) = delete;

 private:
  unsigned long thread_ = 0;        // pthread_t
  std::vector<unsigned char> mask_;  // cpu_set_t; empty when it could not be read
};

// The PU the calling thread runs on right now (sched_getcpu), -1 if unknown.
int current_cpu();

// Where one worker ran, for the report's pin map.
struct PinRecord {
  std::string worker;   // e.g. "stream/core2", "cluster/rank1/thread0"
  int core = -1;        // requested logical core, -1 when not pinned
  int pu = -1;          // OS PU index bound to, -1 when not pinned
  int observed_cpu = -1;  // sched_getcpu() at the end of the run
};
nlohmann::json pin_map_json(const std::vector<PinRecord>& records);

}  // namespace cnnbench
