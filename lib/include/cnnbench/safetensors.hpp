// safetensors files (8-byte little-endian header length, JSON header, raw little-endian data)
// and cnnbench checkpoints on top of them, readable by PyTorch's safetensors.torch.load_file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cnnbench/models.hpp"

namespace cnnbench {

struct Tensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> data;  // F32 only
};

struct SafetensorsFile {
  std::vector<Tensor> tensors;                    // in file order
  std::map<std::string, std::string> metadata;    // "__metadata__" (string -> string)
  const Tensor* find(const std::string& name) const;
};

// Writes atomically (temp file + rename). Tensors are laid out in the given order.
void write_safetensors(const std::filesystem::path& file, const SafetensorsFile& content);
// Strict reader: header length within the file and below 100 MB, valid JSON object, dtype F32,
// shapes non-negative, data_offsets [begin,end) inside the data section, sized as the shape says,
// no overlaps, no gaps, every byte of the file accounted for. Malformed input -> FormatError.
SafetensorsFile read_safetensors(const std::filesystem::path& file);

// Where a training run stands, saved with the weights so that --resume continues exactly.
struct TrainProgress {
  std::int64_t global_step = 0;  // optimizer steps done
  std::uint64_t seed = 0;
  std::int64_t batch = 0;
  std::int64_t steps_per_epoch = 0;
};

// Tensors: PyTorch names for the parameters ("f1.weight", ...), "momentum.<name>" for the SGD
// buffers; __metadata__: format, model, progress. PyTorch loads the parameters with
// {k: v for k, v in load_file(f).items() if not k.startswith("momentum.")}.
void save_checkpoint(const std::filesystem::path& file, const Model& model,
                     const TrainProgress& progress);
// Loads into model (which must be of the checkpoint's kind: Error otherwise, naming both).
// Files without momentum tensors (e.g. written by PyTorch) load with zero momentum.
TrainProgress load_checkpoint(const std::filesystem::path& file, Model& model);

}  // namespace cnnbench
