// Layer kernels: optimised == naive twin on many shapes, gradients == central finite differences,
// the max-pool tie rule, and the accumulate/overwrite contract of backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/layers.hpp"
#include "isa_targets.hpp"

namespace cnnbench {
namespace {

using Floats = std::vector<float>;

Floats random_floats(std::size_t n, Rng& rng, float lo = -1.0f, float hi = 1.0f) {
  Floats v(n);
  for (auto& x : v) x = rng.uniform(lo, hi);
  return v;
}

// max|a-b| / max(max|b|, scale_floor) <= tolerance; on failure names the first element beyond
// it. The floor serves sums of O(1) terms that cancel to near zero, whose rounding error stays
// O(1e-7) absolute however small the sum is.
template <class A, class B>
::testing::AssertionResult close(const std::vector<A>& actual, const std::vector<B>& expected,
                                 double tolerance, double scale_floor = 0.0) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "sizes differ: " << actual.size() << " vs " << expected.size();
  }
  double scale = scale_floor, max_diff = 0.0;
  // Written so that a NaN anywhere fails (std::max would silently drop it).
  for (std::size_t i = 0; i < expected.size(); ++i) {
    scale = std::max(scale, std::abs(double(expected[i])));
    const double diff = std::abs(double(actual[i]) - double(expected[i]));
    if (std::isnan(diff) || diff > max_diff) max_diff = diff;  // a NaN, once seen, stays
  }
  if (scale == 0.0) scale = 1.0;
  if (max_diff / scale <= tolerance) return ::testing::AssertionSuccess();
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (!(std::abs(double(actual[i]) - double(expected[i])) / scale <= tolerance)) {
      return ::testing::AssertionFailure()
             << "normalised max error " << max_diff / scale << " > " << tolerance
             << "; first difference at index " << i << ": " << actual[i] << " vs expected "
             << expected[i];
    }
  }
  return ::testing::AssertionFailure() << "unreachable";
}

// dL/dx by central differences of a loss evaluated in double, one element of x at a time.
std::vector<double> numeric_gradient(Floats& x, float eps, const std::function<double()>& loss) {
  std::vector<double> grad(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    x[i] = saved + eps;
    const double up = loss();
    x[i] = saved - eps;
    const double down = loss();
    x[i] = saved;
    grad[i] = (up - down) / (double(saved + eps) - double(saved - eps));
  }
  return grad;
}

// L = sum_i weights_i * out_i in double: a random projection makes every output matter.
double projected(const Floats& out, const Floats& weights) {
  double sum = 0.0;
  for (std::size_t i = 0; i < out.size(); ++i) sum += double(out[i]) * double(weights[i]);
  return sum;
}

std::string describe(const Conv2dShape& s) {
  std::ostringstream text;
  text << "B" << s.batch << " C" << s.in_channels << " " << s.height << "x" << s.width << " K"
       << s.out_channels << " R" << s.kernel << " pad" << s.pad;
  return text.str();
}

// Optimised vs naive differ by float reassociation only; every input is O(1).
constexpr double kKernelTolerance = 1e-5;
template <class A, class B>
::testing::AssertionResult matches_naive(const std::vector<A>& actual,
                                         const std::vector<B>& expected) {
  return close(actual, expected, kKernelTolerance, 1.0);
}

// --- optimised == naive ----------------------------------------------------------------------

using DenseForward = decltype(&sgemm::dense_forward);
using DenseBackward = decltype(&sgemm::dense_backward);
// The own kernels (the default backend), with the sgemm twins' signature.
// The own kernels whatever the rules say: DenseBackend::own would hand a layer to sgemm on a
// target without FMA or narrower than OpenBLAS's kernels.
constexpr DenseForward own_dense_forward = [](auto... args) {
  dense_forward(args..., DenseBackend::own_only);
};
constexpr DenseBackward own_dense_backward = [](float* dinp, float* dweight, float* dbias,
                                                const float* dout, const float* inp,
                                                const float* weight, int B, int in, int out,
                                                GradientWrite write) {
  dense_backward(dinp, dweight, dbias, dout, inp, weight, B, in, out, DenseBackend::own_only,
                 write);
};

// One dense implementation against the naive twin on shapes that take every path of the own
// kernel: forward through W^T (weights smaller than activations, e.g. 10 outputs) and through
// inp^T, 1..8-row remainders of a block and 1..4 vectors of columns with a partial last one.
void expect_dense_matches_naive(DenseForward forward, DenseBackward backward) {
  Rng rng(1);
  struct Case { int B, in, out; };
  for (const Case c : {Case{1, 1, 1}, Case{1, 7, 3}, Case{3, 13, 5}, Case{5, 300, 100},
                       Case{7, 84, 10}, Case{16, 784, 300}, Case{64, 400, 120},
                       Case{64, 84, 10}, Case{33, 120, 84}, Case{31, 400, 120}, Case{9, 17, 49},
                       Case{40, 100, 10}, Case{13, 50, 3}}) {
    SCOPED_TRACE("B" + std::to_string(c.B) + " " + std::to_string(c.in) + "->" +
                 std::to_string(c.out));
    const Floats inp = random_floats(std::size_t(c.B) * c.in, rng);
    const Floats weight = random_floats(std::size_t(c.out) * c.in, rng);
    const Floats bias = random_floats(c.out, rng);
    const Floats dout = random_floats(std::size_t(c.B) * c.out, rng);
    Floats out(std::size_t(c.B) * c.out, NAN), expected_out(out.size());
    forward(out.data(), inp.data(), weight.data(), bias.data(), c.B, c.in, c.out);
    naive::dense_forward(expected_out.data(), inp.data(), weight.data(), bias.data(), c.B, c.in,
                         c.out);
    EXPECT_TRUE(matches_naive(out, expected_out)) << "forward";
    Floats unbiased(out.size(), NAN), expected_unbiased(out.size());
    forward(unbiased.data(), inp.data(), weight.data(), nullptr, c.B, c.in, c.out);
    naive::dense_forward(expected_unbiased.data(), inp.data(), weight.data(), nullptr, c.B, c.in,
                         c.out);
    EXPECT_TRUE(matches_naive(unbiased, expected_unbiased)) << "forward without bias";

    // Backward starts from non-zero parameter gradients (it accumulates) and a garbage dinp.
    Floats dweight = random_floats(weight.size(), rng), dbias = random_floats(bias.size(), rng);
    Floats expected_dweight = dweight, expected_dbias = dbias;
    Floats dinp(inp.size(), NAN), expected_dinp(inp.size());
    backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
             c.B, c.in, c.out, GradientWrite::accumulate);
    naive::dense_backward(expected_dinp.data(), expected_dweight.data(), expected_dbias.data(),
                          dout.data(), inp.data(), weight.data(), c.B, c.in, c.out);
    EXPECT_TRUE(matches_naive(dinp, expected_dinp)) << "dinp";
    EXPECT_TRUE(matches_naive(dweight, expected_dweight)) << "dweight";
    EXPECT_TRUE(matches_naive(dbias, expected_dbias)) << "dbias";

    // Without dinp (first layer) the parameter gradients are the same.
    Floats dweight_only(weight.size(), 0.0f), dbias_only(bias.size(), 0.0f);
    Floats expected_dweight_only(weight.size(), 0.0f), expected_dbias_only(bias.size(), 0.0f);
    backward(nullptr, dweight_only.data(), dbias_only.data(), dout.data(), inp.data(),
             weight.data(), c.B, c.in, c.out, GradientWrite::accumulate);
    naive::dense_backward(nullptr, expected_dweight_only.data(), expected_dbias_only.data(),
                          dout.data(), inp.data(), weight.data(), c.B, c.in, c.out);
    EXPECT_TRUE(matches_naive(dweight_only, expected_dweight_only)) << "no-dinp dweight";
    EXPECT_TRUE(matches_naive(dbias_only, expected_dbias_only)) << "no-dinp dbias";

    // Overwrite writes over what the parameter gradients held (NaN, which an add would carry)
    // the bits that accumulating into zeros gave just above.
    Floats dweight_written(weight.size(), NAN), dbias_written(bias.size(), NAN);
    backward(nullptr, dweight_written.data(), dbias_written.data(), dout.data(), inp.data(),
             weight.data(), c.B, c.in, c.out, GradientWrite::overwrite);
    EXPECT_EQ(dweight_written, dweight_only) << "overwritten dweight";
    EXPECT_EQ(dbias_written, dbias_only) << "overwritten dbias";
  }
}

