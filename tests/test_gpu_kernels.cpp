// The GPU kernels' per-element bodies and the composed training step, run on the CPU (no GPU
// needed) against the serial layers, models and SGD: the arithmetic the CUDA kernels execute.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <vector>

#include "../lib/strategies/gpu/training_step.hpp"
#include "cnnbench/data.hpp"
#include "cnnbench/layers.hpp"
#include "cnnbench/models.hpp"

namespace cnnbench::gpu {
namespace {

// The executor of training_step.hpp for the host: every for_each is a plain loop and every
// GEMM runs the naive gemm_at body; the order of calls is the GPU stream's order.
struct HostExecutor {
  template <class Body>
  void for_each(const char* /*name*/, std::int64_t n, Body body) {
    for (std::int64_t i = 0; i < n; ++i) body(i);
  }
  void gemm(const char* /*name*/, const GemmCall& call) {
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(call.m) * call.n; ++i) gemm_at(call, i);
  }
  void end_group(KernelGroup /*group*/) {}  // the timing stamps (tests/test_gpu_timing.cpp)
};

std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float lo = -1, float hi = 1) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.uniform(lo, hi);
  return v;
}

// max |a - b| / max |b| (0 when b is all zeros and a matches); prints the first worst element.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double max_diff = 0, max_ref = 0;
  std::size_t worst = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double diff = std::fabs(double(a[i]) - double(b[i]));
    if (diff > max_diff) {
      max_diff = diff;
      worst = i;
    }
    max_ref = std::max(max_ref, std::fabs(double(b[i])));
  }
  const double err = max_ref > 0 ? max_diff / max_ref : max_diff;
  if (err > 1e-5 && worst < a.size()) {
    std::cout << "  first worst element " << worst << ": " << a[worst] << " vs " << b[worst]
              << '\n';
  }
  return err;
}

template <class Body>
void for_all(std::int64_t n, Body body) {
  for (std::int64_t i = 0; i < n; ++i) body(i);
}

TEST(GpuKernelBodies, GatherMatchesGatherBatch) {
  const Dataset data = make_synthetic(50, 3);
  const std::vector<std::uint32_t> indices = {7, 0, 49, 13, 13, 21};
  const int B = static_cast<int>(indices.size());
  std::vector<float> x(B * image_size), x_ref(B * image_size);
  std::vector<std::uint8_t> y(B), y_ref(B);
  gather_batch(x_ref.data(), y_ref.data(), data, indices.data(), B);
  for_all(std::int64_t(B) * image_size, [&](std::int64_t i) {
    gather_sample_at(x.data(), y.data(), data.images.data(), data.labels.data(), indices.data(),
                     image_size, i);
  });
  EXPECT_EQ(x, x_ref);  // the same division, so bit-identical
  EXPECT_EQ(y, y_ref);
}

struct ConvCase {
  ConvDims dims;
  const char* what;
};

class GpuConvBodies : public ::testing::TestWithParam<ConvCase> {};

TEST_P(GpuConvBodies, ForwardMatchesNaive) {
  const ConvDims d = GetParam().dims;
  const Conv2dShape s{d.batch, d.in_channels, d.height, d.width, d.out_channels, d.kernel, d.pad};
  const auto inp = random_floats(std::size_t(d.batch) * d.in_channels * d.height * d.width, 1);
  const auto weight = random_floats(std::size_t(d.weight_count()), 2);
  const auto bias = random_floats(std::size_t(d.out_channels), 3);
  const std::size_t out_count =
      std::size_t(d.batch) * d.out_channels * d.out_height() * d.out_width();
  std::vector<float> out(out_count), ref(out_count), relu_ref(out_count);
  naive::conv2d_forward(ref.data(), inp.data(), weight.data(), bias.data(), s);
  for_all(std::int64_t(out_count), [&](std::int64_t i) {
    conv2d_forward_at(out.data(), inp.data(), weight.data(), bias.data(), d, false, i);
  });
  EXPECT_LE(relative_error(out, ref), 1e-6) << GetParam().what;

  relu_forward(relu_ref.data(), ref.data(), out_count);
  for_all(std::int64_t(out_count), [&](std::int64_t i) {
    conv2d_forward_at(out.data(), inp.data(), weight.data(), bias.data(), d, true, i);
  });
  EXPECT_LE(relative_error(out, relu_ref), 1e-6) << GetParam().what;
}

