// FC-3 and LeNet-5 as whole models: layouts and init per PyTorch, gradients by finite differences,
// accumulation, the gradient-ready hook and PyTorch's SGD update.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "cnnbench/data.hpp"
#include "cnnbench/layers.hpp"
#include "cnnbench/models.hpp"

namespace cnnbench {
namespace {

TEST(ModelSpec, ShapesAndOrderArePyTorchs) {
  const auto& lenet = model_spec(ModelKind::lenet5);
  std::vector<std::string> names;
  for (const auto& t : lenet.tensors) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"c1.weight", "c1.bias", "c2.weight", "c2.bias",
                                             "f1.weight", "f1.bias", "f2.weight", "f2.bias",
                                             "f3.weight", "f3.bias"}));
  EXPECT_EQ(lenet.tensor("c2.weight").shape, (std::vector<std::int64_t>{16, 6, 5, 5}));
  EXPECT_EQ(lenet.tensor("f1.weight").shape, (std::vector<std::int64_t>{120, 400}));
  // PyTorch's LeNet-5 (conv pad 2) has 61,706 parameters, FC-3 266,610.
  EXPECT_EQ(lenet.param_count, 61706u);
  EXPECT_EQ(model_spec(ModelKind::fc3).param_count, 266610u);
  std::size_t offset = 0;
  for (const auto& t : lenet.tensors) {
    EXPECT_EQ(t.offset, offset) << t.name;
    const auto product = std::accumulate(t.shape.begin(), t.shape.end(), std::int64_t{1},
                                         std::multiplies<>());
    EXPECT_EQ(static_cast<std::size_t>(product), t.count) << t.name;
    offset += t.count;
  }
  EXPECT_THROW(lenet.tensor("c3.weight"), Error);
  EXPECT_THROW(parse_model("vgg16"), Error);
}

// The rows of f1 a cluster thread owns are timed as layer first_dense_timed_layer: that is "f1".
TEST(ModelSpec, FirstDenseTimedLayerIsF1) {
  for (const ModelKind kind : {ModelKind::fc3, ModelKind::lenet5}) {
    const auto& names = timed_layer_names(kind);
    const int layer = first_dense_timed_layer(kind);
    ASSERT_GE(layer, 0);
    ASSERT_LT(layer, static_cast<int>(names.size()));
    EXPECT_EQ(names[static_cast<std::size_t>(layer)], "f1") << model_name(kind);
  }
}

// The derived sizes are PyTorch's LeNet-5 activations, worked out by hand.
TEST(ModelSizes, Lenet5ActivationsAreTheHandWorkedShapes) {
  EXPECT_EQ(Lenet5Sizes::p1_side, 14);  // 28 / 2
  EXPECT_EQ(Lenet5Sizes::a2_side, 10);  // 14 - 5 + 1
  EXPECT_EQ(Lenet5Sizes::p2_side, 5);
  EXPECT_EQ(Lenet5Sizes::flat, 400);  // 16 * 5 * 5
  EXPECT_EQ(Lenet5Sizes::a1_floats, 6 * 28 * 28);
  EXPECT_EQ(Lenet5Sizes::p1_floats, 6 * 14 * 14);
  EXPECT_EQ(Lenet5Sizes::a2_floats, 16 * 10 * 10);
  EXPECT_EQ(Fc3Sizes::input, 784);
}

TEST(ModelSpec, FlopsPerImageMatchHandCount) {
  // conv: 2*C*K*R*R*Ho*Wo, dense: 2*in*out; backward = dW + dX, no dX for the first layer.
  const double c1 = 2.0 * 1 * 6 * 25 * 28 * 28, c2 = 2.0 * 6 * 16 * 25 * 10 * 10;
  const double f1 = 2.0 * 400 * 120, f2 = 2.0 * 120 * 84, f3 = 2.0 * 84 * 10;
  EXPECT_DOUBLE_EQ(model_spec(ModelKind::lenet5).train_flops_per_image,
                   3 * c1 - c1 + 3 * (c2 + f1 + f2 + f3));
  EXPECT_NEAR(model_spec(ModelKind::fc3).train_flops_per_image / 1e6, 1.1268, 1e-3);
}

TEST(Init, PyTorchRangesDeterministicPerSeed) {
  for (ModelKind kind : {ModelKind::fc3, ModelKind::lenet5}) {
    Model a(kind), b(kind), c(kind);
    init_params(a.params, kind, 42);
    init_params(b.params, kind, 42);
    init_params(c.params, kind, 43);
    EXPECT_EQ(a.params, b.params);
    EXPECT_NE(a.params, c.params);
    for (const auto& t : a.spec().tensors) {
      const float bound = 1.0f / std::sqrt(static_cast<float>(t.fan_in));
      const auto view = a.param(t.name);
      const auto [lo, hi] = std::minmax_element(view.begin(), view.end());
      EXPECT_GE(*lo, -bound) << t.name;
      EXPECT_LE(*hi, bound) << t.name;
      if (t.count >= 100) {  // a uniform fill reaches near both ends of the range
        EXPECT_LT(*lo, -0.9f * bound) << t.name;
        EXPECT_GT(*hi, 0.9f * bound) << t.name;
      }
    }
  }
}