TEST(Dense, MatchesNaiveOnEveryTarget) {
  for_each_supported_isa([] { expect_dense_matches_naive(own_dense_forward, own_dense_backward); });
}

TEST(Dense, SgemmTwinMatchesNaive) {
  expect_dense_matches_naive(sgemm::dense_forward, sgemm::dense_backward);
}

// The sgemm backend (the blas baseline's) runs the sgemm twin, the own backend (the default) the
// own kernel, except where the rule hands the layer to sgemm (a target without FMA).
TEST(Dense, BackendChoosesTheKernel) {
  Rng rng(2);
  const int B = 64, in = 120, out = 84;
  const Floats inp = random_floats(std::size_t(B) * in, rng);
  const Floats weight = random_floats(std::size_t(out) * in, rng);
  const Floats bias = random_floats(out, rng);
  Floats twin(std::size_t(B) * out);
  sgemm::dense_forward(twin.data(), inp.data(), weight.data(), bias.data(), B, in, out);
  for_each_supported_isa([&] {
    Floats own(twin.size()), on_own(twin.size()), on_sgemm(twin.size());
    own_dense_forward(own.data(), inp.data(), weight.data(), bias.data(), B, in, out);
    ASSERT_NE(own, twin) << "the own kernel sums in another order than sgemm; if they agree to "
                            "the last bit this test cannot tell which one ran";
    dense_forward(on_sgemm.data(), inp.data(), weight.data(), bias.data(), B, in, out,
                  DenseBackend::sgemm);
    dense_forward(on_own.data(), inp.data(), weight.data(), bias.data(), B, in, out,
                  DenseBackend::own);
    EXPECT_EQ(on_sgemm, twin);
    EXPECT_EQ(on_own, dense_all_on_sgemm() ? twin : own);
  });
}

// OpenBLAS's kernel sets on the scale of the SIMD targets.
TEST(Dense, OpenblasCoreNamesRankAgainstTheTargets) {
  EXPECT_EQ(openblas_core_simd_level("SkylakeX"), 4);
  EXPECT_EQ(openblas_core_simd_level("SAPPHIRERAPIDS"), 4);
  EXPECT_EQ(openblas_core_simd_level("Haswell"), 3);
  EXPECT_EQ(openblas_core_simd_level("Zen"), 3);
  EXPECT_EQ(openblas_core_simd_level("Sandybridge"), 2);
  EXPECT_EQ(openblas_core_simd_level("Nehalem"), 1);
  EXPECT_EQ(openblas_core_simd_level("NEOVERSEV1"), 0);
  EXPECT_EQ(openblas_core_simd_level(""), 0);
}

// A target without a fused multiply-add (sse4, scalar), or one narrower than OpenBLAS's kernel
// set (avx2 beside SkylakeX), runs every dense layer on sgemm, forward and backward; the others
// none.
TEST(Dense, TargetsBelowOpenblasRunEveryLayerOnSgemm) {
  Rng rng(7);
  const int B = 64, in = 120, out = 84;
  const Floats inp = random_floats(std::size_t(B) * in, rng);
  const Floats weight = random_floats(std::size_t(out) * in, rng);
  const Floats dout = random_floats(std::size_t(B) * out, rng);
  struct Gradients {
    Floats dinp, dweight, dbias;
  };
  const auto backward = [&](auto&& run) {
    Gradients g{Floats(inp.size()), Floats(weight.size(), 0.0f), Floats(out, 0.0f)};
    run(g.dinp.data(), g.dweight.data(), g.dbias.data(), dout.data(), inp.data(), weight.data(),
        B, in, out, GradientWrite::accumulate);
    return g;
  };
  const Gradients twin = backward(sgemm::dense_backward);
  for_each_supported_isa([&] {
    const std::string isa = isa_info().active;
    const int openblas = openblas_core_simd_level(blas_core_name());
    const int level = isa == "avx3_dl" || isa == "avx3" ? 4 : isa == "avx2" ? 3 : -1;
    const bool on_sgemm = isa == "sse4" || isa == "scalar" || (level > 0 && openblas > level);
    SCOPED_TRACE("OpenBLAS kernels " + blas_core_name());
    EXPECT_EQ(dense_all_on_sgemm(), on_sgemm);
    const Gradients own = backward(own_dense_backward);
    // Where both sum in the same order with the same FMAs (NEON beside OpenBLAS's armv8 kernels)
    // the bits cannot tell which one ran; the rule above is then all there is to check.
    if (own.dinp == twin.dinp && own.dweight == twin.dweight) return;
    const Gradients got = backward([](float* dx, float* dw, float* db, const float* dy,
                                      const float* x, const float* w, int rows, int n_in,
                                      int n_out, GradientWrite write) {
      dense_backward(dx, dw, db, dy, x, w, rows, n_in, n_out, DenseBackend::own, write);
    });
    const Gradients& want = on_sgemm ? twin : own;
    EXPECT_EQ(got.dinp, want.dinp);
    EXPECT_EQ(got.dweight, want.dweight);
  });
}

