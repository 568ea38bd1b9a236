// Dense (Linear) layer on OpenBLAS: out = inp * W^T + b and its backward, all as row-major sgemm.
#include <cblas.h>

#include <algorithm>

#include "cnnbench/layers.hpp"

namespace cnnbench {

// inp (B,in), weight (out,in), bias (out) -> out (B,out)
void dense_forward(float* out, const float* inp, const float* weight, const float* bias, int B,
                   int in, int out_features) {
  if (B <= 0 || out_features <= 0) return;
  // Seed every row with the bias so that sgemm adds the product onto it (beta = 1).
  if (bias) {
    for (int b = 0; b < B; ++b) std::copy_n(bias, out_features, out + std::size_t(b) * out_features);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, out_features, in, 1.0f, inp, in, weight,
              in, bias ? 1.0f : 0.0f, out, out_features);
}

// dout (B,out): dinp (B,in) = dout * W (overwritten, skipped when nullptr);
// dweight (out,in) += dout^T * inp; dbias (out) += sum over B of dout.
void dense_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                    const float* weight, int B, int in, int out_features) {
  if (B <= 0 || out_features <= 0 || in <= 0) return;
  if (dinp) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, in, out_features, 1.0f, dout,
                out_features, weight, in, 0.0f, dinp, in);
  }
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out_features, in, B, 1.0f, dout,
              out_features, inp, in, 1.0f, dweight, in);
  for (int b = 0; b < B; ++b) {
    const float* dout_row = dout + std::size_t(b) * out_features;
    for (int o = 0; o < out_features; ++o) dbias[o] += dout_row[o];
  }
}

}  // namespace cnnbench
