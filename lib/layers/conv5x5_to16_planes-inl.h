// The input gradient of LeNet-5's c2 by tap planes, which conv5x5_to16_backward.cpp takes where
// the image fits the planes' buffers: those buffers, dout turned channels first (on AVX-512 by
// transposes in registers), the products that fill one input channel's tap planes, and their
// shifted sum. Included once per target from inside conv5x5_to16_backward.cpp only (its helpers
// have internal linkage).
#include "layers/conv5x5-inl.h"

#ifndef CNNBENCH_LAYERS_CONV5X5_TO16_PLANES_ONCE
#define CNNBENCH_LAYERS_CONV5X5_TO16_PLANES_ONCE
#include <algorithm>
#include <array>
#include <cstddef>
#include <utility>

namespace cnnbench::conv5x5 {

// dinp by planes, for images at most 16 wide and 24 high (the buffers' sizes): dout turned
// channels first, each pixel row zero-padded to whole vectors, then per input channel 25 planes,
// one per tap, each a product of depth 16 over the pixels (exactly the counted work, no zero
// taps), and the input gradient as the sum of the planes shifted by their taps.
constexpr int max_width_by_planes = 16;
constexpr int max_rows_by_planes = 24;
// Pixels of dout at the largest shape, rounded up to whole vectors of any target.
constexpr int max_plane_floats = 256;
// A row of the shifted sum reads up to 4 floats before its plane and up to 15 past its end.
constexpr int plane_margin = 16;

struct DoutPlanes {  // (16, stride): dout channels first
  alignas(64) float at[channels * max_plane_floats];
};
struct TapPlanes {  // (25, stride) of one input channel, between two margins
  alignas(64) float at[plane_margin + taps * max_plane_floats + plane_margin];
  float* first() { return at + plane_margin; }
};

// Rows of `stride` floats: the padding past each dout row and the margins around the tap planes
// (the products write the padding of the tap planes, zero).
inline void clear_plane_padding(DoutPlanes& dout_planes, TapPlanes& tap_planes, int pixels,
                                int stride) {
  for (int k = 0; k < channels; ++k) {
    std::fill(dout_planes.at + k * stride + pixels, dout_planes.at + (k + 1) * stride, 0.0f);
  }
  std::fill_n(tap_planes.at, plane_margin, 0.0f);
  std::fill_n(tap_planes.first() + taps * stride, plane_margin, 0.0f);
}

inline void fill_dout_planes(DoutPlanes& dout_planes, const float* dout, int pixels, int stride) {
  for (int p = 0; p < pixels; ++p) {
    for (int k = 0; k < channels; ++k) {
      dout_planes.at[k * stride + p] = dout[std::size_t(p) * channels + k];
    }
  }
}

}  // namespace cnnbench::conv5x5
#endif  // CNNBENCH_LAYERS_CONV5X5_TO16_PLANES_ONCE

#if defined(CNNBENCH_LAYERS_CONV5X5_TO16_PLANES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CNNBENCH_LAYERS_CONV5X5_TO16_PLANES_INL_H_
#undef CNNBENCH_LAYERS_CONV5X5_TO16_PLANES_INL_H_
#else
#define CNNBENCH_LAYERS_CONV5X5_TO16_PLANES_INL_H_
#endif

#include <hwy/highway.h>

