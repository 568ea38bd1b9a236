// The sweep's launched command lines. The training flags come from TrainConfig::to_argv, so that a
// launched point runs exactly the config an in-process point would.
#include "launcher.hpp"

#include <unistd.h>

namespace cnnbench {

// Open MPI's mpirun gets --bind-to none (the strategy pins its own threads), --allow-run-as-root
// as root and --oversubscribe when the job needs more cores than this machine has; then
// --mpirun-args, --hostfile and -np.
std::vector<std::string> Launcher::launcher_words(int ranks, int cores_per_rank) const {
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
  args.insert(args.end(), {options_.self.string(), "allreduce-bench", "--report", report.string()});
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
