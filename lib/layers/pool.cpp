// 2x2 stride-2 pooling over planes (max and average). An odd last row or column is ignored, as
// PyTorch's floor mode does; backward writes zeros there.
#include <cstring>

#include "cnnbench/layers.hpp"

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
