// The command lines of the sweep's launched jobs: the MPI launcher's words, then this cnnbench
// binary running `train` (the config's own TrainConfig::to_argv), `allreduce-bench`, or one
// time-to-accuracy job.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "cnnbench/sweep.hpp"
#include "cnnbench/train.hpp"

namespace cnnbench {

class Launcher {
 public:
  Launcher(const SweepOptions& options, int machine_cores)
      : options_(options), machine_cores_(machine_cores) {}

  // `cnnbench train` of config on `ranks` ranks, writing its run report to `report`.
  std::vector<std::string> train(const TrainConfig& config, int ranks,
                                 const std::filesystem::path& report) const;
  // `cnnbench allreduce-bench` on `ranks` ranks, one thread each.
  std::vector<std::string> allreduce_bench(int ranks, const std::filesystem::path& report) const;
  // One time-to-accuracy job (TimeToAccuracyJob as JSON in job) on `ranks` ranks.
  std::vector<std::string> time_to_accuracy(int ranks, int cores_per_rank,
                                            const std::filesystem::path& job,
                                            const std::filesystem::path& result) const;

 private:
  std::vector<std::string> launcher_words(int ranks, int cores_per_rank) const;

  const SweepOptions& options_;
  int machine_cores_ = 1;
};

}  // namespace cnnbench