// The own backend keeps every layer size on the own kernels, on every target with FMA (on the
// others every layer runs on sgemm): FC-3's f1 (940 KB of weights, past half an L2 of 1 MB and
// less) and a layer of 4 MB give the own kernel's bits, not sgemm's, forward and backward.
TEST(Dense, LayersOfEverySizeRunOnTheOwnKernels) {
  Rng rng(6);
  struct Case { int B, in, out; };
  int checked = 0;
  for (const Case c : {Case{64, 784, 300}, Case{8, 2048, 512}}) {
    SCOPED_TRACE("B" + std::to_string(c.B) + " " + std::to_string(c.in) + "->" +
                 std::to_string(c.out));
    const Floats inp = random_floats(std::size_t(c.B) * c.in, rng);
    const Floats weight = random_floats(std::size_t(c.out) * c.in, rng);
    const Floats bias = random_floats(c.out, rng), dout = random_floats(std::size_t(c.B) * c.out, rng);
    Floats twin(std::size_t(c.B) * c.out);
    sgemm::dense_forward(twin.data(), inp.data(), weight.data(), bias.data(), c.B, c.in, c.out);
    for_each_supported_isa([&] {
      if (dense_all_on_sgemm()) return;
      ++checked;
      Floats got(twin.size()), want(twin.size());
      dense_forward(got.data(), inp.data(), weight.data(), bias.data(), c.B, c.in, c.out);
      own_dense_forward(want.data(), inp.data(), weight.data(), bias.data(), c.B, c.in, c.out);
      ASSERT_NE(want, twin) << "the own kernel and sgemm agree to the last bit: this test cannot "
                               "tell which one ran";
      EXPECT_EQ(got, want);
      Floats dinp(inp.size()), dweight(weight.size(), 0.0f), dbias(c.out, 0.0f);
      Floats want_dinp(inp.size()), want_dweight(weight.size(), 0.0f), want_dbias(c.out, 0.0f);
      dense_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                     weight.data(), c.B, c.in, c.out);
      own_dense_backward(want_dinp.data(), want_dweight.data(), want_dbias.data(), dout.data(),
                         inp.data(), weight.data(), c.B, c.in, c.out, GradientWrite::accumulate);
      EXPECT_EQ(dinp, want_dinp);
      EXPECT_EQ(dweight, want_dweight);
    });
  }
  if (checked == 0) GTEST_SKIP() << "no SIMD target of this CPU has FMA";
}

// The weight gradient summed from several batches' factors by rows (the cluster's
// --node-update factors) has the bits of one backward over the batches' samples in order, on
// every target and row cut; a bias-free forward of some rows has the bits of the whole forward
// there. Fails if a call started a row's sum anew, or summed the batches in another order.
TEST(Dense, WeightGradientRowsFromBatchesEqualOneBackwardOverThem) {
  Rng rng(9);
  struct Case { int in, out; std::vector<int> batches; };
  int checked = 0;
  for (const Case& c : {Case{784, 300, {32, 32}}, Case{400, 120, {20, 1, 43}}, Case{37, 19, {5, 0, 6}}}) {
    int B = 0;
    for (int b : c.batches) B += b;
    SCOPED_TRACE(std::to_string(c.in) + "->" + std::to_string(c.out) + " over " + std::to_string(B));
    const Floats inp = random_floats(std::size_t(B) * c.in, rng);
    const Floats dout = random_floats(std::size_t(B) * c.out, rng);
    const Floats weight = random_floats(std::size_t(c.out) * c.in, rng);
    const Floats bias = random_floats(c.out, rng);
    for_each_supported_isa([&] {
      if (dense_all_on_sgemm()) return;
      ++checked;
      Floats want(weight.size(), 7.0f), dbias(c.out);
      dense_backward(nullptr, want.data(), dbias.data(), dout.data(), inp.data(), weight.data(), B,
                     c.in, c.out, DenseBackend::own, GradientWrite::overwrite);
      Floats want_out(std::size_t(B) * c.out);
      dense_forward(want_out.data(), inp.data(), weight.data(), bias.data(), B, c.in, c.out);
      for (const int parts : {1, 2, 3}) {
        Floats got(weight.size(), 7.0f), got_out(want_out.size());
        for (int part = 0; part < parts; ++part) {
          const int first = c.out * part / parts, last = c.out * (part + 1) / parts;
          int at = 0;
          for (std::size_t b = 0; b < c.batches.size(); ++b) {
            dense_weight_gradient_rows(got.data(), dout.data() + std::size_t(at) * c.out,
                                       inp.data() + std::size_t(at) * c.in, c.batches[b], c.in, c.out,
                                       first, last, DenseBackend::own,
                                       b == 0 ? GradientWrite::overwrite : GradientWrite::accumulate);
            Floats rows(std::size_t(c.batches[b]) * (last - first));
            dense_forward(rows.data(), inp.data() + std::size_t(at) * c.in,
                          weight.data() + std::size_t(first) * c.in, bias.data() + first, c.batches[b],
                          c.in, last - first);
            for (int i = 0; i < c.batches[b]; ++i) {
              std::copy_n(rows.data() + std::size_t(i) * (last - first), last - first,
                          got_out.data() + std::size_t(at + i) * c.out + first);
            }
            at += c.batches[b];
          }
        }
        EXPECT_EQ(got, want) << parts << " row parts";
        EXPECT_EQ(got_out, want_out) << parts << " row parts";
      }
      // A dweight of nullptr leaves the weight gradient alone and still sums the bias's.
      Floats bias_only(c.out);
      dense_backward(nullptr, nullptr, bias_only.data(), dout.data(), inp.data(), weight.data(), B,
                     c.in, c.out, DenseBackend::own, GradientWrite::overwrite);
      EXPECT_EQ(bias_only, dbias);
    });
  }
  if (checked == 0) GTEST_SKIP() << "no SIMD target of this CPU has FMA";
}

