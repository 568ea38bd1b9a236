// One training step of FC-3 or LeNet-5 composed from the per-element bodies and GEMMs, written
// once for any executor: the CUDA executor launches a kernel per for_each (step_kernels.cu), the
// host executor of the tests runs plain loops. Exec provides
//   for_each(const char* name, std::int64_t n, Body body)   // body(i) for i in [0, n)
//   gemm(const char* name, const GemmCall& call)
//   end_group(KernelGroup group)   // what was enqueued since the previous boundary was `group`
// Bodies of one for_each write disjoint elements and never read what the same for_each writes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cnnbench/models.hpp"
#include "cnnbench/step_timeline.hpp"
#include "kernel_bodies.hpp"

namespace cnnbench::gpu {

// The unit a step is timed by (metrics.time_breakdown, the trace's device track): the kernels of
// one layer's forward, of its backward, the loss, the gather, the update. A compute group names
// its layer, an index into timed_layer_names (the serial strategy's layers).
struct KernelGroup {
  TimeCategory category = TimeCategory::other;
  int layer = -1;
  bool operator==(const KernelGroup&) const = default;
};

// The shapes are the serial models' (cnnbench/models.hpp), so the two cannot drift apart.
inline constexpr int image_size = Fc3Sizes::input;
inline constexpr int classes = Fc3Sizes::classes;
// Samples per partial sum of the conv parameter gradients (pass 1 of a fixed-order reduction).
inline constexpr int conv_samples_per_chunk = 4;

// LeNet-5's convolutions: c1 (B,1,28,28) -> (B,6,28,28) pad 2; c2 (B,6,14,14) -> (B,16,10,10).
inline ConvDims lenet5_c1_dims(int B) {
  using L = Lenet5Sizes;
  return {B, 1, L::side, L::side, L::c1_channels, L::kernel, L::c1_pad};
}
inline ConvDims lenet5_c2_dims(int B) {
  using L = Lenet5Sizes;
  return {B, L::c1_channels, L::p1_side, L::p1_side, L::c2_channels, L::kernel, 0};
}
inline int conv_chunks(int B) { return (B + conv_samples_per_chunk - 1) / conv_samples_per_chunk; }

// Named tensors of a flat buffer (parameters or gradients), PyTorch's state_dict order.
struct Fc3Tensors {
  float *f1w, *f1b, *f2w, *f2b, *f3w, *f3b;
};
struct Lenet5Tensors {
  float *c1w, *c1b, *c2w, *c2b, *f1w, *f1b, *f2w, *f2b, *f3w, *f3b;
};

// Where a step's batch comes from: images (count, 784) bytes and labels (count); indices points
// at the (steps, B) sample indices of the current range (the step reads row *step), or is nullptr
// when images/labels already hold exactly this batch.
struct BatchSource {
  const std::uint8_t* images = nullptr;
  const std::uint8_t* labels = nullptr;
  const std::uint32_t* indices = nullptr;
};

// Activations, their gradients and scratch for a batch of B; sizes from step_buffer_floats().
// FC-3 uses h1 (B,300), h2 (B,100); LeNet-5 a1 (B,6,28,28), p1 (B,6,14,14), a2 (B,16,10,10),
// p2 (B,400), h1 (B,120), h2 (B,84); both x (B,784), logits (B,10).
struct StepBuffers {
  int batch = 0;
  float* x = nullptr;
  std::uint8_t* y = nullptr;
  float *a1 = nullptr, *p1 = nullptr, *a2 = nullptr, *p2 = nullptr;
  float *h1 = nullptr, *h2 = nullptr, *logits = nullptr;
  float *da1 = nullptr, *dp1 = nullptr, *da2 = nullptr, *dp2 = nullptr;
  float *dh1 = nullptr, *dh2 = nullptr, *dlogits = nullptr;
  float* sample_loss = nullptr;    // (B)
  float* conv_partials = nullptr;  // (conv_chunks(B), c2 param_count)
  const float* ones = nullptr;     // (B) of 1.0f, for bias gradients as GEMMs
  double* step_loss_sums = nullptr;  // (steps of the range): sum of each step's sample losses
  int* step = nullptr;             // step index within the range; advance_step increments it
};

// Floats each StepBuffers array needs (for allocation), and the bytes of y.
struct StepBufferSizes {
  std::size_t x, a1, p1, a2, p2, h1, h2, logits, conv_partials;
};
inline StepBufferSizes step_buffer_floats(bool lenet5, int B) {
  using L = Lenet5Sizes;
  const auto n = static_cast<std::size_t>(B);
  if (!lenet5) {
    return {n * image_size, 0, 0, 0, 0, n * Fc3Sizes::hidden1, n * Fc3Sizes::hidden2,
            n * classes, 0};
  }
  return {n * image_size,  n * L::a1_floats, n * L::p1_floats, n * L::a2_floats, n * L::flat,
          n * L::hidden1,  n * L::hidden2,   n * classes,
          static_cast<std::size_t>(conv_chunks(B)) * lenet5_c2_dims(B).param_count()};
}

// x, y <- the step's batch.
template <class Exec>
void gather_batch_step(Exec& exec, const BatchSource& source, const StepBuffers& w) {
  const int B = w.batch;
  float* x = w.x;
  std::uint8_t* y = w.y;
  const std::uint8_t* images = source.images;
  const std::uint8_t* labels = source.labels;
  const std::uint32_t* indices = source.indices;
  const int* step = w.step;
  exec.for_each("gather_batch", static_cast<std::int64_t>(B) * image_size,
                [=] CNNBENCH_HD(std::int64_t i) {
                  const std::uint32_t* row = indices ? indices + static_cast<std::int64_t>(*step) * B
                                                     : nullptr;
                  gather_sample_at(x, y, images, labels, row, image_size, i);
                });
  exec.end_group({TimeCategory::data});
}

// out (B,out) = inp weight^T + bias, then ReLU when relu.
template <class Exec>
void dense_forward_step(Exec& exec, float* out, const float* inp, const float* weight,
                        const float* bias, int B, int in, int out_features, bool relu) {
  exec.gemm("dense_forward", dense_forward_gemm(out, inp, weight, B, in, out_features));
  exec.for_each("add_bias", static_cast<std::int64_t>(B) * out_features,
                [=] CNNBENCH_HD(std::int64_t i) { add_bias_at(out, bias, out_features, relu, i); });
}

// dweight, dbias (overwritten) and dinp (when not nullptr) from dout (B,out); then, when
// inp_relu_out is set, the ReLU mask of the layer's input is applied to dinp in place.
template <class Exec>
void dense_backward_step(Exec& exec, float* dinp, float* dweight, float* dbias, const float* dout,
                         const float* inp, const float* weight, const float* ones, int B, int in,
                         int out_features, bool inp_is_relu_output) {
  exec.gemm("dense_weight_grad", dense_weight_grad_gemm(dweight, dout, inp, B, in, out_features));
  exec.gemm("dense_bias_grad", dense_bias_grad_gemm(dbias, dout, ones, B, out_features));
  if (!dinp) return;
  exec.gemm("dense_input_grad", dense_input_grad_gemm(dinp, dout, weight, B, in, out_features));
  if (inp_is_relu_output) {
    exec.for_each("relu_backward", static_cast<std::int64_t>(B) * in,
                  [=] CNNBENCH_HD(std::int64_t i) { relu_backward_at(dinp, inp, i); });
  }
}

// Softmax cross-entropy of the logits: dlogits and the step's loss sum.
template <class Exec>
void loss_step(Exec& exec, const StepBuffers& w, float grad_scale) {
  const int B = w.batch;
  float* dlogits = w.dlogits;
  float* sample_loss = w.sample_loss;
  const float* logits = w.logits;
  const std::uint8_t* y = w.y;
  double* sums = w.step_loss_sums;
  const int* step = w.step;
  exec.for_each("softmax_xent", B, [=] CNNBENCH_HD(std::int64_t b) {
    softmax_xent_at(dlogits, sample_loss, logits, y, classes, grad_scale, b);
  });
  exec.for_each("sum_step_loss", 1,
                [=] CNNBENCH_HD(std::int64_t) { sum_step_loss(sums, step, sample_loss, B); });
}

// The dense layers both models end in: inp (B,in) -> h1 (B,hidden1), ReLU -> h2 (B,hidden2),
// ReLU -> logits (B,10).
struct DenseHeadSizes {
  int in, hidden1, hidden2;
};

// Forward, loss and backward of the dense layers (Tensors: Fc3Tensors or Lenet5Tensors, named
// f1w..f3b alike); gradients overwritten, scaled by grad_scale. dinp (B,in) is skipped when
// nullptr; inp is no ReLU output (the image, or a max-pool output whose mask comes after routing).
// f1_layer: f1's index in timed_layer_names; f2, f3 and the loss follow it.
template <class Exec, class Tensors>
void dense_head_forward_backward(Exec& exec, const Tensors& p, const Tensors& g,
                                 const StepBuffers& w, float* dinp, const float* inp,
                                 const DenseHeadSizes& s, float grad_scale, int f1_layer) {
  const int B = w.batch;
  const int f1 = f1_layer, f2 = f1_layer + 1, f3 = f1_layer + 2, loss = f1_layer + 3;
  dense_forward_step(exec, w.h1, inp, p.f1w, p.f1b, B, s.in, s.hidden1, true);
  exec.end_group({TimeCategory::compute, f1});
  dense_forward_step(exec, w.h2, w.h1, p.f2w, p.f2b, B, s.hidden1, s.hidden2, true);
  exec.end_group({TimeCategory::compute, f2});
  dense_forward_step(exec, w.logits, w.h2, p.f3w, p.f3b, B, s.hidden2, classes, false);
  exec.end_group({TimeCategory::compute, f3});
  loss_step(exec, w, grad_scale);
  exec.end_group({TimeCategory::compute, loss});
  dense_backward_step(exec, w.dh2, g.f3w, g.f3b, w.dlogits, w.h2, p.f3w, w.ones, B, s.hidden2,
                      classes, true);
  exec.end_group({TimeCategory::compute, f3});
  dense_backward_step(exec, w.dh1, g.f2w, g.f2b, w.dh2, w.h1, p.f2w, w.ones, B, s.hidden1,
                      s.hidden2, true);
  exec.end_group({TimeCategory::compute, f2});
  dense_backward_step(exec, dinp, g.f1w, g.f1b, w.dh1, inp, p.f1w, w.ones, B, s.in, s.hidden1,
                      false);
  exec.end_group({TimeCategory::compute, f1});
}

// Forward + backward of FC-3 on the gathered batch; gradients overwritten, scaled by grad_scale.
template <class Exec>
void fc3_forward_backward(Exec& exec, const Fc3Tensors& p, const Fc3Tensors& g,
                          const StepBuffers& w, float grad_scale) {
  constexpr DenseHeadSizes sizes{Fc3Sizes::input, Fc3Sizes::hidden1, Fc3Sizes::hidden2};
  dense_head_forward_backward(exec, p, g, w, static_cast<float*>(nullptr), w.x, sizes,
                              grad_scale, /*f1_layer=*/0);
}

// out = ReLU(conv(inp)) for one of LeNet-5's convolutions.
template <class Exec>
void conv_relu_forward_step(Exec& exec, float* out, const float* inp, const float* weight,
                            const float* bias, const ConvDims& d) {
  const std::int64_t n = static_cast<std::int64_t>(d.batch) * d.out_channels * d.out_height() *
                         d.out_width();
  exec.for_each("conv2d_forward", n, [=] CNNBENCH_HD(std::int64_t i) {
    conv2d_forward_at(out, inp, weight, bias, d, true, i);
  });
}

template <class Exec>
void maxpool_forward_step(Exec& exec, float* out, const float* inp, int planes, int H, int W) {
  const std::int64_t n = static_cast<std::int64_t>(planes) * (H / 2) * (W / 2);
  exec.for_each("maxpool2x2_forward", n,
                [=] CNNBENCH_HD(std::int64_t i) { maxpool2x2_forward_at(out, inp, H, W, i); });
}

// dinp = ReLU mask of inp (a ReLU output) applied to the max-pool's routed gradient.
template <class Exec>
void maxpool_relu_backward_step(Exec& exec, float* dinp, const float* dout, const float* inp,
                                int planes, int H, int W) {
  exec.for_each("maxpool2x2_backward", static_cast<std::int64_t>(planes) * H * W,
                [=] CNNBENCH_HD(std::int64_t i) {
                  maxpool2x2_backward_at(dinp, dout, inp, H, W, true, i);
                });
}

// dweight, dbias (overwritten) and dinp (when not nullptr) of a convolution.
template <class Exec>
void conv_backward_step(Exec& exec, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, float* partials,
                        const ConvDims& d) {
  const int chunks = conv_chunks(d.batch);
  exec.for_each("conv2d_param_grad_partial", static_cast<std::int64_t>(chunks) * d.param_count(),
                [=] CNNBENCH_HD(std::int64_t i) {
                  conv2d_param_grad_partial_at(partials, dout, inp, d, conv_samples_per_chunk, i);
                });
  exec.for_each("conv2d_param_grad_reduce", d.param_count(), [=] CNNBENCH_HD(std::int64_t j) {
    conv2d_param_grad_reduce_at(dweight, dbias, partials, d, chunks, j);
  });
  if (!dinp) return;
  const std::int64_t n = static_cast<std::int64_t>(d.batch) * d.in_channels * d.height * d.width;
  exec.for_each("conv2d_input_grad", n, [=] CNNBENCH_HD(std::int64_t i) {
    conv2d_input_grad_at(dinp, dout, weight, d, i);
  });
}

// Forward + backward of LeNet-5 on the gathered batch; gradients overwritten, scaled by
// grad_scale. Mirrors lenet5_forward / lenet5_backward of the serial models.
template <class Exec>
void lenet5_forward_backward(Exec& exec, const Lenet5Tensors& p, const Lenet5Tensors& g,
                             const StepBuffers& w, float grad_scale) {
  using L = Lenet5Sizes;
  const int B = w.batch;
  const ConvDims c1 = lenet5_c1_dims(B), c2 = lenet5_c2_dims(B);
  const int c1_planes = B * L::c1_channels, c2_planes = B * L::c2_channels;
  // Layers as timed_layer_names counts them: c1, c2 (each with its ReLU and max-pool), then f1.
  constexpr int c1_layer = 0, c2_layer = 1, f1_layer = 2;
  conv_relu_forward_step(exec, w.a1, w.x, p.c1w, p.c1b, c1);
  maxpool_forward_step(exec, w.p1, w.a1, c1_planes, L::side, L::side);
  exec.end_group({TimeCategory::compute, c1_layer});
  conv_relu_forward_step(exec, w.a2, w.p1, p.c2w, p.c2b, c2);
  // (B,16,5,5) = flatten (B,400)
  maxpool_forward_step(exec, w.p2, w.a2, c2_planes, L::a2_side, L::a2_side);
  exec.end_group({TimeCategory::compute, c2_layer});
  // p2 is a max-pool output, not a ReLU output: its mask is applied after routing, below.
  constexpr DenseHeadSizes sizes{L::flat, L::hidden1, L::hidden2};
  dense_head_forward_backward(exec, p, g, w, w.dp2, w.p2, sizes, grad_scale, f1_layer);
  maxpool_relu_backward_step(exec, w.da2, w.dp2, w.a2, c2_planes, L::a2_side, L::a2_side);
  conv_backward_step(exec, w.dp1, g.c2w, g.c2b, w.da2, w.p1, p.c2w, w.conv_partials, c2);
  exec.end_group({TimeCategory::compute, c2_layer});
  maxpool_relu_backward_step(exec, w.da1, w.dp1, w.a1, c1_planes, L::side, L::side);
  conv_backward_step(exec, static_cast<float*>(nullptr), g.c1w, g.c1b, w.da1, w.x, p.c1w,
                     w.conv_partials, c1);
  exec.end_group({TimeCategory::compute, c1_layer});
}

// PyTorch's SGD over the flat buffers.
template <class Exec>
void sgd_update_step(Exec& exec, float* params, const float* grads, float* momentum,
                     std::size_t n, float lr, float mu, float weight_decay) {
  exec.for_each("sgd_update", static_cast<std::int64_t>(n), [=] CNNBENCH_HD(std::int64_t i) {
    sgd_at(params, grads, momentum, lr, mu, weight_decay, i);
  });
  exec.end_group({TimeCategory::update});
}

// The next step reads the next row of indices and writes the next loss slot.
template <class Exec>
void advance_step(Exec& exec, int* step) {
  exec.for_each("advance_step", 1, [=] CNNBENCH_HD(std::int64_t) { *step += 1; });
}

}  // namespace cnnbench::gpu
