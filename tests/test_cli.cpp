// `cnnbench` as a user runs it: usage errors exit 2, runtime errors exit 1 with one line naming
// the cause, resume through the CLI is exact, and reports are written whole.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <csignal>
#include <thread>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cnnbench/checkpoint.hpp"
#include "cnnbench/config.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/train.hpp"
#include "run_cli.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;

using cnnbench::test::CliResult;
using cnnbench::test::fresh_temp_dir;
using cnnbench::test::run_cli;

TEST(Cli, UsageErrorsExitTwo) {
  for (const std::string args : {"", "train --batch 0", "train --model vgg16", "train --steps 5 --epochs 2",
                                 "train --synthetic 100 --data x", "train --resume /no/such/file",
                                 "train --consistency sometimes", "train --lr -1", "frobnicate",
                                 "train --synthetic 100 --shards 0", "train --synthetic 100 --shards 65",
                                 "train --synthetic 100 --shard-data"}) {
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.code, 2) << "cnnbench " << args << "\n" << r.output;
  }
}

TEST(Cli, RuntimeErrorsExitOneWithTheCause) {
  struct Case {
    std::string args, expected;
  };
  const fs::path dir = fresh_temp_dir("cli-errors");
  for (const Case& c : std::vector<Case>{
           {"train --synthetic 100 --strategy quantum", "unknown strategy 'quantum'"},
           {"train --data " + dir.string(), "train-images-idx3-ubyte"},
           {"train --data " + (dir / "none").string(), "does not exist"},
           {"train --synthetic 100 --steps 1 --save /proc/no-such-dir/x.safetensors", "/proc/no-such-dir"},
           {"train --synthetic 10 --shards 3 --batch 12",
            "--shards 3: block 1 holds 3 of the 10 samples"},
           {"train --synthetic 100 --steps 1 --pin-core 4096", "--pin-core 4096: expected a core number"}}) {
    const CliResult r = run_cli(c.args + " --quiet");
    EXPECT_EQ(r.code, 1) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find("cnnbench: error: "), std::string::npos) << r.output;
  }
}

// The strategy options' flags are made from their specs: every one is listed with its default,
// and the sweep lists those it passes on with the sweep's own default.
TEST(Cli, HelpListsEveryStrategyOptionWithItsDefault) {
  const CliResult train = run_cli("train --help");
  const CliResult sweep = run_cli("sweep --help");
  ASSERT_EQ(train.code, 0) << train.output;
  ASSERT_EQ(sweep.code, 0) << sweep.output;
  for (const cnnbench::OptionSpec* spec : cnnbench::strategy_option_specs()) {
    EXPECT_NE(train.output.find(spec->flag() + " " + spec->value_name), std::string::npos)
        << spec->name << "\n" << train.output;
    if (!spec->default_text().empty()) {
      EXPECT_NE(train.output.find("=" + spec->default_text()), std::string::npos)
          << spec->name << "\n" << train.output;
    }
    EXPECT_EQ(sweep.output.find(spec->flag() + " ") != std::string::npos, spec->in_sweep)
        << spec->name << "\n" << sweep.output;
  }
  EXPECT_NE(sweep.output.find("--balance static|dynamic=dynamic"), std::string::npos) << sweep.output;
}

TEST(Cli, StrategyOptionErrors) {
  // A value the spec refuses is a usage error; an option of another strategy a runtime one.
  for (const std::string args : {"train --microbatches 0", "train --device -1", "train --overlap yes",
                                 "train --balance even", "sweep --microbatches x"}) {
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.code, 2) << "cnnbench " << args << "\n" << r.output;
  }
  const CliResult other = run_cli("train --synthetic 100 --steps 1 --balance dynamic --quiet");
  EXPECT_EQ(other.code, 1) << other.output;
  EXPECT_NE(other.output.find("--balance does not apply to --strategy serial (it is an option of "
                              "cluster and stream; its options: --pin-core N)"),
            std::string::npos)
      << other.output;
}