// Runs the optimised and naive conv on one shape, forward and backward, and compares. The
// scratch buffer starts as NaN (kernels must not read stale scratch) and ends in canaries that
// catch an undersized scratch_floats().
void expect_conv_matches_naive(const Conv2dShape& s, Rng& rng) {
  SCOPED_TRACE(describe(s));
  const std::size_t in_size = std::size_t(s.batch) * s.in_channels * s.height * s.width;
  const std::size_t out_size = std::size_t(s.batch) * s.out_channels * s.out_height() * s.out_width();
  const std::size_t weight_size = std::size_t(s.out_channels) * s.in_channels * s.kernel * s.kernel;
  const Floats inp = random_floats(in_size, rng);
  const Floats weight = random_floats(weight_size, rng);
  const Floats bias = random_floats(s.out_channels, rng);
  const Floats dout = random_floats(out_size, rng);
  constexpr std::size_t kCanaries = 64;
  constexpr float kCanary = 12345.0f;
  Floats scratch(s.scratch_floats() + kCanaries, NAN);
  std::fill(scratch.end() - kCanaries, scratch.end(), kCanary);

  Floats out(out_size, NAN), expected_out(out_size);
  conv2d_forward(out.data(), inp.data(), weight.data(), bias.data(), s, scratch.data());
  naive::conv2d_forward(expected_out.data(), inp.data(), weight.data(), bias.data(), s);
  EXPECT_TRUE(matches_naive(out, expected_out)) << "forward";

  Floats dweight = random_floats(weight_size, rng), dbias = random_floats(s.out_channels, rng);
  Floats expected_dweight = dweight, expected_dbias = dbias;
  Floats dinp(in_size, NAN), expected_dinp(in_size);
  conv2d_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                  weight.data(), s, scratch.data());
  naive::conv2d_backward(expected_dinp.data(), expected_dweight.data(), expected_dbias.data(),
                         dout.data(), inp.data(), weight.data(), s);
  EXPECT_TRUE(matches_naive(dinp, expected_dinp)) << "dinp";
  EXPECT_TRUE(matches_naive(dweight, expected_dweight)) << "dweight";
  EXPECT_TRUE(matches_naive(dbias, expected_dbias)) << "dbias";

  Floats dweight_only(weight_size, 0.0f), dbias_only(s.out_channels, 0.0f);
  Floats expected_dweight_only(weight_size, 0.0f), expected_dbias_only(s.out_channels, 0.0f);
  conv2d_backward(nullptr, dweight_only.data(), dbias_only.data(), dout.data(), inp.data(),
                  weight.data(), s, scratch.data());
  naive::conv2d_backward(nullptr, expected_dweight_only.data(), expected_dbias_only.data(),
                         dout.data(), inp.data(), weight.data(), s);
  EXPECT_TRUE(matches_naive(dweight_only, expected_dweight_only)) << "no-dinp dweight";
  EXPECT_TRUE(matches_naive(dbias_only, expected_dbias_only)) << "no-dinp dbias";

  EXPECT_TRUE(std::all_of(scratch.end() - kCanaries, scratch.end(),
                          [](float x) { return x == kCanary; }))
      << "a kernel wrote past scratch_floats() = " << s.scratch_floats();
}

TEST(Conv2d, MatchesNaiveOnManyShapes) {
  Rng rng(2);
  struct Image { int height, width; };
  int shapes_run = 0;
  for (int batch : {1, 2, 3})
    for (int in_channels : {1, 3})
      for (int out_channels : {1, 4})
        for (int kernel : {3, 5})
          for (int pad = 0; pad <= 2; ++pad)
            for (const Image image : {Image{4, 3}, Image{6, 5}, Image{9, 9}, Image{8, 10}}) {
              const Conv2dShape s{batch, in_channels, image.height, image.width, out_channels,
                                  kernel, pad};
              if (s.out_height() <= 0 || s.out_width() <= 0) continue;
              expect_conv_matches_naive(s, rng);
              ++shapes_run;
            }
  EXPECT_GT(shapes_run, 250);
}

TEST(Conv2d, MatchesNaiveAtLeNetShapes) {
  Rng rng(3);
  expect_conv_matches_naive(Conv2dShape{3, 1, 28, 28, 6, 5, 2}, rng);   // c1
  expect_conv_matches_naive(Conv2dShape{3, 6, 14, 14, 16, 5, 0}, rng);  // c2
}

TEST(Conv2d, RejectsAnEmptyOutput) {
  Floats buffer(1024);
  const Conv2dShape s{1, 1, 3, 3, 1, 5, 0};
  EXPECT_THROW(conv2d_forward(buffer.data(), buffer.data(), buffer.data(), buffer.data(), s,
                              buffer.data()),
               Error);
}

TEST(MaxPool, MatchesNaiveIncludingTiesAndOddSizesOnEveryTarget) {
  for_each_supported_isa([] {
    Rng rng(4);
    for (int planes : {1, 3})
      for (int H : {2, 3, 6, 7, 28})
        for (int W : {2, 5, 8, 28, 33, 70}) {
          SCOPED_TRACE(std::to_string(planes) + "x" + std::to_string(H) + "x" + std::to_string(W));
          // Few distinct values, so that many windows hold ties.
          Floats inp(std::size_t(planes) * H * W);
          for (auto& x : inp) x = float(rng.below(4)) - 1.5f;
          const Floats dout = random_floats(std::size_t(planes) * (H / 2) * (W / 2), rng);
          Floats out(dout.size(), NAN), expected_out(dout.size());
          maxpool2x2_forward(out.data(), inp.data(), planes, H, W);
          naive::maxpool2x2_forward(expected_out.data(), inp.data(), planes, H, W);
          EXPECT_TRUE(close(out, expected_out, 0.0)) << "forward";
          Floats dinp(inp.size(), NAN), expected_dinp(inp.size());
          maxpool2x2_backward(dinp.data(), dout.data(), inp.data(), planes, H, W);
          naive::maxpool2x2_backward(expected_dinp.data(), dout.data(), inp.data(), planes, H, W);
          EXPECT_TRUE(close(dinp, expected_dinp, 0.0)) << "backward";
        }
  });
}

// --- the fused fast-path kernels == chains of naive twins ---------------------------------------

Floats relu_of(Floats v) {
  for (auto& x : v) x = x > 0.0f ? x : 0.0f;
  return v;
}

// (B,K,H,W) <-> (B,H,W,K): moves the channels last (to_last) or first.
Floats move_channels(const Floats& v, int B, int K, int H, int W, bool to_last) {
  Floats out(v.size());
  for (int b = 0; b < B; ++b)
    for (int k = 0; k < K; ++k)
      for (int p = 0; p < H * W; ++p) {
        const std::size_t first = (std::size_t(b) * K + k) * H * W + p;
        const std::size_t last = (std::size_t(b) * H * W + p) * K + k;
        if (to_last) {
          out[last] = v[first];
        } else {
          out[first] = v[last];
        }
      }
  return out;
}
Floats to_channels_last(const Floats& v, int B, int K, int H, int W) {
  return move_channels(v, B, K, H, W, true);
}
Floats to_channels_first(const Floats& v, int B, int K, int H, int W) {
  return move_channels(v, B, K, H, W, false);
}

// One convolution's operands for a fused kernel and its naive twin: random input, weights and
// bias (drawn in that order), and the naive forward output (B,K,Ho,Wo) before any ReLU.
struct ConvCase {
  explicit ConvCase(const Conv2dShape& shape, Rng& rng)
      : s(shape),
        inp(random_floats(std::size_t(s.batch) * s.in_channels * s.height * s.width, rng)),
        weight(random_floats(std::size_t(s.out_channels) * s.in_channels * 25, rng)),
        bias(random_floats(s.out_channels, rng)),
        expected(std::size_t(s.batch) * s.out_channels * s.out_height() * s.out_width()) {
    naive::conv2d_forward(expected.data(), inp.data(), weight.data(), bias.data(), s);
  }
  Conv2dShape s;
  Floats inp, weight, bias, expected;
};