#include "layers/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace cnnbench::HWY_NAMESPACE {
namespace {

using conv5x5::channels;
using conv5x5::taps;

// Input gradient by planes (W <= 16, H <= 24). plane[tap][p] = sum over the 16 kernels k of
// w[k][c][tap] * dout[k][p], in blocks of MB taps x PB vectors of pixels: the accumulators with
// PB dout vectors and a broadcast weight beside them. Against the rows of input pixels that the
// taps reach (each row one vector, 5 taps a row, on 14 pixels of which 10 have dout), the
// products do no work on zero padding: 208 lanes for two samples of LeNet-5's 100 pixels on
// AVX-512, where the rows did 1.6x the counted multiply-adds (the whole input gradient at batch
// 64 on avx3: 205 -> 163 us).
constexpr int plane_taps_for(int PB) {
  for (int mb = 6; mb > 1; --mb) {
    if (fits(mb * PB, PB + 1)) return mb;
  }
  return 1;
}
// The widest block in which each dout vector still serves 3 taps: AVX-512 and NEON 7 vectors
// (3 taps), AVX2 and SSE4 3 (4 and 3 taps).
constexpr int max_plane_vectors() {
  int widest = 1;
  for (int pb = 2; pb <= 12; ++pb) {
    if (plane_taps_for(pb) >= 3) widest = pb;
  }
  return widest;
}

// planes (MB rows) = w (MB taps, 16 kernels each) x dout_planes (16 rows), PB vectors of each
// row from the block's first one; both kinds of row are `stride` floats apart.
template <int MB, int PB>
HWY_NOINLINE void tap_plane_block(float* planes, const float* dout_planes, const float* w,
                                  int stride) {
  const FloatTag d;
  FloatVec acc[MB][PB];
#pragma GCC unroll 6
  for (int m = 0; m < MB; ++m) {
#pragma GCC unroll 12
    for (int i = 0; i < PB; ++i) acc[m][i] = hn::Zero(d);
  }
  for (int k = 0; k < channels; ++k) {
    FloatVec dv[PB];
#pragma GCC unroll 12
    for (int i = 0; i < PB; ++i) {
      dv[i] = hn::LoadU(d, dout_planes + k * stride + i * lanes);
      keep_in_register(dv[i]);  // one load for the MB taps
    }
#pragma GCC unroll 6
    for (int m = 0; m < MB; ++m) {
      const FloatVec wv = hn::Set(d, w[m * channels + k]);
#pragma GCC unroll 12
      for (int i = 0; i < PB; ++i) acc[m][i] = hn::MulAdd(wv, dv[i], acc[m][i]);
    }
  }
#pragma GCC unroll 6
  for (int m = 0; m < MB; ++m) {
#pragma GCC unroll 12
    for (int i = 0; i < PB; ++i) hn::StoreU(acc[m][i], d, planes + m * stride + i * lanes);
  }
}

// `rows` tap planes in blocks of MB, the rest in one smaller block.
template <int PB, int MB = plane_taps_for(PB)>
void tap_plane_rows(float* planes, const float* dout_planes, const float* w, int rows,
                    int stride) {
  int t = 0;
  for (; t + MB <= rows; t += MB) {
    tap_plane_block<MB, PB>(planes + t * stride, dout_planes, w + t * channels, stride);
  }
  if constexpr (MB > 1) {
    if (t < rows) {
      tap_plane_rows<PB, MB - 1>(planes + t * stride, dout_planes, w + t * channels, rows - t,
                                 stride);
    }
  }
}

using TapPlaneRows = void (*)(float*, const float*, const float*, int, int);
template <int... PB>
constexpr std::array<TapPlaneRows, sizeof...(PB)> tap_plane_widths(
    std::integer_sequence<int, PB...>) {
  return {&tap_plane_rows<PB + 1>...};
}

// The 25 tap planes of input channel c (packed_c: its 25 taps x 16 kernels), the pixels' vectors
// in blocks of at most max_plane_vectors() whose sizes differ by one at most.
void tap_planes(float* planes, const float* dout_planes, const float* packed_c, int pixels,
                int stride) {
  static constexpr auto widths =
      tap_plane_widths(std::make_integer_sequence<int, max_plane_vectors()>());
  const int vectors = (pixels + lanes - 1) / lanes;
  const int blocks = (vectors + max_plane_vectors() - 1) / max_plane_vectors();
  for (int b = 0, v = 0; b < blocks; ++b) {
    const int width = vectors / blocks + (b < vectors % blocks ? 1 : 0);
    widths[std::size_t(width - 1)](planes + v * lanes, dout_planes + v * lanes, packed_c, taps,
                                   stride);
    v += width;
  }
}

// Each input row is dinp_row_vectors vectors at x = 0, lanes, ..., moved left to W - lanes
// where the row ends (overlapping) or, for rows narrower than a vector, one vector stored in
// part; tap kx of the vector at x0 takes lane l from pixel x0 + l - kx of a dout row where that
// is in [0, Wo).
constexpr int dinp_row_vectors = conv5x5::max_width_by_planes / lanes;  // 1, 2 or 4
HWY_INLINE int dinp_vector_x(int v, int W) { return std::min(v * lanes, std::max(W - lanes, 0)); }
using TapMasks = hn::Mask<FloatTag>[dinp_row_vectors][5];

void make_tap_masks(TapMasks& in_row, int W) {
  const FloatTag d;
  const FloatVec Wo = hn::Set(d, float(W - 4));
  for (int v = 0; v < dinp_row_vectors; ++v) {
    for (int kx = 0; kx < 5; ++kx) {
      const FloatVec at = hn::Iota(d, float(dinp_vector_x(v, W) - kx));
      in_row[v][kx] = hn::And(hn::Ge(at, hn::Zero(d)), hn::Lt(at, Wo));
    }
  }
}

// dinp_c (H, W) = sum over taps of the tap planes shifted by (ky, kx): one accumulator per kx,
// kernel rows whose dout row is outside the image left out. Tap (ky, kx) of input row iy reads
// plane ky 5 + kx at dout row iy - ky, kx pixels to the left: planes + iy Wo + x0 + ky next_ky +
// kx next_kx, one pointer stepped along the kernel rows (indexing each tap separately, the
// address arithmetic outnumbered the loads).
void dinp_from_tap_planes(float* dinp_c, const float* planes, const TapMasks& in_row, int H, int W,
                          int stride) {
  const FloatTag d;
  const int Ho = H - 4, Wo = W - 4;
  const std::ptrdiff_t next_ky = 5 * stride - Wo, next_kx = stride - 1;
  for (int v = 0; v < dinp_row_vectors; ++v) {
    const int x0 = dinp_vector_x(v, W);
    hn::Mask<FloatTag> in[5];
#pragma GCC unroll 5
    for (int kx = 0; kx < 5; ++kx) in[kx] = in_row[v][kx];
    for (int iy = 0; iy < H; ++iy) {
      const int ky_first = std::max(0, iy - Ho + 1), ky_last = std::min(4, iy);
      const float* at = planes + iy * Wo + x0 + ky_first * next_ky;
      FloatVec acc[5];
#pragma GCC unroll 5
      for (int kx = 0; kx < 5; ++kx) acc[kx] = hn::Zero(d);
      for (int ky = ky_first; ky <= ky_last; ++ky, at += next_ky) {
#pragma GCC unroll 5
        for (int kx = 0; kx < 5; ++kx) {
          acc[kx] = hn::Add(acc[kx], hn::IfThenElseZero(in[kx], hn::LoadU(d, at + kx * next_kx)));
        }
      }
      const FloatVec sum = hn::Add(hn::Add(hn::Add(acc[0], acc[1]), hn::Add(acc[2], acc[3])),
                                   acc[4]);
      store_first(dinp_c + iy * W + x0, sum, std::min(lanes, W - x0));
    }
  }
}

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// r (16 x 16) transposed in registers: unpacks within 128-bit blocks, then block shuffles.
HWY_INLINE void transpose_16x16(__m512 (&r)[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 4; ++j) {
      t[8 * i + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + j + 4], 0x88);
      t[8 * i + j + 4] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + j + 4], 0xdd);
    }
  }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
  }
}
#endif