TEST(StrategyOptionSpecs, ChecksMadeFromTheSpec) {
  using cnnbench::find_option_spec;
  using cnnbench::option_value_problem;
  const cnnbench::OptionSpec& slowdown = *find_option_spec("slowdown");
  EXPECT_EQ(option_value_problem(slowdown, "1:2.5"), "");
  for (const char* bad : {"1:inf", "1:nan", "1:1001", "1:0.5", "x:2", "1", "-1:2"}) {
    EXPECT_NE(option_value_problem(slowdown, bad).find("--slowdown " + std::string(bad)),
              std::string::npos) << bad;
  }
  EXPECT_NE(option_value_problem(*find_option_spec("microbatches"), "0").find(">= 1"),
            std::string::npos);
  EXPECT_EQ(option_value_problem(*find_option_spec("consistency"), "async"), "");
  EXPECT_EQ(find_option_spec("no-such-option"), nullptr);
  // Each spec's name is its flag and appears once; a strategy's info lists the specs it reads.
  for (const cnnbench::StrategyInfo& info : cnnbench::list_strategies()) {
    for (const cnnbench::OptionSpec* spec : info.options) EXPECT_TRUE(spec->applies_to(info.name));
  }
  try {
    cnnbench::check_strategy_options({{"consistency", "strict"}}, "cluster");
    ADD_FAILURE() << "cluster accepted --consistency";
  } catch (const cnnbench::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--consistency does not apply to --strategy cluster"),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(cnnbench::check_strategy_options({{"frobnicate", "1"}}, "stream"), cnnbench::Error);
}

TEST(TrainConfigEdges, JsonAndArgvRoundTrip) {
  cnnbench::TrainConfig config;
  config.model = cnnbench::ModelKind::fc3;
  config.strategy = "stream";
  config.batch = 32;
  config.sgd.lr = 0.05f;
  config.steps = 7;
  config.threads = 2;
  config.pin = false;
  config.shuffle = false;
  config.shards = 3;
  config.options = {{"balance", "dynamic"}, {"microbatches", "2"}};
  const nlohmann::json json = config;
  const auto back = json.get<cnnbench::TrainConfig>();
  EXPECT_EQ(nlohmann::json(back), json);
  const std::vector<std::string> argv = cnnbench::to_argv(config);
  const std::string line = [&] {
    std::string text;
    for (const std::string& word : argv) text += word + " ";
    return text;
  }();
  // Settings as the shortest decimal that reads back as the same float, not 0.899999976.
  for (const char* expected : {"--model fc3 ", "--strategy stream ", "--batch 32 ", "--lr 0.05 ",
                               "--momentum 0.9 ", "--weight-decay 0 ",
                               "--steps 7 ", "--threads 2 ", "--no-pin ", "--no-shuffle ",
                               "--balance dynamic ", "--microbatches 2 ", "--shards 3 "}) {
    EXPECT_NE(line.find(expected), std::string::npos) << expected << " in " << line;
  }
  // The same words make the same run through the CLI.
  const CliResult r = run_cli("train " + line + "--synthetic 256 --quiet --report -");
  ASSERT_EQ(r.code, 0) << r.output;
  nlohmann::json reported = nlohmann::json::parse(r.output).at("config");
  reported.erase("data");
  EXPECT_EQ(reported, json);
}

TEST(Cli, ResumeThroughTheCliIsBitExact) {
  const fs::path dir = fresh_temp_dir("cli-resume");
  const std::string common = "train --model lenet5 --synthetic 300 --batch 32 --seed 9 --quiet";
  ASSERT_EQ(run_cli(common + " --steps 7 --save " + (dir / "half.st").string()).code, 0);
  ASSERT_EQ(run_cli(common + " --steps 14 --resume " + (dir / "half.st").string() + " --save " +
                    (dir / "resumed.st").string()).code, 0);
  ASSERT_EQ(run_cli(common + " --steps 14 --save " + (dir / "straight.st").string()).code, 0);
  EXPECT_EQ(cnnbench::read_file(dir / "resumed.st"), cnnbench::read_file(dir / "straight.st"));
}

// A sharded run resumes bit-exactly in its own order, and says so when the order changes.
TEST(Cli, ResumeKeepsOrSaysTheShardsOrder) {
  const fs::path dir = fresh_temp_dir("cli-resume-shards");
  const std::string common = "train --model fc3 --synthetic 300 --batch 32 --seed 9 --quiet";
  ASSERT_EQ(run_cli(common + " --shards 3 --steps 4 --save " + (dir / "half.st").string()).code, 0);
  const CliResult same = run_cli(common + " --shards 3 --steps 8 --resume " +
                                 (dir / "half.st").string() + " --save " + (dir / "resumed.st").string());
  ASSERT_EQ(same.code, 0) << same.output;
  EXPECT_EQ(same.output.find("shards"), std::string::npos) << same.output;
  ASSERT_EQ(run_cli(common + " --shards 3 --steps 8 --save " + (dir / "straight.st").string()).code, 0);
  EXPECT_EQ(cnnbench::read_file(dir / "resumed.st"), cnnbench::read_file(dir / "straight.st"));
  const CliResult changed = run_cli(common + " --steps 8 --resume " + (dir / "half.st").string());
  ASSERT_EQ(changed.code, 0) << changed.output;
  EXPECT_NE(changed.output.find("trained in the order of 3 shards (--shards), this run visits 1"),
            std::string::npos) << changed.output;
}

// --checkpoint-every rewrites --save's file along the way and leaves the same final file as a run
// without it (the file at each step is checked in test_training.cpp and under mpirun).
TEST(Cli, CheckpointEveryLeavesTheSameFinalCheckpoint) {
  const fs::path dir = fresh_temp_dir("cli-checkpoint-every");
  const std::string common = "train --model fc3 --synthetic 300 --batch 32 --seed 9 --quiet --steps 14";
  ASSERT_EQ(run_cli(common + " --checkpoint-every 4 --save " + (dir / "every.st").string()).code, 0);
  ASSERT_EQ(run_cli(common + " --save " + (dir / "straight.st").string()).code, 0);
  EXPECT_EQ(cnnbench::read_file(dir / "every.st"), cnnbench::read_file(dir / "straight.st"));
}

// --checkpoint-every needs --save; it and --comm-timeout refuse values out of their range. Usage
// errors (exit 2) that name the flag and say what is expected.
TEST(Cli, CheckpointEveryAndCommTimeoutUsageErrors) {
  struct Case {
    std::string args, expected;
  };
  for (const Case& c : std::vector<Case>{
           {"train --synthetic 100 --steps 5 --checkpoint-every 5", "--save"},
           {"train --checkpoint-every 0 --save x.st", ">= 1"},
           {"train --checkpoint-every often --save x.st", "whole number"},
           {"train --strategy cluster --comm-timeout 0", "in 0.1..86400"},
           {"train --strategy cluster --comm-timeout -3", "in 0.1..86400"},
           {"train --strategy cluster --comm-timeout 86401", "in 0.1..86400"},
           {"train --strategy cluster --comm-timeout nan", "finite number"},
           {"train --strategy cluster --comm-timeout inf", "finite number"},
           {"train --strategy cluster --comm-timeout soon", "finite number"},
           {"sweep --comm-timeout 0.01", "in 0.1..86400"}}) {
    const CliResult r = run_cli(c.args);
    const std::string flag = c.args.find("--comm-timeout") != std::string::npos
                                 ? "--comm-timeout" : "--checkpoint-every";
    EXPECT_EQ(r.code, 2) << "cnnbench " << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(flag), std::string::npos) << c.args << "\n" << r.output;
  }
  const CliResult serial = run_cli("train --synthetic 100 --steps 1 --comm-timeout 5 --quiet");
  EXPECT_EQ(serial.code, 1) << serial.output;
  EXPECT_NE(serial.output.find("--comm-timeout does not apply to --strategy serial"),
            std::string::npos) << serial.output;
  if (CNNBENCH_HAVE_MPI) {
    const CliResult one_rank =
        run_cli("train --synthetic 100 --steps 2 --strategy cluster --comm-timeout 0.1 --quiet");
    EXPECT_EQ(one_rank.code, 0) << one_rank.output;
  }
}

