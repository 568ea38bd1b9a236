// `cnnbench train --strategy cluster` end to end under mpirun: only rank 0 reports and saves,
// a checkpoint resumes on a different rank count and still equals serial (the loss curve, then
// one step from the same checkpoint: equivalence.hpp), the report's time
// breakdown adds up (2 x 1 and 2 x 2) and names a slowed rank, its trace holds both ranks,
// killing one rank of a running job ends the whole job within 30 s, and stopping one ends it
// after --comm-timeout; allreduce-bench forces the algorithm asked for and labels Open MPI's
// fallbacks, and times the pairwise exchange.
#include <gtest/gtest.h>

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cnnbench/checkpoint.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/cpu_identity.hpp"
#include "cnnbench/models.hpp"
#include "mpirun_job.hpp"
#include "../equivalence.hpp"
#include "../temp_dir.hpp"

namespace cnnbench {
namespace {

namespace fs = std::filesystem;

fs::path fresh_folder(const std::string& name) {
  return test::fresh_temp_dir_of_process("cluster-cli-", name);
}

std::vector<std::string> train_command(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {CNNBENCH_CLI, "train", "--model", "fc3", "--synthetic", "1024",
                                   "--batch", "32", "--quiet"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Runs a command to completion (60 s at most) and expects exit status 0.
void run_ok(const std::vector<std::string>& args, const fs::path& log) {
  const pid_t pid = test::spawn_logged(args, {}, log);
  const test::Ended ended = test::wait_for(pid, 60);
  ASSERT_TRUE(ended.in_time && ended.exit_code == 0)
      << args[0] << " ... exited " << ended.exit_code << ":\n" << read_file(log);
}

TEST(ClusterCli, ResumesOnADifferentRankCountAndMatchesSerial) {
  const fs::path dir = fresh_folder("resume");
  const auto file = [&](const std::string& name) { return (dir / name).string(); };
  // 10 steps on 2 ranks, then 10 more on 1 rank x 2 threads, against 20 serial steps; then one
  // more step from the resumed run's checkpoint on both.
  run_ok(test::mpirun_command(2, train_command({"--strategy", "cluster", "--steps", "10", "--save",
                                               file("half.safetensors"), "--report",
                                               file("half.json")})),
         dir / "half.log");
  run_ok(train_command({"--strategy", "cluster", "--threads", "2", "--steps", "20", "--resume",
                        file("half.safetensors"), "--save", file("resumed.safetensors"),
                        "--report", file("resumed.json")}),
         dir / "resumed.log");
  run_ok(train_command({"--strategy", "serial", "--steps", "20", "--report", file("serial.json")}),
         dir / "serial.log");
  run_ok(train_command({"--strategy", "cluster", "--threads", "2", "--steps", "21", "--resume",
                        file("resumed.safetensors"), "--save", file("cluster-step.safetensors")}),
         dir / "cluster-step.log");
  run_ok(train_command({"--strategy", "serial", "--steps", "21", "--resume",
                        file("resumed.safetensors"), "--save", file("serial-step.safetensors")}),
         dir / "serial-step.log");

  // Rank 0 alone wrote the report and the checkpoint, and left no temporary files behind.
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"cluster-step.log", "cluster-step.safetensors",
                                             "half.json", "half.log", "half.safetensors",
                                             "resumed.json", "resumed.log", "resumed.safetensors",
                                             "serial-step.log", "serial-step.safetensors",
                                             "serial.json", "serial.log"}));
  const auto report = nlohmann::json::parse(read_file(dir / "half.json"));
  EXPECT_EQ(report.at("strategy_metrics").at("ranks"), 2);
  EXPECT_EQ(report.at("pin_map").size(), 2u) << "rank 0's report lists every rank's threads";

