// safetensors files (8-byte little-endian header length, JSON header, raw little-endian data),
// readable by PyTorch's safetensors.torch.load_file. Checkpoints on top of them: checkpoint.hpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

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

// Writes through write_output (atomic for a regular file). Tensors are laid out in the given order.
void write_safetensors(const std::filesystem::path& file, const SafetensorsFile& content);
// Strict reader: header length within the file and below 100 MB, valid JSON object, dtype F32,
// shapes non-negative, data_offsets [begin,end) inside the data section, sized as the shape says,
// no overlaps, no gaps, every byte of the file accounted for. Malformed input -> FormatError.
SafetensorsFile read_safetensors(const std::filesystem::path& file);

}  // namespace cnnbench
