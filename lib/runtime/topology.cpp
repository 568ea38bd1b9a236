// Machine topology (hwloc, or sysfs + sysconf + /proc/cpuinfo without it) and thread pinning.
// Only the CPUs this process may use count: taskset, cgroups and mpirun bindings shrink `cores`.
#include "cnnbench/topology.hpp"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "cnnbench/config.hpp"
#include "cnnbench/core.hpp"

#if CNNBENCH_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace cnnbench {

namespace {

// Caches are listed once per (level, type, size) with how many the machine has.
using CacheKey = std::tuple<int, std::string, std::uint64_t>;

std::vector<CacheLevel> caches_from_counts(const std::map<CacheKey, int>& counts) {
  std::vector<CacheLevel> caches;
  for (const auto& [key, count] : counts) {
    caches.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), count});
  }
  return caches;
}

std::string trim(std::string text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  const auto last = text.find_last_not_of(" \t\r\n");
  return text.substr(first, last - first + 1);
}

std::string cpu_model_from_proc_cpuinfo() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    // x86 says "model name"; some ARM kernels say "Processor".
    if (line.rfind("model name", 0) == 0 || line.rfind("Processor", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return trim(line.substr(colon + 1));
    }
  }
  return "unknown";
}

// One integer from a sysfs file, or `fallback` when the file is missing or unreadable.
long read_sysfs_long(const std::string& path, long fallback) {
  std::ifstream in(path);
  long value = 0;
  return (in >> value) ? value : fallback;
}

std::string read_sysfs_string(const std::string& path) {
  std::ifstream in(path);
  std::string value;
  std::getline(in, value);
  return trim(value);
}

// "32K", "1024K", "32M" as sysfs writes cache sizes.
std::uint64_t parse_sysfs_size(const std::string& text) {
  if (text.empty()) return 0;
  std::uint64_t value = 0;
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') {
    value = value * 10 + static_cast<std::uint64_t>(text[digits] - '0');
    ++digits;
  }
  const char unit = digits < text.size() ? text[digits] : ' ';
  if (unit == 'K') return value << 10;
  if (unit == 'M') return value << 20;
  if (unit == 'G') return value << 30;
  return value;
}

std::string sysfs_cache_type(const std::string& type) {
  if (type == "Data") return "data";
  if (type == "Instruction") return "instruction";
  return "unified";
}

// Node numbers may have gaps, so count the node<N> folders rather than probing 0, 1, 2, ...
int count_numa_nodes() {
  std::error_code error;
  int nodes = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/sys/devices/system/node", error)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 4 && name.rfind("node", 0) == 0 &&
        name.find_first_not_of("0123456789", 4) == std::string::npos) {
      ++nodes;
    }
  }
  return nodes;
}

// The PUs (OS indices) this process may run on, in increasing order.
std::vector<int> allowed_pus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> pus;
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &set)) pus.push_back(cpu);
    }
  }
  if (pus.empty()) {
    const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
    for (int cpu = 0; cpu < std::max(1L, online); ++cpu) pus.push_back(cpu);
  }
  return pus;
}

#if CNNBENCH_HAVE_HWLOC

// The release of the loaded library (root info "hwlocVersion", set at load); the API version
// when the library doesn't say.
std::string hwloc_release(hwloc_topology_t handle) {
  const char* release = hwloc_obj_get_info_by_name(hwloc_get_root_obj(handle), "hwlocVersion");
  if (release) return release;
  const unsigned api = hwloc_get_api_version();
  return std::to_string(api >> 16) + "." + std::to_string((api >> 8) & 0xff) + "." +
         std::to_string(api & 0xff);
}

std::string hwloc_cache_type(hwloc_obj_cache_type_t type) {
  switch (type) {
    case HWLOC_OBJ_CACHE_DATA:
      return "data";
    case HWLOC_OBJ_CACHE_INSTRUCTION:
      return "instruction";
    default:
      return "unified";
  }
}

// The loaded hwloc topology stays alive for pinning; `summary` is what callers see.
struct HwlocMachine {
  hwloc_topology_t handle = nullptr;
  Topology summary;