// The parameter gradients a fused kernel adds into (random starting values, drawn after dout) and
// what the naive backward makes of the same starting values and dout (channels first).
struct ConvGradients {
  ConvGradients(const ConvCase& c, const Floats& dout_first, Rng& rng)
      : dweight(random_floats(c.weight.size(), rng)),
        dbias(random_floats(c.s.out_channels, rng)),
        expected_dinp(c.inp.size()),
        expected_dweight(dweight),
        expected_dbias(dbias) {
    naive::conv2d_backward(expected_dinp.data(), expected_dweight.data(), expected_dbias.data(),
                           dout_first.data(), c.inp.data(), c.weight.data(), c.s);
  }
  void expect_parameters_match_naive() const {
    EXPECT_TRUE(matches_naive(dweight, expected_dweight)) << "dweight";
    EXPECT_TRUE(matches_naive(dbias, expected_dbias)) << "dbias";
  }
  Floats dweight, dbias, expected_dinp, expected_dweight, expected_dbias;
};

// c1 on one shape: forward (with ReLU) and the parameter gradients.
void expect_single_channel_matches_naive(int B, int K, int H, int W, Rng& rng) {
  SCOPED_TRACE("B" + std::to_string(B) + " K" + std::to_string(K) + " " + std::to_string(H) +
               "x" + std::to_string(W));
  const ConvCase c(Conv2dShape{B, 1, H, W, K, 5, 2}, rng);
  Floats out(c.expected.size(), NAN);
  conv5x5_pad2_relu_forward(out.data(), c.inp.data(), c.weight.data(), c.bias.data(), B, K, H, W);
  EXPECT_TRUE(matches_naive(out, relu_of(c.expected))) << "forward";

  const Floats dout = random_floats(out.size(), rng);
  ConvGradients g(c, dout, rng);
  conv5x5_pad2_backward_weights(g.dweight.data(), g.dbias.data(), dout.data(), c.inp.data(), B, K,
                                H, W);
  g.expect_parameters_match_naive();
}

// Every row width 16..28 (row tails of every length on 4-, 8- and 16-lane targets) and kernel
// counts that leave every remainder of the kernel blocks.
TEST(FusedConv, SingleChannelPad2MatchesNaiveOnEveryTarget) {
  for_each_supported_isa([] {
    Rng rng(11);
    expect_single_channel_matches_naive(2, 6, 28, 28, rng);
    expect_single_channel_matches_naive(3, 2, 5, 16, rng);
    for (int W = 16; W <= 28; ++W) {
      expect_single_channel_matches_naive(1, 1 + W % 7, 3 + W % 9, W, rng);
    }
  });
}

// c2 on one shape: forward with and without ReLU, then the backward with its input gradient
// (skipped when with_dinp is false).
void expect_sixteen_matches_naive(int B, int C, int H, int W, Rng& rng, bool with_dinp = true) {
  SCOPED_TRACE("B" + std::to_string(B) + " C" + std::to_string(C) + " " + std::to_string(H) +
               "x" + std::to_string(W) + (with_dinp ? "" : " without dinp"));
  const ConvCase c(Conv2dShape{B, C, H, W, 16, 5, 0}, rng);
  const int Ho = c.s.out_height(), Wo = c.s.out_width();
  Floats scratch(conv5x5_to16_scratch_floats(C));
  Floats out(c.expected.size(), NAN);
  conv5x5_to16_relu_forward(out.data(), c.inp.data(), c.weight.data(), c.bias.data(), B, C, H, W,
                            scratch.data());
  EXPECT_TRUE(matches_naive(out, to_channels_last(relu_of(c.expected), B, 16, Ho, Wo)))
      << "forward";
  Floats partial(out.size(), NAN);
  conv5x5_to16_forward(partial.data(), c.inp.data(), c.weight.data(), c.bias.data(), B, C, H, W,
                       scratch.data());
  EXPECT_TRUE(matches_naive(partial, to_channels_last(c.expected, B, 16, Ho, Wo)))
      << "forward without ReLU";

  const Floats dout = random_floats(out.size(), rng);  // channels last
  ConvGradients g(c, to_channels_first(dout, B, 16, Ho, Wo), rng);
  Floats dinp(c.inp.size(), NAN);
  conv5x5_to16_backward(with_dinp ? dinp.data() : nullptr, g.dweight.data(), g.dbias.data(),
                        dout.data(), c.inp.data(), c.weight.data(), B, C, H, W, scratch.data());
  if (with_dinp) {
    EXPECT_TRUE(matches_naive(dinp, g.expected_dinp)) << "dinp";
    // The input gradient alone (no dweight): the same values, and dbias left as it was.
    Floats dinp_alone(c.inp.size(), NAN), dbias_untouched(16, 7.0f);
    conv5x5_to16_backward(dinp_alone.data(), nullptr, dbias_untouched.data(), dout.data(),
                          c.inp.data(), c.weight.data(), B, C, H, W, scratch.data());
    EXPECT_TRUE(matches_naive(dinp_alone, g.expected_dinp)) << "dinp without dweight";
    EXPECT_EQ(dbias_untouched, Floats(16, 7.0f));
  }
  g.expect_parameters_match_naive();
}

// LeNet-5's c2, channel counts 1..7 (every remainder of the channel blocks), images 5x5..16x16
// (the input gradient by planes, row tails of every length), batches that several samples at a
// time leave a remainder of, the largest planes (24x16), and shapes past 16 wide or 24 high (the
// general input gradient).
TEST(FusedConv, SixteenChannelsLastMatchesNaiveOnEveryTarget) {
  for_each_supported_isa([] {
    Rng rng(12);
    expect_sixteen_matches_naive(2, 6, 14, 14, rng);
    expect_sixteen_matches_naive(2, 6, 14, 14, rng, false);
    expect_sixteen_matches_naive(3, 2, 14, 14, rng);
    expect_sixteen_matches_naive(7, 3, 9, 12, rng);
    expect_sixteen_matches_naive(3, 1, 5, 5, rng);
    expect_sixteen_matches_naive(2, 2, 24, 16, rng);
    expect_sixteen_matches_naive(2, 2, 23, 15, rng);
    for (int C = 1; C <= 7; ++C) expect_sixteen_matches_naive(1, C, 4 + C + C % 3, 16 - C, rng);
    for (int H = 5; H <= 16; ++H) expect_sixteen_matches_naive(1, 1 + H % 4, H, 21 - H, rng);
    expect_sixteen_matches_naive(1, 1, 9, 12, rng);
    expect_sixteen_matches_naive(3, 7, 5, 17, rng);
    expect_sixteen_matches_naive(1, 10, 7, 9, rng);
    expect_sixteen_matches_naive(1, 2, 26, 8, rng);
    expect_sixteen_matches_naive(1, 3, 25, 19, rng);
  });
}

