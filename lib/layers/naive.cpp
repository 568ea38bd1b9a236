// The naive twins of the optimised layer kernels: plain loops that read like the math, kept as
// the tests' oracle. Slow on purpose; nothing in training calls them.
#include <cstring>

#include "cnnbench/layers.hpp"

namespace cnnbench::naive {

// inp (B,in), weight (out,in), bias (out) -> out (B,out)
void dense_forward(float* out, const float* inp, const float* weight, const float* bias, int B,
                   int in, int out_features) {
  for (int b = 0; b < B; ++b) {
    for (int o = 0; o < out_features; ++o) {
      float sum = bias ? bias[o] : 0.0f;
      for (int i = 0; i < in; ++i) sum += inp[b * in + i] * weight[o * in + i];
      out[b * out_features + o] = sum;
    }
  }
}

// dout (B,out) -> dinp (B,in) overwritten; dweight (out,in), dbias (out) accumulated.
void dense_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                    const float* weight, int B, int in, int out_features) {
  if (dinp) {
    for (int b = 0; b < B; ++b) {
      for (int i = 0; i < in; ++i) {
        float sum = 0.0f;
        for (int o = 0; o < out_features; ++o) sum += dout[b * out_features + o] * weight[o * in + i];
        dinp[b * in + i] = sum;
      }
    }
  }
  for (int o = 0; o < out_features; ++o) {
    for (int i = 0; i < in; ++i) {
      float sum = 0.0f;
      for (int b = 0; b < B; ++b) sum += dout[b * out_features + o] * inp[b * in + i];
      dweight[o * in + i] += sum;
    }
    float bias_sum = 0.0f;
    for (int b = 0; b < B; ++b) bias_sum += dout[b * out_features + o];
    dbias[o] += bias_sum;
  }
}

// inp (B,C,H,W), weight (K,C,R,R), bias (K) -> out (B,K,Ho,Wo); taps outside the image read 0.
void conv2d_forward(float* out, const float* inp, const float* weight, const float* bias,
                    const Conv2dShape& s) {
  const int C = s.in_channels, H = s.height, W = s.width, K = s.out_channels, R = s.kernel;
  const int Ho = s.out_height(), Wo = s.out_width();
  for (int b = 0; b < s.batch; ++b)
    for (int k = 0; k < K; ++k)
      for (int oy = 0; oy < Ho; ++oy)
        for (int ox = 0; ox < Wo; ++ox) {
          float sum = bias ? bias[k] : 0.0f;
          for (int c = 0; c < C; ++c)
            for (int ky = 0; ky < R; ++ky)
              for (int kx = 0; kx < R; ++kx) {
                const int iy = oy + ky - s.pad, ix = ox + kx - s.pad;
                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                sum += inp[((b * C + c) * H + iy) * W + ix] * weight[((k * C + c) * R + ky) * R + kx];
              }
          out[((b * K + k) * Ho + oy) * Wo + ox] = sum;
        }
}

// Scatter form: every output gradient flows back along each tap that produced it.
void conv2d_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, const Conv2dShape& s) {
  const int C = s.in_channels, H = s.height, W = s.width, K = s.out_channels, R = s.kernel;
  const int Ho = s.out_height(), Wo = s.out_width();
  if (dinp) std::memset(dinp, 0, sizeof(float) * s.batch * C * H * W);
  for (int b = 0; b < s.batch; ++b)
    for (int k = 0; k < K; ++k)
      for (int oy = 0; oy < Ho; ++oy)
        for (int ox = 0; ox < Wo; ++ox) {
          const float g = dout[((b * K + k) * Ho + oy) * Wo + ox];
          dbias[k] += g;
          for (int c = 0; c < C; ++c)
            for (int ky = 0; ky < R; ++ky)
              for (int kx = 0; kx < R; ++kx) {
                const int iy = oy + ky - s.pad, ix = ox + kx - s.pad;
                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                const int in_index = ((b * C + c) * H + iy) * W + ix;
                const int w_index = ((k * C + c) * R + ky) * R + kx;
                dweight[w_index] += g * inp[in_index];
                if (dinp) dinp[in_index] += g * weight[w_index];
              }
        }
}

// inp (planes,H,W) -> out (planes,H/2,W/2); an odd last row/column is ignored.
void maxpool2x2_forward(float* out, const float* inp, int planes, int H, int W) {
  const int Ho = H / 2, Wo = W / 2;
  for (int p = 0; p < planes; ++p)
    for (int oy = 0; oy < Ho; ++oy)
      for (int ox = 0; ox < Wo; ++ox) {
        float best = inp[(p * H + 2 * oy) * W + 2 * ox];
        for (int dy = 0; dy < 2; ++dy)
          for (int dx = 0; dx < 2; ++dx) {
            const float v = inp[(p * H + 2 * oy + dy) * W + 2 * ox + dx];
            if (v > best) best = v;
          }
        out[(p * Ho + oy) * Wo + ox] = best;
      }
}

// The gradient goes to the first maximum of each window in row-major order (strict >).
void maxpool2x2_backward(float* dinp, const float* dout, const float* inp, int planes, int H,
                         int W) {
  const int Ho = H / 2, Wo = W / 2;
  std::memset(dinp, 0, sizeof(float) * planes * H * W);
  for (int p = 0; p < planes; ++p)
    for (int oy = 0; oy < Ho; ++oy)
      for (int ox = 0; ox < Wo; ++ox) {
        int best_index = (p * H + 2 * oy) * W + 2 * ox;
        for (int dy = 0; dy < 2; ++dy)
          for (int dx = 0; dx < 2; ++dx) {
            const int index = (p * H + 2 * oy + dy) * W + 2 * ox + dx;
            if (inp[index] > inp[best_index]) best_index = index;
          }
        dinp[best_index] += dout[(p * Ho + oy) * Wo + ox];
      }
}

}  // namespace cnnbench::naive
