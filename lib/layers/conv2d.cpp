// Conv2d (stride 1, zero padding) as im2col + sgemm, one sample at a time so that the column
// buffer (C*R*R x Ho*Wo: 25x784 for LeNet-5's c1, 150x100 for c2) stays in cache.
#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "cnnbench/core.hpp"
#include "cnnbench/layers.hpp"

namespace cnnbench {

namespace {

void check_shape(const Conv2dShape& s) {
  CNNBENCH_CHECK(s.batch >= 0 && s.in_channels > 0 && s.out_channels > 0 && s.kernel > 0 &&
                     s.pad >= 0 && s.out_height() > 0 && s.out_width() > 0,
                 "conv2d: invalid shape (batch " + std::to_string(s.batch) + ", channels " +
                     std::to_string(s.in_channels) + "->" + std::to_string(s.out_channels) +
                     ", image " + std::to_string(s.height) + "x" + std::to_string(s.width) +
                     ", kernel " + std::to_string(s.kernel) + ", pad " + std::to_string(s.pad) +
                     "): the output would be empty");
}

// For kernel column kx, the output columns ox whose input column ox + kx - pad lies inside the
// image: [first, last).
struct ValidColumns {
  int first, last;
};
ValidColumns valid_columns(const Conv2dShape& s, int kx) {
  const int Wo = s.out_width();
  const int first = std::clamp(s.pad - kx, 0, Wo);
  const int last = std::clamp(s.width + s.pad - kx, first, Wo);
  return {first, last};
}

// One sample: inp (C,H,W) -> col (C*R*R, Ho*Wo); row (c,ky,kx) holds inp[c, oy+ky-pad, ox+kx-pad]
// for every output pixel (oy,ox), zero where the tap falls in the padding.
void im2col(float* col, const float* inp, const Conv2dShape& s) {
  const int H = s.height, W = s.width, R = s.kernel, Ho = s.out_height(), Wo = s.out_width();
  for (int c = 0; c < s.in_channels; ++c) {
    const float* plane = inp + std::size_t(c) * H * W;
    for (int ky = 0; ky < R; ++ky) {
      for (int kx = 0; kx < R; ++kx) {
        float* row = col + std::size_t((c * R + ky) * R + kx) * Ho * Wo;
        const auto [first, last] = valid_columns(s, kx);
        const int shift = kx - s.pad;
        for (int oy = 0; oy < Ho; ++oy) {
          float* dst = row + oy * Wo;
          const int iy = oy + ky - s.pad;
          if (iy < 0 || iy >= H) {
            std::fill_n(dst, Wo, 0.0f);
            continue;
          }
          const float* src = plane + iy * W;
          std::fill(dst, dst + first, 0.0f);
          for (int ox = first; ox < last; ++ox) dst[ox] = src[ox + shift];
          std::fill(dst + last, dst + Wo, 0.0f);
        }
      }
    }
  }
}

// The adjoint of im2col: dinp (C,H,W) = sum of every col entry back onto the pixel it was read from.
void col2im(float* dinp, const float* col, const Conv2dShape& s) {
  const int H = s.height, W = s.width, R = s.kernel, Ho = s.out_height(), Wo = s.out_width();
  std::memset(dinp, 0, sizeof(float) * s.in_channels * H * W);
  for (int c = 0; c < s.in_channels; ++c) {
    float* plane = dinp + std::size_t(c) * H * W;
    for (int ky = 0; ky < R; ++ky) {
      for (int kx = 0; kx < R; ++kx) {
        const float* row = col + std::size_t((c * R + ky) * R + kx) * Ho * Wo;
        const auto [first, last] = valid_columns(s, kx);
        const int shift = kx - s.pad;
        for (int oy = 0; oy < Ho; ++oy) {
          const int iy = oy + ky - s.pad;
          if (iy < 0 || iy >= H) continue;
          const float* src = row + oy * Wo;
          float* dst = plane + iy * W;
          for (int ox = first; ox < last; ++ox) dst[ox + shift] += src[ox];
        }
      }
    }
  }
}

}  // namespace

// One sample's column buffer; backward reuses it for the column gradient after dweight is done.
std::size_t Conv2dShape::scratch_floats() const {
  return std::size_t(in_channels) * kernel * kernel * std::max(0, out_height()) *
         std::max(0, out_width());
}

// inp (B,C,H,W), weight (K,C,R,R) = a (K, C*R*R) matrix, bias (K) -> out (B,K,Ho,Wo).
// Per sample: out_b (K, Ho*Wo) = W (K, CRR) * col (CRR, Ho*Wo) + bias.
void conv2d_forward(float* out, const float* inp, const float* weight, const float* bias,
                    const Conv2dShape& s, float* scratch) {
  check_shape(s);
  const int K = s.out_channels, CRR = s.in_channels * s.kernel * s.kernel;
  const int pixels = s.out_height() * s.out_width();
  const std::size_t in_size = std::size_t(s.in_channels) * s.height * s.width;
  for (int b = 0; b < s.batch; ++b) {
    float* out_b = out + std::size_t(b) * K * pixels;
    if (bias) {
      for (int k = 0; k < K; ++k) std::fill_n(out_b + std::size_t(k) * pixels, pixels, bias[k]);
    }
    im2col(scratch, inp + b * in_size, s);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, K, pixels, CRR, 1.0f, weight, CRR,
                scratch, pixels, bias ? 1.0f : 0.0f, out_b, pixels);
  }
}

// dout (B,K,Ho,Wo). Per sample: dW (K,CRR) += dout_b (K,P) * col^T (P,CRR); dbias += row sums;
// dcol (CRR,P) = W^T (CRR,K) * dout_b (K,P), then col2im into dinp_b (overwritten).
void conv2d_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, const Conv2dShape& s, float* scratch) {
  check_shape(s);
  const int K = s.out_channels, CRR = s.in_channels * s.kernel * s.kernel;
  const int pixels = s.out_height() * s.out_width();
  const std::size_t in_size = std::size_t(s.in_channels) * s.height * s.width;
  for (int b = 0; b < s.batch; ++b) {
    const float* dout_b = dout + std::size_t(b) * K * pixels;
    for (int k = 0; k < K; ++k) {
      const float* dout_plane = dout_b + std::size_t(k) * pixels;
      float sum = 0.0f;
      for (int p = 0; p < pixels; ++p) sum += dout_plane[p];
      dbias[k] += sum;
    }
    im2col(scratch, inp + b * in_size, s);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, K, CRR, pixels, 1.0f, dout_b, pixels,
                scratch, pixels, 1.0f, dweight, CRR);
    if (dinp) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, CRR, pixels, K, 1.0f, weight, CRR,
                  dout_b, pixels, 0.0f, scratch, pixels);
      col2im(dinp + b * in_size, scratch, s);
    }
  }
}

}  // namespace cnnbench
