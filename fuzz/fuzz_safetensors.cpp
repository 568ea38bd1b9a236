// libFuzzer target for the safetensors reader and the checkpoint loader on top of it: any bytes
// either load or throw cnnbench::Error; what loads writes back and re-reads to the same tensors.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cnnbench/core.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/checkpoint.hpp"
#include "cnnbench/safetensors.hpp"
#include "fuzz_input_file.hpp"

namespace {

bool same_tensors(const cnnbench::SafetensorsFile& a, const cnnbench::SafetensorsFile& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    const cnnbench::Tensor& x = a.tensors[i];
    const cnnbench::Tensor& y = b.tensors[i];
    // Bytes, not float ==: NaN payloads must survive too.
    if (x.name != y.name || x.shape != y.shape || x.data.size() != y.data.size()) return false;
    if (!x.data.empty() &&
        std::memcmp(x.data.data(), y.data.data(), x.data.size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const cnnbench::fuzz::InputFile file("input.safetensors");
  static const cnnbench::fuzz::InputFile rewritten("rewritten.safetensors");
  const auto content =
      file.read_back(data, size, [](const auto& path) { return cnnbench::read_safetensors(path); });
  if (!content) return 0;
  cnnbench::write_safetensors(rewritten.path(), *content);
  if (!same_tensors(*content, cnnbench::read_safetensors(rewritten.path()))) __builtin_trap();

  for (const cnnbench::ModelKind kind : {cnnbench::ModelKind::fc3, cnnbench::ModelKind::lenet5}) {
    cnnbench::Model model(kind);
    try {
      cnnbench::load_checkpoint(file.path(), model);
    } catch (const cnnbench::Error&) {
    }
  }
  return 0;
}
