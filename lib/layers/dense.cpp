// Dense (Linear) layer: out = inp * W^T + b and its backward, row-major, on one register-blocked
// product kernel of our own rather than OpenBLAS's sgemm. Every sgemm call takes its packing
// buffer from a process-wide pool under one mutex, so the threads of one process that run dense
// layers at the same moment (the cluster's workers, the stream's actors) wait on that lock and
// pack into buffers another core wrote last. The sgemm versions stay for the "blas" baseline,
// which is there to measure OpenBLAS's own threading.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "layers/dense.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "layers/simd-inl.h"

#ifndef CNNBENCH_LAYERS_DENSE_ONCE
#define CNNBENCH_LAYERS_DENSE_ONCE
#include <cblas.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cctype>
#include <string>
#include <string_view>
#include <utility>

#include "cnnbench/core.hpp"
#include "cnnbench/layers.hpp"
#include "layers/product.hpp"
#endif

// The register-blocked product, compiled once per SIMD target.
HWY_BEFORE_NAMESPACE();
namespace cnnbench::HWY_NAMESPACE {
namespace {

using dense_kernel::Product;
using dense_kernel::Start;

// Widest column panel, in vectors: V vectors of B's row and R x V accumulators must fit the
// registers with a broadcast of A to spare (4 on 32-register targets, 2 on 16-register ones).
constexpr int max_vectors = vector_registers >= 32 ? 4 : 2;

// Rows per block for V vectors: 32 registers take 4x4, 6x3 or 8x2; 16 take 6x2 or 8x1.
template <int V>
constexpr int rows_per_block = vector_registers >= 32 ? (V <= 2 ? 8 : V == 3 ? 6 : 4)
                                                      : (V == 1 ? 8 : 6);

// Rows [r0, r0 + R) x columns [j0, j0 + lanes (V - 1) + last) of C, held in registers over the
// whole depth: per k, V vectors of B's row and R floats of A's column make R x V multiply-adds.
template <int R, int V>
void product_block(const Product& p, int r0, int j0, int last, Start start, const float* init) {
  const FloatTag d;
  const auto width = [last](int v) { return v == V - 1 ? last : lanes; };
  // Every loop over r and v unrolled: only then does GCC keep sum in registers (otherwise it
  // stores all R x V accumulators to the stack on every k).
  FloatVec sum[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const float* c = p.c + (r0 + r) * p.c_row + j0;
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      sum[r][v] = start == Start::accumulate     ? load_first(c + v * lanes, width(v))
                  : start == Start::row_value    ? hn::Set(d, init[r0 + r])
                  : start == Start::column_value ? load_first(init + j0 + v * lanes, width(v))
                                                 : hn::Zero(d);
    }
  }
  const float* a = p.a + r0 * p.a_row;
  const float* b = p.b + j0;
  for (int k = 0; k < p.depth; ++k, a += p.a_k, b += p.b_k) {
    FloatVec row[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) row[v] = load_first(b + v * lanes, width(v));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const FloatVec x = hn::Set(d, a[r * p.a_row]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) sum[r][v] = hn::MulAdd(x, row[v], sum[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* c = p.c + (r0 + r) * p.c_row + j0;
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) store_first(c + v * lanes, sum[r][v], width(v));
  }
}

using BlockFunction = void (*)(const Product&, int, int, int, Start, const float*);

template <int V, int... R>
constexpr std::array<BlockFunction, sizeof...(R)> blocks_of(std::integer_sequence<int, R...>) {
  return {&product_block<R + 1, V>...};
}

// Every row of C over the columns [j0, j0 + lanes (V - 1) + last).
template <int V>
void product_columns(const Product& p, int j0, int last, Start start, const float* init) {
  constexpr int rows = rows_per_block<V>;
  static constexpr auto blocks = blocks_of<V>(std::make_integer_sequence<int, rows>{});
  int r0 = 0;
  for (; r0 + rows <= p.rows; r0 += rows) {
    // An accumulated C (a weight gradient, up to 940 KB) is read a few rows of one panel at a
    // time, rows far apart: the hardware prefetcher does not follow, so ask for the next block's.
    if (start == Start::accumulate) {
      const int next_rows = std::min(rows, p.rows - r0 - rows);
      for (int r = 0; r < next_rows; ++r) {
        const float* c = p.c + (r0 + rows + r) * p.c_row + j0;
        for (int line = 0; line < V * lanes; line += 16) hwy::Prefetch(c + line);  // 64-byte lines
      }
    }
    blocks[rows - 1](p, r0, j0, last, start, init);
  }
  if (r0 < p.rows) blocks[static_cast<std::size_t>(p.rows - r0 - 1)](p, r0, j0, last, start, init);
}

template <int... V>
void product_panel(const Product& p, int j0, int vectors, int last, Start start, const float* init,
                   std::integer_sequence<int, V...>) {
  ((vectors == V + 1 ? product_columns<V + 1>(p, j0, last, start, init) : void()), ...);
}

}  // namespace

// Depth in blocks of depth_block, column panels of max_vectors within a block: B's panel
// (depth_block x panel floats) stays in L1 across the rows, and A's block (rows x depth_block) in
// L2 across the panels. Without the depth blocks a 16-float panel of FC-3's f1 forward re-read
// its 940 KB of weights from L3 once per panel. C is stored and reloaded between depth blocks,
// which changes no bit of the result: every element still sums its products in order of k.
constexpr int depth_block = lanes >= 16 ? 128 : 256;

void multiply(const Product& p, Start start, const float* init) {
  constexpr int panel = max_vectors * lanes;
  for (int k0 = 0; k0 < p.depth; k0 += depth_block) {
    Product block = p;
    block.a += k0 * p.a_k;
    block.b += k0 * p.b_k;
    block.depth = std::min(depth_block, p.depth - k0);
    const Start block_start = k0 == 0 ? start : Start::accumulate;
    for (int j0 = 0; j0 < p.cols; j0 += panel) {
      const int width = std::min(panel, p.cols - j0);
      const int vectors = (width + lanes - 1) / lanes;
      const int last = width - (vectors - 1) * lanes;
      product_panel(block, j0, vectors, last, block_start, init,
                    std::make_integer_sequence<int, max_vectors>{});
    }
  }
}

// Whether this target has a fused multiply-add (AVX2, AVX-512, NEON on aarch64): without one a
// product costs a multiply and an add, and the own kernel has half the peak of OpenBLAS's.
bool target_fuses_multiply_add() { return HWY_NATIVE_FMA != 0; }

// This target's x86 SIMD level on the scale of openblas_core_simd_level (4 AVX-512, 3 AVX2,
// 1 SSE4, 0 scalar); -1 off x86, where no OpenBLAS kernel set is ranked against ours.
int target_simd_level() {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  return 4;
#elif HWY_TARGET == HWY_AVX2
  return 3;
#elif HWY_TARGET == HWY_SSE4
  return 1;
#elif HWY_TARGET == HWY_SCALAR
  return 0;
#else
  return -1;
#endif
}

// dst (cols, rows) = src (rows, cols)^T. Blocks of 4 x 4 floats go through 128-bit registers
// (two rounds of interleaves), which every target but the scalar one has; the edges that are not
// whole blocks, and the scalar target, copy float by float. Tiles of 16 x 16 keep the rows that
// a tile reads and writes in L1.
void transpose_loop(float* HWY_RESTRICT dst, const float* HWY_RESTRICT src, int rows, int cols) {
  constexpr int tile = 16;
  const auto at = [](int row, int col, int row_length) {
    return std::size_t(row) * std::size_t(row_length) + std::size_t(col);
  };
  const auto copy = [&](int r0, int r1, int c0, int c1) {
    for (int r = r0; r < r1; ++r) {
      for (int c = c0; c < c1; ++c) dst[at(c, r, rows)] = src[at(r, c, cols)];
    }
  };
  for (int r0 = 0; r0 < rows; r0 += tile) {
    for (int c0 = 0; c0 < cols; c0 += tile) {
      const int r1 = std::min(rows, r0 + tile), c1 = std::min(cols, c0 + tile);
#if HWY_TARGET == HWY_SCALAR
      copy(r0, r1, c0, c1);
#else
      const hn::Full128<float> d;
      const hn::Repartition<std::uint64_t, decltype(d)> d64;
      const int r4 = r0 + (r1 - r0) / 4 * 4, c4 = c0 + (c1 - c0) / 4 * 4;
      for (int r = r0; r < r4; r += 4) {
        for (int c = c0; c < c4; c += 4) {
          const auto row0 = hn::LoadU(d, src + at(r, c, cols));
          const auto row1 = hn::LoadU(d, src + at(r + 1, c, cols));
          const auto row2 = hn::LoadU(d, src + at(r + 2, c, cols));
          const auto row3 = hn::LoadU(d, src + at(r + 3, c, cols));
          // (a0 b0 a1 b1), (c0 d0 c1 d1), (a2 b2 a3 b3), (c2 d2 c3 d3)
          const auto ab01 = hn::BitCast(d64, hn::InterleaveLower(d, row0, row1));
          const auto cd01 = hn::BitCast(d64, hn::InterleaveLower(d, row2, row3));
          const auto ab23 = hn::BitCast(d64, hn::InterleaveUpper(d, row0, row1));
          const auto cd23 = hn::BitCast(d64, hn::InterleaveUpper(d, row2, row3));
          hn::StoreU(hn::BitCast(d, hn::InterleaveLower(d64, ab01, cd01)), d,
                     dst + at(c, r, rows));
          hn::StoreU(hn::BitCast(d, hn::InterleaveUpper(d64, ab01, cd01)), d,
                     dst + at(c + 1, r, rows));
          hn::StoreU(hn::BitCast(d, hn::InterleaveLower(d64, ab23, cd23)), d,
                     dst + at(c + 2, r, rows));
          hn::StoreU(hn::BitCast(d, hn::InterleaveUpper(d64, ab23, cd23)), d,
                     dst + at(c + 3, r, rows));
        }
      }
      copy(r0, r4, c4, c1);
      copy(r4, r1, c0, c1);
#endif
    }
  }
}

}  // namespace cnnbench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "layers/kernel_dispatch.h"

