// Per-layer micro-benchmarks at the shapes FC-3 and LeNet-5 train with, for batch 1..256, each
// reporting GFLOP/s and its share of one core's sgemm peak (peak_share, micro_common.hpp); plain
// sgemm at 64^3..1024^3 shows how that rate depends on the product's size. Pooling, ReLU and
// softmax count one "flop" per comparison / add / multiply / exp (layer_flops.hpp).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdint>
#include <memory>
#include <string>

#include "benchmarks.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/layers.hpp"
#include "micro_common.hpp"

namespace cnnbench::micro {

namespace {

// --- dense -------------------------------------------------------------------------------------

using DenseForward = decltype(&sgemm::dense_forward);
using DenseBackward = decltype(&sgemm::dense_backward);

void register_dense_kernel(const DenseLayer layer, const std::string& prefix, DenseForward forward,
                           DenseBackward backward) {
  benchmark::RegisterBenchmark(
      (prefix + "dense_forward/" + layer.name).c_str(), [layer, forward](benchmark::State& state) {
        const int B = int(state.range(0));
        const auto inp = random_buffer(std::size_t(B) * layer.in, 1);
        const auto weight = random_buffer(std::size_t(layer.out) * layer.in, 2);
        const auto bias = random_buffer(layer.out, 3);
        aligned_vector<float> out(std::size_t(B) * layer.out);
        time_kernel(state, layer.forward_flops(B), out.data(), [&] {
          forward(out.data(), inp.data(), weight.data(), bias.data(), B, layer.in, layer.out);
        });
      })->Apply(with_batches);

  benchmark::RegisterBenchmark(
      (prefix + "dense_backward/" + layer.name).c_str(), [layer, backward](benchmark::State& state) {
        const int B = int(state.range(0));
        const auto inp = random_buffer(std::size_t(B) * layer.in, 1);
        const auto weight = random_buffer(std::size_t(layer.out) * layer.in, 2);
        const auto dout = random_buffer(std::size_t(B) * layer.out, 4);
        aligned_vector<float> dinp(std::size_t(B) * layer.in);
        aligned_vector<float> dweight(weight.size()), dbias(layer.out);
        float* dinp_or_null = layer.needs_dinp ? dinp.data() : nullptr;
        time_kernel(state, layer.backward_flops(B), dweight.data(), [&] {
          backward(dinp_or_null, dweight.data(), dbias.data(), dout.data(), inp.data(),
                   weight.data(), B, layer.in, layer.out, GradientWrite::accumulate);
        });
      })->Apply(with_batches);
}

// The layer on its own kernels ("dense_...") and on one-thread OpenBLAS sgemm ("sgemm_dense_...",
// what the blas baseline runs), side by side.
void register_dense(const DenseLayer layer) {
  struct Kernel {
    std::string prefix;
    DenseForward forward;
    DenseBackward backward;
  };
  // The own kernels are dense_forward's default backend.
  const DenseForward own_forward = [](auto... args) { dense_forward(args...); };
  const DenseBackward own_backward = [](float* dinp, float* dweight, float* dbias,
                                        const float* dout, const float* inp, const float* weight,
                                        int B, int in, int out, GradientWrite write) {
    dense_backward(dinp, dweight, dbias, dout, inp, weight, B, in, out, DenseBackend::own, write);
  };
  for (const Kernel& kernel : {Kernel{"", own_forward, own_backward},
                               Kernel{"sgemm_", sgemm::dense_forward, sgemm::dense_backward}}) {
    register_dense_kernel(layer, kernel.prefix, kernel.forward, kernel.backward);
  }
}

// The weight gradient of half a layer's rows summed over two shares of the batch from their
// factors (--node-update factors: two calls, the second accumulating), against one share's
// whole weight gradient (what each thread of a data-parallel split computes). Batch = the
// whole batch; each share holds half of it.
void register_dense_factor_rows(const DenseLayer layer) {
  benchmark::RegisterBenchmark(
      ("dense_weight_gradient_half_rows_two_shares/" + std::string(layer.name)).c_str(),
      [layer](benchmark::State& state) {
        const int B = int(state.range(0)), share = B / 2, rows = layer.out / 2;
        const auto inp = random_buffer(std::size_t(B) * layer.in, 1);
        const auto dout = random_buffer(std::size_t(B) * layer.out, 4);
        aligned_vector<float> dweight(std::size_t(layer.out) * layer.in);
        time_kernel(state, 2.0 * B * rows * layer.in, dweight.data(), [&] {
          for (int s = 0; s < 2; ++s) {
            dense_weight_gradient_rows(dweight.data(), dout.data() + std::size_t(s) * share * layer.out,
                                       inp.data() + std::size_t(s) * share * layer.in, share,
                                       layer.in, layer.out, 0, rows, DenseBackend::own,
                                       s == 0 ? GradientWrite::overwrite : GradientWrite::accumulate);
          }
        });
      })->Apply(with_batches);
  // The forward of half the rows: per share (what a thread of --node-update factors runs on
  // FC-3's f1), or over the whole batch at once.
  for (const int calls : {1, 2}) {
    benchmark::RegisterBenchmark(
        ("dense_forward_half_rows_" + std::string(calls == 1 ? "whole_batch" : "two_shares") + "/" +
         layer.name).c_str(),
        [layer, calls](benchmark::State& state) {
          const int B = int(state.range(0)), share = B / calls, rows = layer.out / 2;
          const auto inp = random_buffer(std::size_t(B) * layer.in, 1);
          const auto weight = random_buffer(std::size_t(layer.out) * layer.in, 2);
          const auto bias = random_buffer(layer.out, 3);
          aligned_vector<float> out(std::size_t(B) * rows);
          time_kernel(state, 2.0 * B * rows * layer.in, out.data(), [&] {
            for (int s = 0; s < calls; ++s) {
              dense_forward(out.data() + std::size_t(s) * share * rows,
                            inp.data() + std::size_t(s) * share * layer.in, weight.data(), bias.data(),
                            share, layer.in, rows);
            }
          });
        })->Apply(with_batches);
  }
  benchmark::RegisterBenchmark(
      ("dense_weight_gradient_all_rows_one_share/" + std::string(layer.name)).c_str(),
      [layer](benchmark::State& state) {
        const int B = int(state.range(0)), share = B / 2;
        const auto inp = random_buffer(std::size_t(B) * layer.in, 1);
        const auto dout = random_buffer(std::size_t(B) * layer.out, 4);
        aligned_vector<float> dweight(std::size_t(layer.out) * layer.in);
        time_kernel(state, 2.0 * share * layer.out * layer.in, dweight.data(), [&] {
          dense_weight_gradient_rows(dweight.data(), dout.data(), inp.data(), share, layer.in,
                                     layer.out, 0, layer.out, DenseBackend::own,
                                     GradientWrite::overwrite);
        });
      })->Apply(with_batches);
}

// --- conv2d ------------------------------------------------------------------------------------

void register_conv(const ConvLayer layer) {
  benchmark::RegisterBenchmark(
      ("conv2d_forward/" + std::string(layer.name)).c_str(), [layer](benchmark::State& state) {
        const Conv2dShape s = layer.shape(int(state.range(0)));
        const auto inp = random_buffer(input_floats(s), 1);
        const auto weight = random_buffer(weight_floats(s), 2);
        const auto bias = random_buffer(s.out_channels, 3);
        aligned_vector<float> out(output_floats(s));
        aligned_vector<float> scratch(s.scratch_floats());
        time_kernel(state, conv_product_flops(s), out.data(), [&] {
          conv2d_forward(out.data(), inp.data(), weight.data(), bias.data(), s, scratch.data());
        });
      })->Apply(with_batches);

  benchmark::RegisterBenchmark(
      ("conv2d_backward/" + std::string(layer.name)).c_str(), [layer](benchmark::State& state) {
        const Conv2dShape s = layer.shape(int(state.range(0)));
        const auto inp = random_buffer(input_floats(s), 1);
        const auto weight = random_buffer(weight_floats(s), 2);
        const auto dout = random_buffer(output_floats(s), 4);
        aligned_vector<float> dinp(inp.size()), dweight(weight.size()), dbias(s.out_channels);
        aligned_vector<float> scratch(s.scratch_floats());
        float* dinp_or_null = layer.needs_dinp ? dinp.data() : nullptr;
        time_kernel(state, conv_backward_flops(layer, s.batch), dweight.data(), [&] {
          conv2d_backward(dinp_or_null, dweight.data(), dbias.data(), dout.data(), inp.data(),
                          weight.data(), s, scratch.data());
        });
      })->Apply(with_batches);
}

// --- the fused LeNet-5 kernels of the serial fast path ------------------------------------------

// Each pass of the serial LeNet-5 step on the kernels it runs, through register_fused
// (micro_common.hpp); flops as for the plain layers. c2's backward also as its weight gradient
// alone and its input gradient alone. Buffers live in the closure; each benchmark keeps its own.
void register_fused_lenet5() {
  const ConvLayer c1 = kLenet5Conv[0], c2 = kLenet5Conv[1];
  const PoolLayer pool1 = kLenet5Pool[0], pool2 = kLenet5Pool[1];
  const int channels = c2.in_channels;  // c1's output, c2's input
  const int side1 = c1.size, side2 = c2.size, a2_side = pool2.size;
  const double c1_flops = conv_product_flops(c1.shape(1));
  const double c2_flops = conv_product_flops(c2.shape(1));
  register_fused("conv5x5_pad2_relu_forward/lenet5.c1", c1_flops, [=](int B) {
    const Conv2dShape s = c1.shape(B);
    auto inp = random_buffer(input_floats(s), 1), weight = random_buffer(weight_floats(s), 2),
         bias = random_buffer(s.out_channels, 3);
    auto out = std::make_shared<aligned_vector<float>>(output_floats(s));
    return [=] {
      conv5x5_pad2_relu_forward(out->data(), inp.data(), weight.data(), bias.data(), B, channels,
                                side1, side1);
    };
  });
  register_fused("conv5x5_pad2_backward_weights/lenet5.c1", conv_backward_weights_flops(c1, 1),
                 [=](int B) {
                   const Conv2dShape s = c1.shape(B);
                   auto inp = random_buffer(input_floats(s), 1),
                        dout = random_buffer(output_floats(s), 2);
                   auto dweight = std::make_shared<aligned_vector<float>>(weight_floats(s)),
                        dbias = std::make_shared<aligned_vector<float>>(s.out_channels);
                   return [=] {
                     conv5x5_pad2_backward_weights(dweight->data(), dbias->data(), dout.data(),
                                                   inp.data(), B, channels, side1, side1);
                   };
                 });
  register_fused("conv5x5_to16_relu_forward/lenet5.c2", c2_flops, [=](int B) {
    const Conv2dShape s = c2.shape(B);
    auto inp = random_buffer(input_floats(s), 1), weight = random_buffer(weight_floats(s), 2),
         bias = random_buffer(s.out_channels, 3);
    auto out = std::make_shared<aligned_vector<float>>(output_floats(s));
    auto scratch = std::make_shared<aligned_vector<float>>(conv5x5_to16_scratch_floats(channels));
    return [=] {
      conv5x5_to16_relu_forward(out->data(), inp.data(), weight.data(), bias.data(), B, channels,
                                side2, side2, scratch->data());
    };
  });
  // with_data / with_weights: which gradients the call computes (the other's pointer is null).
  const auto c2_backward = [=](const std::string& name, double flops, bool with_data,
                               bool with_weights) {
    register_fused(name, flops, [=](int B) {
      const Conv2dShape s = c2.shape(B);
      auto inp = random_buffer(input_floats(s), 1), weight = random_buffer(weight_floats(s), 2),
           dout = random_buffer(output_floats(s), 3);
      auto dinp = std::make_shared<aligned_vector<float>>(inp.size());
      auto dweight = std::make_shared<aligned_vector<float>>(weight.size()),
           dbias = std::make_shared<aligned_vector<float>>(s.out_channels);
      auto scratch =
          std::make_shared<aligned_vector<float>>(conv5x5_to16_scratch_floats(channels));
      return [=] {
        conv5x5_to16_backward(with_data ? dinp->data() : nullptr,
                              with_weights ? dweight->data() : nullptr, dbias->data(), dout.data(),
                              inp.data(), weight.data(), B, channels, side2, side2,
                              scratch->data());
      };
    });
  };
  c2_backward("conv5x5_to16_backward/lenet5.c2", conv_backward_flops(c2, 1), true, true);
  c2_backward("conv5x5_to16_backward_weights/lenet5.c2", conv_backward_weights_flops(c2, 1), false,
              true);
  c2_backward("conv5x5_to16_backward_data/lenet5.c2", c2_flops, true, false);
  // The pools' input is the convolution's output, their gradient a quarter of it.
  register_fused("maxpool2x2_relu_backward/lenet5.pool1", pool1.flops(1), [=](int B) {
    const std::size_t in = output_floats(c1.shape(B));
    auto inp = random_buffer(in, 1), dout = random_buffer(in / 4, 2);
    auto dinp = std::make_shared<aligned_vector<float>>(inp.size());
    return [=] {
      maxpool2x2_relu_backward(dinp->data(), dout.data(), inp.data(), B * channels, side1, side1);
    };
  });
  register_fused("maxpool2x2_channels_last16_forward/lenet5.pool2", pool2.flops(1), [=](int B) {
    const std::size_t in = output_floats(c2.shape(B));
    auto inp = random_buffer(in, 1);
    auto out = std::make_shared<aligned_vector<float>>(in / 4);
    return
        [=] { maxpool2x2_channels_last16_forward(out->data(), inp.data(), B, a2_side, a2_side); };
  });
  register_fused("maxpool2x2_relu_channels_last16_backward/lenet5.pool2", pool2.flops(1),
                 [=](int B) {
                   const std::size_t in = output_floats(c2.shape(B));
                   auto inp = random_buffer(in, 1), dout = random_buffer(in / 4, 2);
                   auto dinp = std::make_shared<aligned_vector<float>>(inp.size());
                   return [=] {
                     maxpool2x2_relu_channels_last16_backward(dinp->data(), dout.data(), inp.data(),
                                                              B, a2_side, a2_side);
                   };
                 });
}

// --- pooling, ReLU, softmax cross-entropy -----------------------------------------------------

void register_pool(const PoolLayer layer) {
  benchmark::RegisterBenchmark(
      ("maxpool_forward/" + std::string(layer.name)).c_str(), [layer](benchmark::State& state) {
        const int planes = int(state.range(0)) * layer.channels;
        const auto inp = random_buffer(std::size_t(planes) * layer.size * layer.size, 1);
        aligned_vector<float> out(inp.size() / 4);
        // 3 comparisons per window
        time_kernel(state, 3.0 * double(out.size()), out.data(), [&] {
          maxpool2x2_forward(out.data(), inp.data(), planes, layer.size, layer.size);
        });
      })->Apply(with_batches);

  benchmark::RegisterBenchmark(
      ("maxpool_backward/" + std::string(layer.name)).c_str(), [layer](benchmark::State& state) {
        const int planes = int(state.range(0)) * layer.channels;
        const auto inp = random_buffer(std::size_t(planes) * layer.size * layer.size, 1);
        const auto dout = random_buffer(inp.size() / 4, 2);
        aligned_vector<float> dinp(inp.size());
        time_kernel(state, 3.0 * double(dout.size()), dinp.data(), [&] {
          maxpool2x2_backward(dinp.data(), dout.data(), inp.data(), planes, layer.size, layer.size);
        });
      })->Apply(with_batches);
}

struct ReluSite {
  const char* name;
  int features;  // per sample
};

void register_relu(const ReluSite site) {
  benchmark::RegisterBenchmark(
      ("relu_forward/" + std::string(site.name)).c_str(), [site](benchmark::State& state) {
        const std::size_t n = std::size_t(state.range(0)) * site.features;
        const auto inp = random_buffer(n, 1);
        aligned_vector<float> out(n);
        time_kernel(state, double(n), out.data(), [&] { relu_forward(out.data(), inp.data(), n); });
      })->Apply(with_batches);

  benchmark::RegisterBenchmark(
      ("relu_backward/" + std::string(site.name)).c_str(), [site](benchmark::State& state) {
        const std::size_t n = std::size_t(state.range(0)) * site.features;
        const auto out = random_buffer(n, 1);
        const auto dout = random_buffer(n, 2);
        aligned_vector<float> dinp(n);
        time_kernel(state, double(n), dinp.data(),
                    [&] { relu_backward(dinp.data(), dout.data(), out.data(), n); });
      })->Apply(with_batches);
}

void register_softmax_xent(int classes) {
  // Forward + backward are one fused call: max, subtract, exp, sum, scale per logit.
  benchmark::RegisterBenchmark(
      ("softmax_xent_forward_backward/" + std::to_string(classes)).c_str(),
      [classes](benchmark::State& state) {
        const int B = int(state.range(0));
        const auto logits = random_buffer(std::size_t(B) * classes, 1);
        std::vector<std::uint8_t> labels(B);
        for (int b = 0; b < B; ++b) labels[b] = std::uint8_t(b % classes);
        aligned_vector<float> dlogits(logits.size());
        for (auto _ : state) {
          benchmark::DoNotOptimize(softmax_xent_forward_backward(
              dlogits.data(), logits.data(), labels.data(), B, classes, 1.0f / float(B)));
          benchmark::ClobberMemory();
        }
        set_flops(state, 5.0 * double(logits.size()));
      })->Apply(with_batches);

  benchmark::RegisterBenchmark(
      ("softmax_xent_loss/" + std::to_string(classes)).c_str(), [classes](benchmark::State& state) {
        const int B = int(state.range(0));
        const auto logits = random_buffer(std::size_t(B) * classes, 1);
        std::vector<std::uint8_t> labels(B);
        for (int b = 0; b < B; ++b) labels[b] = std::uint8_t(b % classes);
        int correct = 0;
        for (auto _ : state) {
          benchmark::DoNotOptimize(
              softmax_xent_loss(logits.data(), labels.data(), B, classes, &correct));
        }
        set_flops(state, 4.0 * double(logits.size()));
      })->Apply(with_batches);
}

// --- SGD ---------------------------------------------------------------------------------------

void register_sgd(ModelKind kind) {
  benchmark::RegisterBenchmark(
      ("sgd_step/" + std::string(model_name(kind))).c_str(), [kind](benchmark::State& state) {
        const std::size_t n = model_spec(kind).param_count;
        auto params = random_buffer(n, 1), momentum = random_buffer(n, 2);
        const auto grads = random_buffer(n, 3);
        const SgdConfig sgd;
        time_kernel(state, sgd_flops(n), params.data(),
                    [&] { sgd_step(params.data(), grads.data(), momentum.data(), n, sgd); });
      });
}

// --- the yardstick -----------------------------------------------------------------------------

void register_sgemm() {
  benchmark::RegisterBenchmark("sgemm", [](benchmark::State& state) {
    const int n = int(state.range(0));
    const auto a = random_buffer(std::size_t(n) * n, 1);
    const auto b = random_buffer(std::size_t(n) * n, 2);
    aligned_vector<float> c(std::size_t(n) * n);
    time_kernel(state, 2.0 * n * n * n, c.data(), [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(),
                  n, 0.0f, c.data(), n);
    });
  })->ArgName("n")->Arg(64)->Arg(256)->Arg(1024);
}

}  // namespace

void register_layer_benchmarks() {
  // FC-3 and LeNet-5's shapes: micro_common.hpp.
  for (const DenseLayer& layer : kFc3Dense) register_dense(layer);
  register_dense_factor_rows(kFc3Dense[0]);
  register_relu({"fc3.f1", Fc3Sizes::hidden1});
  register_relu({"fc3.f2", Fc3Sizes::hidden2});

  for (const ConvLayer& layer : kLenet5Conv) register_conv(layer);
  for (const PoolLayer& layer : kLenet5Pool) register_pool(layer);
  for (const DenseLayer& layer : kLenet5Dense) register_dense(layer);
  register_dense_factor_rows(kLenet5Dense[0]);
  register_relu({"lenet5.c1", Lenet5Sizes::a1_floats});
  register_relu({"lenet5.c2", Lenet5Sizes::a2_floats});
  register_relu({"lenet5.f1", Lenet5Sizes::hidden1});
  register_relu({"lenet5.f2", Lenet5Sizes::hidden2});

  register_fused_lenet5();

  register_softmax_xent(Fc3Sizes::classes);
  register_sgd(ModelKind::fc3);
  register_sgd(ModelKind::lenet5);
  register_sgemm();
}

}  // namespace cnnbench::micro
