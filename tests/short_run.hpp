// A short unpinned LeNet-5 run of a strategy: what the breakdown and trace tests train.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "cnnbench/config.hpp"

namespace cnnbench::testing {

inline TrainConfig short_run(const std::string& strategy, int threads, int steps,
                             std::map<std::string, std::string> options = {}) {
  TrainConfig c;
  c.model = ModelKind::lenet5;
  c.strategy = strategy;
  c.batch = 32;
  c.steps = steps;
  c.threads = threads;
  c.pin = false;  // tests share the machine's cores
  c.options = std::move(options);
  return c;
}

}  // namespace cnnbench::testing