  HwlocMachine() {
    if (hwloc_topology_init(&handle) != 0) fail("hwloc: cannot initialise a topology");
    // Restrict discovery to the process binding so that `cores` counts only usable cores
    // (disallowed cgroup CPUs are already left out by default).
    hwloc_topology_set_flags(
        handle, HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM | HWLOC_TOPOLOGY_FLAG_RESTRICT_TO_CPUBINDING);
    if (hwloc_topology_load(handle) != 0) {
      const int saved = errno;
      hwloc_topology_destroy(handle);
      fail(std::string("hwloc: cannot discover the machine topology: ") + std::strerror(saved));
    }
    summarize();
  }
  ~HwlocMachine() { hwloc_topology_destroy(handle); }
  HwlocMachine(const HwlocMachine&) = delete;
  HwlocMachine& operator=(const HwlocMachine&) = delete;

  int count(hwloc_obj_type_t type) const { return hwloc_get_nbobjs_by_type(handle, type); }

  void summarize() {
    summary.source = "hwloc " + hwloc_release(handle);
    const hwloc_obj_t root = hwloc_get_root_obj(handle);
    const hwloc_obj_t package = hwloc_get_obj_by_type(handle, HWLOC_OBJ_PACKAGE, 0);
    const char* model = package ? hwloc_obj_get_info_by_name(package, "CPUModel") : nullptr;
    if (!model) model = hwloc_obj_get_info_by_name(root, "CPUModel");
    summary.cpu_model = model ? trim(model) : cpu_model_from_proc_cpuinfo();
    summary.packages = std::max(1, count(HWLOC_OBJ_PACKAGE));
    summary.numa_nodes = std::max(1, count(HWLOC_OBJ_NUMANODE));
    summary.pus = count(HWLOC_OBJ_PU);

    // Some virtual machines report no cores; then every PU is its own core.
    const hwloc_obj_type_t core_type = count(HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    for (hwloc_obj_t core = nullptr;
         (core = hwloc_get_next_obj_by_type(handle, core_type, core)) != nullptr;) {
      std::vector<int> pus;
      for (hwloc_obj_t pu = nullptr; (pu = hwloc_get_next_obj_inside_cpuset_by_type(
                                          handle, core->cpuset, HWLOC_OBJ_PU, pu)) != nullptr;) {
        pus.push_back(static_cast<int>(pu->os_index));
      }
      if (!pus.empty()) summary.core_pus.push_back(std::move(pus));
    }
    summary.cores = static_cast<int>(summary.core_pus.size());
    CNNBENCH_CHECK(summary.cores > 0, "hwloc: the topology has no usable processing unit");

    std::map<CacheKey, int> caches;
    for (int depth = 0; depth < hwloc_topology_get_depth(handle); ++depth) {
      const hwloc_obj_type_t type = hwloc_get_depth_type(handle, depth);
      if (!hwloc_obj_type_is_cache(type)) continue;
      for (hwloc_obj_t cache = nullptr;
           (cache = hwloc_get_next_obj_by_depth(handle, depth, cache)) != nullptr;) {
        const auto& attr = cache->attr->cache;
        ++caches[{static_cast<int>(attr.depth), hwloc_cache_type(attr.type), attr.size}];
      }
    }
    summary.caches = caches_from_counts(caches);
  }
};

const HwlocMachine& hwloc_machine() {
  static const HwlocMachine machine;
  return machine;
}

#endif  // CNNBENCH_HAVE_HWLOC

}  // namespace

Topology sysfs_topology() {
  Topology topology;
  topology.source = "sysconf";
  topology.cpu_model = cpu_model_from_proc_cpuinfo();
  const std::string cpu_dir = "/sys/devices/system/cpu/cpu";

  // Group the allowed PUs by (package, core id); without sysfs each PU is a core.
  std::map<std::pair<long, long>, std::vector<int>> cores;
  std::set<long> packages;
  std::map<CacheKey, int> caches;
  std::set<std::tuple<int, std::string, std::string>> seen_caches;  // (level, type, shared list)
  for (const int pu : allowed_pus()) {
    const std::string dir = cpu_dir + std::to_string(pu);
    const long package = read_sysfs_long(dir + "/topology/physical_package_id", 0);
    const long core = read_sysfs_long(dir + "/topology/core_id", pu);
    packages.insert(package);
    cores[{package, core}].push_back(pu);
    for (int index = 0;; ++index) {
      const std::string cache = dir + "/cache/index" + std::to_string(index);
      const long level = read_sysfs_long(cache + "/level", -1);
      if (level < 0) break;
      const std::string type = sysfs_cache_type(read_sysfs_string(cache + "/type"));
      const std::string shared = read_sysfs_string(cache + "/shared_cpu_list");
      if (!seen_caches.insert({static_cast<int>(level), type, shared}).second) continue;
      const std::uint64_t bytes = parse_sysfs_size(read_sysfs_string(cache + "/size"));
      ++caches[{static_cast<int>(level), type, bytes}];
    }
  }
  // Cores ordered by package, then by first PU, as hwloc numbers them logically.
  std::vector<std::pair<long, std::vector<int>>> ordered;
  for (auto& [key, pus] : cores) {
    std::sort(pus.begin(), pus.end());
    ordered.emplace_back(key.first, pus);
  }
  std::sort(ordered.begin(), ordered.end());
  for (auto& [package, pus] : ordered) {
    topology.pus += static_cast<int>(pus.size());
    topology.core_pus.push_back(std::move(pus));
  }
  topology.cores = static_cast<int>(topology.core_pus.size());
  topology.packages = std::max<int>(1, static_cast<int>(packages.size()));

  topology.numa_nodes = std::max(1, count_numa_nodes());
  topology.caches = caches_from_counts(caches);
  return topology;
}

