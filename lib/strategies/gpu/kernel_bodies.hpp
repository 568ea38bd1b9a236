// The per-element arithmetic of every GPU kernel, as __host__ __device__ functions: the CUDA
// kernels call them once per thread index, and host tests call them in plain loops against the
// serial layers of layers.hpp. Compiles with g++ too (CNNBENCH_HD is empty outside nvcc).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define CNNBENCH_HD __host__ __device__
#else
#define CNNBENCH_HD
#endif

namespace cnnbench::gpu {

// --- batch gathering: images (count, image_size) bytes -> x (B, image_size) = pixel / 255 -------
// indices (B) picks the samples; nullptr means sample b is image b (a batch already gathered).
CNNBENCH_HD inline void gather_sample_at(float* x, std::uint8_t* y, const std::uint8_t* images,
                                         const std::uint8_t* labels, const std::uint32_t* indices,
                                         int image_size, std::int64_t i) {
  const std::int64_t b = i / image_size;
  const std::int64_t pixel = i % image_size;
  const std::int64_t sample = indices ? static_cast<std::int64_t>(indices[b]) : b;
  x[i] = static_cast<float>(images[sample * image_size + pixel]) / 255.0f;
  if (pixel == 0) y[b] = labels[sample];
}

// --- dense bias (+ ReLU) after the GEMM: out (B, features) += bias, then max(0, .) -------------
CNNBENCH_HD inline void add_bias_at(float* out, const float* bias, int features, bool relu,
                                    std::int64_t i) {
  const float v = out[i] + bias[i % features];
  out[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
}

// ReLU backward in place: d = out > 0 ? d : 0, where out is the ReLU's output.
CNNBENCH_HD inline void relu_backward_at(float* d, const float* out, std::int64_t i) {
  d[i] = out[i] > 0.0f ? d[i] : 0.0f;
}

// --- conv2d, stride 1, zero padding: inp (B,C,H,W), weight (K,C,R,R), bias (K) -> (B,K,Ho,Wo) ---
struct ConvDims {
  int batch, in_channels, height, width, out_channels, kernel, pad;
  CNNBENCH_HD int out_height() const { return height + 2 * pad - kernel + 1; }
  CNNBENCH_HD int out_width() const { return width + 2 * pad - kernel + 1; }
  CNNBENCH_HD int weight_count() const { return out_channels * in_channels * kernel * kernel; }
  // Weight and bias gradients side by side, as the partial sums of conv2d_param_grad_partial_at.
  CNNBENCH_HD int param_count() const { return weight_count() + out_channels; }
};

// Output element i of (B,K,Ho,Wo): bias + correlation, then ReLU when asked.
CNNBENCH_HD inline void conv2d_forward_at(float* out, const float* inp, const float* weight,
                                          const float* bias, const ConvDims& d, bool relu,
                                          std::int64_t i) {
  const int Ho = d.out_height(), Wo = d.out_width(), R = d.kernel;
  const int ox = static_cast<int>(i % Wo);
  const int oy = static_cast<int>((i / Wo) % Ho);
  const int k = static_cast<int>((i / (static_cast<std::int64_t>(Wo) * Ho)) % d.out_channels);
  const std::int64_t b = i / (static_cast<std::int64_t>(Wo) * Ho * d.out_channels);
  float sum = 0.0f;
  for (int c = 0; c < d.in_channels; ++c) {
    const float* plane = inp + (b * d.in_channels + c) * d.height * d.width;
    const float* w = weight + (static_cast<std::int64_t>(k) * d.in_channels + c) * R * R;
    for (int r = 0; r < R; ++r) {
      const int iy = oy + r - d.pad;
      if (iy < 0 || iy >= d.height) continue;
      for (int s = 0; s < R; ++s) {
        const int ix = ox + s - d.pad;
        if (ix < 0 || ix >= d.width) continue;
        sum += plane[iy * d.width + ix] * w[r * R + s];
      }
    }
  }
  const float v = sum + bias[k];
  out[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
}

// Input-gradient element i of (B,C,H,W): the full correlation of dout (B,K,Ho,Wo) with the
// flipped kernels (overwrites dinp, as layers.hpp's conv2d_backward does).
CNNBENCH_HD inline void conv2d_input_grad_at(float* dinp, const float* dout, const float* weight,
                                             const ConvDims& d, std::int64_t i) {
  const int Ho = d.out_height(), Wo = d.out_width(), R = d.kernel;
  const int ix = static_cast<int>(i % d.width);
  const int iy = static_cast<int>((i / d.width) % d.height);
  const int c = static_cast<int>((i / (static_cast<std::int64_t>(d.width) * d.height)) %
                                 d.in_channels);
  const std::int64_t b = i / (static_cast<std::int64_t>(d.width) * d.height * d.in_channels);
  float sum = 0.0f;
  for (int k = 0; k < d.out_channels; ++k) {
    const float* plane = dout + (b * d.out_channels + k) * Ho * Wo;
    const float* w = weight + (static_cast<std::int64_t>(k) * d.in_channels + c) * R * R;
    for (int r = 0; r < R; ++r) {
      const int oy = iy + d.pad - r;
      if (oy < 0 || oy >= Ho) continue;
      for (int s = 0; s < R; ++s) {
        const int ox = ix + d.pad - s;
        if (ox < 0 || ox >= Wo) continue;
        sum += plane[oy * Wo + ox] * w[r * R + s];
      }
    }
  }
  dinp[i] = sum;
}

// Parameter gradients in two passes so that every sum has a fixed order (deterministic runs):
// pass 1 writes partials (chunks, param_count): element i = (chunk, j) sums, over the samples
// [chunk*samples_per_chunk, +samples_per_chunk) and all output positions, the gradient of
// parameter j (j < weight_count: weight (k,c,r,s) row-major; else bias j - weight_count).
CNNBENCH_HD inline void conv2d_param_grad_partial_at(float* partials, const float* dout,
                                                     const float* inp, const ConvDims& d,
                                                     int samples_per_chunk, std::int64_t i) {
  const int Ho = d.out_height(), Wo = d.out_width(), R = d.kernel;
  const int j = static_cast<int>(i % d.param_count());
  const std::int64_t chunk = i / d.param_count();
  const std::int64_t b_first = chunk * samples_per_chunk;
  const std::int64_t b_last =
      b_first + samples_per_chunk < d.batch ? b_first + samples_per_chunk : d.batch;
  float sum = 0.0f;
  if (j >= d.weight_count()) {
    const int k = j - d.weight_count();
    for (std::int64_t b = b_first; b < b_last; ++b) {
      const float* plane = dout + (b * d.out_channels + k) * Ho * Wo;
      for (int p = 0; p < Ho * Wo; ++p) sum += plane[p];
    }
  } else {
    const int s = j % R, r = (j / R) % R;
    const int c = (j / (R * R)) % d.in_channels, k = j / (R * R * d.in_channels);
    // Output rows/cols whose input tap (oy + r - pad, ox + s - pad) is inside the image.
    const int oy_first = d.pad - r > 0 ? d.pad - r : 0;
    const int oy_last = d.height + d.pad - r < Ho ? d.height + d.pad - r : Ho;
    const int ox_first = d.pad - s > 0 ? d.pad - s : 0;
    const int ox_last = d.width + d.pad - s < Wo ? d.width + d.pad - s : Wo;
    for (std::int64_t b = b_first; b < b_last; ++b) {
      const float* g = dout + (b * d.out_channels + k) * Ho * Wo;
      const float* plane = inp + (b * d.in_channels + c) * d.height * d.width;
      for (int oy = oy_first; oy < oy_last; ++oy) {
        const float* row = plane + (oy + r - d.pad) * d.width + (s - d.pad);
        for (int ox = ox_first; ox < ox_last; ++ox) sum += g[oy * Wo + ox] * row[ox];
      }
    }
  }
  partials[i] = sum;
}

// Pass 2: parameter j = the sum of its partials over the chunks, in chunk order (overwrites).
CNNBENCH_HD inline void conv2d_param_grad_reduce_at(float* dweight, float* dbias,
                                                    const float* partials, const ConvDims& d,
                                                    int chunks, std::int64_t j) {
  float sum = 0.0f;
  for (int chunk = 0; chunk < chunks; ++chunk) sum += partials[chunk * d.param_count() + j];
  if (j < d.weight_count()) {
    dweight[j] = sum;
  } else {
    dbias[j - d.weight_count()] = sum;
  }
}

// --- max-pool 2x2 stride 2 over planes: inp (planes,H,W) -> out (planes,H/2,W/2) ---------------
// Row-major index (0..3) of the first maximum of the window at (oy, ox), as PyTorch routes it.
CNNBENCH_HD inline int maxpool2x2_argmax(const float* plane, int W, int oy, int ox) {
  const float* top = plane + (2 * oy) * W + 2 * ox;
  const float v[4] = {top[0], top[1], top[W], top[W + 1]};
  int best = 0;
  for (int q = 1; q < 4; ++q) {
    if (v[q] > v[best]) best = q;
  }
  return best;
}

CNNBENCH_HD inline void maxpool2x2_forward_at(float* out, const float* inp, int H, int W,
                                              std::int64_t i) {
  const int Ho = H / 2, Wo = W / 2;
  const int ox = static_cast<int>(i % Wo), oy = static_cast<int>((i / Wo) % Ho);
  const float* plane = inp + (i / (static_cast<std::int64_t>(Wo) * Ho)) * H * W;
  const int q = maxpool2x2_argmax(plane, W, oy, ox);
  out[i] = plane[(2 * oy + q / 2) * W + 2 * ox + q % 2];
}

// Input-gradient element i of (planes,H,W): the window's gradient if this is its first maximum,
// else 0; then the ReLU mask of the pool's input (which is a ReLU output) when relu is set.
CNNBENCH_HD inline void maxpool2x2_backward_at(float* dinp, const float* dout, const float* inp,
                                               int H, int W, bool relu, std::int64_t i) {
  const int Ho = H / 2, Wo = W / 2;
  const int x = static_cast<int>(i % W), y = static_cast<int>((i / W) % H);
  const std::int64_t plane_index = i / (static_cast<std::int64_t>(W) * H);
  const int oy = y / 2, ox = x / 2;
  float g = 0.0f;
  if (oy < Ho && ox < Wo) {
    const int q = maxpool2x2_argmax(inp + plane_index * H * W, W, oy, ox);
    if (q == (y % 2) * 2 + x % 2) g = dout[(plane_index * Ho + oy) * Wo + ox];
  }
  dinp[i] = relu && !(inp[i] > 0.0f) ? 0.0f : g;
}

// --- softmax cross-entropy of sample b: logits (B,C), labels (B) -------------------------------
// Writes the sample's loss and dlogits = (softmax - onehot) * grad_scale.
CNNBENCH_HD inline void softmax_xent_at(float* dlogits, float* sample_loss, const float* logits,
                                        const std::uint8_t* labels, int C, float grad_scale,
                                        std::int64_t b) {
  const float* l = logits + b * C;
  float* dl = dlogits + b * C;
  float max_logit = l[0];
  for (int c = 1; c < C; ++c) max_logit = l[c] > max_logit ? l[c] : max_logit;
  float sum = 0.0f;
  for (int c = 0; c < C; ++c) sum += expf(l[c] - max_logit);
  const int label = labels[b];
  sample_loss[b] = logf(sum) - (l[label] - max_logit);
  const float scale = grad_scale / sum;
  for (int c = 0; c < C; ++c) dl[c] = expf(l[c] - max_logit) * scale;
  dl[label] -= grad_scale;
}

// Sum of the B sample losses, in order, into step_loss_sums[*step] (one thread).
CNNBENCH_HD inline void sum_step_loss(double* step_loss_sums, const int* step,
                                      const float* sample_loss, int B) {
  double sum = 0.0;
  for (int b = 0; b < B; ++b) sum += sample_loss[b];
  step_loss_sums[*step] = sum;
}

// --- SGD as PyTorch does it: g += wd*p; v = mu*v + g; p -= lr*v -------------------------------
CNNBENCH_HD inline void sgd_at(float* params, const float* grads, float* momentum, float lr,
                               float mu, float weight_decay, std::int64_t i) {
  const float g = grads[i] + weight_decay * params[i];
  const float v = mu * momentum[i] + g;
  momentum[i] = v;
  params[i] -= lr * v;
}

// --- one GEMM in cuBLAS's column-major terms: C (m,n) = alpha * op(A) op(B) + beta * C ---------
// The dense layers are written as GemmCalls so the host tests can check the argument mapping.
struct GemmCall {
  bool transpose_a = false, transpose_b = false;
  int m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  const float* a = nullptr;
  int lda = 0;
  const float* b = nullptr;
  int ldb = 0;
  float beta = 0.0f;
  float* c = nullptr;
  int ldc = 0;
};

// Element i (column-major: row i % m, column i / m) of the GEMM: the naive twin of cuBLAS.
CNNBENCH_HD inline void gemm_at(const GemmCall& g, std::int64_t i) {
  const int row = static_cast<int>(i % g.m), col = static_cast<int>(i / g.m);
  float sum = 0.0f;
  for (int l = 0; l < g.k; ++l) {
    const float a = g.transpose_a ? g.a[l + static_cast<std::int64_t>(row) * g.lda]
                                  : g.a[row + static_cast<std::int64_t>(l) * g.lda];
    const float b = g.transpose_b ? g.b[col + static_cast<std::int64_t>(l) * g.ldb]
                                  : g.b[l + static_cast<std::int64_t>(col) * g.ldb];
    sum += a * b;
  }
  float& c = g.c[row + static_cast<std::int64_t>(col) * g.ldc];
  c = g.beta == 0.0f ? g.alpha * sum : g.alpha * sum + g.beta * c;
}

// Row-major dense layers (inp (B,in), weight (out,in)) as column-major GEMMs.
// out (B,out) = inp weight^T (bias added separately).
inline GemmCall dense_forward_gemm(float* out, const float* inp, const float* weight, int B, int in,
                                   int out_features) {
  return {true, false, out_features, B, in, 1.0f, weight, in, inp, in, 0.0f, out, out_features};
}
// dweight (out,in) = dout^T inp (overwrites).
inline GemmCall dense_weight_grad_gemm(float* dweight, const float* dout, const float* inp, int B,
                                       int in, int out_features) {
  return {false, true, in, out_features, B, 1.0f, inp, in, dout, out_features, 0.0f, dweight, in};
}
// dbias (out) = dout^T ones (B) (overwrites).
inline GemmCall dense_bias_grad_gemm(float* dbias, const float* dout, const float* ones, int B,
                                     int out_features) {
  return {false, false, out_features, 1, B, 1.0f, dout, out_features, ones, B, 0.0f, dbias,
          out_features};
}
// dinp (B,in) = dout weight (overwrites).
inline GemmCall dense_input_grad_gemm(float* dinp, const float* dout, const float* weight, int B,
                                      int in, int out_features) {
  return {false, false, in, B, out_features, 1.0f, weight, in, dout, out_features, 0.0f, dinp, in};
}

}  // namespace cnnbench::gpu
