// The model's tensors inside its flat device buffers, and one device allocation cut into a step's
// activation buffers: a first pass without memory sizes it, so that the two never disagree.
#include "step_layout.hpp"

#include <array>
#include <cstdint>

namespace cnnbench::gpu {

namespace {

// Carves aligned arrays out of one allocation: a sizing pass when base == nullptr.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  template <class T>
  T* take(std::size_t count) {
    if (count == 0) return nullptr;
    offset_ = (offset_ + 255) / 256 * 256;
    T* p = base_ ? reinterpret_cast<T*>(base_ + offset_) : nullptr;
    offset_ += count * sizeof(T);
    return p;
  }
  std::size_t bytes() const { return offset_; }

 private:
  char* base_;
  std::size_t offset_ = 0;
};

StepBuffers take_buffers(Carver& carver, bool lenet5, int B) {
  const StepBufferSizes n = step_buffer_floats(lenet5, B);
  const auto batch = static_cast<std::size_t>(B);
  StepBuffers w;
  w.batch = B;
  w.x = carver.take<float>(n.x);
  w.y = carver.take<std::uint8_t>(batch);
  w.a1 = carver.take<float>(n.a1);
  w.p1 = carver.take<float>(n.p1);
  w.a2 = carver.take<float>(n.a2);
  w.p2 = carver.take<float>(n.p2);
  w.h1 = carver.take<float>(n.h1);
  w.h2 = carver.take<float>(n.h2);
  w.logits = carver.take<float>(n.logits);
  w.da1 = carver.take<float>(n.a1);
  w.dp1 = carver.take<float>(n.p1);
  w.da2 = carver.take<float>(n.a2);
  w.dp2 = carver.take<float>(n.p2);
  w.dh1 = carver.take<float>(n.h1);
  w.dh2 = carver.take<float>(n.h2);
  w.dlogits = carver.take<float>(n.logits);
  w.sample_loss = carver.take<float>(batch);
  w.conv_partials = carver.take<float>(n.conv_partials);
  w.ones = carver.take<float>(batch);
  w.step = carver.take<int>(1);
  return w;
}

}  // namespace

void set_model_tensors(StepLaunch& step, const Model& model, const TrainConfig& config,
                       float* params, float* grads, float* momentum) {
  step.lenet5 = model.kind == ModelKind::lenet5;
  step.params = params;
  step.grads = grads;
  step.momentum = momentum;
  step.param_count = model.params.size();
  step.grad_scale = 1.0f / static_cast<float>(config.batch);
  step.lr = config.sgd.lr;
  step.momentum_factor = config.sgd.momentum;
  step.weight_decay = config.sgd.weight_decay;
  const auto& tensors = model.spec().tensors;
  auto views = [&tensors](float* flat) {
    std::array<float*, 10> at{};
    for (std::size_t i = 0; i < tensors.size() && i < at.size(); ++i) {
      at[i] = flat + tensors[i].offset;
    }
    return at;
  };
  const auto p = views(params), g = views(grads);
  if (step.lenet5) {
    step.lenet5_params = {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9]};
    step.lenet5_grads = {g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9]};
  } else {
    step.fc3_params = {p[0], p[1], p[2], p[3], p[4], p[5]};
    step.fc3_grads = {g[0], g[1], g[2], g[3], g[4], g[5]};
  }
}

std::size_t step_memory_bytes(bool lenet5, int batch) {
  Carver sizing(nullptr);
  take_buffers(sizing, lenet5, batch);
  return sizing.bytes();
}

StepBuffers carve_step_buffers(char* base, bool lenet5, int batch) {
  Carver carver(base);
  return take_buffers(carver, lenet5, batch);
}

}  // namespace cnnbench::gpu
