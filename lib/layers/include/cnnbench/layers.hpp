// Layers as forward/backward free functions over plain float pointers with explicit sizes.
// Conventions (as in llm.c): outputs first, gradients prefixed `d`; backward *accumulates* into
// parameter gradients (dweight, dbias += ...) so micro-batches and shares can add up, and
// *overwrites* the input gradient dinp (which may be nullptr when not needed). dense_backward can
// also write its parameter gradients over what they held (GradientWrite::overwrite): the first
// contribution of a step then needs no buffer cleared before it, with the same bits as adding
// into zeros.
// Every optimised kernel has a naive twin in namespace cnnbench::naive: the tests' oracle.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace cnnbench {

// --- dense (Linear): inp (B,in), weight (out,in), bias (out) -> out (B,out) -------------------
// What a dense layer runs on, chosen by the caller: the own register-blocked kernels (default),
// or OpenBLAS sgemm (the sgemm versions below), which the blas baseline passes so that it
// measures OpenBLAS's own threading. OpenBLAS's thread count is not part of this choice: it is
// OpenBLAS's process-wide setting (set_blas_threads, cnnbench/core.hpp).
// own_only runs the own kernels whatever the rule below says: the tests' subject.
enum class DenseBackend { own, sgemm, own_only };
enum class GradientWrite { accumulate, overwrite };
void dense_forward(float* out, const float* inp, const float* weight, const float* bias, int B,
                   int in, int out_features, DenseBackend backend = DenseBackend::own);
// dweight may be nullptr: the weight gradient is then left to dense_weight_gradient_rows (dbias
// is still summed).
void dense_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                    const float* weight, int B, int in, int out_features,
                    DenseBackend backend = DenseBackend::own,
                    GradientWrite write = GradientWrite::accumulate);
// The weight gradient's rows [row_begin, row_end) (output features) alone: dweight (out,in) there
// += (overwrite: =) dout[:, rows]^T inp. On the own kernels every element sums its products in
// order of the batch, so one call per batch over consecutive batches, the first overwriting,
// gives the bits of one dense_backward over all their samples: a weight gradient summed from
// several threads' inputs and output gradients (their "sufficient factors").
void dense_weight_gradient_rows(float* dweight, const float* dout, const float* inp, int B, int in,
                                int out_features, int row_begin, int row_end,
                                DenseBackend backend = DenseBackend::own,
                                GradientWrite write = GradientWrite::accumulate);
namespace sgemm {
// The same layer as OpenBLAS sgemm calls.
void dense_forward(float* out, const float* inp, const float* weight, const float* bias, int B,
                   int in, int out_features);
void dense_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                    const float* weight, int B, int in, int out_features,
                    GradientWrite write = GradientWrite::accumulate);
void dense_weight_gradient_rows(float* dweight, const float* dout, const float* inp, int B, int in,
                                int out_features, int row_begin, int row_end,
                                GradientWrite write = GradientWrite::accumulate);
}  // namespace sgemm
// The own backend runs every layer size on its own cache-blocked kernels, except that every layer
// runs on sgemm (dense_all_on_sgemm()) when the SIMD target in use has no fused multiply-add (sse4,
// scalar) or is narrower than OpenBLAS's kernel set (--isa avx2 where OpenBLAS runs SkylakeX):
// OpenBLAS runs the CPU's own ISA whatever --isa says. A rule of target and kernel set, never of
// timing: reruns take the same kernels.
bool dense_all_on_sgemm();
// OpenBLAS's kernel set (openblas_get_corename(): "SkylakeX", "Haswell", "Zen", ...) as an x86
// SIMD level: 4 AVX-512, 3 AVX2, 2 AVX, 1 SSE, 0 when not known (ARM, a new name).
int openblas_core_simd_level(std::string_view core);

// --- conv2d, stride 1, zero padding: inp (B,C,H,W), weight (K,C,R,R), bias (K) -> (B,K,Ho,Wo) --
struct Conv2dShape {
  int batch = 1, in_channels = 1, height = 28, width = 28, out_channels = 1, kernel = 5, pad = 0;
  int out_height() const { return height + 2 * pad - kernel + 1; }
  int out_width() const { return width + 2 * pad - kernel + 1; }
  // Floats of scratch space the optimised kernels need (im2col buffers and the like).
  std::size_t scratch_floats() const;
};
void conv2d_forward(float* out, const float* inp, const float* weight, const float* bias,
                    const Conv2dShape& s, float* scratch);
void conv2d_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, const Conv2dShape& s, float* scratch);

