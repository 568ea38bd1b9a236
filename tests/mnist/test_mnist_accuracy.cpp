// Real MNIST: LeNet-5 trained one epoch must reach 97.5% test accuracy. One epoch at the CLI's
// defaults (lr 0.01, batch 64) lands near 97% in cnnbench and in PyTorch alike (PyTorch 1.13, seeds
// 0..3: 96.6-97.1%), so this test trains with lr 0.02 and batch 32 (seeds 1..3: 97.9-98.3%).
// Needs datasets/mnist (datasets/fetch_mnist.sh); CI fetches it, elsewhere the test skips.
#include "cnnbench/train.hpp"
#include "mnist_fixture.hpp"

namespace cnnbench {
namespace {

using Mnist = MnistTest;

TEST_F(Mnist, LeNet5OneEpochReaches97_5Percent) {
  ASSERT_EQ(train().count, 60000u);
  ASSERT_EQ(test().count, 10000u);
  TrainConfig config;
  config.model = ModelKind::lenet5;
  config.epochs = 1;
  config.batch = 32;
  config.sgd.lr = 0.02f;
  RunOptions options;
  options.test = &test();
  const RunResult r = run_training(config, train(), options);
  ASSERT_TRUE(r.test.has_value());
  std::printf("lenet5 1 epoch: test accuracy %.4f, %.0f images/s\n", r.test->accuracy,
              r.images_per_s);
  EXPECT_GE(r.test->accuracy, 0.975);
}

}  // namespace
}  // namespace cnnbench