struct Batch {
  aligned_vector<float> x;
  std::vector<std::uint8_t> y;
};

Batch make_batch(int n, std::uint64_t seed) {
  const Dataset data = make_synthetic(static_cast<std::size_t>(n), seed);
  Batch b{aligned_vector<float>(static_cast<std::size_t>(n) * 784), std::vector<std::uint8_t>(n)};
  std::vector<std::uint32_t> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), 0u);
  gather_batch(b.x.data(), b.y.data(), data, idx.data(), n);
  return b;
}

double mean_loss(ModelKind kind, const aligned_vector<float>& params, const Batch& b, int n,
                 Workspace& ws) {
  aligned_vector<float> scratch(params.size(), 0.0f);
  return forward_backward(kind, params.data(), scratch.data(), b.x.data(), b.y.data(), n, 1.0f / n,
                          ws) /
         n;
}

// Central differences on 16 random elements of every tensor against the analytic gradient,
// compared as vectors: ||numeric - analytic|| / ||analytic||. ReLU and max-pool kinks plus float
// rounding put a few percent of noise on single quotients (the layers' own tests check each kernel
// tightly); a wrong index, a missing term or a wrong scale gives an error of order 1.
class ModelGradient : public ::testing::TestWithParam<ModelKind> {};

TEST_P(ModelGradient, MatchesFiniteDifferencesPerTensor) {
  const ModelKind kind = GetParam();
  const int n = 6;
  Model m(kind);
  init_params(m.params, kind, 11);
  const Batch b = make_batch(n, 5);
  Workspace ws(kind, n);
  std::fill(m.grads.begin(), m.grads.end(), 0.0f);
  forward_backward(kind, m.params.data(), m.grads.data(), b.x.data(), b.y.data(), n, 1.0f / n, ws);
  Rng rng(99);
  const float eps = 1e-3f;
  for (const auto& t : m.spec().tensors) {
    double error2 = 0, norm2 = 0;
    for (int k = 0; k < 16; ++k) {
      const std::size_t i = t.offset + rng.below(t.count);
      aligned_vector<float> p = m.params;
      p[i] += eps;
      const double plus = mean_loss(kind, p, b, n, ws);
      p[i] = m.params[i] - eps;
      const double numeric = (plus - mean_loss(kind, p, b, n, ws)) / (2.0 * eps);
      error2 += (numeric - m.grads[i]) * (numeric - m.grads[i]);
      norm2 += double(m.grads[i]) * m.grads[i];
    }
    ASSERT_GT(norm2, 0) << t.name;
    EXPECT_LT(std::sqrt(error2 / norm2), 0.1) << model_name(kind) << " " << t.name;
  }
}

INSTANTIATE_TEST_SUITE_P(BothModels, ModelGradient,
                         ::testing::Values(ModelKind::fc3, ModelKind::lenet5),
                         [](const auto& param_info) { return std::string(model_name(param_info.param)); });

// The largest |want| and the largest |want - got| of two gradients.
struct Spread {
  float largest = 0, largest_diff = 0;
};
Spread spread(const aligned_vector<float>& want, const aligned_vector<float>& got) {
  Spread s;
  for (std::size_t i = 0; i < want.size(); ++i) {
    s.largest = std::max(s.largest, std::abs(want[i]));
    s.largest_diff = std::max(s.largest_diff, std::abs(want[i] - got[i]));
  }
  return s;
}

TEST(ForwardBackward, AccumulatesAndSplitsLikeOneBatch) {
  // Gradients of two half-batches with grad_scale 1/n added together equal the whole batch's.
  for (ModelKind kind : {ModelKind::fc3, ModelKind::lenet5}) {
    const int n = 8;
    Model m(kind);
    init_params(m.params, kind, 3);
    const Batch b = make_batch(n, 9);
    Workspace ws(kind, n);
    aligned_vector<float> whole(m.params.size(), 0.0f), halves(m.params.size(), 0.0f);
    const double loss = forward_backward(kind, m.params.data(), whole.data(), b.x.data(),
                                         b.y.data(), n, 1.0f / n, ws);
    double loss_halves = 0;
    for (int h = 0; h < 2; ++h) {
      loss_halves += forward_backward(kind, m.params.data(), halves.data(), b.x.data() + h * 4 * 784,
                                      b.y.data() + h * 4, 4, 1.0f / n, ws);
    }
    EXPECT_NEAR(loss, loss_halves, 1e-4 * loss);
    const Spread s = spread(whole, halves);
    EXPECT_LE(s.largest_diff, 1e-4f * s.largest) << model_name(kind);
    EXPECT_GT(s.largest, 0.0f);
  }
}

