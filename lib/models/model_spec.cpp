// Parameter layouts of FC-3 and LeNet-5 (PyTorch's names, shapes and state_dict order), the flat
// buffers, PyTorch-style initialisation and the SGD update.
#include <algorithm>
#include <cmath>

#include "cnnbench/models.hpp"

namespace cnnbench {

namespace {

struct LayerShape {
  std::string name;
  std::vector<std::int64_t> weight_shape;  // bias shape is weight_shape[0]
};

ModelSpec build_spec(ModelKind kind, const std::vector<LayerShape>& layers, double train_flops,
                     double forward_flops) {
  ModelSpec spec;
  spec.kind = kind;
  for (const auto& layer : layers) {
    std::int64_t fan_in = 1;
    for (std::size_t d = 1; d < layer.weight_shape.size(); ++d) fan_in *= layer.weight_shape[d];
    const std::int64_t out = layer.weight_shape[0];
    for (const bool is_weight : {true, false}) {
      ParamTensor t;
      t.name = layer.name + (is_weight ? ".weight" : ".bias");
      t.shape = is_weight ? layer.weight_shape : std::vector<std::int64_t>{out};
      t.count = static_cast<std::size_t>(is_weight ? out * fan_in : out);
      t.offset = spec.param_count;
      t.fan_in = static_cast<int>(fan_in);
      spec.param_count += t.count;
      spec.tensors.push_back(std::move(t));
    }
  }
  spec.train_flops_per_image = train_flops;
  spec.forward_flops_per_image = forward_flops;
  return spec;
}

// Multiply-adds counted as 2 FLOPs; backward = weight gradient + input gradient, except that the
// first layer needs no input gradient. Element-wise work is not counted.
double dense_flops(int in, int out) { return 2.0 * in * out; }
double conv_flops(int c, int k, int r, int ho, int wo) { return 2.0 * c * k * r * r * ho * wo; }

ModelSpec make_fc3_spec() {
  using S = Fc3Sizes;
  const double f1 = dense_flops(S::input, S::hidden1), f2 = dense_flops(S::hidden1, S::hidden2),
               f3 = dense_flops(S::hidden2, S::classes);
  return build_spec(ModelKind::fc3,
                    {{"f1", {S::hidden1, S::input}},
                     {"f2", {S::hidden2, S::hidden1}},
                     {"f3", {S::classes, S::hidden2}}},
                    f1 * 2 + f2 * 3 + f3 * 3, f1 + f2 + f3);
}

ModelSpec make_lenet5_spec() {
  using S = Lenet5Sizes;
  const double c1 = conv_flops(1, S::c1_channels, S::kernel, S::side, S::side),
               c2 = conv_flops(S::c1_channels, S::c2_channels, S::kernel, S::a2_side, S::a2_side);
  const double f1 = dense_flops(S::flat, S::hidden1), f2 = dense_flops(S::hidden1, S::hidden2),
               f3 = dense_flops(S::hidden2, S::classes);
  return build_spec(ModelKind::lenet5,
                    {{"c1", {S::c1_channels, 1, S::kernel, S::kernel}},
                     {"c2", {S::c2_channels, S::c1_channels, S::kernel, S::kernel}},
                     {"f1", {S::hidden1, S::flat}},
                     {"f2", {S::hidden2, S::hidden1}},
                     {"f3", {S::classes, S::hidden2}}},
                    c1 * 2 + (c2 + f1 + f2 + f3) * 3, c1 + c2 + f1 + f2 + f3);
}

}  // namespace

ModelKind parse_model(std::string_view name) {
  if (name == "fc3") return ModelKind::fc3;
  if (name == "lenet5") return ModelKind::lenet5;
  fail("unknown model '" + std::string(name) + "' (expected fc3 or lenet5)");
}

const char* model_name(ModelKind kind) { return kind == ModelKind::fc3 ? "fc3" : "lenet5"; }

const ParamTensor& ModelSpec::tensor(std::string_view name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return t;
  }
  fail(std::string("model ") + model_name(kind) + " has no tensor '" + std::string(name) + "'");
}

const ModelSpec& model_spec(ModelKind kind) {
  static const ModelSpec fc3 = make_fc3_spec();
  static const ModelSpec lenet5 = make_lenet5_spec();
  return kind == ModelKind::fc3 ? fc3 : lenet5;
}

Model::Model(ModelKind model_kind)
    : kind(model_kind),
      params(model_spec(model_kind).param_count, 0.0f),
      grads(model_spec(model_kind).param_count, 0.0f),
      momentum(model_spec(model_kind).param_count, 0.0f) {}

std::span<float> Model::param(std::string_view name) {
  const ParamTensor& t = spec().tensor(name);
  return {params.data() + t.offset, t.count};
}

std::span<const float> Model::param(std::string_view name) const {
  const ParamTensor& t = spec().tensor(name);
  return {params.data() + t.offset, t.count};
}

void init_params(std::span<float> params, ModelKind kind, std::uint64_t seed) {
  const ModelSpec& spec = model_spec(kind);
  CNNBENCH_CHECK(params.size() == spec.param_count, "init_params: buffer size does not match model");
  Rng rng(derive_seed(seed, 0x1417));
  for (const auto& t : spec.tensors) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(t.fan_in));
    for (std::size_t i = 0; i < t.count; ++i) params[t.offset + i] = rng.uniform(-bound, bound);
  }
}

}  // namespace cnnbench