TEST_P(GpuConvBodies, BackwardMatchesNaive) {
  const ConvDims d = GetParam().dims;
  const Conv2dShape s{d.batch, d.in_channels, d.height, d.width, d.out_channels, d.kernel, d.pad};
  const std::size_t in_count = std::size_t(d.batch) * d.in_channels * d.height * d.width;
  const std::size_t out_count =
      std::size_t(d.batch) * d.out_channels * d.out_height() * d.out_width();
  const auto inp = random_floats(in_count, 4);
  const auto weight = random_floats(std::size_t(d.weight_count()), 5);
  const auto dout = random_floats(out_count, 6);
  std::vector<float> dinp_ref(in_count), dweight_ref(std::size_t(d.weight_count()), 0.0f),
      dbias_ref(std::size_t(d.out_channels), 0.0f);
  naive::conv2d_backward(dinp_ref.data(), dweight_ref.data(), dbias_ref.data(), dout.data(),
                         inp.data(), weight.data(), s);

  std::vector<float> dinp(in_count), dweight(dweight_ref.size(), -7.0f),
      dbias(dbias_ref.size(), -7.0f);  // overwritten, not accumulated
  for_all(std::int64_t(in_count), [&](std::int64_t i) {
    conv2d_input_grad_at(dinp.data(), dout.data(), weight.data(), d, i);
  });
  for (const int samples_per_chunk : {1, 2, 4, 7}) {
    const int chunks = (d.batch + samples_per_chunk - 1) / samples_per_chunk;
    std::vector<float> partials(std::size_t(chunks) * d.param_count());
    for_all(std::int64_t(partials.size()), [&](std::int64_t i) {
      conv2d_param_grad_partial_at(partials.data(), dout.data(), inp.data(), d, samples_per_chunk,
                                   i);
    });
    for_all(d.param_count(), [&](std::int64_t j) {
      conv2d_param_grad_reduce_at(dweight.data(), dbias.data(), partials.data(), d, chunks, j);
    });
    EXPECT_LE(relative_error(dweight, dweight_ref), 1e-5)
        << GetParam().what << ", " << samples_per_chunk << " samples per chunk";
    EXPECT_LE(relative_error(dbias, dbias_ref), 1e-5)
        << GetParam().what << ", " << samples_per_chunk << " samples per chunk";
  }
  EXPECT_LE(relative_error(dinp, dinp_ref), 1e-5) << GetParam().what;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GpuConvBodies,
    ::testing::Values(ConvCase{lenet5_c1_dims(3), "lenet5 c1"},
                      ConvCase{lenet5_c2_dims(5), "lenet5 c2"},
                      ConvCase{{2, 3, 7, 6, 4, 3, 1}, "odd 7x6, 3x3 pad 1"},
                      ConvCase{{3, 2, 5, 5, 1, 5, 0}, "kernel as large as the image"}));

TEST(GpuKernelBodies, MaxPoolRoutesToFirstMaximumLikeSerial) {
  const int planes = 5, H = 10, W = 8;
  // Values from a small set, so that windows have ties (first maximum wins) and zeros.
  auto inp = random_floats(std::size_t(planes) * H * W, 7, 0, 3);
  for (float& v : inp) v = std::floor(v);
  const auto dout = random_floats(std::size_t(planes) * (H / 2) * (W / 2), 8);
  std::vector<float> out(dout.size()), out_ref(dout.size());
  naive::maxpool2x2_forward(out_ref.data(), inp.data(), planes, H, W);
  for_all(std::int64_t(out.size()),
          [&](std::int64_t i) { maxpool2x2_forward_at(out.data(), inp.data(), H, W, i); });
  EXPECT_EQ(out, out_ref);

  std::vector<float> dinp(inp.size()), dinp_ref(inp.size());
  naive::maxpool2x2_backward(dinp_ref.data(), dout.data(), inp.data(), planes, H, W);
  for_all(std::int64_t(dinp.size()), [&](std::int64_t i) {
    maxpool2x2_backward_at(dinp.data(), dout.data(), inp.data(), H, W, false, i);
  });
  EXPECT_EQ(dinp, dinp_ref);

  // Fused with the ReLU mask of the pool's input, as serial does in two passes.
  relu_backward(dinp_ref.data(), dinp_ref.data(), inp.data(), dinp_ref.size());
  for_all(std::int64_t(dinp.size()), [&](std::int64_t i) {
    maxpool2x2_backward_at(dinp.data(), dout.data(), inp.data(), H, W, true, i);
  });
  EXPECT_EQ(dinp, dinp_ref);
}