// ReLU outputs with many ties and zeros: the cases where routing rules differ.
Floats tied_relu_outputs(std::size_t n, Rng& rng) {
  Floats v(n);
  for (auto& x : v) x = float(rng.below(4)) * 0.5f - 0.5f > 0.0f ? float(rng.below(3)) : 0.0f;
  return v;
}

// Naive max-pool backward, then ReLU's backward masked by the ReLU output inp.
Floats naive_pool_relu_backward(const Floats& dout, const Floats& inp, int planes, int H, int W) {
  Floats dinp(inp.size());
  naive::maxpool2x2_backward(dinp.data(), dout.data(), inp.data(), planes, H, W);
  for (std::size_t i = 0; i < dinp.size(); ++i) dinp[i] = inp[i] > 0.0f ? dinp[i] : 0.0f;
  return dinp;
}

TEST(FusedPool, ReluBackwardMatchesNaiveChainOnEveryTarget) {
  for_each_supported_isa([] {
    Rng rng(13);
    for (int H : {2, 7, 28})
      for (int W : {3, 14, 28}) {
        const int planes = 3;
        const Floats inp = tied_relu_outputs(std::size_t(planes) * H * W, rng);
        const Floats dout = random_floats(std::size_t(planes) * (H / 2) * (W / 2), rng);
        Floats dinp(inp.size(), NAN);
        maxpool2x2_relu_backward(dinp.data(), dout.data(), inp.data(), planes, H, W);
        EXPECT_TRUE(close(dinp, naive_pool_relu_backward(dout, inp, planes, H, W), 0.0))
            << H << "x" << W;
      }
  });
}

TEST(FusedPool, ChannelsLastSixteenMatchesNaiveChainOnEveryTarget) {
  for_each_supported_isa([] {
    Rng rng(14);
    for (int H : {2, 10})
      for (int W : {4, 10}) {
        const int B = 2, Ho = H / 2, Wo = W / 2;
        const Floats inp_first = tied_relu_outputs(std::size_t(B) * 16 * H * W, rng);
        const Floats inp = to_channels_last(inp_first, B, 16, H, W);
        Floats out(std::size_t(B) * 16 * Ho * Wo, NAN), expected(out.size());
        maxpool2x2_channels_last16_forward(out.data(), inp.data(), B, H, W);
        naive::maxpool2x2_forward(expected.data(), inp_first.data(), B * 16, H, W);
        EXPECT_TRUE(close(out, expected, 0.0)) << "forward " << H << "x" << W;

        const Floats dout = random_floats(out.size(), rng);
        Floats dinp(inp.size(), NAN);
        maxpool2x2_relu_channels_last16_backward(dinp.data(), dout.data(), inp.data(), B, H, W);
        const Floats expected_dinp = to_channels_last(
            naive_pool_relu_backward(dout, inp_first, B * 16, H, W), B, 16, H, W);
        EXPECT_TRUE(close(dinp, expected_dinp, 0.0)) << "backward " << H << "x" << W;
      }
  });
}

// --- the max-pool tie rule -------------------------------------------------------------------

// One 2x2 window: which of its four inputs (row-major) receives the gradient.
int routed_index(const Floats& window, bool use_naive) {
  Floats dinp(4, NAN);
  const float dout = 1.0f;
  if (use_naive) {
    naive::maxpool2x2_backward(dinp.data(), &dout, window.data(), 1, 2, 2);
  } else {
    maxpool2x2_backward(dinp.data(), &dout, window.data(), 1, 2, 2);
  }
  int routed = -1;
  for (int i = 0; i < 4; ++i) {
    if (dinp[i] == 1.0f && routed < 0) {
      routed = i;
    } else if (dinp[i] != 0.0f) {
      return -2;  // gradient split or lost
    }
  }
  return routed;
}

TEST(MaxPool, TiesGoToTheFirstMaximumInRowMajorOrder) {
  for (bool use_naive : {false, true}) {
    SCOPED_TRACE(use_naive ? "naive" : "optimised");
    EXPECT_EQ(routed_index({2, 2, 2, 2}, use_naive), 0);  // all equal: top-left
    EXPECT_EQ(routed_index({0, 3, 3, 3}, use_naive), 1);
    EXPECT_EQ(routed_index({0, 1, 3, 3}, use_naive), 2);
    EXPECT_EQ(routed_index({3, 1, 0, 3}, use_naive), 0);
    EXPECT_EQ(routed_index({0, 3, 1, 3}, use_naive), 1);
    EXPECT_EQ(routed_index({0, 1, 2, 3}, use_naive), 3);
    EXPECT_EQ(routed_index({-1, -1, -1, -1}, use_naive), 0);
  }
}

// --- backward accumulates parameter gradients and overwrites dinp ----------------------------

// backward(dinp, dweight, dbias) twice from zero parameter gradients: they must double (backward
// adds into them) while dinp stays as the first call left it (backward overwrites it).
void expect_accumulates_and_overwrites(std::size_t inputs, std::size_t weights, std::size_t biases,
                                       const std::function<void(float*, float*, float*)>& backward,
                                       const std::string& layer) {
  Floats dweight(weights, 0.0f), dbias(biases, 0.0f), dinp(inputs, NAN);
  backward(dinp.data(), dweight.data(), dbias.data());
  const Floats once_dweight = dweight, once_dbias = dbias, once_dinp = dinp;
  backward(dinp.data(), dweight.data(), dbias.data());
  Floats twice_dweight = once_dweight, twice_dbias = once_dbias;
  for (auto& x : twice_dweight) x *= 2.0f;
  for (auto& x : twice_dbias) x *= 2.0f;
  EXPECT_TRUE(close(dweight, twice_dweight, 1e-6)) << layer << " dweight";
  EXPECT_TRUE(close(dbias, twice_dbias, 1e-6)) << layer << " dbias";
  EXPECT_TRUE(close(dinp, once_dinp, 0.0)) << layer << " dinp";
}

TEST(Backward, AccumulatesParameterGradientsAndOverwritesInputGradient) {
  Rng rng(5);
  {
    const int B = 3, in = 11, out = 7;
    const Floats inp = random_floats(B * in, rng), weight = random_floats(out * in, rng);
    const Floats dout = random_floats(B * out, rng);
    expect_accumulates_and_overwrites(
        inp.size(), weight.size(), out,
        [&](float* dinp, float* dweight, float* dbias) {
          dense_backward(dinp, dweight, dbias, dout.data(), inp.data(), weight.data(), B, in, out);
        },
        "dense");
  }
  {
    const Conv2dShape s{2, 3, 7, 6, 4, 3, 1};
    const Floats inp = random_floats(2 * 3 * 7 * 6, rng), weight = random_floats(4 * 3 * 3 * 3, rng);
    const Floats dout = random_floats(2 * 4 * s.out_height() * s.out_width(), rng);
    Floats scratch(s.scratch_floats());
    expect_accumulates_and_overwrites(
        inp.size(), weight.size(), 4,
        [&](float* dinp, float* dweight, float* dbias) {
          conv2d_backward(dinp, dweight, dbias, dout.data(), inp.data(), weight.data(), s,
                          scratch.data());
        },
        "conv");
  }
}