TEST(Cli, ReportHasTheMetricsAndStdoutWorks) {
  const fs::path dir = fresh_temp_dir("cli-report");
  const fs::path report = dir / "run.json";
  const CliResult r = run_cli("train --model fc3 --synthetic 256 --steps 4 --eval --quiet --report " +
                              report.string());
  ASSERT_EQ(r.code, 0) << r.output;
  const auto j = nlohmann::json::parse(cnnbench::read_file(report));
  EXPECT_EQ(j.at("schema_version"), 1);
  EXPECT_EQ(j.at("config").at("model"), "fc3");
  EXPECT_EQ(j.at("metrics").at("steps"), 4);
  EXPECT_GT(j.at("metrics").at("images_per_s").get<double>(), 0);
  EXPECT_EQ(j.at("loss_curve").size(), 4u);
  EXPECT_TRUE(j.at("metrics").contains("test_accuracy"));
  // No temp files are left beside the report.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);

  const CliResult to_stdout = run_cli("train --model fc3 --synthetic 128 --steps 1 --quiet --report -");
  ASSERT_EQ(to_stdout.code, 0);
  const nlohmann::json parsed = nlohmann::json::parse(to_stdout.output, nullptr, false);
  EXPECT_FALSE(parsed.is_discarded()) << to_stdout.output;
  EXPECT_TRUE(parsed.contains("metrics")) << to_stdout.output;
}

