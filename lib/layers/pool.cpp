// 2x2 stride-2 pooling over planes (max and average). An odd last row or column is ignored, as
// PyTorch's floor mode does; backward writes zeros there.
#include <cstring>
#include <string>

#include "cnnbench/core.hpp"
#include "cnnbench/layers.hpp"
#include "vector16.hpp"

namespace cnnbench {

// inp (planes,H,W) -> out (planes,H/2,W/2)
void maxpool2x2_forward(float* out, const float* inp, int planes, int H, int W) {
  const int Ho = H / 2, Wo = W / 2;
  for (int p = 0; p < planes; ++p) {
    for (int oy = 0; oy < Ho; ++oy) {
      const float* top = inp + (std::size_t(p) * H + 2 * oy) * W;
      const float* bottom = top + W;
      float* dst = out + (std::size_t(p) * Ho + oy) * Wo;
      for (int ox = 0; ox < Wo; ++ox) {
        const float upper = top[2 * ox] >= top[2 * ox + 1] ? top[2 * ox] : top[2 * ox + 1];
        const float lower =
            bottom[2 * ox] >= bottom[2 * ox + 1] ? bottom[2 * ox] : bottom[2 * ox + 1];
        dst[ox] = upper >= lower ? upper : lower;
      }
    }
  }
}

namespace {

// One pair of input rows: recomputes each window's first maximum in row-major order (a b / c d:
// a wins ties with everything, b with c and d, c with d) and writes all four gradients.
// Bitwise & instead of && keeps the loop free of branches, which random data would mispredict;
// __restrict__ (the rows never overlap) lets it vectorise without run-time overlap checks.
void maxpool2x2_backward_rows(float* __restrict__ dtop, float* __restrict__ dbottom,
                              const float* __restrict__ g, const float* __restrict__ top,
                              const float* __restrict__ bottom, int Wo) {
  for (int ox = 0; ox < Wo; ++ox) {
    const float a = top[2 * ox], b = top[2 * ox + 1], c = bottom[2 * ox], d = bottom[2 * ox + 1];
    const float upper = a >= b ? a : b, lower = c >= d ? c : d;
    const float max = upper >= lower ? upper : lower;
    const bool a_wins = a == max;
    const bool b_wins = (b == max) & !a_wins;
    const bool c_wins = (c == max) & !a_wins & !b_wins;
    const bool d_wins = !a_wins & !b_wins & !c_wins;
    dtop[2 * ox] = a_wins ? g[ox] : 0.0f;
    dtop[2 * ox + 1] = b_wins ? g[ox] : 0.0f;
    dbottom[2 * ox] = c_wins ? g[ox] : 0.0f;
    dbottom[2 * ox + 1] = d_wins ? g[ox] : 0.0f;
  }
}

}  // namespace

// Full windows route their gradient to one input; an odd last row/column gets zeros.
void maxpool2x2_backward(float* dinp, const float* dout, const float* inp, int planes, int H,
                         int W) {
  const int Ho = H / 2, Wo = W / 2;
  for (int p = 0; p < planes; ++p) {
    const float* plane = inp + std::size_t(p) * H * W;
    float* dplane = dinp + std::size_t(p) * H * W;
    for (int oy = 0; oy < Ho; ++oy) {
      float* dtop = dplane + 2 * oy * W;
      maxpool2x2_backward_rows(dtop, dtop + W, dout + (std::size_t(p) * Ho + oy) * Wo,
                               plane + 2 * oy * W, plane + (2 * oy + 1) * W, Wo);
      if (W % 2 != 0) dtop[W - 1] = dtop[2 * W - 1] = 0.0f;
    }
    if (H % 2 != 0) std::memset(dplane + std::size_t(H - 1) * W, 0, sizeof(float) * W);
  }
}

// The same routing where inp is a ReLU output: a window whose maximum is 0 had no positive input,
// so ReLU's backward would zero what max-pool routed; both happen here in one pass.
void maxpool2x2_relu_backward(float* dinp, const float* dout, const float* inp, int planes, int H,
                              int W) {
  maxpool2x2_backward(dinp, dout, inp, planes, H, W);
  const std::size_t n = std::size_t(planes) * H * W;
  for (std::size_t i = 0; i < n; ++i) dinp[i] = inp[i] > 0.0f ? dinp[i] : 0.0f;
}

namespace {

void check_channels_last_shape(int H, int W) {
  CNNBENCH_CHECK(H >= 2 && W >= 2 && H % 2 == 0 && W % 2 == 0,
                 "maxpool2x2 channels-last: needs even sizes (got " + std::to_string(H) + "x" +
                     std::to_string(W) + ")");
}

}  // namespace

// inp (B,H,W,16) channels last -> out (B,16,H/2,W/2) channels first, i.e. flatten order.
void maxpool2x2_channels_last16_forward(float* out, const float* inp, int B, int H, int W) {
  check_channels_last_shape(H, W);
  const int Ho = H / 2, Wo = W / 2;
  for (int b = 0; b < B; ++b) {
    const float* inp_b = inp + std::size_t(b) * H * W * 16;
    float* out_b = out + std::size_t(b) * 16 * Ho * Wo;
    for (int oy = 0; oy < Ho; ++oy) {
      for (int ox = 0; ox < Wo; ++ox) {
        const float* a = inp_b + (std::size_t(2 * oy) * W + 2 * ox) * 16;
        const float* c = a + std::size_t(W) * 16;
        const simd::f16 va = simd::load(a), vb = simd::load(a + 16);
        const simd::f16 vc = simd::load(c), vd = simd::load(c + 16);
        const simd::f16 upper = va >= vb ? va : vb, lower = vc >= vd ? vc : vd;
        const simd::f16 max = upper >= lower ? upper : lower;
        for (int k = 0; k < 16; ++k) out_b[(k * Ho + oy) * Wo + ox] = max[k];
      }
    }
  }
}

// dout (B,16,H/2,W/2) -> dinp (B,H,W,16), where inp (B,H,W,16) is a ReLU output: max-pool's
// first-maximum routing and ReLU's backward in one pass, 16 channels at a time.
void maxpool2x2_relu_channels_last16_backward(float* dinp, const float* dout, const float* inp,
                                              int B, int H, int W) {
  check_channels_last_shape(H, W);
  const int Ho = H / 2, Wo = W / 2;
  const simd::f16 zero = {};
  for (int b = 0; b < B; ++b) {
    const float* inp_b = inp + std::size_t(b) * H * W * 16;
    const float* dout_b = dout + std::size_t(b) * 16 * Ho * Wo;
    float* dinp_b = dinp + std::size_t(b) * H * W * 16;
    for (int oy = 0; oy < Ho; ++oy) {
      for (int ox = 0; ox < Wo; ++ox) {
        const std::size_t top = (std::size_t(2 * oy) * W + 2 * ox) * 16;
        const std::size_t bottom = top + std::size_t(W) * 16;
        const simd::f16 va = simd::load(inp_b + top), vb = simd::load(inp_b + top + 16);
        const simd::f16 vc = simd::load(inp_b + bottom), vd = simd::load(inp_b + bottom + 16);
        const simd::f16 upper = va >= vb ? va : vb, lower = vc >= vd ? vc : vd;
        const simd::f16 max = upper >= lower ? upper : lower;
        simd::f16 g;
        for (int k = 0; k < 16; ++k) g[k] = dout_b[(k * Ho + oy) * Wo + ox];
        g = max > 0.0f ? g : zero;  // ReLU: no positive input, no gradient
        const auto a_wins = va == max;
        const auto b_wins = (vb == max) & ~a_wins;
        const auto c_wins = (vc == max) & ~a_wins & ~b_wins;
        const auto d_wins = ~a_wins & ~b_wins & ~c_wins;
        simd::store(dinp_b + top, a_wins ? g : zero);
        simd::store(dinp_b + top + 16, b_wins ? g : zero);
        simd::store(dinp_b + bottom, c_wins ? g : zero);
        simd::store(dinp_b + bottom + 16, d_wins ? g : zero);
      }
    }
  }
}

// inp (planes,H,W) -> out (planes,H/2,W/2): mean of each window.
void avgpool2x2_forward(float* out, const float* inp, int planes, int H, int W) {
  const int Ho = H / 2, Wo = W / 2;
  for (int p = 0; p < planes; ++p) {
    for (int oy = 0; oy < Ho; ++oy) {
      const float* top = inp + (std::size_t(p) * H + 2 * oy) * W;
      const float* bottom = top + W;
      float* dst = out + (std::size_t(p) * Ho + oy) * Wo;
      for (int ox = 0; ox < Wo; ++ox) {
        dst[ox] = 0.25f * ((top[2 * ox] + top[2 * ox + 1]) + (bottom[2 * ox] + bottom[2 * ox + 1]));
      }
    }
  }
}

// Each window's gradient is shared equally by its four inputs.
void avgpool2x2_backward(float* dinp, const float* dout, int planes, int H, int W) {
  const int Ho = H / 2, Wo = W / 2;
  for (int p = 0; p < planes; ++p) {
    float* dplane = dinp + std::size_t(p) * H * W;
    for (int oy = 0; oy < Ho; ++oy) {
      float* dtop = dplane + 2 * oy * W;
      float* dbottom = dtop + W;
      const float* g = dout + (std::size_t(p) * Ho + oy) * Wo;
      for (int ox = 0; ox < Wo; ++ox) {
        const float share = 0.25f * g[ox];
        dtop[2 * ox] = dtop[2 * ox + 1] = dbottom[2 * ox] = dbottom[2 * ox + 1] = share;
      }
      if (W % 2 != 0) dtop[W - 1] = dbottom[W - 1] = 0.0f;
    }
    if (H % 2 != 0) std::memset(dplane + std::size_t(H - 1) * W, 0, sizeof(float) * W);
  }
}

}  // namespace cnnbench