std::string hwloc_version_string() {
#if CNNBENCH_HAVE_HWLOC
  return hwloc_release(hwloc_machine().handle);
#else
  return "";
#endif
}

const Topology& machine_topology() {
#if CNNBENCH_HAVE_HWLOC
  return hwloc_machine().summary;
#else
  static const Topology topology = sysfs_topology();
  return topology;
#endif
}

// nlohmann::json's conversion of one cache level (found by argument-dependent lookup), so that
// topology.caches converts as a whole.
void to_json(nlohmann::json& json, const CacheLevel& cache) {
  json = {{"level", cache.level},
          {"type", cache.type},
          {"bytes", cache.bytes},
          {"count", cache.count}};
}

nlohmann::json topology_json(const Topology& topology) {
  return {{"source", topology.source},     {"cpu_model", topology.cpu_model},
          {"packages", topology.packages}, {"numa_nodes", topology.numa_nodes},
          {"cores", topology.cores},       {"pus", topology.pus},
          {"core_pus", topology.core_pus}, {"caches", topology.caches}};
}

int pin_current_thread(int core) {
  if (core < 0)
    fail("cannot pin a thread to core " + std::to_string(core) + ": cores count from 0");
  const Topology& topology = machine_topology();
  const int logical_core = core % topology.cores;
  const int pu = topology.core_pus[static_cast<std::size_t>(logical_core)].front();
  const auto refuse = [&](int error) {
    fail("cannot pin a thread to core " + std::to_string(core) + " (logical core " +
         std::to_string(logical_core) + ", PU " + std::to_string(pu) +
         "): " + std::strerror(error));
  };
#if CNNBENCH_HAVE_HWLOC
  // One PU, not the whole core, so the thread never migrates between hyperthreads.
  hwloc_bitmap_t target = hwloc_bitmap_alloc();
  hwloc_bitmap_only(target, static_cast<unsigned>(pu));
  const int status = hwloc_set_cpubind(hwloc_machine().handle, target, HWLOC_CPUBIND_THREAD);
  const int saved = errno;
  hwloc_bitmap_free(target);
  if (status != 0) refuse(saved);
#else
  cpu_set_t target;
  CPU_ZERO(&target);
  CPU_SET(pu, &target);
  const int status = ::pthread_setaffinity_np(::pthread_self(), sizeof(target), &target);
  if (status != 0) refuse(status);
#endif
  return pu;
}

AffinityGuard::AffinityGuard() : thread_(::pthread_self()) {
  static_assert(sizeof(pthread_t) <= sizeof(thread_));
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (::pthread_getaffinity_np(::pthread_self(), sizeof(mask), &mask) == 0) {
    mask_.resize(sizeof(mask));
    std::memcpy(mask_.data(), &mask, sizeof(mask));
  }
}

AffinityGuard::~AffinityGuard() {
  if (mask_.empty()) return;
  cpu_set_t mask;
  std::memcpy(&mask, mask_.data(), sizeof(mask));
  ::pthread_setaffinity_np(static_cast<pthread_t>(thread_), sizeof(mask), &mask);
}

int current_cpu() { return ::sched_getcpu(); }

nlohmann::json pin_map_json(const std::vector<PinRecord>& records) {
  // Indices stay integers, -1 meaning "not pinned" or "not known", as the report schema says.
  nlohmann::json map = nlohmann::json::array();
  for (const auto& record : records) {
    map.push_back({{"worker", record.worker},
                   {"core", record.core},
                   {"pu", record.pu},
                   {"observed_cpu", record.observed_cpu}});
  }
  return map;
}

}  // namespace cnnbench
