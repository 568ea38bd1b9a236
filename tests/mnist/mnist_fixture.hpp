// The real MNIST data set for the tests labelled "mnist": loaded once per test binary from
// datasets/mnist (datasets/fetch_mnist.sh). Missing data skips the test, except in CI, which
// fetches it and so must have it.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

#include "cnnbench/data.hpp"

namespace cnnbench {

class MnistTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::filesystem::path dir =
        std::filesystem::path(CNNBENCH_SOURCE_DIR) / "datasets/mnist";
    if (!std::filesystem::exists(dir / "train-images-idx3-ubyte")) return;
    train_ = std::make_unique<Dataset>(load_mnist(dir, Split::train));
    test_ = std::make_unique<Dataset>(load_mnist(dir, Split::test));
  }
  void SetUp() override {
    if (train_) return;
    if (std::getenv("CI")) FAIL() << "MNIST is missing in CI: run datasets/fetch_mnist.sh";
    GTEST_SKIP() << "MNIST not fetched (datasets/fetch_mnist.sh)";
  }
  static const Dataset& train() { return *train_; }
  static const Dataset& test() { return *test_; }

 private:
  static inline std::unique_ptr<Dataset> train_, test_;
};

}  // namespace cnnbench
