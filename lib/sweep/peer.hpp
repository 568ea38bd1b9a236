// The PyTorch peers of the sweep's strategies (docs/design.md, "Peer strategies"): pytorch (one
// process, `cores` threads) and pytorch-ddp (`nodes` processes under DistributedDataParallel over
// gloo on 127.0.0.1), each repetition one run of bench/torch_peer.py on the sweep's own initial
// weights, data and sample order, so that a peer point trains the function its serial point does.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cnnbench/data.hpp"
#include "cnnbench/sweep.hpp"
#include "cnnbench/train.hpp"

namespace cnnbench {

// "pytorch" and "pytorch-ddp".
const std::vector<std::string>& peer_strategy_names();
bool is_peer_strategy(const std::string& strategy);

// Whether `python` imports torch and the worker script is found (run in `scratch`); the reason
// and how to add the peers when not.
StrategyInfo peer_strategy_info(const std::string& strategy, const std::string& python,
                                const std::filesystem::path& scratch);

// The files a peer run reads, written once per sweep into a folder of the scratch folder: the
// training set (and the test set of time to accuracy) as IDX files, each model's initial
// weights, and the sample order of as many steps as asked for so far.
class PeerFiles {
 public:
  PeerFiles(const SweepOptions& options, const Dataset& train, std::filesystem::path folder);
  std::filesystem::path data() const { return folder_; }
  std::filesystem::path init(ModelKind model);
  std::filesystem::path order(std::int64_t steps);

 private:
  const SweepOptions& options_;
  const Dataset& train_;
  std::filesystem::path folder_;
  std::int64_t order_steps_ = 0;
  bool inits_[2] = {false, false};
};

// The worker's command line for one repetition of `point` (`steps` steps; a time to accuracy run
// when target_accuracy > 0, `steps` then being its limit).
std::vector<std::string> peer_command(const SweepOptions& options, PeerFiles& files,
                                      const PointSpec& point, std::int64_t steps,
                                      double target_accuracy = 0);

}  // namespace cnnbench