// --- finite differences ----------------------------------------------------------------------
// Linear layers are exact under central differences, so only float rounding of the forward pass
// limits agreement; a wrong index or a missing term moves the gradient by O(1) of its scale.

constexpr double kLinearGradTolerance = 1e-4;
constexpr double kNonlinearGradTolerance = 2e-3;

TEST(FiniteDifferences, Dense) {
  Rng rng(6);
  const int B = 3, in = 5, out = 4;
  Floats inp = random_floats(B * in, rng), weight = random_floats(out * in, rng),
         bias = random_floats(out, rng);
  const Floats projection = random_floats(B * out, rng);
  auto loss = [&] {
    Floats y(B * out);
    dense_forward(y.data(), inp.data(), weight.data(), bias.data(), B, in, out);
    return projected(y, projection);
  };
  Floats dinp(inp.size()), dweight(weight.size(), 0.0f), dbias(out, 0.0f);
  dense_backward(dinp.data(), dweight.data(), dbias.data(), projection.data(), inp.data(),
                 weight.data(), B, in, out);
  EXPECT_TRUE(close(dinp, numeric_gradient(inp, 0.25f, loss), kLinearGradTolerance)) << "inp";
  EXPECT_TRUE(close(dweight, numeric_gradient(weight, 0.25f, loss), kLinearGradTolerance))
      << "weight";
  EXPECT_TRUE(close(dbias, numeric_gradient(bias, 0.25f, loss), kLinearGradTolerance)) << "bias";
}

TEST(FiniteDifferences, Conv2d) {
  Rng rng(7);
  for (const Conv2dShape s : {Conv2dShape{2, 2, 7, 6, 3, 3, 1}, Conv2dShape{1, 1, 6, 6, 2, 5, 2},
                              Conv2dShape{2, 3, 5, 7, 2, 3, 0}}) {
    SCOPED_TRACE(describe(s));
    Floats inp = random_floats(std::size_t(s.batch) * s.in_channels * s.height * s.width, rng);
    Floats weight =
        random_floats(std::size_t(s.out_channels) * s.in_channels * s.kernel * s.kernel, rng);
    Floats bias = random_floats(s.out_channels, rng);
    const Floats projection = random_floats(
        std::size_t(s.batch) * s.out_channels * s.out_height() * s.out_width(), rng);
    Floats scratch(s.scratch_floats());
    auto loss = [&] {
      Floats y(projection.size());
      conv2d_forward(y.data(), inp.data(), weight.data(), bias.data(), s, scratch.data());
      return projected(y, projection);
    };
    Floats dinp(inp.size()), dweight(weight.size(), 0.0f), dbias(bias.size(), 0.0f);
    conv2d_backward(dinp.data(), dweight.data(), dbias.data(), projection.data(), inp.data(),
                    weight.data(), s, scratch.data());
    EXPECT_TRUE(close(dinp, numeric_gradient(inp, 0.25f, loss), kLinearGradTolerance)) << "inp";
    EXPECT_TRUE(close(dweight, numeric_gradient(weight, 0.25f, loss), kLinearGradTolerance))
        << "weight";
    EXPECT_TRUE(close(dbias, numeric_gradient(bias, 0.25f, loss), kLinearGradTolerance))
        << "bias";
  }
}

// The loss the pooling gradients are checked against: <forward(inp), projection>, reading inp as
// it is at each call (numeric_gradient moves its elements).
std::function<double()> pool_loss(void (*forward)(float*, const float*, int, int, int),
                                  const Floats& inp, const Floats& projection, int planes, int H,
                                  int W) {
  return [forward, &inp, &projection, planes, H, W] {
    Floats y(projection.size());
    forward(y.data(), inp.data(), planes, H, W);
    return projected(y, projection);
  };
}

TEST(FiniteDifferences, MaxPoolWithoutTies) {
  Rng rng(8);
  const int planes = 2, H = 7, W = 6;
  // Distinct values 0.01 apart in random order: a 1e-3 step never changes a window's maximum.
  Floats inp(planes * H * W);
  std::iota(inp.begin(), inp.end(), 0.0f);
  for (std::size_t i = inp.size() - 1; i > 0; --i) std::swap(inp[i], inp[rng.below(i + 1)]);
  for (auto& x : inp) x = 0.01f * x - 0.3f;
  const Floats projection = random_floats(planes * (H / 2) * (W / 2), rng);
  const auto loss = pool_loss(maxpool2x2_forward, inp, projection, planes, H, W);
  Floats dinp(inp.size(), NAN);
  maxpool2x2_backward(dinp.data(), projection.data(), inp.data(), planes, H, W);
  EXPECT_TRUE(close(dinp, numeric_gradient(inp, 1e-3f, loss), kLinearGradTolerance));
}

TEST(FiniteDifferences, AvgPool) {
  Rng rng(9);
  const int planes = 2, H = 5, W = 6;
  Floats inp = random_floats(planes * H * W, rng);
  const Floats projection = random_floats(planes * (H / 2) * (W / 2), rng);
  const auto loss = pool_loss(avgpool2x2_forward, inp, projection, planes, H, W);
  Floats dinp(inp.size(), NAN);
  avgpool2x2_backward(dinp.data(), projection.data(), planes, H, W);
  EXPECT_TRUE(close(dinp, numeric_gradient(inp, 0.25f, loss), kLinearGradTolerance));
}

// Element-wise activations: backward from the output, checked out of place and in place.
void expect_activation_gradient(void (*forward)(float*, const float*, std::size_t),
                                void (*backward)(float*, const float*, const float*, std::size_t),
                                Floats inp, float eps, Rng& rng) {
  const Floats projection = random_floats(inp.size(), rng);
  auto loss = [&] {
    Floats y(inp.size());
    forward(y.data(), inp.data(), inp.size());
    return projected(y, projection);
  };
  Floats out(inp.size());
  forward(out.data(), inp.data(), inp.size());
  Floats dinp(inp.size(), NAN);
  backward(dinp.data(), projection.data(), out.data(), inp.size());
  EXPECT_TRUE(close(dinp, numeric_gradient(inp, eps, loss), kNonlinearGradTolerance));

  Floats in_place = inp;  // out == inp, then dinp == dout
  forward(in_place.data(), in_place.data(), in_place.size());
  EXPECT_TRUE(close(in_place, out, 0.0)) << "in-place forward";
  Floats gradient = projection;
  backward(gradient.data(), gradient.data(), in_place.data(), gradient.size());
  EXPECT_TRUE(close(gradient, dinp, 0.0)) << "in-place backward";
}