  // The resumed run's report holds its own 10 steps.
  std::vector<double> curve = testing::report_loss_curve(dir / "half.json");
  const std::vector<double> resumed = testing::report_loss_curve(dir / "resumed.json");
  curve.insert(curve.end(), resumed.begin(), resumed.end());
  testing::expect_loss_curves_close(curve, testing::report_loss_curve(dir / "serial.json"),
                                    "2 ranks, then resumed on 1 x 2");
  const testing::ModelState got = testing::read_checkpoint_state(dir / "cluster-step.safetensors", ModelKind::fc3);
  EXPECT_NE(got.params, testing::read_checkpoint_state(dir / "resumed.safetensors", ModelKind::fc3).params)
      << "the 21st step changed nothing";
  testing::expect_one_step_close(
      got, testing::read_checkpoint_state(dir / "serial-step.safetensors", ModelKind::fc3),
      ModelKind::fc3, "cluster 1 x 2 vs serial");
  fs::remove_all(dir);
}

// The direct children of `parent` whose command is `name`, with their MPI rank.
std::vector<std::pair<pid_t, int>> ranks_of(pid_t parent, const std::string& name) {
  std::vector<std::pair<pid_t, int>> found;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string pid_text = entry.path().filename();
    if (pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const auto open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent || line.substr(open + 1, close - open - 1) != name) continue;
    std::ifstream environment(entry.path() / "environ");
    int rank = -1;
    for (std::string variable; std::getline(environment, variable, '\0');) {
      if (variable.rfind("OMPI_COMM_WORLD_RANK=", 0) == 0) rank = std::stoi(variable.substr(21));
    }
    found.emplace_back(std::stoi(pid_text), rank);
  }
  return found;
}

// Alive and not a zombie waiting to be reaped.
bool is_running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

// The rules of a report's time breakdown: the categories add up to metrics.train_seconds (the
// run's wall time, measured apart from them) within 5%, the rest stays under 10% of it, the
// layers and the named compute parts add up to compute_s within 1%.
void expect_breakdown_adds_up(const nlohmann::json& report) {
  const auto& breakdown = report.at("metrics").at("time_breakdown");
  double sum = 0;
  for (const char* key : {"compute_s", "update_s", "reduce_s", "communication_exposed_s",
                          "imbalance_wait_s", "pipeline_bubble_s", "data_s", "other_s"}) {
    sum += breakdown.at(key).get<double>();
  }
  const double train_seconds = report.at("metrics").at("train_seconds");
  EXPECT_GT(train_seconds, 0.0);
  EXPECT_NEAR(sum, train_seconds, 0.05 * train_seconds) << breakdown.dump(1);
  // What no phase claimed is small, once the OS's share of it (a loaded machine) is set apart.
  const double other = breakdown.at("other_s").get<double>();
  const double descheduled = breakdown.at("other_descheduled_s").get<double>();
  EXPECT_LE(descheduled, other + 1e-12) << breakdown.dump(1);
  EXPECT_LT(other - descheduled, 0.10 * train_seconds) << breakdown.dump(1);
  double parts = 0;
  for (const char* group : {"per_layer", "compute_parts"}) {
    for (const auto& [name, seconds] : breakdown.at(group).items()) parts += seconds.get<double>();
  }
  const double compute = breakdown.at("compute_s");
  EXPECT_NEAR(parts, compute, 0.01 * compute) << breakdown.dump(1);
}

// A worker the OS kept off its core for over 10% of its working time ("rank 0: 23% descheduled"),
// or "" when every worker had its core.
std::string loaded_worker(const nlohmann::json& breakdown) {
  for (const auto& worker : breakdown.at("workers")) {
    const double busy = worker.at("busy_s").get<double>();
    const double lost = worker.at("descheduled_s").get<double>();
    if (busy > 0 && lost > 0.10 * busy) {
      return worker.at("kind").get<std::string>() + " " + std::to_string(worker.at("id").get<int>()) +
             ": " + std::to_string(static_cast<int>(100 * lost / busy)) + "% descheduled";
    }
  }
  return "";
}