TEST(GpuKernelBodies, SoftmaxCrossEntropyMatchesSerial) {
  const int B = 9, C = classes;
  auto logits = random_floats(std::size_t(B) * C, 9, -8, 8);
  logits[3] = logits[4] = 20.0f;  // a tie at the maximum
  std::vector<std::uint8_t> labels(B);
  for (int b = 0; b < B; ++b) labels[b] = static_cast<std::uint8_t>((b * 7) % C);
  const float scale = 1.0f / 64;
  std::vector<float> dlogits(logits.size()), dlogits_ref(logits.size()), sample_loss(B);
  const double loss_ref = softmax_xent_forward_backward(dlogits_ref.data(), logits.data(),
                                                        labels.data(), B, C, scale);
  for_all(B, [&](std::int64_t b) {
    softmax_xent_at(dlogits.data(), sample_loss.data(), logits.data(), labels.data(), C, scale, b);
  });
  std::vector<double> sums(3, 0.0);
  const int step = 2;
  sum_step_loss(sums.data(), &step, sample_loss.data(), B);
  EXPECT_NEAR(sums[2], loss_ref, 1e-5 * std::max(1.0, std::fabs(loss_ref)));
  EXPECT_EQ(sums[0], 0.0);
  EXPECT_LE(relative_error(dlogits, dlogits_ref), 1e-6);
}

TEST(GpuKernelBodies, DenseGemmMappingMatchesNaiveDense) {
  const int B = 6, in = 13, out = 7;
  const auto inp = random_floats(std::size_t(B) * in, 10);
  const auto weight = random_floats(std::size_t(out) * in, 11);
  const auto bias = random_floats(std::size_t(out), 12);
  const auto dout = random_floats(std::size_t(B) * out, 13);
  const std::vector<float> ones(B, 1.0f);
  HostExecutor exec;

  std::vector<float> y(std::size_t(B) * out), y_ref(y.size());
  naive::dense_forward(y_ref.data(), inp.data(), weight.data(), bias.data(), B, in, out);
  dense_forward_step(exec, y.data(), inp.data(), weight.data(), bias.data(), B, in, out, false);
  EXPECT_LE(relative_error(y, y_ref), 1e-6);

  std::vector<float> dinp_ref(inp.size()), dweight_ref(weight.size(), 0.0f),
      dbias_ref(bias.size(), 0.0f);
  naive::dense_backward(dinp_ref.data(), dweight_ref.data(), dbias_ref.data(), dout.data(),
                        inp.data(), weight.data(), B, in, out);
  std::vector<float> dinp(inp.size()), dweight(weight.size(), 5.0f), dbias(bias.size(), 5.0f);
  dense_backward_step(exec, dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                      weight.data(), ones.data(), B, in, out, false);
  EXPECT_LE(relative_error(dinp, dinp_ref), 1e-6);
  EXPECT_LE(relative_error(dweight, dweight_ref), 1e-6);
  EXPECT_LE(relative_error(dbias, dbias_ref), 1e-6);
}

TEST(GpuKernelBodies, SgdMatchesSerialSgdStep) {
  const std::size_t n = 101;
  const SgdConfig config{0.05f, 0.9f, 0.01f};
  auto params = random_floats(n, 14), momentum = random_floats(n, 15);
  const auto grads = random_floats(n, 16);
  auto params_ref = params, momentum_ref = momentum;
  sgd_step(params_ref.data(), grads.data(), momentum_ref.data(), n, config);
  for_all(std::int64_t(n), [&](std::int64_t i) {
    sgd_at(params.data(), grads.data(), momentum.data(), config.lr, config.momentum,
           config.weight_decay, i);
  });
  // Equal up to fused multiply-add contraction (the library may be built with -march=native).
  EXPECT_LE(relative_error(params, params_ref), 1e-6);
  EXPECT_LE(relative_error(momentum, momentum_ref), 1e-6);
}

