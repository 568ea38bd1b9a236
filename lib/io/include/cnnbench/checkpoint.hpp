// cnnbench checkpoints: a model's parameters and SGD momentum in a safetensors file, with where
// the training run stands, so that --resume continues exactly and PyTorch loads the weights.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "cnnbench/models.hpp"

namespace cnnbench {

// Where a training run stands, saved with the weights so that --resume continues exactly.
struct TrainProgress {
  std::int64_t global_step = 0;  // optimizer steps done
  std::uint64_t seed = 0;
  std::int64_t batch = 0;
  std::int64_t steps_per_epoch = 0;
  std::int64_t shards = 1;  // --shards: the sample order of N blocks (docs/design.md)
  // What the run trained with, so that a resumed run can say what it changed; files written
  // before these were recorded (and PyTorch's) have none.
  std::optional<SgdConfig> sgd{};
  std::string data{};  // the training set's source ("" when not recorded)
};

// The shortest text that reads back as the same float ("0.01", not "0.00999999978"): how the
// metadata records the SGD settings, and how messages name them.
std::string float_text(float value);

// Tensors: PyTorch names for the parameters ("f1.weight", ...), "momentum.<name>" for the SGD
// buffers; __metadata__: format, model, progress, SGD settings and data source. PyTorch loads the parameters with
// {k: v for k, v in load_file(f).items() if not k.startswith("momentum.")}.
void save_checkpoint(const std::filesystem::path& file, const Model& model,
                     const TrainProgress& progress);
// Loads into model (which must be of the checkpoint's kind: Error otherwise, naming both).
// Files without momentum tensors (e.g. written by PyTorch) load with zero momentum.
TrainProgress load_checkpoint(const std::filesystem::path& file, Model& model);

}  // namespace cnnbench