// Rank 0's report breaks every rank's steps down (expect_breakdown_adds_up), and the rank an
// injected slowdown holds back is named the straggler, its excess injected compute rather than
// the OS's (the slowed rank sleeps: no CPU, yet not descheduled). Its factor is a wall-time
// ratio on a shared machine, so only a loose bound is asserted here.
TEST(ClusterCli, TheReportBreaksTheStepsDownAndNamesTheSlowedRank) {
  const fs::path dir = fresh_folder("breakdown");
  run_ok(test::mpirun_command(2, {CNNBENCH_CLI, "train", "--strategy", "cluster", "--model",
                                  "lenet5", "--synthetic", "3072", "--batch", "128", "--steps",
                                  "24", "--slowdown", "1:2", "--quiet", "--report",
                                  (dir / "run.json").string(), "--trace",
                                  (dir / "trace.json").string()}),
         dir / "run.log");
  const auto report = nlohmann::json::parse(read_file(dir / "run.json"));
  const auto& breakdown = report.at("metrics").at("time_breakdown");
  expect_breakdown_adds_up(report);
  EXPECT_GT(breakdown.at("compute_parts").at("injected_s").get<double>(), 0.0);
  EXPECT_EQ(breakdown.at("steps"), 24);
  ASSERT_EQ(breakdown.at("workers").size(), 2u);
  for (const auto& worker : breakdown.at("workers")) EXPECT_EQ(worker.at("kind"), "rank");
  const auto& straggler = report.at("metrics").at("straggler");
  EXPECT_EQ(straggler.at("kind"), "rank");
  // Which rank straggles is the premise of a quiet machine: a core the OS shared with another
  // process slows its rank as much as the injected factor does.
  const std::string loaded = loaded_worker(breakdown);
  if (loaded.empty()) {
    EXPECT_EQ(straggler.at("id"), 1) << straggler.dump();
    EXPECT_GT(straggler.at("mean_excess").get<double>(), 1.2) << straggler.dump();
    EXPECT_LT(straggler.at("descheduled_share").get<double>(), 0.5) << straggler.dump();
  } else {
    std::printf("not checked: which rank straggles (the machine is not quiet: %s)\n", loaded.c_str());
  }
  // Rank 0 wrote a trace with both ranks' threads in it.
  const auto trace = nlohmann::json::parse(read_file(dir / "trace.json"));
  std::vector<int> ranks;
  for (const auto& event : trace.at("traceEvents")) {
    if (event.at("ph") != "X") continue;
    EXPECT_GE(event.at("dur").get<double>(), 0.0);
    const int rank = event.at("pid");
    if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) ranks.push_back(rank);
  }
  std::sort(ranks.begin(), ranks.end());
  EXPECT_EQ(ranks, (std::vector<int>{0, 1}));
  // The allreduces a step made, as the report states them, cover the whole gradient.
  const auto& schedule = report.at("strategy_metrics").at("allreduce").at("schedule_bytes");
  double scheduled = 0;
  for (const auto& bytes : schedule) scheduled += bytes.get<double>();
  EXPECT_GT(schedule.size(), 1u) << "overlap on: one allreduce per bucket";
  EXPECT_EQ(scheduled, 4.0 * static_cast<double>(model_spec(ModelKind::lenet5).param_count));
  fs::remove_all(dir);
}

// allreduce-bench on 3 ranks for 1, 2, 4, 8, 16 floats with `flags` and --algorithm: Open MPI
// holds the algorithm's id in `setting` (read back after MPI_Init), and each size is labelled
// with the algorithm `run` lists for it. Returns the report.
struct LabelCase {
  const char* algorithm;
  int id;
  std::vector<std::string> run;  // for 1, 2, 4, 8, 16 floats
};
nlohmann::json expect_labels(const fs::path& dir, std::vector<std::string> flags, const char* setting,
                             const LabelCase& e) {
  const fs::path out = dir / (std::string(e.algorithm) + ".json");
  std::vector<std::string> command = {CNNBENCH_CLI, "allreduce-bench", "--algorithm", e.algorithm,
                                      "--min-bytes", "4", "--max-bytes", "64", "--samples", "3",
                                      "--repetitions", "5", "--report", out.string()};
  command.insert(command.begin() + 2, flags.begin(), flags.end());
  // Sizes this small leave the link's bandwidth under the noise: the fit is a link (alpha >= 0,
  // beta > 0) and exits 0, or is refused with the sizes to measure and exits 1, never a
  // negative cost that exits 0 (scaling-model would refuse it later with no hint).
  const pid_t pid = test::spawn_logged(test::mpirun_command(3, command), {}, dir / "run.log");
  const test::Ended ended = test::wait_for(pid, 60);
  EXPECT_TRUE(ended.in_time);
  const auto report = nlohmann::json::parse(read_file(out));
  if (ended.exit_code == 0) {
    EXPECT_GE(report.at("fit").at("link").at("alpha_s").get<double>(), 0) << report.at("fit");
    EXPECT_GT(report.at("fit").at("link").at("beta_s_per_byte").get<double>(), 0) << report.at("fit");
    EXPECT_EQ(report.at("fit").at("residuals").size(), report.at("sizes").size());
  } else {
    EXPECT_EQ(ended.exit_code, 1) << read_file(dir / "run.log");
    EXPECT_TRUE(report.at("fit").is_null());
    EXPECT_NE(report.value("fit_refused", "").find("measure up to 1 MiB or more (--max-bytes 1048576)"),
              std::string::npos) << report.dump();
  }
  EXPECT_EQ(report.at("open_mpi").at(setting), e.id) << report.at("open_mpi");
  // The machine it was measured on, as a run report has it.
  EXPECT_EQ(report.at("context").at("cpu").at("family"), cpu_identity_json(this_cpu()).at("family")) << report.at("context");
  EXPECT_FALSE(report.at("context").at("date").get<std::string>().empty());
  const auto& sizes = report.at("sizes");
  EXPECT_EQ(sizes.size(), e.run.size());
  for (std::size_t i = 0; i < std::min(sizes.size(), e.run.size()); ++i) {
    EXPECT_EQ(sizes[i].at("algorithm_asked"), e.algorithm);
    EXPECT_EQ(sizes[i].at("algorithm_run"), e.run[i]) << "at " << sizes[i].at("bytes") << " bytes";
  }
  return report;
}