// GradientWrite::overwrite writes every gradient over what the buffer held (NaN here, which any
// add would carry) with the bits that accumulating into a cleared buffer gives, on both dense
// backends and through the gradient-ready hook (LeNet-5's c2 then runs in pieces).
TEST(ForwardBackward, OverwriteGivesTheBitsOfAddingIntoZeros) {
  for (ModelKind kind : {ModelKind::fc3, ModelKind::lenet5}) {
    for (DenseBackend backend : {DenseBackend::own, DenseBackend::sgemm}) {
      for (bool hooked : {false, true}) {
        const int n = 8;
        Model m(kind);
        init_params(m.params, kind, 5);
        const Batch b = make_batch(n, 6);
        Workspace ws(kind, n, backend);
        aligned_vector<float> added(m.params.size(), 0.0f);
        aligned_vector<float> written(m.params.size(), std::nanf(""));
        const auto run = [&](aligned_vector<float>& grads, GradientWrite write) {
          if (hooked) {
            return forward_backward(kind, m.params.data(), grads.data(), b.x.data(), b.y.data(),
                                    n, 1.0f / n, ws, [](int, int) {}, write);
          }
          return forward_backward(kind, m.params.data(), grads.data(), b.x.data(), b.y.data(), n,
                                  1.0f / n, ws, write);
        };
        const double loss_added = run(added, GradientWrite::accumulate);
        const double loss_written = run(written, GradientWrite::overwrite);
        const std::string where = std::string(model_name(kind)) +
                                  (backend == DenseBackend::own ? " own" : " sgemm") +
                                  (hooked ? " hooked" : "");
        EXPECT_EQ(loss_added, loss_written) << where;
        EXPECT_EQ(0, std::memcmp(added.data(), written.data(), added.size() * sizeof(float)))
            << where << ": overwritten gradients differ from those added into zeros";
        // And a second overwrite replaces the first instead of adding to it.
        run(written, GradientWrite::overwrite);
        EXPECT_EQ(0, std::memcmp(added.data(), written.data(), added.size() * sizeof(float)))
            << where << ": a second overwrite added to the first";
      }
    }
  }
}

// The workspace carries the dense backend it was built with down to every dense layer: on sgemm
// the gradients are other bits than on the own kernels (other sums), the same up to rounding.
class WorkspaceBackend : public ::testing::TestWithParam<ModelKind> {};

TEST_P(WorkspaceBackend, ReachesEveryDenseLayer) {
  const ModelKind kind = GetParam();
  Workspace on_own(kind, 8), on_sgemm(kind, 8, DenseBackend::sgemm);
  EXPECT_EQ(on_own.dense_backend(), DenseBackend::own);
  EXPECT_EQ(on_sgemm.dense_backend(), DenseBackend::sgemm);
  Model m(kind);
  init_params(m.params, kind, 4);
  const Batch b = make_batch(8, 3);
  aligned_vector<float> own(m.params.size(), 0.0f), sgemm(m.params.size(), 0.0f);
  forward_backward(kind, m.params.data(), own.data(), b.x.data(), b.y.data(), 8, 0.125f, on_own);
  forward_backward(kind, m.params.data(), sgemm.data(), b.x.data(), b.y.data(), 8, 0.125f,
                   on_sgemm);
  // On a target whose own backend hands every dense layer to sgemm too, both are sgemm's bits.
  if (dense_all_on_sgemm()) {
    EXPECT_EQ(own, sgemm) << "the own backend ran other kernels than sgemm on a target that has "
                             "every dense layer on sgemm";
  } else {
    EXPECT_NE(own, sgemm) << "the sgemm workspace ran the own kernels";
  }
  const Spread s = spread(own, sgemm);
  EXPECT_LE(s.largest_diff, 1e-4f * s.largest);
}

INSTANTIATE_TEST_SUITE_P(BothModels, WorkspaceBackend,
                         ::testing::Values(ModelKind::fc3, ModelKind::lenet5),
                         [](const auto& param_info) { return std::string(model_name(param_info.param)); });