namespace cnnbench {

namespace {

using dense_kernel::Product;
using dense_kernel::Start;

HWY_EXPORT(multiply);

void multiply(const Product& p, Start start, const float* init = nullptr) {
  CNNBENCH_DISPATCH(dense, multiply)(p, start, init);
}

HWY_EXPORT(transpose_loop);
HWY_EXPORT(target_fuses_multiply_add);
HWY_EXPORT(target_simd_level);

// dst (cols, rows) = src (rows, cols)^T.
void transpose(float* dst, const float* src, int rows, int cols) {
  CNNBENCH_DISPATCH(dense, transpose_loop)(dst, src, rows, cols);
}

// Per-thread scratch for the forward pass's transposes; grows to the largest layer and stays.
float* scratch(std::size_t floats) {
  thread_local aligned_vector<float> buffer;
  if (buffer.size() < floats) buffer.resize(floats);
  return buffer.data();
}

// Every row of out (B,out) set to the bias, or to zero without one.
void seed_rows_with_bias(float* out, const float* bias, int B, int out_features) {
  for (int b = 0; b < B; ++b) {
    float* row = out + std::size_t(b) * out_features;
    if (bias) {
      std::copy_n(bias, out_features, row);
    } else {
      std::fill_n(row, out_features, 0.0f);
    }
  }
}

// dbias (out) += sum over B of dout (B,out).
void add_bias_gradient(float* dbias, const float* dout, int B, int out_features) {
  for (int b = 0; b < B; ++b) {
    const float* dout_row = dout + std::size_t(b) * out_features;
    for (int o = 0; o < out_features; ++o) dbias[o] += dout_row[o];
  }
}

}  // namespace

namespace sgemm {

// inp (B,in), weight (out,in), bias (out) -> out (B,out)
void dense_forward(float* out, const float* inp, const float* weight, const float* bias, int B,
                   int in, int out_features) {
  if (B <= 0 || out_features <= 0) return;
  // Seed every row with the bias so that sgemm adds the product onto it (beta = 1).
  seed_rows_with_bias(out, bias, B, out_features);
  if (in <= 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, out_features, in, 1.0f, inp, in, weight,
              in, 1.0f, out, out_features);
}

// dout (B,out): dinp (B,in) = dout * W (overwritten, skipped when nullptr);
// dweight (out,in) += dout^T * inp; dbias (out) += sum over B of dout (= with overwrite).
void dense_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                    const float* weight, int B, int in, int out_features, GradientWrite write) {
  if (B <= 0 || out_features <= 0 || in <= 0) return;
  if (dinp) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, in, out_features, 1.0f, dout,
                out_features, weight, in, 0.0f, dinp, in);
  }
  if (write == GradientWrite::overwrite) std::fill_n(dbias, out_features, 0.0f);
  add_bias_gradient(dbias, dout, B, out_features);
  if (dweight) dense_weight_gradient_rows(dweight, dout, inp, B, in, out_features, 0, out_features, write);
}

