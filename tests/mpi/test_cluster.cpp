// The cluster strategy under mpirun: any ranks x threads equals a naive serial loop (the loss
// curve of 50 steps, then one step from the same state: equivalence.hpp), runs are bit-identical run to run and rank to rank, balancing moves work off a slowed
// rank, and a rank that throws ends the whole job quickly, naming the rank.
// The binary re-launches itself under mpirun; the rank side is the test ClusterRank.Run, which
// only runs when CNNBENCH_CLUSTER_TEST_CASE carries a case description (JSON).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <mpi.h>

#include <nlohmann/json.hpp>

#include "cnnbench/cluster.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/train.hpp"
#include "mpirun_job.hpp"
#include "../equivalence.hpp"
#include "../serial_oracle.hpp"
#include "../temp_dir.hpp"

namespace cnnbench {
namespace {

namespace fs = std::filesystem;
constexpr const char* case_variable = "CNNBENCH_CLUSTER_TEST_CASE";
constexpr std::size_t dataset_size = 512;
constexpr std::uint64_t data_seed = 3, init_seed = 11, order_seed = 5;

struct Case {
  std::string model = "fc3";
  int ranks = 1, threads = 1, batch = 32, steps = 50;
  std::map<std::string, std::string> options;
  // Faults: a rank that throws inside the strategy (from its step callback) or outside it
  // (between prepare and the steps). Killing a rank is tested on the CLI (test_cluster_cli).
  int throw_rank = -1, throw_step = -1, throw_outside_rank = -1;
  bool allreduce_benchmark = false;  // instead of training
  std::string out;  // folder for the ranks' results

  nlohmann::json to_json() const {
    return {{"model", model}, {"threads", threads}, {"batch", batch}, {"steps", steps},
            {"options", options}, {"throw_rank", throw_rank}, {"throw_step", throw_step},
            {"throw_outside_rank", throw_outside_rank},            {"allreduce_benchmark", allreduce_benchmark}, {"out", out}};
  }
  static Case from_json(const nlohmann::json& j) {
    Case c;
    c.model = j.at("model");
    c.threads = j.at("threads");
    c.batch = j.at("batch");
    c.steps = j.at("steps");
    c.options = j.at("options").get<std::map<std::string, std::string>>();
    c.throw_rank = j.at("throw_rank");
    c.throw_step = j.at("throw_step");
    c.throw_outside_rank = j.at("throw_outside_rank");
    c.allreduce_benchmark = j.at("allreduce_benchmark");
    c.out = j.at("out");
    return c;
  }
};

// The run the oracle makes of a case (its data, init and order are the ranks' too).
testing::SerialRun serial_run(const Case& c) {
  testing::SerialRun run;
  run.model = c.model;
  run.batch = c.batch;
  run.steps = c.steps;
  run.dataset_size = dataset_size;
  run.data_seed = data_seed;
  run.init_seed = init_seed;
  run.order_seed = order_seed;
  return run;
}

// A run of the case, and the step after it taken from its weights and momentum.
struct Trained : testing::Trained {
  testing::ModelState stepped;
};

testing::Trained train_serially(const Case& c) { return testing::train_serially(serial_run(c)); }

// ---- the rank side ------------------------------------------------------------------------------

// rank<r><suffix>.bin: the weights, the momentum, then the losses.
void write_rank_result(const Case& c, int rank, const Model& model, const std::vector<double>& losses,
                       const std::string& suffix = "") {
  std::ofstream out(fs::path(c.out) / ("rank" + std::to_string(rank) + suffix + ".bin"), std::ios::binary);
  out.write(reinterpret_cast<const char*>(model.params.data()),
            static_cast<std::streamsize>(model.params.size() * sizeof(float)));
  out.write(reinterpret_cast<const char*>(model.momentum.data()),
            static_cast<std::streamsize>(model.momentum.size() * sizeof(float)));
  out.write(reinterpret_cast<const char*>(losses.data()),
            static_cast<std::streamsize>(losses.size() * sizeof(double)));
}

TEST(ClusterRank, Run) {
  const char* description = std::getenv(case_variable);
  if (description == nullptr) GTEST_SKIP() << "runs only as a rank launched by the tests below";
  const Case c = Case::from_json(nlohmann::json::parse(description));
  if (c.allreduce_benchmark) {
    AllreduceBenchConfig bench;
    bench.min_bytes = 4;
    bench.max_bytes = 1 << 16;
    bench.repetitions = 20;
    const nlohmann::json result = allreduce_benchmark(bench);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) write_output(fs::path(c.out) / "report.json", result.dump(1));
    return;
  }
  const ModelKind kind = parse_model(c.model);
  const Dataset data = make_synthetic(dataset_size, data_seed);
  Model model(kind);
  init_params(model.params, kind, init_seed);
  TrainConfig config;
  config.model = kind;
  config.strategy = "cluster";
  config.batch = c.batch;
  config.threads = c.threads;
  config.options = c.options;