// --- pooling 2x2 stride 2 over planes: inp (planes,H,W) -> out (planes,H/2,W/2) ---------------
// Max-pool backward routes each gradient to the first maximum of its window (row-major),
// as PyTorch does; it recomputes that from inp so no index buffer is needed.
void maxpool2x2_forward(float* out, const float* inp, int planes, int H, int W);
void maxpool2x2_backward(float* dinp, const float* dout, const float* inp, int planes, int H, int W);
void avgpool2x2_forward(float* out, const float* inp, int planes, int H, int W);
void avgpool2x2_backward(float* dinp, const float* dout, int planes, int H, int W);

// --- element-wise activations; backward uses the forward *output* (in-place safe) -------------
void relu_forward(float* out, const float* inp, std::size_t n);
void relu_backward(float* dinp, const float* dout, const float* out, std::size_t n);
void tanh_forward(float* out, const float* inp, std::size_t n);
void tanh_backward(float* dinp, const float* dout, const float* out, std::size_t n);
void sigmoid_forward(float* out, const float* inp, std::size_t n);
void sigmoid_backward(float* dinp, const float* dout, const float* out, std::size_t n);

// --- softmax cross-entropy: logits (B,C), labels (B) -----------------------------------------
// Returns the *sum* of the B per-sample losses (the caller divides by the global batch) and
// writes dlogits = (softmax - onehot) * grad_scale; grad_scale = 1/global_batch gives the mean.
double softmax_xent_forward_backward(float* dlogits, const float* logits, const std::uint8_t* labels,
                                     int B, int C, float grad_scale);
// Sum of losses and number of correct argmax predictions, no gradient (evaluation).
double softmax_xent_loss(const float* logits, const std::uint8_t* labels, int B, int C,
                         int* correct);

// --- fused kernels of the serial fast path (LeNet-5), each equal to a chain of the above -----
// Direct 5x5 convolution, one input channel, pad 2, + bias + ReLU:
// inp (B,1,H,W), weight (K,1,5,5), bias (K) -> out (B,K,H,W); needs 16 <= W <= 28, H <= 28.
void conv5x5_pad2_relu_forward(float* out, const float* inp, const float* weight,
                               const float* bias, int B, int K, int H, int W);
// Its parameter gradients (no input gradient: it is a first layer): dout (B,K,H,W) is the
// gradient after ReLU's backward; dweight (K,1,5,5) and dbias (K) are accumulated.
void conv5x5_pad2_backward_weights(float* dweight, float* dbias, const float* dout,
                                   const float* inp, int B, int K, int H, int W);
// Direct 5x5 convolution to 16 output channels, no padding, + bias + ReLU, output channels last:
// inp (B,C,H,W), weight (16,C,5,5), bias (16) -> out (B,H-4,W-4,16).
// scratch holds conv5x5_to16_scratch_floats(C) floats (weights repacked channels last).
std::size_t conv5x5_to16_scratch_floats(int C);
void conv5x5_to16_relu_forward(float* out, const float* inp, const float* weight,
                               const float* bias, int B, int C, int H, int W, float* scratch);
// The same without the ReLU: a block of input channels whose partial sums are added up first.
void conv5x5_to16_forward(float* out, const float* inp, const float* weight, const float* bias,
                          int B, int C, int H, int W, float* scratch);
// dout (B,H-4,W-4,16) channels last (after ReLU's backward): dinp (B,C,H,W) overwritten (skipped
// when nullptr), dweight (16,C,5,5) and dbias (16) accumulated (both skipped when dweight is
// nullptr, which leaves the input gradient alone to time).
void conv5x5_to16_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                           const float* inp, const float* weight, int B, int C, int H, int W,
                           float* scratch);
// Max-pool backward followed by ReLU's backward, where inp (planes,H,W) is the ReLU output.
void maxpool2x2_relu_backward(float* dinp, const float* dout, const float* inp, int planes, int H,
                              int W);
// 2x2 max-pool from channels last to channels first: inp (B,H,W,16) -> out (B,16,H/2,W/2).
void maxpool2x2_channels_last16_forward(float* out, const float* inp, int B, int H, int W);
// Its backward fused with ReLU's (inp is the ReLU output): dout (B,16,H/2,W/2) -> dinp (B,H,W,16).
void maxpool2x2_relu_channels_last16_backward(float* dinp, const float* dout, const float* inp,
                                              int B, int H, int W);

namespace naive {
void dense_forward(float* out, const float* inp, const float* weight, const float* bias, int B,
                   int in, int out_features);
void dense_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                    const float* weight, int B, int in, int out_features);
void conv2d_forward(float* out, const float* inp, const float* weight, const float* bias,
                    const Conv2dShape& s);
void conv2d_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, const Conv2dShape& s);
void maxpool2x2_forward(float* out, const float* inp, int planes, int H, int W);
void maxpool2x2_backward(float* dinp, const float* dout, const float* inp, int planes, int H, int W);
}  // namespace naive

}  // namespace cnnbench