// dout (pixels, 16) -> dout_planes (16, stride). On AVX-512, 16 pixels at a time transposed in
// registers (pixels past the last one as zeros, the rows' padding): one float at a time, it
// took a tenth of the input gradient's time (about 20 us of LeNet-5's c2 at batch 64 on avx3).
void dout_channels_first(conv5x5::DoutPlanes& dout_planes, const float* dout, int pixels,
                         int stride) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  for (int p0 = 0; p0 < pixels; p0 += 16) {
    __m512 r[16];
    for (int i = 0; i < 16; ++i) {
      r[i] = p0 + i < pixels ? _mm512_loadu_ps(dout + std::size_t(p0 + i) * channels)
                             : _mm512_setzero_ps();
    }
    transpose_16x16(r);
    for (int k = 0; k < channels; ++k) _mm512_storeu_ps(dout_planes.at + k * stride + p0, r[k]);
  }
#else
  conv5x5::fill_dout_planes(dout_planes, dout, pixels, stride);
#endif
}

// The input gradients of `samples` consecutive samples, whose dout pixels the products take as
// one row: LeNet-5's two samples of 100 pixels are 13 vectors on AVX-512 instead of 2 x 7.
void c2_input_gradient_by_planes(float* dinp_b, const float* dout_b, const float* packed,
                                 int samples, int C, int H, int W, const TapMasks& in_row,
                                 conv5x5::DoutPlanes& dout_planes,
                                 conv5x5::TapPlanes& tap_planes_c) {
  const int sample_pixels = (H - 4) * (W - 4), pixels = samples * sample_pixels;
  const int stride = (pixels + lanes - 1) / lanes * lanes;
  conv5x5::clear_plane_padding(dout_planes, tap_planes_c, pixels, stride);
  dout_channels_first(dout_planes, dout_b, pixels, stride);
  for (int c = 0; c < C; ++c) {
    tap_planes(tap_planes_c.first(), dout_planes.at, packed + c * taps * channels, pixels,
               stride);
    for (int s = 0; s < samples; ++s) {
      dinp_from_tap_planes(dinp_b + (std::size_t(s) * C + c) * H * W,
                           tap_planes_c.first() + s * sample_pixels, in_row, H, W, stride);
    }
  }
}

}  // namespace
}  // namespace cnnbench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // CNNBENCH_LAYERS_CONV5X5_TO16_PLANES_INL_H_