TEST(ForwardBackward, AnnouncesEveryTensorOnceLastLayerFirst) {
  for (ModelKind kind : {ModelKind::fc3, ModelKind::lenet5}) {
    Model m(kind);
    init_params(m.params, kind, 1);
    const Batch b = make_batch(4, 2);
    Workspace ws(kind, 4);
    std::vector<std::pair<int, int>> calls;
    forward_backward(kind, m.params.data(), m.grads.data(), b.x.data(), b.y.data(), 4, 0.25f, ws,
                     [&](int first, int last) {
                       if (first <= last) calls.emplace_back(first, last);  // else: a pause
                     });
    const int tensors = static_cast<int>(m.spec().tensors.size());
    ASSERT_EQ(static_cast<int>(calls.size()), tensors / 2);
    int expected_last = tensors - 1;
    for (auto [first, last] : calls) {
      EXPECT_EQ(last, expected_last);
      EXPECT_EQ(first, last - 1);
      expected_last = first - 1;
    }

    // With the hook, backward may compute a layer in pieces: the same gradients up to rounding.
    Model plain(kind);
    plain.params = m.params;
    forward_backward(kind, plain.params.data(), plain.grads.data(), b.x.data(), b.y.data(), 4,
                     0.25f, ws);
    float max_abs = 0, max_diff = 0;
    for (std::size_t i = 0; i < plain.grads.size(); ++i) {
      max_abs = std::max(max_abs, std::abs(plain.grads[i]));
      max_diff = std::max(max_diff, std::abs(plain.grads[i] - m.grads[i]));
    }
    EXPECT_GT(max_abs, 0.0f);
    EXPECT_LE(max_diff, 1e-6f * max_abs) << model_name(kind);
  }
}

TEST(Sgd, MatchesPyTorchFormula) {
  // g += wd*p; v = mu*v + g; p -= lr*v, element by element in float.
  std::vector<float> p = {1.0f, -2.0f, 0.5f}, g = {0.1f, 0.2f, -0.3f}, v = {0.0f, 1.0f, -1.0f};
  const SgdConfig c{0.1f, 0.9f, 0.01f};
  std::vector<float> expected_p = p, expected_v = v;
  for (int i = 0; i < 3; ++i) {
    const float gi = g[i] + c.weight_decay * p[i];
    expected_v[i] = c.momentum * v[i] + gi;
    expected_p[i] = p[i] - c.lr * expected_v[i];
  }
  sgd_step(p.data(), g.data(), v.data(), 3, c);
  EXPECT_EQ(p, expected_p);
  EXPECT_EQ(v, expected_v);
}

TEST(Sgd, SummedStepsEqualSumThenStep) {
  // Three buffers over more than two of the function's chunks and a ragged end: the step must
  // see ((a + b) + c) exactly, and every buffer must be zero afterwards.
  constexpr std::size_t n = 5000;
  Rng rng(7);
  std::vector<std::vector<float>> parts(3, std::vector<float>(n));
  std::vector<float> p(n), v(n);
  for (auto& part : parts) {
    for (float& x : part) x = rng.uniform(-1.0f, 1.0f);
  }
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = rng.uniform(-1.0f, 1.0f);
    v[i] = rng.uniform(-1.0f, 1.0f);
  }
  const SgdConfig c{0.05f, 0.9f, 1e-3f};
  std::vector<float> sum(n), expected_p = p, expected_v = v;
  for (std::size_t i = 0; i < n; ++i) sum[i] = (parts[0][i] + parts[1][i]) + parts[2][i];
  sgd_step(expected_p.data(), sum.data(), expected_v.data(), n, c);

  // The replicas' form leaves the parts as they were.
  const auto kept = parts;
  std::vector<float> replica_p = p, replica_v = v;
  const std::vector<const float*> inputs = {parts[0].data(), parts[1].data(), parts[2].data()};
  sum_sgd_step(replica_p.data(), inputs.data(), 3, replica_v.data(), n, c);
  EXPECT_EQ(replica_p, expected_p);
  EXPECT_EQ(replica_v, expected_v);
  EXPECT_EQ(parts, kept);
  // One part: the plain step.
  std::vector<float> single_p = p, single_v = v, plain_p = p, plain_v = v;
  sum_sgd_step(single_p.data(), inputs.data(), 1, single_v.data(), n, c);
  sgd_step(plain_p.data(), parts[0].data(), plain_v.data(), n, c);
  EXPECT_EQ(single_p, plain_p);
  EXPECT_EQ(single_v, plain_v);

  std::vector<float*> pointers = {parts[0].data(), parts[1].data(), parts[2].data()};
  sum_sgd_step_and_clear(p.data(), pointers.data(), 3, v.data(), n, c);
  EXPECT_EQ(p, expected_p);
  EXPECT_EQ(v, expected_v);
  for (const auto& part : parts) EXPECT_EQ(part, std::vector<float>(n, 0.0f));
}

}  // namespace
}  // namespace cnnbench