void dense_weight_gradient_rows(float* dweight, const float* dout, const float* inp, int B, int in,
                                int out_features, int row_begin, int row_end, GradientWrite write) {
  const int rows = row_end - row_begin;
  if (rows <= 0 || in <= 0) return;
  float* first = dweight + std::size_t(row_begin) * in;
  // Zeros then beta = 1, not beta = 0: the same bits as accumulating into a cleared buffer.
  if (write == GradientWrite::overwrite) std::fill_n(first, std::size_t(rows) * in, 0.0f);
  if (B <= 0) return;
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, in, B, 1.0f, dout + row_begin,
              out_features, inp, in, 1.0f, first, in);
}

}  // namespace sgemm

int openblas_core_simd_level(std::string_view core) {
  std::string name(core);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* avx512 : {"skylakex", "cooperlake", "sapphirerapids"}) {
    if (name == avx512) return 4;
  }
  for (const char* avx2 : {"haswell", "zen", "excavator"}) {
    if (name == avx2) return 3;
  }
  for (const char* avx : {"sandybridge", "bulldozer", "piledriver", "steamroller"}) {
    if (name == avx) return 2;
  }
  for (const char* sse : {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom",
                          "opteron", "opteron(sse3)", "barcelona", "bobcat"}) {
    if (name == sse) return 1;
  }
  return 0;
}