// --algorithm reaches Open MPI, and every size is labelled with what Open MPI 4.1 runs for its
// count on 3 ranks: the ring below 3 floats is recursive doubling, Rabenseifner below
// 2^floor(lg 3) = 2 floats is basic linear; unforced, what its decision table picks.
TEST(ClusterCli, AllreduceBenchForcesTheAlgorithmAndLabelsTheFallbacks) {
  const fs::path dir = fresh_folder("allreduce");
  for (const LabelCase& e : {LabelCase{"ring", 4, {"recursive_doubling", "recursive_doubling", "ring", "ring", "ring"}},
                             LabelCase{"rabenseifner", 6, {"basic_linear", "rabenseifner", "rabenseifner",
                                                           "rabenseifner", "rabenseifner"}}}) {
    const nlohmann::json report = expect_labels(dir, {}, "coll_tuned_allreduce_algorithm", e);
    EXPECT_EQ(report.at("open_mpi").at("coll_tuned_use_dynamic_rules"), 1);
    const auto& sizes = report.at("sizes");
    for (const auto& size : sizes) {
      // nccl-tests' bus bandwidth: 2(p-1)/p = 4/3 of the algorithm bandwidth at p = 3.
      EXPECT_NEAR(size.at("bus_gbps").get<double>(), size.at("algorithm_gbps").get<double>() * 4 / 3,
                  1e-9 * size.at("bus_gbps").get<double>());
    }
  }
  // Unforced, each size is labelled with what Open MPI 4.1's decision table runs on 3 ranks.
  // The labels are the point here: as above, a busy machine's times of these sizes may fit a
  // cost per byte no link has, which the command refuses (exit 1) with the times and labels kept.
  const fs::path out = dir / "default.json";
  const pid_t pid = test::spawn_logged(
      test::mpirun_command(3, {CNNBENCH_CLI, "allreduce-bench", "--min-bytes", "4096", "--max-bytes", "262144",
                               "--samples", "3", "--repetitions", "3", "--report", out.string()}),
      {}, dir / "run.log");
  const test::Ended ended = test::wait_for(pid, 60);
  ASSERT_TRUE(ended.in_time) << read_file(dir / "run.log");
  const auto report = nlohmann::json::parse(read_file(out));
  if (ended.exit_code != 0) {
    EXPECT_EQ(ended.exit_code, 1) << read_file(dir / "run.log");
    EXPECT_NE(report.value("fit_refused", "").find("the fit's link"), std::string::npos) << report.dump();
  }
  const std::vector<std::string> table = {"ring", "recursive_doubling", "ring", "ring",
                                          "ring", "ring", "rabenseifner"};  // 4 kB .. 256 kB
  const auto& sizes = report.at("sizes");
  ASSERT_EQ(sizes.size(), table.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(sizes[i].at("algorithm_asked"), "default");
    EXPECT_EQ(sizes[i].at("algorithm_run"), table[i]) << "at " << sizes[i].at("bytes") << " bytes";
  }
  fs::remove_all(dir);
}