TEST(FiniteDifferences, Activations) {
  Rng rng(10);
  Floats away_from_zero(64);
  for (auto& x : away_from_zero) x = (rng.below(2) ? 1.0f : -1.0f) * rng.uniform(0.05f, 2.0f);
  {
    SCOPED_TRACE("relu");
    expect_activation_gradient(relu_forward, relu_backward, away_from_zero, 1e-2f, rng);
  }
  {
    SCOPED_TRACE("tanh");
    expect_activation_gradient(tanh_forward, tanh_backward, random_floats(64, rng, -2.0f, 2.0f),
                               1e-3f, rng);
  }
  {
    SCOPED_TRACE("sigmoid");
    expect_activation_gradient(sigmoid_forward, sigmoid_backward,
                               random_floats(64, rng, -3.0f, 3.0f), 1e-3f, rng);
  }
}

TEST(Activations, SaturateWithoutNaN) {
  const Floats extremes = {-1e4f, -100.0f, 100.0f, 1e4f};
  Floats out(extremes.size());
  sigmoid_forward(out.data(), extremes.data(), extremes.size());
  EXPECT_TRUE(close(out, Floats{0.0f, 0.0f, 1.0f, 1.0f}, 1e-6));
  tanh_forward(out.data(), extremes.data(), extremes.size());
  EXPECT_TRUE(close(out, Floats{-1.0f, -1.0f, 1.0f, 1.0f}, 1e-6));
}

TEST(FiniteDifferences, SoftmaxCrossEntropy) {
  Rng rng(11);
  const int B = 4, C = 10;
  Floats logits = random_floats(B * C, rng, -3.0f, 3.0f);
  const std::vector<std::uint8_t> labels = {3, 0, 9, 3};
  Floats scratch(B * C);
  auto loss = [&] {
    return softmax_xent_forward_backward(scratch.data(), logits.data(), labels.data(), B, C, 1.0f);
  };
  Floats dlogits(B * C, NAN);
  const double loss_sum =
      softmax_xent_forward_backward(dlogits.data(), logits.data(), labels.data(), B, C, 1.0f);
  EXPECT_TRUE(close(dlogits, numeric_gradient(logits, 1e-2f, loss), kNonlinearGradTolerance));

  // grad_scale scales the gradient only; the returned value is always the sum of losses.
  Floats scaled(B * C);
  const double scaled_loss = softmax_xent_forward_backward(scaled.data(), logits.data(),
                                                           labels.data(), B, C, 0.25f);
  EXPECT_DOUBLE_EQ(scaled_loss, loss_sum);
  for (auto& x : dlogits) x *= 0.25f;
  EXPECT_TRUE(close(scaled, dlogits, 1e-6));

  // Oracle for the loss itself: -log softmax in double.
  double expected = 0.0;
  for (int b = 0; b < B; ++b) {
    double exp_sum = 0.0;
    for (int c = 0; c < C; ++c) exp_sum += std::exp(double(logits[b * C + c]));
    expected += std::log(exp_sum) - double(logits[b * C + labels[b]]);
  }
  EXPECT_NEAR(loss_sum, expected, 1e-5 * expected);
}

TEST(SoftmaxCrossEntropy, StableForLargeLogits) {
  const Floats logits = {1e4f, 0.0f, -1e4f, 50.0f, 51.0f, 52.0f};
  const Floats shifted = {1e4f - 52.0f, -52.0f, -1e4f - 52.0f, -2.0f, -1.0f, 0.0f};
  const std::vector<std::uint8_t> labels = {1, 0};
  Floats dlogits(6), dshifted(6);
  const double loss = softmax_xent_forward_backward(dlogits.data(), logits.data(), labels.data(),
                                                    2, 3, 1.0f);
  EXPECT_TRUE(std::isfinite(loss));
  // Losses 1e4 (p[label] = e^-1e4 underflows, the loss must not) and 2 + log(1 + e^-1 + e^-2).
  const double expected = 1e4 + (std::log(1.0 + std::exp(-1.0) + std::exp(-2.0)) + 2.0);
  EXPECT_NEAR(loss, expected, 1e-6 * expected);
  for (float g : dlogits) EXPECT_TRUE(std::isfinite(g));
  // Per-row shift invariance of the gradient.
  const std::vector<std::uint8_t> shifted_labels = {1, 0};
  softmax_xent_forward_backward(dshifted.data(), shifted.data(), shifted_labels.data(), 2, 3, 1.0f);
  EXPECT_TRUE(close(Floats(dlogits.begin() + 3, dlogits.end()),
                    Floats(dshifted.begin() + 3, dshifted.end()), 1e-6));
}

TEST(SoftmaxCrossEntropy, LossMatchesTrainingLossAndCountsFirstMaxima) {
  Rng rng(12);
  const int B = 9, C = 10;
  Floats logits = random_floats(B * C, rng);
  std::vector<std::uint8_t> labels(B);
  for (auto& label : labels) label = std::uint8_t(rng.below(C));
  // Sample 0: a tie between classes 2 and 7 -> the prediction is 2.
  std::fill_n(logits.begin(), C, 0.0f);
  logits[2] = logits[7] = 5.0f;
  labels[0] = 7;
  labels[1] = 2;
  logits[1 * C + 2] = 9.0f;  // sample 1 is right

  int expected_correct = 0;
  for (int b = 0; b < B; ++b) {
    const auto row = logits.begin() + b * C;
    expected_correct += std::max_element(row, row + C) - row == labels[b] ? 1 : 0;
  }
  Floats dlogits(B * C);
  const double training_loss =
      softmax_xent_forward_backward(dlogits.data(), logits.data(), labels.data(), B, C, 1.0f);
  int correct = -1;
  const double evaluation_loss = softmax_xent_loss(logits.data(), labels.data(), B, C, &correct);
  EXPECT_NEAR(evaluation_loss, training_loss, 1e-6 * training_loss);
  EXPECT_EQ(correct, expected_correct);
  EXPECT_GE(correct, 1);
}

TEST(SoftmaxCrossEntropy, RejectsLabelsOutOfRange) {
  const Floats logits(10, 0.0f);
  const std::vector<std::uint8_t> labels = {10};
  Floats dlogits(10);
  EXPECT_THROW(softmax_xent_forward_backward(dlogits.data(), logits.data(), labels.data(), 1, 10,
                                             1.0f),
               Error);
  EXPECT_THROW(softmax_xent_loss(logits.data(), labels.data(), 1, 10, nullptr), Error);
}

}  // namespace
}  // namespace cnnbench