// The whole GPU step, composed exactly as the CUDA strategy composes it, run on the host for a
// few steps against serial's forward_backward + sgd_step from the same init and order.
void expect_host_step_matches_serial(ModelKind kind, int B, int steps) {
  const bool lenet5 = kind == ModelKind::lenet5;
  const Dataset data = make_synthetic(64, 5);
  const auto order = epoch_order(data.count, 5, 0, true);
  const SgdConfig sgd{0.05f, 0.9f, 0.001f};
  Model serial(kind);
  init_params(serial.params, kind, 42);
  Model device = serial;

  // Serial reference.
  Workspace ws(kind, B);
  std::vector<float> x(std::size_t(B) * image_size);
  std::vector<std::uint8_t> y(B);
  std::vector<double> losses_ref;
  for (int s = 0; s < steps; ++s) {
    gather_batch(x.data(), y.data(), data, order.data() + std::size_t(s) * B, B);
    std::fill(serial.grads.begin(), serial.grads.end(), 0.0f);
    losses_ref.push_back(forward_backward(kind, serial.params.data(), serial.grads.data(),
                                          x.data(), y.data(), B, 1.0f / B, ws));
    sgd_step(serial.params.data(), serial.grads.data(), serial.momentum.data(),
             serial.params.size(), sgd);
  }

  // The GPU step on host memory.
  const StepBufferSizes n = step_buffer_floats(lenet5, B);
  std::vector<float> gx(n.x), a1(n.a1), p1(n.p1), a2(n.a2), p2(n.p2), h1(n.h1), h2(n.h2),
      logits(n.logits), da1(n.a1), dp1(n.p1), da2(n.a2), dp2(n.p2), dh1(n.h1), dh2(n.h2),
      dlogits(n.logits), sample_loss(B), partials(n.conv_partials), ones(B, 1.0f);
  std::vector<std::uint8_t> gy(B);
  std::vector<double> loss_sums(steps, 0.0);
  int step = 0;
  StepBuffers w;
  w.batch = B;
  w.x = gx.data();
  w.y = gy.data();
  w.a1 = a1.data(), w.p1 = p1.data(), w.a2 = a2.data(), w.p2 = p2.data();
  w.h1 = h1.data(), w.h2 = h2.data(), w.logits = logits.data();
  w.da1 = da1.data(), w.dp1 = dp1.data(), w.da2 = da2.data(), w.dp2 = dp2.data();
  w.dh1 = dh1.data(), w.dh2 = dh2.data(), w.dlogits = dlogits.data();
  w.sample_loss = sample_loss.data();
  w.conv_partials = partials.data();
  w.ones = ones.data();
  w.step_loss_sums = loss_sums.data();
  w.step = &step;
  const BatchSource source{data.images.data(), data.labels.data(), order.data()};
  std::vector<float*> p, g;
  for (const auto& t : device.spec().tensors) {
    p.push_back(device.params.data() + t.offset);
    g.push_back(device.grads.data() + t.offset);
  }
  std::fill(device.grads.begin(), device.grads.end(), 123.0f);  // must be overwritten
  HostExecutor exec;
  for (int s = 0; s < steps; ++s) {
    gather_batch_step(exec, source, w);
    if (lenet5) {
      lenet5_forward_backward(exec, {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9]},
                              {g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9]}, w,
                              1.0f / B);
    } else {
      fc3_forward_backward(exec, {p[0], p[1], p[2], p[3], p[4], p[5]},
                           {g[0], g[1], g[2], g[3], g[4], g[5]}, w, 1.0f / B);
    }
    sgd_update_step(exec, device.params.data(), device.grads.data(), device.momentum.data(),
                    device.params.size(), sgd.lr, sgd.momentum, sgd.weight_decay);
    advance_step(exec, w.step);
  }
  EXPECT_EQ(step, steps);
  for (int s = 0; s < steps; ++s) {
    EXPECT_NEAR(loss_sums[s], losses_ref[s], 1e-4 * std::fabs(losses_ref[s])) << "step " << s;
  }
  for (const auto& t : device.spec().tensors) {
    const auto first = static_cast<std::ptrdiff_t>(t.offset);
    const auto last = first + static_cast<std::ptrdiff_t>(t.count);
    const std::vector<float> a(device.params.begin() + first, device.params.begin() + last);
    const std::vector<float> b(serial.params.begin() + first, serial.params.begin() + last);
    const std::vector<float> va(device.momentum.begin() + first, device.momentum.begin() + last);
    const std::vector<float> vb(serial.momentum.begin() + first, serial.momentum.begin() + last);
    EXPECT_LE(relative_error(a, b), 1e-4) << model_name(kind) << " " << t.name;
    EXPECT_LE(relative_error(va, vb), 1e-4) << model_name(kind) << " momentum of " << t.name;
  }
}

TEST(GpuTrainingStepOnHost, Fc3MatchesSerial) {
  expect_host_step_matches_serial(ModelKind::fc3, 7, 4);
}

TEST(GpuTrainingStepOnHost, Lenet5MatchesSerial) {
  // 6 samples: not a multiple of the conv gradient chunk, so the last chunk is partial.
  expect_host_step_matches_serial(ModelKind::lenet5, 6, 3);
}

}  // namespace
}  // namespace cnnbench::gpu