// --nonblocking times the cluster strategy's own call, MPI_Iallreduce in place, which libnbc
// serves: unforced its binomial trees at every size; asked for Rabenseifner (id 3, read back),
// the ring where the count is below 2^floor(lg 3) = 2 floats.
TEST(ClusterCli, AllreduceBenchNonblockingLabelsLibnbcsChoice) {
  const fs::path dir = fresh_folder("allreduce-nonblocking");
  for (const LabelCase& e : {LabelCase{"default", 0, {"binomial", "binomial", "binomial", "binomial", "binomial"}},
                             LabelCase{"rabenseifner", 3, {"ring", "rabenseifner", "rabenseifner", "rabenseifner",
                                                           "rabenseifner"}}}) {
    const nlohmann::json report = expect_labels(dir, {"--nonblocking"}, "coll_libnbc_iallreduce_algorithm", e);
    EXPECT_TRUE(report.at("nonblocking").get<bool>());
  }
  // Over a link capped at 1gbit every size up to 64 bytes is inside its 500 kB tbf burst: the fit
  // is refused, and the times stay in the report with the reason.
  const fs::path out = dir / "burst.json";
  const pid_t pid = test::spawn_logged(
      test::mpirun_command(2, {CNNBENCH_CLI, "allreduce-bench", "--min-bytes", "4", "--max-bytes", "64",
                               "--samples", "3", "--repetitions", "3", "--report", out.string()}),
      {"CNNBENCH_LINK_RATE=1gbit"}, dir / "burst.log");
  const test::Ended ended = test::wait_for(pid, 60);
  ASSERT_TRUE(ended.in_time);
  EXPECT_EQ(ended.exit_code, 1) << read_file(dir / "burst.log");
  const auto report = nlohmann::json::parse(read_file(out));
  EXPECT_TRUE(report.at("fit").is_null());
  EXPECT_EQ(report.at("sizes").size(), 5u);
  EXPECT_NE(report.at("fit_refused").get<std::string>().find("inside the link's tbf burst"), std::string::npos)
      << report.at("fit_refused");
  fs::remove_all(dir);
}

// --exchange times MPI_Sendrecv between rank r and r ^ 1 over the same doubling sizes: the report
// says so, holds every size and no allreduce fit; 3 ranks
// leave one without a partner and are refused, as is an allreduce option beside --exchange.
TEST(ClusterCli, AllreduceBenchExchangeTimesPairwiseSendrecv) {
  const fs::path dir = fresh_folder("exchange");
  const fs::path out = dir / "exchange.json";
  const std::vector<std::string> command = {CNNBENCH_CLI, "allreduce-bench", "--exchange", "--min-bytes", "4096",
                                            "--max-bytes", "1048576", "--samples", "3", "--report", out.string()};
  run_ok(test::mpirun_command(2, command), dir / "run.log");
  const auto report = nlohmann::json::parse(read_file(out));
  EXPECT_TRUE(report.at("exchange").get<bool>());
  EXPECT_NE(report.at("operation").get<std::string>().find("MPI_Sendrecv"), std::string::npos) << report.at("operation");
  EXPECT_TRUE(report.at("fit").is_null());
  const auto& sizes = report.at("sizes");
  ASSERT_EQ(sizes.size(), 9u);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(sizes[i].at("bytes"), 4096 << i);
    EXPECT_FALSE(sizes[i].contains("algorithm_run"));
    EXPECT_LE(sizes[i].at("seconds_min").get<double>(), sizes[i].at("seconds").get<double>());
    EXPECT_LE(sizes[i].at("seconds").get<double>(), sizes[i].at("seconds_max").get<double>());
    EXPECT_NEAR(sizes[i].at("bus_gbps").get<double>(), sizes[i].at("algorithm_gbps").get<double>(),
                1e-9 * sizes[i].at("bus_gbps").get<double>());  // the payload once each way
  }

  const fs::path odd = dir / "odd.json";
  std::vector<std::string> three = command;
  three.back() = odd.string();
  const pid_t pid = test::spawn_logged(test::mpirun_command(3, three), {}, dir / "odd.log");
  const test::Ended ended = test::wait_for(pid, 60);
  ASSERT_TRUE(ended.in_time);
  EXPECT_NE(ended.exit_code, 0);
  EXPECT_NE(read_file(dir / "odd.log").find("3 ranks leave rank 2 without a partner"), std::string::npos)
      << read_file(dir / "odd.log");
  EXPECT_FALSE(fs::exists(odd));

  const pid_t both = test::spawn_logged({CNNBENCH_CLI, "allreduce-bench", "--exchange", "--nonblocking"}, {},
                                        dir / "both.log");
  const test::Ended refused = test::wait_for(both, 60);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(read_file(dir / "both.log").find("--exchange times MPI_Sendrecv between pairs of ranks, not an "
                                             "allreduce: it takes no --nonblocking"),
            std::string::npos)
      << read_file(dir / "both.log");
  fs::remove_all(dir);
}

