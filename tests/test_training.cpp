// The training driver: exact resume, --init, schedule length, errors, and the pinned loss
// trajectory of the first steps (golden file cross-checked against PyTorch when it was made).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cnnbench/config.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/layers.hpp"
#include "cnnbench/train.hpp"
#include "temp_dir.hpp"

namespace cnnbench {
namespace {

namespace fs = std::filesystem;
using test::fresh_temp_dir;

TrainConfig small_config(ModelKind kind, std::int64_t steps) {
  TrainConfig c;
  c.model = kind;
  c.batch = 32;
  c.steps = steps;
  c.seed = 5;
  c.pin = false;
  return c;
}

TEST(RunTraining, ResumeEqualsUninterruptedBitForBit) {
  const fs::path dir = fresh_temp_dir("training-resume");
  const Dataset data = make_synthetic(200, 5);  // 6 steps per epoch: the run crosses epochs
  for (ModelKind kind : {ModelKind::fc3, ModelKind::lenet5}) {
    RunOptions first;
    first.save = dir / "half.safetensors";
    run_training(small_config(kind, 7), data, first);

    RunOptions second;
    second.resume = dir / "half.safetensors";
    const RunResult resumed = run_training(small_config(kind, 14), data, second);
    const RunResult straight = run_training(small_config(kind, 14), data, RunOptions{});

    EXPECT_EQ(resumed.steps_run, 7);
    EXPECT_EQ(resumed.progress.global_step, 14);
    EXPECT_EQ(resumed.model.params, straight.model.params) << model_name(kind);
    EXPECT_EQ(resumed.model.momentum, straight.model.momentum) << model_name(kind);
    // The loss of the resumed steps are the second half of the straight run's.
    ASSERT_EQ(straight.step_losses.size(), 14u);
    EXPECT_EQ(resumed.step_losses,
              std::vector<double>(straight.step_losses.begin() + 7, straight.step_losses.end()));
  }
}

// --checkpoint-every: the checkpoint on --save's path is rewritten every K steps (looked at here
// through the every-steps hook, which runs right after it), holds that step, and resuming from it
// ends with the uninterrupted run's weights, bit for bit; checkpointing changes nothing else.
TEST(RunTraining, CheckpointEveryWritesCheckpointsThatResumeExactly) {
  const fs::path dir = fresh_temp_dir("training-checkpoint-every");
  const Dataset data = make_synthetic(200, 5);  // 6 steps per epoch: the run crosses epochs
  std::vector<std::pair<std::string, int>> strategies = {{"serial", 1}, {"stream", 2}};
  if (CNNBENCH_HAVE_MPI) strategies.emplace_back("cluster", 1);  // one rank, without mpirun
  for (const auto& [strategy, threads] : strategies) {
    TrainConfig config = small_config(ModelKind::lenet5, 25);
    config.strategy = strategy;
    config.threads = threads;
    const RunResult straight = run_training(config, data, RunOptions{});

    RunOptions checkpointed;
    checkpointed.save = dir / "run.safetensors";
    checkpointed.checkpoint_every = 10;
    checkpointed.every_steps = 5;
    std::vector<std::int64_t> saved_at;  // the step each hook call found in the file
    checkpointed.on_every_steps = [&](std::int64_t step, const Model&) {
      Model on_disk(config.model);
      saved_at.push_back(fs::exists(dir / "run.safetensors")
                             ? load_checkpoint(dir / "run.safetensors", on_disk).global_step
                             : -1);
      if (step == 20) fs::copy_file(dir / "run.safetensors", dir / "step-20.safetensors",
                                    fs::copy_options::overwrite_existing);
      return false;
    };
    const RunResult with_checkpoints = run_training(config, data, checkpointed);
    EXPECT_EQ(with_checkpoints.model.params, straight.model.params) << strategy;
    // Hook calls at steps 5 (nothing written yet), 10, 15, 20 and 25 (before the final save).
    EXPECT_EQ(saved_at, (std::vector<std::int64_t>{-1, 10, 10, 20, 20})) << strategy;

    RunOptions resume;
    resume.resume = dir / "step-20.safetensors";
    const RunResult resumed = run_training(config, data, resume);
    EXPECT_EQ(resumed.steps_run, 5) << strategy;
    EXPECT_EQ(resumed.model.params, straight.model.params) << strategy;
    EXPECT_EQ(resumed.model.momentum, straight.model.momentum) << strategy;
    fs::remove(dir / "run.safetensors");
    fs::remove(dir / "step-20.safetensors");
  }
}

TEST(RunTraining, ResumeWithOtherSeedOrBatchIsAnError) {
  const fs::path dir = fresh_temp_dir("training-resume-mismatch");
  const Dataset data = make_synthetic(100, 1);
  RunOptions save;
  save.save = dir / "a.safetensors";
  run_training(small_config(ModelKind::fc3, 2), data, save);
  RunOptions resume;
  resume.resume = dir / "a.safetensors";
  TrainConfig other = small_config(ModelKind::fc3, 4);
  other.seed = 6;
  EXPECT_THROW(
      {
        try {
          run_training(other, data, resume);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("--seed 5"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
}

TEST(RunTraining, InitLoadsWeightsAndStepsZeroKeepsThem) {
  const fs::path dir = fresh_temp_dir("training-init");
  const Dataset data = make_synthetic(100, 1);
  RunOptions save;
  save.save = dir / "init.safetensors";
  const RunResult trained = run_training(small_config(ModelKind::fc3, 3), data, save);

  RunOptions init;
  init.init = dir / "init.safetensors";
  TrainConfig config = small_config(ModelKind::fc3, 0);
  config.seed = 77;  // the file's weights win over the seeded init
  const RunResult loaded = run_training(config, data, init);
  EXPECT_EQ(loaded.model.params, trained.model.params);
  EXPECT_EQ(loaded.steps_run, 0);
}

TEST(RunTraining, EpochsDropThePartialBatch) {
  const Dataset data = make_synthetic(100, 1);  // batch 32: 3 full batches, 4 samples dropped
  TrainConfig config = small_config(ModelKind::fc3, -1);
  config.epochs = 2;
  const RunResult r = run_training(config, data, RunOptions{});
  EXPECT_EQ(r.steps_run, 6);
  ASSERT_EQ(r.epochs.size(), 2u);
  EXPECT_EQ(r.epochs[0].steps, 3);
  EXPECT_EQ(r.epochs[1].epoch, 1);
}

TEST(RunTraining, ClearErrors) {
  const Dataset tiny = make_synthetic(10, 1);
  EXPECT_THROW(run_training(small_config(ModelKind::fc3, 1), tiny, RunOptions{}), Error);
  TrainConfig bad = small_config(ModelKind::fc3, 1);
  bad.strategy = "quantum";
  try {
    run_training(bad, make_synthetic(100, 1), RunOptions{});
    FAIL() << "an unknown strategy must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown strategy 'quantum'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("serial"), std::string::npos) << "lists the known ones";
  }
}

TEST(RunTraining, SyntheticDataIsLearnable) {
  TrainConfig config = small_config(ModelKind::fc3, -1);
  config.epochs = 3;
  const Dataset train = make_synthetic(2048, 3), test = make_synthetic(512, 3, 2048);
  RunOptions options;
  options.test = &test;
  const RunResult r = run_training(config, train, options);
  ASSERT_TRUE(r.test.has_value());
  EXPECT_GT(r.test->accuracy, 0.5) << "a net must learn the synthetic classes";
  EXPECT_LT(r.step_losses.back(), r.step_losses.front());
}
// The blas baseline runs the dense layers on sgemm (other float sums than the own kernels, so
// other bits, same training); the choice lives in its workspace, so a serial run after it is on
// the own kernels again, bit for bit.
TEST(RunTraining, BlasBaselineRunsDenseOnSgemmAndRestoresTheOwnKernels) {
  const Dataset data = make_synthetic(256, 3);
  TrainConfig config = small_config(ModelKind::fc3, 4);
  const RunResult serial = run_training(config, data, RunOptions{});
  config.strategy = "blas";
  config.threads = 1;
  const RunResult blas = run_training(config, data, RunOptions{});
  config.strategy = "serial";
  EXPECT_EQ(run_training(config, data, RunOptions{}).model.params, serial.model.params)
      << "a serial run after the blas baseline left the own kernels";
  if (dense_all_on_sgemm()) {  // this target's serial runs on sgemm as well: the same bits
    EXPECT_EQ(blas.model.params, serial.model.params) << "serial left sgemm on this target";
  } else {
    EXPECT_NE(blas.model.params, serial.model.params) << "the blas baseline did not run on sgemm";
  }
  float largest = 0, largest_diff = 0;
  for (std::size_t i = 0; i < serial.model.params.size(); ++i) {
    largest = std::max(largest, std::abs(serial.model.params[i]));
    largest_diff = std::max(largest_diff, std::abs(blas.model.params[i] - serial.model.params[i]));
  }
  EXPECT_LE(largest_diff, 1e-4f * largest);
}

// The first 10 losses of a fixed-seed run on synthetic data, pinned in tests/data. The file was
// produced by this code and checked against PyTorch (tests/py/test_torch_parity.py does that
// comparison live where PyTorch is installed). CNNBENCH_UPDATE_GOLDEN=1 rewrites it.
TEST(RunTraining, LossTrajectoryOfFirstTenStepsIsPinned) {
  const fs::path golden = fs::path(CNNBENCH_SOURCE_DIR) / "tests/data/loss_trajectory.json";
  nlohmann::json current;
  const Dataset data = make_synthetic(640, 7);
  for (ModelKind kind : {ModelKind::fc3, ModelKind::lenet5}) {
    TrainConfig config = small_config(kind, 10);
    config.batch = 64;
    config.seed = 7;
    current[model_name(kind)] = run_training(config, data, RunOptions{}).step_losses;
  }
  if (std::getenv("CNNBENCH_UPDATE_GOLDEN")) {
    write_output(golden, current.dump(2) + "\n");
    GTEST_SKIP() << "rewrote " << golden;
  }
  const nlohmann::json expected = nlohmann::json::parse(read_file(golden));
  for (const char* model : {"fc3", "lenet5"}) {
    const auto want = expected.at(model).get<std::vector<double>>();
    const auto got = current.at(model).get<std::vector<double>>();
    ASSERT_EQ(want.size(), got.size()) << model;
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-4 * std::abs(want[i])) << model << " step " << i;
    }
    EXPECT_LT(got.back(), got.front()) << model << " must learn in 10 steps";
  }
}

// The bar never fills a terminal's last column (that wraps, and every redraw scrolls a line), at
// every width the program draws at, for the longest numbers a run shows.
TEST(ProgressBar, FitsEveryTerminalWidth) {
  ProgressState s;
  s.step = 123456789;
  s.total = 987654321;
  s.images_per_s = 1234567;
  s.loss = 12.3456;
  s.eta_seconds = 9876543;
  for (int columns = min_bar_columns; columns <= 200; ++columns) {
    const std::string line = progress_bar_line(s, columns);
    EXPECT_LE(line.size(), static_cast<std::size_t>(columns - 1)) << columns << ": " << line;
    EXPECT_NE(line.find("123456789/987654321"), std::string::npos) << columns << ": " << line;
    if (columns >= 26) {
      EXPECT_NE(line.find("step 123456789/987654321"), std::string::npos) << line;
    }
  }
  // Wide enough: every part and a bar; narrow: the step count still shows.
  EXPECT_NE(progress_bar_line(s, 120).find("ETA"), std::string::npos);
  EXPECT_EQ(progress_bar_line(s, 80).size(), 79u);
  EXPECT_NE(progress_bar_line(s, 40).find("step"), std::string::npos);
  // The narrowest bar terminal: the step and the loss when they fit, else the step.
  s = ProgressState{.step = 5, .total = 100, .images_per_s = 1000, .loss = 2.3026, .eta_seconds = 1};
  EXPECT_EQ(progress_bar_line(s, 24), "step 5/100  loss 2.3026");
  EXPECT_EQ(progress_bar_line(s, 20), "step 5/100");
}

TEST(ProgressBar, FillsInProportion) {
  ProgressState s;
  s.step = 50;
  s.total = 100;
  const std::string line = progress_bar_line(s, 80);
  const std::size_t width = line.find(']') - 1;
  EXPECT_EQ(std::count(line.begin(), line.end(), '#'), static_cast<std::ptrdiff_t>(width / 2)) << line;
  EXPECT_EQ(progress_log_line(s), "step 50/100 (50%)  0 img/s  loss 0.0000  ETA 0s");
}

TEST(ProgressBar, WidthFromColumnsWithinBounds) {
  // (A terminal narrower than min_bar_columns gets progress lines, not a bar.)
  if (::isatty(STDERR_FILENO) != 0) GTEST_SKIP() << "stderr is a terminal: its width decides";
  const char* saved = std::getenv("COLUMNS");
  const std::string old = saved ? saved : "";
  for (const auto& [value, expected] : std::vector<std::pair<std::string, int>>{
           {"100", 100}, {"20", 20}, {"10", 10}, {"1000", 200}, {"x", 80}, {"-3", 80}}) {
    ::setenv("COLUMNS", value.c_str(), 1);
    EXPECT_EQ(terminal_columns(), expected) << value;
  }
  // What the CLI refuses, naming the variable: a value that is not a width.
  ::setenv("COLUMNS", "wide", 1);
  EXPECT_EQ(columns_environment_problem(), "COLUMNS=wide: expected a whole number >= 1 (the terminal's width)");
  ::setenv("COLUMNS", "100", 1);
  EXPECT_EQ(columns_environment_problem(), "");
  if (saved) {
    ::setenv("COLUMNS", old.c_str(), 1);
  } else {
    ::unsetenv("COLUMNS");
  }
}

}  // namespace
}  // namespace cnnbench
