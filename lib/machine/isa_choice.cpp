// `--isa best`'s cache: the measured choice of each kernel family's target, one file per CPU
// identity and build under $XDG_CACHE_HOME/cnnbench/ (a home folder shared by the nodes of a
// mixed cluster keeps one file per kind of node). The file repeats its identity, which must match.
#include "cnnbench/isa_choice.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>

#include "cnnbench/config.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/cpu_identity.hpp"
#include "core/git_revision.hpp"


namespace cnnbench {

namespace {

namespace fs = std::filesystem;

// What a measured choice holds for: the CPU (as the report names it, without its clock), the
// build, and OpenBLAS's kernel set (dense layers run on sgemm by rules that read it).
nlohmann::json cache_identity() {
  nlohmann::json cpu = cpu_identity_json(this_cpu());
  cpu.erase("mhz_nominal");
  cpu.erase("mhz_current");
  return {{"cpu", cpu},
          {"build",
           {{"version", CNNBENCH_VERSION},
            {"git_sha", build::git_sha},
            {"git_dirty", build::git_dirty},
            {"compiled", isa_info().compiled}}},
          {"openblas_core_type", blas_core_name()}};
}

// FNV-1a: a file name that is the same in every build and on every machine.
std::string identity_hash(const std::string& text) {
  std::uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  return hex;
}

std::optional<fs::path> cache_folder() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && *xdg == '/') return fs::path(xdg) / "cnnbench";
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home != 0) return fs::path(home) / ".cache" / "cnnbench";
  return std::nullopt;
}

bool cache_enabled() {
  const char* setting = std::getenv("CNNBENCH_ISA_CACHE");
  return setting == nullptr || std::string(setting) != "off";
}

double epoch_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void note(const std::string& text) { std::fprintf(stderr, "cnnbench: %s\n", text.c_str()); }

nlohmann::json targets_json(const KernelTargets& targets) {
  nlohmann::json kernels = nlohmann::json::object();
  for (KernelFamily family : kernel_families) {
    kernels[kernel_family_name(family)] = targets[static_cast<std::size_t>(family)];
  }
  return kernels;
}

// The cached choice, or nothing with the reason (empty when there is simply no file yet).
std::optional<KernelChoice> read_cache(const fs::path& file, const nlohmann::json& identity,
                                       std::string& why_not) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json cached = nlohmann::json::parse(text.str(), nullptr, false);
  if (cached.is_discarded() || !cached.is_object() || !cached.contains("kernels") ||
      !cached.at("kernels").is_object()) {
    why_not = "it is not a kernel choice (corrupt)";
    return std::nullopt;
  }
  if (cached.value("identity", nlohmann::json()) != identity) {
    why_not = "it was measured on another CPU, build or OpenBLAS kernel set";
    return std::nullopt;
  }
  if (cached.value("busy", false)) {
    // A busy calibration's marker: the default until it lapses, then a measurement again.
    const double until = cached.value("busy_until_epoch_s", 0.0);
    if (!(until > epoch_seconds())) return std::nullopt;
    KernelChoice choice = highest_kernel_choice();
    choice.how = "busy";
    choice.calibration_ms = cached.value("calibration_ms", 0.0);
    choice.measured_at = cached.value("measured_at", "");
    return choice;
  }
  KernelChoice choice;
  for (KernelFamily family : kernel_families) {
    const nlohmann::json target = cached.at("kernels").value(kernel_family_name(family), nlohmann::json());
    const std::string name = target.is_string() ? target.get<std::string>() : "";
    if (name.empty() || name == "best" || name == "highest" || !isa_problem(name).empty()) {
      why_not = std::string("its ") + kernel_family_name(family) + " target is not one this CPU runs";
      return std::nullopt;
    }
    choice.targets[static_cast<std::size_t>(family)] = name;
  }
  choice.how = "cached";
  choice.calibration_ms = cached.value("calibration_ms", 0.0);
  const nlohmann::json when = cached.value("measured_at", nlohmann::json());
  choice.measured_at = when.is_string() ? when.get<std::string>() : "";
  return choice;
}