// Two ranks of two threads: the breakdown adds up the same way, a worker per thread per rank.
TEST(ClusterCli, TheBreakdownOfTwoRanksOfTwoThreadsAddsUp) {
  const fs::path dir = fresh_folder("breakdown-2x2");
  run_ok(test::mpirun_command(2, {CNNBENCH_CLI, "train", "--strategy", "cluster", "--model",
                                  "lenet5", "--synthetic", "1024", "--batch", "64", "--steps",
                                  "48", "--threads", "2", "--no-pin", "--oversubscribe",
                                  "--quiet", "--report", (dir / "run.json").string()}),
         dir / "run.log");
  const auto report = nlohmann::json::parse(read_file(dir / "run.json"));
  expect_breakdown_adds_up(report);
  const auto& workers = report.at("metrics").at("time_breakdown").at("workers");
  ASSERT_EQ(workers.size(), 4u);
  for (const auto& worker : workers) {
    EXPECT_EQ(worker.at("kind"), "thread");
    EXPECT_GE(worker.at("descheduled_s").get<double>(), 0.0);
    EXPECT_LE(worker.at("descheduled_s").get<double>(), worker.at("wall_s").get<double>());
  }
  EXPECT_EQ(report.at("metrics").at("straggler").at("kind"), "rank");
  fs::remove_all(dir);
}

TEST(ClusterCli, KillingOneRankEndsTheJobWithin30Seconds) {
  const fs::path dir = fresh_folder("kill");
  const pid_t mpirun = test::spawn_logged(
      test::mpirun_command(2, {CNNBENCH_CLI, "train", "--model", "lenet5", "--strategy", "cluster",
                               "--synthetic", "2048", "--steps", "1000000", "--quiet"}),
      {}, dir / "log");
  // Both ranks up and a couple of seconds into training.
  std::vector<std::pair<pid_t, int>> ranks;
  const double start = now_seconds();
  // A rank's environment may not be readable in the instant after its exec: scan until both
  // ranks are seen with their numbers.
  auto has_rank_one = [&] {
    return std::any_of(ranks.begin(), ranks.end(), [](const auto& r) { return r.second == 1; });
  };
  while ((ranks.size() < 2 || !has_rank_one()) && now_seconds() - start < 30) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ranks = ranks_of(mpirun, fs::path(CNNBENCH_CLI).filename().string().substr(0, 15));
  }
  ASSERT_EQ(ranks.size(), 2u) << read_file(dir / "log");
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const auto victim = std::find_if(ranks.begin(), ranks.end(), [](const auto& r) { return r.second == 1; });
  ASSERT_NE(victim, ranks.end());
  ASSERT_EQ(::kill(victim->first, SIGKILL), 0);

  const test::Ended ended = test::wait_for(mpirun, 30);
  const std::string log = read_file(dir / "log");
  EXPECT_TRUE(ended.in_time) << "the job still ran 30 s after rank 1 was killed\n" << log;
  EXPECT_NE(ended.exit_code, 0) << log;
  EXPECT_NE(log.find("rank 1"), std::string::npos) << log;
  std::cout << "[ info ] the job ended " << ended.seconds << " s after rank 1 was killed\n";
  // mpirun's last SIGTERM/SIGKILL to the surviving ranks may land just after it exits.
  for (const auto& [pid, rank] : ranks) {
    const double deadline = now_seconds() + 10;
    while (is_running(pid) && now_seconds() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_FALSE(is_running(pid)) << "rank " << rank << " (pid " << pid << ") outlived the job by 10 s";
  }
  fs::remove_all(dir);
}

