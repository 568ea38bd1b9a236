// The command lines of the sweep's launched jobs: the launcher's words (mpirun's or srun's), then
// this cnnbench binary running `train` (the config's own TrainConfig::to_argv), `allreduce-bench`,
// or one time-to-accuracy job.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "cnnbench/records.hpp"
#include "cnnbench/sweep.hpp"
#include "cnnbench/train.hpp"

namespace cnnbench {

class Launcher {
 public:
  Launcher(const SweepOptions& options, int machine_cores)
      : options_(options), machine_cores_(machine_cores) {}

  // Error when the launcher cannot start jobs here: srun not found, or not inside a Slurm
  // allocation. mpirun is looked for when a job starts (a point that cannot start fails).
  void check_usable() const;

  // `cnnbench train` of config on `ranks` ranks, writing its run report to `report`.
  std::vector<std::string> train(const TrainConfig& config, int ranks,
                                 const std::filesystem::path& report) const;
  // `cnnbench allreduce-bench` on `ranks` ranks, one thread each.
  std::vector<std::string> allreduce_bench(int ranks, const std::filesystem::path& report) const;
  // One time-to-accuracy job (TimeToAccuracyJob as JSON in job) on `ranks` ranks.
  std::vector<std::string> time_to_accuracy(int ranks, int cores_per_rank,
                                            const std::filesystem::path& job,
                                            const std::filesystem::path& result) const;

  // What a report records of a job started with `command`.
  LaunchRecord record(const std::vector<std::string>& command) const;

 private:
  std::vector<std::string> launcher_words(int ranks, int cores_per_rank) const;
  std::vector<std::string> mpirun_words(int ranks, int cores_per_rank) const;
  std::vector<std::string> srun_words(int ranks, int cores_per_rank) const;

  const SweepOptions& options_;
  int machine_cores_ = 1;
};

}  // namespace cnnbench
