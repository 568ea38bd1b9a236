// cnnbench checkpoints: the model's parameters under PyTorch's names, the SGD momentum under
// "momentum.<name>", and the training progress in __metadata__, all in one safetensors file.
#include <algorithm>
#include <array>
#include <charconv>
#include <string>
#include <type_traits>

#include "cnnbench/core.hpp"
#include "cnnbench/checkpoint.hpp"
#include "cnnbench/safetensors.hpp"

namespace cnnbench {

namespace {

constexpr const char* kFormat = "cnnbench-checkpoint-1";
constexpr const char* kMomentumPrefix = "momentum.";

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

Tensor copy_out(const std::string& name, const ParamTensor& spec, const float* buffer) {
  return Tensor{
      .name = name,
      .shape = spec.shape,
      .data = std::vector<float>(buffer + spec.offset, buffer + spec.offset + spec.count)};
}

// The model a file holds: its "model" metadata, or for files without it (PyTorch's), the
// tensor names: only LeNet-5 has c1.*, both have f1.*.
ModelKind checkpoint_model(const std::filesystem::path& file, const SafetensorsFile& content) {
  const auto model = content.metadata.find("model");
  if (model != content.metadata.end()) {
    try {
      return parse_model(model->second);
    } catch (const Error& e) {
      fail(file.string() + ": __metadata__ \"model\": " + e.what());
    }
  }
  if (content.find("c1.weight")) return ModelKind::lenet5;
  if (content.find("f1.weight")) return ModelKind::fc3;
  fail(file.string() +
       ": not an FC-3 or LeNet-5 checkpoint: it has neither c1.weight nor f1.weight");
}

template <class Number>
Number metadata_number(const std::filesystem::path& file, const SafetensorsFile& content,
                       const std::string& key) {
  const auto it = content.metadata.find(key);
  if (it == content.metadata.end()) return 0;
  const std::string& text = it->second;
  Number value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) {
    fail(file.string() + ": __metadata__ \"" + key + "\" should be " +
         (std::is_integral_v<Number> ? "an integer" : "a number") + ", found \"" + text + "\"");
  }
  return value;
}

// The tensor `name` of the file, checked against the shape the model expects.
const Tensor* matching_tensor(const std::filesystem::path& file, const SafetensorsFile& content,
                              const std::string& name, const ParamTensor& spec) {
  const Tensor* t = content.find(name);
  if (t && t->shape != spec.shape) {
    fail(file.string() + ": tensor '" + name + "' has shape " + shape_text(t->shape) +
         ", expected " + shape_text(spec.shape));
  }
  return t;
}

}  // namespace

std::string float_text(float value) {
  std::array<char, 32> text{};
  const auto [end, error] = std::to_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() ? std::string(text.data(), end) : std::to_string(value);
}

void save_checkpoint(const std::filesystem::path& file, const Model& model,
                     const TrainProgress& progress) {
  const ModelSpec& spec = model.spec();
  SafetensorsFile content;
  for (const ParamTensor& t : spec.tensors)
    content.tensors.push_back(copy_out(t.name, t, model.params.data()));
  for (const ParamTensor& t : spec.tensors) {
    content.tensors.push_back(copy_out(kMomentumPrefix + t.name, t, model.momentum.data()));
  }
  content.metadata = {{"format", kFormat},
                      {"model", model_name(model.kind)},
                      {"global_step", std::to_string(progress.global_step)},
                      {"seed", std::to_string(progress.seed)},
                      {"batch", std::to_string(progress.batch)},
                      {"steps_per_epoch", std::to_string(progress.steps_per_epoch)}};
  if (progress.sgd) {
    content.metadata["lr"] = float_text(progress.sgd->lr);
    content.metadata["momentum"] = float_text(progress.sgd->momentum);
    content.metadata["weight_decay"] = float_text(progress.sgd->weight_decay);
  }
  if (!progress.data.empty()) content.metadata["data"] = progress.data;
  // Recorded only when sharded, so an unsharded checkpoint is what it always was.
  if (progress.shards != 1) content.metadata["shards"] = std::to_string(progress.shards);
  write_safetensors(file, content);
}

TrainProgress load_checkpoint(const std::filesystem::path& file, Model& model) {
  const SafetensorsFile content = read_safetensors(file);
  const auto format = content.metadata.find("format");
  if (format != content.metadata.end() && format->second != kFormat) {
    fail(file.string() + ": __metadata__ \"format\" is \"" + format->second + "\", expected \"" +
         kFormat + "\"");
  }
  const ModelKind kind = checkpoint_model(file, content);
  if (kind != model.kind) {
    fail(file.string() + ": checkpoint holds model " + model_name(kind) + ", expected model " +
         model_name(model.kind) + " (pass --model " + model_name(kind) + ")");
  }

  // Validate everything before touching the model, so a failed load leaves it as it was.
  const ModelSpec& spec = model.spec();
  std::vector<const Tensor*> params, momenta;
  for (const ParamTensor& t : spec.tensors) {
    const Tensor* param = matching_tensor(file, content, t.name, t);
    if (!param) fail(file.string() + ": tensor '" + t.name + "' is missing");
    params.push_back(param);
    momenta.push_back(matching_tensor(file, content, kMomentumPrefix + t.name, t));
  }
  const auto present = std::count_if(momenta.begin(), momenta.end(), [](auto* t) { return t; });
  if (present != 0 && present != static_cast<std::ptrdiff_t>(momenta.size())) {
    for (std::size_t i = 0; i < momenta.size(); ++i) {
      if (!momenta[i]) {
        fail(file.string() + ": tensor '" + kMomentumPrefix + spec.tensors[i].name +
             "' is missing (the file has some momentum tensors but not all)");
      }
    }
  }
  for (const Tensor& t : content.tensors) {
    const std::string base = t.name.starts_with(kMomentumPrefix)
                                 ? t.name.substr(std::string(kMomentumPrefix).size())
                                 : t.name;
    const bool known = std::any_of(spec.tensors.begin(), spec.tensors.end(),
                                   [&](const ParamTensor& p) { return p.name == base; });
    if (!known) {
      fail(file.string() + ": unexpected tensor '" + t.name + "' for model " +
           model_name(model.kind));
    }
  }
  TrainProgress progress;
  progress.global_step = metadata_number<std::int64_t>(file, content, "global_step");
  progress.seed = metadata_number<std::uint64_t>(file, content, "seed");
  progress.batch = metadata_number<std::int64_t>(file, content, "batch");
  progress.steps_per_epoch = metadata_number<std::int64_t>(file, content, "steps_per_epoch");
  if (content.metadata.count("lr") != 0) {
    progress.sgd = SgdConfig{metadata_number<float>(file, content, "lr"),
                             metadata_number<float>(file, content, "momentum"),
                             metadata_number<float>(file, content, "weight_decay")};
  }
  if (const auto data = content.metadata.find("data"); data != content.metadata.end()) {
    progress.data = data->second;
  }
  if (content.metadata.count("shards") != 0) {
    progress.shards = metadata_number<std::int64_t>(file, content, "shards");
  }

  for (std::size_t i = 0; i < spec.tensors.size(); ++i) {
    const ParamTensor& t = spec.tensors[i];
    std::copy(params[i]->data.begin(), params[i]->data.end(), model.params.begin() + t.offset);
    if (momenta[i]) {
      std::copy(momenta[i]->data.begin(), momenta[i]->data.end(),
                model.momentum.begin() + t.offset);
    } else {
      std::fill_n(model.momentum.begin() + t.offset, t.count, 0.0f);
    }
  }
  return progress;
}

}  // namespace cnnbench
