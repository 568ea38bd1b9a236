// The sweep's launched command lines. The training flags come from TrainConfig::to_argv, so that a
// launched point runs exactly the config an in-process point would.
#include "launcher.hpp"

#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <sstream>

#include "cnnbench/core.hpp"

namespace cnnbench {

namespace {

// The file `command` runs: itself when it names a path, else the first executable of that name
// in PATH.
std::optional<std::filesystem::path> find_program(const std::string& command) {
  if (command.find('/') != std::string::npos) {
    if (::access(command.c_str(), X_OK) == 0) return std::filesystem::path(command);
    return std::nullopt;
  }
  const char* path = std::getenv("PATH");
  std::istringstream folders(path != nullptr ? path : "");
  for (std::string folder; std::getline(folders, folder, ':');) {
    const std::filesystem::path candidate = std::filesystem::path(folder.empty() ? "." : folder) / command;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

bool names_mpi_plugin(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--mpi" || arg.rfind("--mpi=", 0) == 0) return true;
  }
  return false;
}

}  // namespace

int slurm_allocation_cpus() {
  const char* value = std::getenv("SLURM_JOB_CPUS_PER_NODE");
  if (value == nullptr) return 0;
  // Comma-separated groups, each CPUS or CPUS(xNODES).
  std::istringstream groups(value);
  long long total = 0;
  for (std::string group; std::getline(groups, group, ',');) {
    std::size_t used = 0;
    long long cpus = 0, nodes = 1;
    try {
      cpus = std::stoll(group, &used);
      if (used < group.size()) {
        if (group.compare(used, 2, "(x") != 0 || group.back() != ')') return 0;
        std::size_t digits = 0;
        nodes = std::stoll(group.substr(used + 2), &digits);
        if (used + 2 + digits + 1 != group.size()) return 0;
      }
    } catch (const std::exception&) {
      return 0;
    }
    if (cpus < 1 || nodes < 1) return 0;
    total += cpus * nodes;
    if (total > 1 << 30) return 0;
  }
  return static_cast<int>(total);
}

void Launcher::check_usable() const {
  if (options_.launcher_kind != LauncherKind::srun) return;
  if (!find_program(options_.launcher)) {
    fail("--launcher srun: " + options_.launcher +
         " not found (install Slurm's client, or give srun's path with --srun)");
  }
  if (std::getenv("SLURM_JOB_ID") == nullptr) {
    fail("--launcher srun: not inside a Slurm allocation (SLURM_JOB_ID is unset): run the sweep "
         "from an sbatch script (scripts/slurm/cnnbench-sweep.sbatch) or under salloc");
  }
}

std::vector<std::string> Launcher::launcher_words(int ranks, int cores_per_rank) const {
  return options_.launcher_kind == LauncherKind::srun ? srun_words(ranks, cores_per_rank)
                                                      : mpirun_words(ranks, cores_per_rank);
}

// Open MPI's mpirun gets --bind-to none (the strategy pins its own threads), --allow-run-as-root
// as root and --oversubscribe when the job needs more cores than this machine has; then
// --mpirun-args, --hostfile and -np.
std::vector<std::string> Launcher::mpirun_words(int ranks, int cores_per_rank) const {
  std::vector<std::string> words = {options_.launcher};
  const std::string name = std::filesystem::path(options_.launcher).filename().string();
  if (name == "mpirun" || name == "mpiexec" || name == "orterun") {
    words.insert(words.end(), {"--bind-to", "none"});
    if (::geteuid() == 0) words.push_back("--allow-run-as-root");
    if (!options_.hostfile && ranks * cores_per_rank > machine_cores_) {
      words.push_back("--oversubscribe");
    }
  }
  words.insert(words.end(), options_.launcher_args.begin(), options_.launcher_args.end());
  if (options_.hostfile) words.insert(words.end(), {"--hostfile", options_.hostfile->string()});
  words.insert(words.end(), {"-np", std::to_string(ranks)});
  return words;
}

// srun starts the ranks as one step of the allocation: --mpi=pmix (what Open MPI's ranks
// initialise through) unless --srun-args names an MPI plugin, --cpus-per-task for a rank's
// threads, and --overcommit when the step needs more CPUs than the allocation has and the sweep
// was given --oversubscribe (srun refuses such a step otherwise); then --srun-args.
std::vector<std::string> Launcher::srun_words(int ranks, int cores_per_rank) const {
  std::vector<std::string> words = {options_.launcher};
  if (!names_mpi_plugin(options_.launcher_args)) words.push_back("--mpi=pmix");
  words.insert(words.end(), {"-n", std::to_string(ranks)});
  if (cores_per_rank > 1) words.insert(words.end(), {"--cpus-per-task", std::to_string(cores_per_rank)});
  const int cpus = slurm_allocation_cpus();
  if (options_.oversubscribe && cpus > 0 && ranks * cores_per_rank > cpus) {
    words.push_back("--overcommit");
  }
  words.insert(words.end(), options_.launcher_args.begin(), options_.launcher_args.end());
  return words;
}

LaunchRecord Launcher::record(const std::vector<std::string>& command) const {
  return {launcher_kind_name(options_.launcher_kind), command};
}

std::vector<std::string> Launcher::train(const TrainConfig& config, int ranks,
                                         const std::filesystem::path& report) const {
  std::vector<std::string> args = launcher_words(ranks, config.threads);
  args.insert(args.end(), {options_.self.string(), "train"});
  for (std::string& word : to_argv(config)) args.push_back(std::move(word));
  if (options_.data_dir) {
    args.insert(args.end(), {"--data", options_.data_dir->string()});
  } else {
    args.insert(args.end(), {"--synthetic", std::to_string(options_.synthetic_samples)});
  }
  args.insert(args.end(), {"--quiet", "--report", report.string(), "--isa", options_.isa});
  if (options_.oversubscribe) args.push_back("--oversubscribe");
  return args;
}

std::vector<std::string> Launcher::allreduce_bench(int ranks,
                                                   const std::filesystem::path& report) const {
  std::vector<std::string> args = launcher_words(ranks, 1);
  // The call the cluster strategy makes for every bucket: an in-place MPI_Iallreduce that libnbc
  // runs as the ring (mpi_rank_group.cpp), so the fit is the link as the points use it. Open
  // MPI's blocking choice above 256 KiB, Rabenseifner, ran at 0.7 of the ring's rate over
  // emulated 100mbit hosts (docs/cluster.md, "The costs").
  args.insert(args.end(), {options_.self.string(), "allreduce-bench", "--nonblocking", "--algorithm", "ring",
                           "--report", report.string()});
  return args;
}

std::vector<std::string> Launcher::time_to_accuracy(int ranks, int cores_per_rank,
                                                    const std::filesystem::path& job,
                                                    const std::filesystem::path& result) const {
  std::vector<std::string> args = launcher_words(ranks, cores_per_rank);
  args.insert(args.end(), {options_.self.string(), "sweep", "--tta-job", job.string(),
                           "--tta-out", result.string()});
  return args;
}

}  // namespace cnnbench