  auto strategy = make_strategy("cluster");
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  strategy->prepare(model, data, config);
  if (rank == c.throw_outside_rank) throw Error("injected failure outside the strategy");

  std::vector<double> losses;
  const auto on_step = [&](std::int64_t, double loss) {
    if (rank == c.throw_rank && static_cast<int>(losses.size()) == c.throw_step) {
      throw Error("injected failure at step " + std::to_string(c.throw_step));
    }
    losses.push_back(loss);
  };
  testing::SerialRun with_next_step = serial_run(c);
  ++with_next_step.steps;
  const auto order = testing::step_order(with_next_step);
  // Two ranges, as the driver makes them at epoch ends.
  const std::int64_t first_range = c.steps / 3;
  strategy->run_steps({order.data(), 0, first_range, 0}, on_step);
  strategy->run_steps({order.data(), first_range, c.steps - first_range, first_range}, on_step);
  strategy->sync_to(model);
  write_rank_result(c, rank, model, losses);
  if (strategy->is_primary()) {
    write_output(fs::path(c.out) / "report.json",
                          nlohmann::json{{"metrics", strategy->metrics()},
                                         {"pins", pin_map_json(strategy->pin_map())}}
                              .dump(1));
  }
  strategy.reset();
  // One more step from the weights and momentum reached, on a fresh strategy as --resume starts
  // one; the launching side holds it against the oracle's step from there.
  auto resumed = make_strategy("cluster");
  resumed->prepare(model, data, config);
  resumed->run_steps({order.data(), c.steps, 1, c.steps}, [](std::int64_t, double) {});
  resumed->sync_to(model);
  write_rank_result(c, rank, model, {}, "-step");
}

// ---- the launching side -----------------------------------------------------------------------

struct Job {
  pid_t pid = -1;
  fs::path out;
  fs::path log;
};

// Starts `mpirun -np ranks <this binary> --gtest_filter=ClusterRank.Run` with the case in the
// environment; output goes to out/log.
Job launch(Case& c, int ranks, const std::string& name) {
  Job job;
  job.out = test::fresh_temp_dir_of_process("cluster-", name);
  job.log = job.out / "log";
  c.out = job.out.string();
  c.ranks = ranks;
  const auto args = test::mpirun_command(
      ranks, {fs::read_symlink("/proc/self/exe").string(), "--gtest_filter=ClusterRank.Run", "--gtest_brief=1"});
  job.pid = test::spawn_logged(args, {std::string(case_variable) + "=" + c.to_json().dump()}, job.log);
  return job;
}

using test::Ended;
Ended wait_for(const Job& job, double limit) { return test::wait_for(job.pid, limit); }

std::string log_of(const Job& job) { return read_file(job.log); }

// Rank `rank`'s run of `steps` steps and its step after them.
Trained read_rank_result(const Job& job, int rank, std::size_t params, int steps) {
  Trained result;
  const auto read = [&](const std::string& suffix, std::vector<float>& weights,
                        std::vector<float>& momentum, std::vector<double>& losses) {
    weights.resize(params);
    momentum.resize(params);
    std::ifstream in(job.out / ("rank" + std::to_string(rank) + suffix + ".bin"), std::ios::binary);
    in.read(reinterpret_cast<char*>(weights.data()), static_cast<std::streamsize>(params * sizeof(float)));
    in.read(reinterpret_cast<char*>(momentum.data()), static_cast<std::streamsize>(params * sizeof(float)));
    in.read(reinterpret_cast<char*>(losses.data()), static_cast<std::streamsize>(losses.size() * sizeof(double)));
    if (!in) throw Error("rank " + std::to_string(rank) + " wrote no complete result" + suffix + " in " + job.out.string());
  };
  result.losses.resize(static_cast<std::size_t>(steps));
  read("", result.params, result.momentum, result.losses);
  std::vector<double> no_losses;
  read("-step", result.stepped.params, result.stepped.momentum, no_losses);
  return result;
}

// Runs the case on ranks x c.threads and returns rank 0's result, after checking that the job
// succeeded and that every rank holds the same bits.
Trained run_cluster(Case c, int ranks, const std::string& name) {
  const Job job = launch(c, ranks, name);
  const Ended ended = wait_for(job, 120);
  EXPECT_TRUE(ended.in_time && ended.exit_code == 0)
      << name << ": exit " << ended.exit_code << " after " << ended.seconds << " s\n" << log_of(job);
  std::cout << "[ info ] " << name << ": " << ended.seconds << " s\n";
  const std::size_t params = model_spec(parse_model(c.model)).param_count;
  const Trained first = read_rank_result(job, 0, params, c.steps);
  for (int r = 1; r < ranks; ++r) {
    const Trained other = read_rank_result(job, r, params, c.steps);
    EXPECT_TRUE(other.params == first.params && other.momentum == first.momentum)
        << name << ": rank " << r << " holds different weights than rank 0";
    EXPECT_TRUE(other.stepped.params == first.stepped.params &&
                other.stepped.momentum == first.stepped.momentum)
        << name << ": after one more step rank " << r << " holds different weights than rank 0";
    EXPECT_EQ(other.losses, first.losses) << name << ": rank " << r << " saw different losses";
  }
  fs::remove_all(job.out);
  return first;
}

nlohmann::json run_cluster_report(Case c, int ranks, const std::string& name, Trained* result) {
  const Job job = launch(c, ranks, name);
  const Ended ended = wait_for(job, 120);
  EXPECT_TRUE(ended.in_time && ended.exit_code == 0)
      << name << ": exit " << ended.exit_code << "\n" << log_of(job);
  if (result) *result = read_rank_result(job, 0, model_spec(parse_model(c.model)).param_count, c.steps);
  auto report = nlohmann::json::parse(read_file(job.out / "report.json"));
  fs::remove_all(job.out);
  return report;
}

// The loss curve equals the oracle's, and the step after the run equals the oracle's step from
// the run's weights and momentum (equivalence.hpp).
void expect_matches_serial(const Trained& got, const Case& c, const testing::Trained& serial,
                           const std::string& name) {
  testing::expect_loss_curves_close(got.losses, serial.losses, name + " (cluster vs serial)");
  testing::expect_one_step_close(
      got.stepped, testing::serial_step_after(serial_run(c), {got.params, got.momentum}),
      parse_model(c.model), name + " (cluster vs serial)");
}

// A rank process runs only ClusterRank.Run; the launching tests skip there.
bool is_rank_process() { return std::getenv(case_variable) != nullptr; }

TEST(Cluster, Fc3MatchesSerialOnEveryShape) {
  if (is_rank_process()) GTEST_SKIP();
  Case c;
  c.model = "fc3";
  const testing::Trained serial = train_serially(c);
  for (const auto& [ranks, threads] : {std::pair{1, 1}, {1, 2}, {2, 1}, {2, 2}, {3, 1}, {4, 1}}) {
    c.threads = threads;
    const std::string name = "fc3_" + std::to_string(ranks) + "x" + std::to_string(threads);
    expect_matches_serial(run_cluster(c, ranks, name), c, serial, name);
  }
}

TEST(Cluster, Lenet5MatchesSerial) {
  if (is_rank_process()) GTEST_SKIP();
  Case c;
  c.model = "lenet5";
  c.batch = 16;
  const testing::Trained serial = train_serially(c);
  for (const auto& [ranks, threads] : {std::pair{1, 2}, {2, 1}}) {
    c.threads = threads;
    const std::string name = "lenet5_" + std::to_string(ranks) + "x" + std::to_string(threads);
    expect_matches_serial(run_cluster(c, ranks, name), c, serial, name);
  }
  c.threads = 2;
  c.options["overlap"] = "off";
  expect_matches_serial(run_cluster(c, 2, "lenet5_2x2_no_overlap"), c, serial, "lenet5_2x2_no_overlap");
}

// --rank-update sharded over MPI: each rank's own segments through MPI_Ialltoallv and summed in
// rank order, stepped, then shared with MPI_Iallgatherv; the momentum's segments shared for the
// checkpoint (the one more step runs from them). On 2 ranks the sum has the bits of the
// replicated update's MPI_Iallreduce (a + b either way).
TEST(Cluster, ShardedUpdateMatchesSerial) {
  if (is_rank_process()) GTEST_SKIP();
  Case c;
  c.model = "fc3";
  const testing::Trained serial = train_serially(c);
  for (const auto& [ranks, threads] : {std::pair{2, 1}, {2, 2}, {3, 1}}) {
    c.threads = threads;
    c.options = {{"rank-update", "sharded"}};
    const std::string name = "sharded_" + std::to_string(ranks) + "x" + std::to_string(threads);
    const Trained sharded = run_cluster(c, ranks, name);
    expect_matches_serial(sharded, c, serial, name);
    if (ranks != 2) continue;
    c.options = {{"rank-update", "replicated"}};
    const Trained replicated = run_cluster(c, ranks, name + "_replicated");
    EXPECT_TRUE(sharded.params == replicated.params && sharded.momentum == replicated.momentum)
        << name << ": the sharded update should give the replicated update's bits on 2 ranks";
    EXPECT_EQ(sharded.losses, replicated.losses) << name;
  }
}

TEST(Cluster, SameShapeGivesBitIdenticalRuns) {
  if (is_rank_process()) GTEST_SKIP();
  Case c;
  c.steps = 20;
  for (const auto& [ranks, threads, overlap] :
       {std::tuple{2, 2, "on"}, {3, 1, "off"}}) {
    c.threads = threads;
    c.options["overlap"] = overlap;
    const std::string name = "repeat_" + std::to_string(ranks) + "x" + std::to_string(threads) + "_" + overlap;
    const Trained first = run_cluster(c, ranks, name + "_a");
    const Trained second = run_cluster(c, ranks, name + "_b");
    EXPECT_TRUE(first.params == second.params && first.momentum == second.momentum)
        << name << ": two runs of the same shape differ";
    EXPECT_EQ(first.losses, second.losses) << name;
  }
}

TEST(Cluster, DynamicBalanceMovesWorkOffASlowRankAndStillMatchesSerial) {
  if (is_rank_process()) GTEST_SKIP();
  Case c;
  c.options = {{"balance", "dynamic"}, {"slowdown", "1:4"}};
  const testing::Trained serial = train_serially(c);
  Trained balanced;
  const auto report = run_cluster_report(c, 2, "balance", &balanced);
  expect_matches_serial(balanced, c, serial, "balance");
  const auto& ranks = report.at("metrics").at("per_rank");
  ASSERT_EQ(ranks.size(), 2u);
  const double fast = ranks[0].at("samples"), slow = ranks[1].at("samples");
  EXPECT_EQ(fast + slow, 50.0 * c.batch) << "the global batch must stay whole";
  EXPECT_LT(slow, fast) << "a rank computing 4x slower should get the smaller share\n" << report.dump(1);
  EXPECT_EQ(report.at("metrics").at("balance"), "dynamic");
}

TEST(Cluster, DynamicBalanceOverThreadsKeepsTheShareWholeAndMatchesSerial) {
  if (is_rank_process()) GTEST_SKIP();
  Case c;
  c.threads = 2;
  c.options = {{"balance", "dynamic"}};
  const testing::Trained serial = train_serially(c);
  for (const int ranks : {1, 2}) {
    const std::string name = "thread_balance_" + std::to_string(ranks);
    Trained balanced;
    const auto report = run_cluster_report(c, ranks, name, &balanced);
    expect_matches_serial(balanced, c, serial, name);
    for (const auto& rank : report.at("metrics").at("per_rank")) {
      const auto shares = rank.at("last_thread_shares").get<std::vector<int>>();
      ASSERT_EQ(shares.size(), 2u) << name;
      EXPECT_EQ(shares[0] + shares[1], rank.at("last_share").get<double>()) << name;
      for (const int share : shares) EXPECT_GE(share, 1) << name;
    }
  }
}

TEST(Cluster, ReportCarriesCommunicationMetricsAndEveryRanksPins) {
  if (is_rank_process()) GTEST_SKIP();
  Case c;
  c.steps = 6;
  c.threads = 2;
  const auto report = run_cluster_report(c, 2, "report", nullptr);
  const auto& metrics = report.at("metrics");
  EXPECT_EQ(metrics.at("ranks"), 2);
  EXPECT_EQ(metrics.at("threads_per_rank"), 2);
  EXPECT_EQ(metrics.at("steps"), 6.0);
  const auto& allreduce = metrics.at("allreduce");
  EXPECT_GE(allreduce.at("seconds_max").get<double>(), allreduce.at("seconds_mean").get<double>());
  const double params = static_cast<double>(model_spec(ModelKind::fc3).param_count);
  EXPECT_GE(allreduce.at("payload_bytes_per_step").get<double>(), 4 * params);
  EXPECT_TRUE(metrics.contains("overlap_detail"));
  EXPECT_EQ(metrics.at("rank-update"), "replicated");  // the default
  std::vector<std::string> workers;
  for (const auto& pin : report.at("pins")) workers.push_back(pin.at("worker"));
  EXPECT_EQ(workers, (std::vector<std::string>{"cluster/rank0/thread0", "cluster/rank0/thread1",
                                               "cluster/rank1/thread0", "cluster/rank1/thread1"}));
}

TEST(Cluster, InvalidOptionsNameTheFlag) {
  if (is_rank_process()) GTEST_SKIP();
  // Every value is checked by test_cluster_shares; here: the error leaves the job and names
  // the flag, also for a check only a running job can make (a rank the job lacks).
  for (const auto& [key, value] : {std::pair<std::string, std::string>{"overlap", "maybe"},
                                  {"slowdown", "5:2"}}) {
    Case c;
    c.options[key] = value;
    c.steps = 2;
    const Job job = launch(c, 2, "bad_" + key);
    const Ended ended = wait_for(job, 30);
    const std::string log = log_of(job);
    EXPECT_TRUE(ended.in_time) << log;
    EXPECT_NE(ended.exit_code, 0) << log;
    EXPECT_NE(log.find("--" + key), std::string::npos) << "the error should name --" << key << ":\n" << log;
    fs::remove_all(job.out);
  }
}

TEST(Cluster, AllreduceBenchmarkReportsMediansPerSize) {
  if (is_rank_process()) GTEST_SKIP();
  Case c;
  c.allreduce_benchmark = true;
  const auto report = run_cluster_report(c, 2, "bench", nullptr);
  EXPECT_EQ(report.at("ranks"), 2);
  const auto& sizes = report.at("sizes");
  ASSERT_EQ(sizes.size(), 15u);  // 4 B, 8 B, ... 64 KiB
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const auto& size = sizes[i];
    EXPECT_EQ(size.at("bytes").get<double>(), 4.0 * std::pow(2.0, static_cast<double>(i)));
    EXPECT_EQ(size.at("count").get<double>(), std::pow(2.0, static_cast<double>(i)));
    // The median lies between the quartiles, and they between the extremes.
    const double low = size.at("seconds_min"), q1 = size.at("seconds_q1"), median = size.at("seconds"),
                 q3 = size.at("seconds_q3"), high = size.at("seconds_max");
    EXPECT_GT(low, 0.0);
    EXPECT_LE(low, q1);
    EXPECT_LE(q1, median);
    EXPECT_LE(median, q3);
    EXPECT_LE(q3, high);
    // Bus bandwidth is the ring's 2(p-1)/p = 1 times the algorithm bandwidth at p = 2.
    EXPECT_NEAR(size.at("bus_gbps").get<double>(), size.at("algorithm_gbps").get<double>(), 1e-12);
    EXPECT_NEAR(size.at("algorithm_gbps").get<double>(), size.at("bytes").get<double>() / median / 1e9,
                1e-9 * size.at("algorithm_gbps").get<double>());
  }
  EXPECT_EQ(report.at("network").at("transport"), "shm");
  EXPECT_GT(report.at("reduction").at("gamma_s_per_byte").get<double>(), 0.0);
  EXPECT_TRUE(report.at("open_mpi").contains("coll_tuned_allreduce_algorithm"));
}

void expect_job_ends_naming_rank(const Job& job, const Ended& ended, const std::string& rank_text) {
  const std::string log = log_of(job);
  EXPECT_TRUE(ended.in_time) << "the job still ran 30 s after the failure\n" << log;
  EXPECT_NE(ended.exit_code, 0) << log;
  EXPECT_NE(log.find(rank_text), std::string::npos) << "expected '" << rank_text << "' in:\n" << log;
}

TEST(Cluster, RankThatThrowsEndsTheJob) {
  if (is_rank_process()) GTEST_SKIP();
  Case c;
  c.throw_rank = 1;
  c.throw_step = 3;
  const Job job = launch(c, 2, "throw_inside");
  expect_job_ends_naming_rank(job, wait_for(job, 30), "rank 1 of 2 failed: injected failure at step 3");
  fs::remove_all(job.out);

  Case outside;
  outside.throw_outside_rank = 1;
  const Job job2 = launch(outside, 2, "throw_outside");
  expect_job_ends_naming_rank(job2, wait_for(job2, 30), "rank 1 of 2 failed");
  fs::remove_all(job2.out);
}

}  // namespace
}  // namespace cnnbench