TEST(Cli, SummaryLineNamesModelStrategyAndSpeed) {
  const CliResult r = run_cli("train --model fc3 --synthetic 128 --steps 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("fc3 serial: 2 steps"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("images/s"), std::string::npos) << r.output;
}

TEST(Cli, AParallelRunNamesItsStragglerAndTraceWritesAChromeTrace) {
  if (CNNBENCH_HAVE_MPI) {  // the cluster strategy is part of the build
    const CliResult r = run_cli("train --model fc3 --strategy cluster --threads 2 --synthetic 256 "
                                "--steps 4 --progress none");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("straggler: thread "), std::string::npos) << r.output;
  }

  const std::string trace = ::testing::TempDir() + "cnnbench-cli-trace.json";
  const CliResult traced = run_cli("train --model fc3 --synthetic 256 --steps 3 --quiet --trace " +
                                   trace);
  ASSERT_EQ(traced.code, 0) << traced.output;
  const nlohmann::json parsed = nlohmann::json::parse(cnnbench::read_file(trace));
  ASSERT_TRUE(parsed.contains("traceEvents"));
  EXPECT_FALSE(parsed["traceEvents"].empty());
  std::filesystem::remove(trace);
}

// Starts `cnnbench train ARGS...` in `dir`, sends `signals` (each after `delay_ms`) and returns the
// wait status. A signal that lands before the process has set its handlers (a slow start on a
// loaded machine) kills it, and one that lands before the work it should stop makes `early` true:
// then it tries again with a longer delay.
int signalled_run(const fs::path& dir, const std::vector<std::string>& args, const std::vector<int>& signals,
                  const std::function<bool()>& early = [] { return false; }) {
  int status = 0;
  for (int delay_ms : {300, 1000, 2500}) {
    const pid_t child = ::fork();
    if (child < 0) return -1;
    if (child == 0) {
      if (::chdir(dir.c_str()) != 0) ::_exit(127);
      std::vector<char*> argv = {const_cast<char*>(CNNBENCH_CLI), const_cast<char*>("train")};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(CNNBENCH_CLI, argv.data());
      ::_exit(127);
    }
    for (const int signal : signals) {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      ::kill(child, signal);
    }
    ::waitpid(child, &status, 0);
    if (WIFEXITED(status) && !early()) break;
  }
  return status;
}

// Every file in `dir`, by name.
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Without --save the checkpoint goes beside the report, named after its step, and a second
// interrupted run adds a file instead of replacing the first (--force: it replaces the report).
TEST(Cli, InterruptCheckpointIsNamedAfterItsStepBesideTheReport) {
  const fs::path dir = fresh_temp_dir("cli-interrupt-name");
  const std::vector<std::string> args = {"--model", "fc3", "--synthetic", "512", "--batch", "8", "--steps",
                                         "10000000", "--quiet", "--report", "out/r.json", "--force"};
  for (int run = 0; run < 2; ++run) {
    const int status = signalled_run(dir, args, {SIGINT});
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 130) << status;
  }
  const std::vector<std::string> names = names_in(dir / "out");
  ASSERT_EQ(names.size(), 3u) << ::testing::PrintToString(names);
  EXPECT_EQ(names[2], "r.json");
  const std::regex checkpoint("cnnbench-interrupted-step-[0-9]+(-2)?\\.safetensors");
  EXPECT_TRUE(std::regex_match(names[0], checkpoint)) << names[0];
  EXPECT_TRUE(std::regex_match(names[1], checkpoint)) << names[1];
  EXPECT_EQ(names_in(dir), std::vector<std::string>{"out"}) << "nothing is written into the working directory";
}