// A rank that stops answering without dying (SIGSTOP: its process and its connections stay, as
// when a host hangs or its link goes down, and TCP would wait for many minutes): the others give
// up after --comm-timeout, the job ends within --comm-timeout + 10 s with a line naming the lost
// rank, writes no report, and the checkpoint of --checkpoint-every is whole and resumes.
TEST(ClusterCli, AStoppedRankEndsTheJobAfterCommTimeoutAndTheCheckpointResumes) {
  const fs::path dir = fresh_folder("stopped");
  const fs::path checkpoint = dir / "last.safetensors";
  constexpr double comm_timeout = 3;
  const pid_t mpirun = test::spawn_logged(
      test::mpirun_command(3, train_command({"--strategy", "cluster", "--steps", "100000",
                                             "--comm-timeout", "3", "--checkpoint-every", "10",
                                             "--save", checkpoint.string(), "--report",
                                             (dir / "run.json").string(), "--oversubscribe"})),
      {}, dir / "log");
  std::vector<std::pair<pid_t, int>> ranks;
  const auto victim = [&] {
    return std::find_if(ranks.begin(), ranks.end(), [](const auto& r) { return r.second == 2; });
  };
  const double start = now_seconds();
  while ((ranks.size() < 3 || victim() == ranks.end() || !fs::exists(checkpoint)) &&
         now_seconds() - start < 60) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ranks = ranks_of(mpirun, fs::path(CNNBENCH_CLI).filename().string().substr(0, 15));
  }
  if (ranks.size() < 3 || victim() == ranks.end() || !fs::exists(checkpoint)) {
    test::wait_for(mpirun, 0);
    FAIL() << "no 3 ranks and a checkpoint within 60 s\n" << read_file(dir / "log");
  }
  const pid_t stopped = victim()->first;
  ASSERT_EQ(::kill(stopped, SIGSTOP), 0);
  const test::Ended ended = test::wait_for(mpirun, comm_timeout + 10);
  // Whatever happened, the stopped rank must not outlive the test.
  ::kill(stopped, SIGCONT);
  ::kill(stopped, SIGKILL);
  const std::string log = read_file(dir / "log");
  EXPECT_TRUE(ended.in_time) << "the job still ran " << comm_timeout + 10
                             << " s after rank 2 stopped\n" << log;
  EXPECT_NE(ended.exit_code, 0) << log;
  EXPECT_NE(log.find("cnnbench: error: lost contact with rank 2 (host "), std::string::npos) << log;
  EXPECT_NE(log.find("no reply within --comm-timeout 3 s; the last checkpoint is " +
                     checkpoint.string() + " (step "),
            std::string::npos)
      << log;
  EXPECT_FALSE(fs::exists(dir / "run.json")) << "a failed job wrote a report";
  std::cout << "[ info ] the job ended " << ended.seconds << " s after rank 2 stopped\n";

  // The last checkpoint is whole, at a multiple of 10 steps, and a run resumes from it.
  Model model(ModelKind::fc3);
  const TrainProgress progress = load_checkpoint(checkpoint, model);
  EXPECT_GT(progress.global_step, 0);
  EXPECT_EQ(progress.global_step % 10, 0);
  EXPECT_NE(log.find("(step " + std::to_string(progress.global_step) + "); ending the job"),
            std::string::npos)
      << "the line names another checkpoint than the last one\n" << log;
  run_ok(train_command({"--strategy", "cluster", "--steps", std::to_string(progress.global_step + 5),
                        "--resume", checkpoint.string(), "--save", (dir / "resumed.safetensors").string()}),
         dir / "resumed.log");
  Model resumed(ModelKind::fc3);
  EXPECT_EQ(load_checkpoint(dir / "resumed.safetensors", resumed).global_step,
            progress.global_step + 5);
  for (const auto& [pid, rank] : ranks) {
    const double deadline = now_seconds() + 10;
    while (is_running(pid) && now_seconds() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_FALSE(is_running(pid)) << "rank " << rank << " (pid " << pid << ") outlived the job";
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cnnbench