// Measured on a Sapphire Rapids-class Xeon (2 MB L2, OpenBLAS on its SkylakeX kernels): with
// --isa sse4, serial FC-3 trained at 28,400 images/s on the own 4-lane kernels without FMA, 0.51x
// PyTorch on its AVX2 setting; with --isa avx2 the blas baseline beat serial FC-3 by 1.4x
// (paired sweep), because OpenBLAS runs the kernels of the CPU's own ISA whatever target ours are
// narrowed to. On a target without FMA, or one narrower than OpenBLAS's kernels, every dense
// layer runs on sgemm (OPENBLAS_CORETYPE=Haswell with --isa avx2 keeps the own AVX2 kernels: the
// two then emulate an AVX2 machine together). The rule reads the target and OpenBLAS's kernel
// set, never a timing.
bool dense_all_on_sgemm() {
  static const int openblas_level = openblas_core_simd_level(blas_core_name());
  if (!CNNBENCH_DISPATCH(dense, target_fuses_multiply_add)()) return true;
  const int target_level = CNNBENCH_DISPATCH(dense, target_simd_level)();
  return openblas_level > 0 && target_level >= 0 && openblas_level > target_level;
}

namespace {

// The own register-blocked kernels (DenseBackend::own_only, and own where no rule says sgemm).
void own_dense_forward(float* out, const float* inp, const float* weight, const float* bias, int B,
                       int in, int out_features) {
  if (B <= 0 || out_features <= 0) return;
  if (in <= 0) return seed_rows_with_bias(out, bias, B, out_features);  // no products
  // The kernel wants B's rows contiguous: either W^T (in, out) with out's rows as C, or inp^T
  // (in, B) with out^T as C and a transpose back. Whichever moves fewer floats.
  const std::size_t weight_floats = std::size_t(out_features) * in;
  const std::size_t activation_floats = std::size_t(B) * (in + out_features);
  if (weight_floats <= activation_floats) {
    float* weight_t = scratch(weight_floats);
    transpose(weight_t, weight, out_features, in);
    multiply({inp, in, 1, weight_t, out_features, out, out_features, B, out_features, in},
             bias ? Start::column_value : Start::zero, bias);
  } else {
    float* inp_t = scratch(activation_floats);
    float* out_t = inp_t + std::size_t(B) * in;
    transpose(inp_t, inp, B, in);
    multiply({weight, in, 1, inp_t, B, out_t, B, out_features, B, in},
             bias ? Start::row_value : Start::zero, bias);
    transpose(out, out_t, out_features, B);
  }
}

// dweight's rows [row_begin, row_end) from dout's columns there: each element sums its products
// in order of the batch, so calls over consecutive batches, the first overwriting, give the bits
// of one call over all their samples. Overwrite starts each sum at zero in registers, as
// accumulate starts it at a cleared buffer's zero: the same bits without a pass over dweight
// (FC-3's f1: 940 KB) before backward.
void own_weight_gradient_rows(float* dweight, const float* dout, const float* inp, int B, int in,
                              int out_features, int row_begin, int row_end, GradientWrite write) {
  const int rows = row_end - row_begin;
  if (rows <= 0 || in <= 0) return;
  float* first = dweight + std::size_t(row_begin) * in;
  if (B <= 0) {
    if (write == GradientWrite::overwrite) std::fill_n(first, std::size_t(rows) * in, 0.0f);
    return;
  }
  multiply({dout + row_begin, 1, out_features, inp, in, first, in, rows, in, B},
           write == GradientWrite::overwrite ? Start::zero : Start::accumulate);
}

void own_dense_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, int B, int in, int out_features,
                        GradientWrite write) {
  if (B <= 0 || out_features <= 0 || in <= 0) return;
  // dinp[b][i] = sum_o dout[b][o] W[o][i]; dweight[o][i] += sum_b dout[b][o] inp[b][i].
  if (dinp) {
    multiply({dout, out_features, 1, weight, in, dinp, in, B, in, out_features}, Start::zero);
  }
  if (write == GradientWrite::overwrite) std::fill_n(dbias, out_features, 0.0f);
  add_bias_gradient(dbias, dout, B, out_features);
  if (dweight) own_weight_gradient_rows(dweight, dout, inp, B, in, out_features, 0, out_features, write);
}

