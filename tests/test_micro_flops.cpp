// The flop counts cnnbench-micro divides its times by (apps/micro/layer_flops.hpp), checked
// against counts made by walking each layer's loops from its shapes, and against the models'
// train_flops_per_image: a wrong count would misplace a layer's share of the peak.
#include <gtest/gtest.h>

#include <cstddef>
#include <iterator>
#include <string>

#include "../apps/micro/layer_flops.hpp"
#include "cnnbench/models.hpp"

namespace cnnbench::micro {
namespace {

// Multiply-adds of a direct convolution, one per (sample, output channel, output pixel, input
// channel, tap), padding taps included; the output side from the input side, kernel and padding.
double counted_conv_multiply_adds(const ConvLayer& layer, int B) {
  const int out_side = layer.size + 2 * layer.pad - layer.kernel + 1;
  double count = 0;
  for (int b = 0; b < B; ++b)
    for (int k = 0; k < layer.out_channels; ++k)
      for (int y = 0; y < out_side; ++y)
        for (int x = 0; x < out_side; ++x)
          for (int c = 0; c < layer.in_channels; ++c)
            for (int tap = 0; tap < layer.kernel * layer.kernel; ++tap) count += 1;
  return count;
}

double counted_conv_outputs(const ConvLayer& layer, int B) {
  const int out_side = layer.size + 2 * layer.pad - layer.kernel + 1;
  return double(B) * layer.out_channels * out_side * out_side;
}

TEST(MicroFlops, ConvolutionsCountTwoFlopsPerMultiplyAddAndOnePerBiasGradient) {
  for (const ConvLayer& layer : kLenet5Conv) {
    for (int B : {1, 3}) {
      SCOPED_TRACE(std::string(layer.name) + " batch " + std::to_string(B));
      const double products = 2 * counted_conv_multiply_adds(layer, B);
      EXPECT_EQ(conv_product_flops(layer.shape(B)), products);
      EXPECT_EQ(conv_backward_weights_flops(layer, B), products + counted_conv_outputs(layer, B));
      EXPECT_EQ(conv_backward_flops(layer, B),
                (layer.needs_dinp ? 2 : 1) * products + counted_conv_outputs(layer, B));
    }
  }
}

TEST(MicroFlops, DenseLayersCountTwoFlopsPerMultiplyAdd) {
  for (const auto& model : {std::begin(kFc3Dense), std::begin(kLenet5Dense)}) {
    for (const DenseLayer* layer = model; layer != model + 3; ++layer) {
      double multiply_adds = 0;
      for (int b = 0; b < 2; ++b)
        for (int o = 0; o < layer->out; ++o)
          for (int i = 0; i < layer->in; ++i) multiply_adds += 1;
      SCOPED_TRACE(layer->name);
      EXPECT_EQ(layer->forward_flops(2), 2 * multiply_adds);
      EXPECT_EQ(layer->backward_flops(2),
                (layer->needs_dinp ? 4 : 2) * multiply_adds + 2.0 * layer->out);
    }
  }
}

TEST(MicroFlops, PoolsCountThreeComparisonsPerWindowOfTheirConvolutionsOutput) {
  // pool1 follows c1 (28x28, 6 channels), pool2 follows c2 (10x10, 16 channels).
  EXPECT_EQ(kLenet5Pool[0].flops(2), 2 * 3.0 * 6 * 14 * 14);
  EXPECT_EQ(kLenet5Pool[1].flops(2), 2 * 3.0 * 16 * 5 * 5);
  for (int i = 0; i < 2; ++i) {
    const ConvLayer& conv = kLenet5Conv[i];
    const double outputs = counted_conv_outputs(conv, 1);
    EXPECT_EQ(kLenet5Pool[i].flops(1), 3.0 * outputs / 4) << kLenet5Pool[i].name;
  }
}

// The passes' products (bias gradients left out, as the model's count leaves them) add up to
// the model's training flops per image: no layer or pass is counted twice or missed.
TEST(MicroFlops, LayerCountsAddUpToTheModelsTrainingFlops) {
  double lenet5 = 0;
  for (const ConvLayer& layer : kLenet5Conv) {
    lenet5 += conv_product_flops(layer.shape(1)) + conv_backward_flops(layer, 1) -
              conv_bias_gradient_flops(layer, 1);
  }
  for (const DenseLayer& layer : kLenet5Dense) {
    lenet5 += layer.forward_flops(1) + layer.backward_flops(1) - layer.bias_gradient_flops(1);
  }
  EXPECT_EQ(lenet5, model_spec(ModelKind::lenet5).train_flops_per_image);
  EXPECT_NEAR(lenet5, 2.26e6, 0.01e6);

  double fc3 = 0;
  for (const DenseLayer& layer : kFc3Dense) {
    fc3 += layer.forward_flops(1) + layer.backward_flops(1) - layer.bias_gradient_flops(1);
  }
  EXPECT_EQ(fc3, model_spec(ModelKind::fc3).train_flops_per_image);
}

TEST(MicroFlops, SgdCountsSixFlopsPerParameterOfTheModel) {
  const std::size_t lenet5_params = 6 * 25 + 6 + 16 * 6 * 25 + 16 + 400 * 120 + 120 + 120 * 84 +
                                    84 + 84 * 10 + 10;
  EXPECT_EQ(model_spec(ModelKind::lenet5).param_count, lenet5_params);
  EXPECT_EQ(sgd_flops(lenet5_params), 6.0 * lenet5_params);
}

}  // namespace
}  // namespace cnnbench::micro