// The calibration, or (busy) a marker that keeps the default until busy_retry_seconds from now.
void write_cache(const fs::path& file, const nlohmann::json& identity, const Calibration& calibration) {
  const KernelChoice& choice = calibration.choice;
  nlohmann::json cached = {{"identity", identity},
                           {"kernels", targets_json(choice.targets)},
                           {"calibration_ms", choice.calibration_ms},
                           {"measured_at", choice.measured_at},
                           {"families", calibration_json(calibration)}};
  if (calibration.busy()) {
    cached["busy"] = true;
    cached["busy_until_epoch_s"] = epoch_seconds() + busy_retry_seconds;
  }
  try {
    write_output(file, cached.dump(2) + "\n");
  } catch (const Error& e) {
    note("cannot cache the kernel choice, so every run measures it: " + std::string(e.what()));
  }
}

// An exclusive lock on `file` for as long as it lives, or none when the file cannot be opened
// (an unwritable folder): the processes of one start (the ranks of a cluster run on one node)
// then measure one after the other, and all but the first find the first one's choice cached.
class CacheLock {
 public:
  explicit CacheLock(const fs::path& file) {
    std::error_code ignored;
    fs::create_directories(file.parent_path(), ignored);
    fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~CacheLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;

 private:
  int fd_ = -1;
};

// The cache file of this CPU, build and kernel set (and its identity), or none when caching is off
// or there is no home for it.
struct CacheFile {
  fs::path file, lock;
  nlohmann::json identity;
};
std::optional<CacheFile> cache_file() {
  const std::optional<fs::path> folder = cache_enabled() ? cache_folder() : std::nullopt;
  if (!folder) return std::nullopt;
  CacheFile cache;
  cache.identity = cache_identity();
  const std::string name = "kernel-choice-" + identity_hash(cache.identity.dump());
  cache.file = *folder / (name + ".json");
  cache.lock = *folder / (name + ".lock");
  return cache;
}

void note_busy(const Calibration& calibration) {
  double worst = 0;
  int counted = min_counted_rounds;
  for (const FamilyCalibration& f : calibration.families) {
    worst = std::max(worst, f.noise);
    counted = std::min(counted, f.counted_rounds);
  }
  char text[400];
  std::snprintf(text, sizeof text,
                "the machine is too busy to time the kernels (%d quiet rounds of %d needed, the "
                "default target against itself %.1f%% apart in a round, at most %.0f%% allowed): this run "
                "uses the highest target, %s; `cnnbench calibrate` measures again",
                counted, min_counted_rounds, 100 * worst, 100 * busy_noise,
                isa_info().highest.c_str());
  note(text);
}

// The cached choice when there is a good one, else one measured now (and cached).
KernelChoice cached_or_measured_choice() {
  const std::optional<CacheFile> cache = cache_file();
  if (!cache) {
    const Calibration calibration = calibrate_kernels(calibration_budget_ms);
    if (calibration.busy()) note_busy(calibration);
    return calibration.choice;
  }
  const CacheLock lock(cache->lock);
  std::string why_not;
  if (auto cached = read_cache(cache->file, cache->identity, why_not)) return *cached;
  if (!why_not.empty()) note("ignoring " + cache->file.string() + ": " + why_not + "; measuring again");
  const Calibration calibration = calibrate_kernels(calibration_budget_ms);
  if (calibration.busy()) note_busy(calibration);
  write_cache(cache->file, cache->identity, calibration);
  return calibration.choice;
}

// One choice per process: every later "best" takes the same kernels (and bits).
const KernelChoice& best_choice() {
  static const KernelChoice choice = cached_or_measured_choice();
  return choice;
}

}  // namespace

Calibration recalibrate_and_cache() {
  const std::optional<CacheFile> cache = cache_file();
  if (!cache) return calibrate_kernels(calibration_budget_ms);
  const CacheLock lock(cache->lock);
  const Calibration calibration = calibrate_kernels(calibration_budget_ms);
  if (!calibration.busy()) write_cache(cache->file, cache->identity, calibration);
  return calibration;
}

std::optional<std::string> kernel_cache_path() {
  const std::optional<CacheFile> cache = cache_file();
  if (!cache) return std::nullopt;
  return cache->file.string();
}

void use_isa(const std::string& name) {
  const std::string problem = isa_problem(name);
  CNNBENCH_CHECK(problem.empty(), problem);
  if (name == "best") return use_kernel_choice(best_choice(), name);
  if (name == "highest") return use_kernel_choice(highest_kernel_choice(), name);
  use_kernel_choice(forced_kernel_choice(name), name);
}

}  // namespace cnnbench