// A second Ctrl-C ends the run at once with 130, leaving no temporary file. The report goes to a
// FIFO nobody reads, so the orderly stop after the first signal waits there until the second.
TEST(Cli, SecondInterruptAbortsAtOnce) {
  const fs::path dir = fresh_temp_dir("cli-interrupt-twice");
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  const int status = signalled_run(dir, {"--model", "fc3", "--synthetic", "512", "--batch", "8", "--steps",
                                         "10000000", "--quiet", "--save", "c.st", "--report", "fifo"},
                                   {SIGINT, SIGINT});
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 130);
  for (const std::string& name : names_in(dir)) {
    EXPECT_TRUE(name == "fifo" || name == "c.st") << "left behind: " << name;
  }
}

// SIGINT or SIGTERM mid-run: a checkpoint is written, the exit code says which signal (130 or
// 143), and --resume then ends bit for bit where an uninterrupted run of the same length ends. The
// interrupted run is open-ended, so the signal always lands mid-run however slow the build (an ASan
// build too); the length compared is the step it stopped at plus a few.
TEST(Cli, InterruptedRunCheckpointsAndResumesExactly) {
  const fs::path dir = fresh_temp_dir("cli-interrupt");
  const std::string common = "train --model fc3 --synthetic 512 --batch 8 --quiet";
  for (const int signal : {SIGINT, SIGTERM}) {
    const std::string tag = std::to_string(signal);
    const std::string interrupted = (dir / ("interrupted-" + tag + ".st")).string();
    // A loaded machine may deliver the signal before the first step: a checkpoint of step 0, and
    // the run is tried again later, replacing that checkpoint (--force: the output rule refuses an
    // existing --save otherwise).
    const auto before_a_step = [&] {
      cnnbench::Model model(cnnbench::ModelKind::fc3);
      return !fs::exists(interrupted) || cnnbench::load_checkpoint(interrupted, model).global_step == 0;
    };
    const int status = signalled_run(dir, {"--model", "fc3", "--synthetic", "512", "--batch", "8", "--steps",
                                           "100000000", "--quiet", "--save", interrupted, "--force"},
                                     {signal}, before_a_step);
    ASSERT_TRUE(WIFEXITED(status)) << "killed by the signal instead of stopping cleanly";
    ASSERT_EQ(WEXITSTATUS(status), 128 + signal);
    ASSERT_TRUE(fs::exists(interrupted));
    cnnbench::Model model(cnnbench::ModelKind::fc3);
    const std::int64_t stopped_at = cnnbench::load_checkpoint(interrupted, model).global_step;
    ASSERT_GT(stopped_at, 0);
    const std::string steps = " --steps " + std::to_string(stopped_at + 23);
    const std::string straight = (dir / ("straight-" + tag + ".st")).string();
    const std::string resumed = (dir / ("resumed-" + tag + ".st")).string();
    ASSERT_EQ(run_cli(common + steps + " --save " + straight).code, 0);
    ASSERT_EQ(run_cli(common + steps + " --resume " + interrupted + " --save " + resumed).code, 0);
    EXPECT_EQ(cnnbench::read_file(resumed), cnnbench::read_file(straight));
  }
}

// A sweep stopped by SIGTERM exits 143 (SIGINT: 130) and leaves its report, marked interrupted and
// incomplete, with what it measured so far.
TEST(Cli, SweepStoppedBySigtermExits143WithAnIncompleteReport) {
  const fs::path dir = fresh_temp_dir("cli-sweep-sigterm");
  int status = 0;
  for (int delay_ms : {1500, 4000}) {
    fs::remove(dir / "r.json");
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::execl(CNNBENCH_CLI, CNNBENCH_CLI, "sweep", "--model", "fc3", "--strategies", "serial", "--cores", "1",
              "--steps", "20", "--repeat", "1000", "--warmup", "0", "--synthetic", "256", "--quiet", "--out",
              (dir / "r.json").c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ::kill(child, SIGTERM);
    ::waitpid(child, &status, 0);
    if (WIFEXITED(status)) break;  // else the signal came before the handlers: wait longer
  }
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 143);
  ASSERT_TRUE(fs::exists(dir / "r.json"));
  const auto report = nlohmann::json::parse(cnnbench::read_file(dir / "r.json"));
  EXPECT_TRUE(report.at("interrupted").get<bool>());
  EXPECT_FALSE(report.at("complete").get<bool>());
}

}  // namespace