// Whether a call on `backend` runs on sgemm: the sgemm backend always, the own one by the rule.
bool on_sgemm(DenseBackend backend) {
  return backend == DenseBackend::sgemm ||
         (backend == DenseBackend::own && dense_all_on_sgemm());
}

}  // namespace

// inp (B,in), weight (out,in), bias (out) -> out (B,out)
void dense_forward(float* out, const float* inp, const float* weight, const float* bias, int B,
                   int in, int out_features, DenseBackend backend) {
  if (on_sgemm(backend)) {
    sgemm::dense_forward(out, inp, weight, bias, B, in, out_features);
  } else {
    own_dense_forward(out, inp, weight, bias, B, in, out_features);
  }
}

void dense_weight_gradient_rows(float* dweight, const float* dout, const float* inp, int B, int in,
                                int out_features, int row_begin, int row_end, DenseBackend backend,
                                GradientWrite write) {
  if (on_sgemm(backend)) {
    sgemm::dense_weight_gradient_rows(dweight, dout, inp, B, in, out_features, row_begin, row_end, write);
  } else {
    own_weight_gradient_rows(dweight, dout, inp, B, in, out_features, row_begin, row_end, write);
  }
}

// dout (B,out): dinp (B,in) = dout * W (overwritten, skipped when nullptr);
// dweight (out,in) += dout^T * inp; dbias (out) += sum over B of dout.
void dense_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                    const float* weight, int B, int in, int out_features, DenseBackend backend,
                    GradientWrite write) {
  if (on_sgemm(backend)) {
    sgemm::dense_backward(dinp, dweight, dbias, dout, inp, weight, B, in, out_features, write);
  } else {
    own_dense_backward(dinp, dweight, dbias, dout, inp, weight, B, in, out_features, write);
  }
}

}  // namespace cnnbench
#endif  // HWY_ONCE
