// `cnnbench tune`: each strategy's settings planned from one profile of the step, the most
// promising measured paired with serial as the sweep measures, a table and a tune report with the
// winner per strategy (docs/tune.md).
#include <algorithm>
#include <cstdio>

#include "cnnbench/core.hpp"
#include "cnnbench/isa_choice.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/tune.hpp"
#include "commands.hpp"
#include "input_rules.hpp"

namespace cnnbench::cli {

namespace {

struct TuneArgs {
  std::string model;
  int cores = 0;
  int nodes = 1;
  std::vector<std::string> strategies = {"stream", "cluster", "blas"};
  double budget = 300;
  bool exhaustive = false;
  int repeat = 3, warmup = 1;
  double min_time = 0.2;
  std::string isa = "best";
  std::string data_dir;
  std::size_t synthetic = 8192;
  int batch = 64;
  float lr = 0.01f, momentum = 0.9f;
  std::uint64_t seed = 1;
  bool no_pin = false, oversubscribe = false, quiet = false, force = false;
  std::string mpirun = "mpirun", mpirun_args;
  std::string out = "results/tune.json";
  int emulate_hosts = 0;  // --emulate-hosts N: the cluster over N emulated hosts
  std::string rate;
};

const std::vector<std::string>& tunable_strategies() {
  static const std::vector<std::string> names = {"stream", "cluster", "blas"};
  return names;
}

// --emulate-hosts N tunes the cluster over N network namespaces of this machine, one rank each,
// through their own mpirun: only the cluster runs over hosts, --nodes is N when given, no other
// mpirun goes with it, and --rate needs it.
void check_tune_hosts(TuneArgs& a, const CLI::App& cmd) {
  if (a.emulate_hosts == 0) {
    if (cmd.count("--rate") > 0) throw CLI::ValidationError("--rate", "caps the links of --emulate-hosts; add --emulate-hosts N");
    return;
  }
  for (const char* flag : {"--mpirun", "--mpirun-args"}) {
    if (cmd.count(flag) > 0) {
      throw CLI::ValidationError(flag, "does not go with --emulate-hosts (the emulated hosts bring their own mpirun)");
    }
  }
  if (cmd.count("--strategies") == 0) a.strategies = {"cluster"};
  for (const std::string& s : a.strategies) {
    if (s != "cluster") {
      throw CLI::ValidationError("--strategies", s + " runs on one node; over --emulate-hosts only cluster is tuned");
    }
  }
  if (cmd.count("--nodes") > 0 && a.nodes != a.emulate_hosts) {
    throw CLI::ValidationError("--nodes", std::to_string(a.nodes) + ": the cluster over --emulate-hosts " +
                                              std::to_string(a.emulate_hosts) + " runs one rank a host (leave --nodes out)");
  }
  if (cmd.count("--rate") > 0 && !is_link_rate(a.rate)) {
    throw CLI::ValidationError("--rate", "'" + a.rate + "' is not a rate: a positive number and a "
                                         "unit of tc, e.g. 100mbit, 1gbit, 500kbit");
  }
  a.nodes = a.emulate_hosts;
}

void check_tune_args(TuneArgs& a, const CLI::App& cmd) {
  check_tune_hosts(a, cmd);
  drop_repeats("--strategies", a.strategies);
  if (a.strategies.empty()) throw CLI::ValidationError("--strategies", "name at least one of stream, cluster, blas");
  // Several nodes need the cluster's launcher and communication model over a hostfile, which
  // this command does not plan yet: refused rather than measured on one node and called K.
  if (a.nodes != 1 && a.emulate_hosts == 0) {
    throw CLI::ValidationError("--nodes", std::to_string(a.nodes) + ": tune measures one node (or emulated hosts, --emulate-hosts N); for several, "
                               "tune one node and predict the rest with cnnbench scaling-model");
  }
  check_threads("--cores", a.cores, a.nodes, a.batch, a.oversubscribe);  // emulated hosts share these cores
}

// The table's number, or "-" when the candidate was not measured.
std::string number(const nlohmann::json& value, const char* format, double scale = 1) {
  if (!value.is_number()) return "-";
  char text[32];
  std::snprintf(text, sizeof text, format, scale * value.get<double>());
  return text;
}

std::string joined(const nlohmann::json& words) {
  std::string line;
  for (const auto& w : words) line += (line.empty() ? "" : " ") + w.get<std::string>();
  return line;
}

void print_table(const nlohmann::json& report, std::FILE* to) {
  std::fprintf(to, "%-22s %-44s %9s %9s %7s %8s  %s\n", "point", "candidate", "pred ms", "meas ms",
               "error", "speedup", "command");
  for (const nlohmann::json& m : report.at("measured")) {
    const std::string label = m.at("label").get<std::string>() + (m.at("default").get<bool>() ? " (default)" : "");
    std::fprintf(to, "%-22s %-44s %9s %9s %7s %8s  %s\n", printable_text(m.at("id").get<std::string>()).c_str(),
                 printable_text(label).c_str(), number(m.at("predicted_step_s"), "%.3f", 1e3).c_str(),
                 number(m.value("measured_step_s", nlohmann::json()), "%.3f", 1e3).c_str(),
                 number(m.value("relative_error", nlohmann::json()), "%+.0f%%", 100).c_str(),
                 number(m.value("speedup", nlohmann::json()), "%.2f").c_str(),
                 printable_text(joined(m.at("command"))).c_str());
    if (m.at("status") != "ok") std::fprintf(to, "    %s\n", printable_text(m.at("status").get<std::string>()).c_str());
  }
  for (const auto& [strategy, w] : report.at("winners").items()) {
    if (w.is_null()) {
      std::fprintf(to, "winner %s: none measured\n", printable_text(strategy).c_str());
      continue;
    }
    std::fprintf(to, "winner %s: %s, speedup %s (default %s)\n", printable_text(strategy).c_str(),
                 printable_text(w.at("label").get<std::string>()).c_str(), number(w.at("speedup"), "%.2f").c_str(),
                 number(w.at("default_speedup"), "%.2f").c_str());
  }
  const nlohmann::json& placement = report.value("core_placement", nlohmann::json());
  if (placement.is_object() && placement.value("moved", false)) {
    std::fprintf(to, "the cores moved while the candidates ran, and what is best moves with them: %s\n",
                 printable_text(placement.value("message", "")).c_str());
  }
  const nlohmann::json& error = report.at("planner_error");
  std::fprintf(to, "planner error over %d measured: median %s, largest %s\n", error.at("points").get<int>(),
               number(error.at("median_abs_relative_error"), "%.0f%%", 100).c_str(),
               number(error.at("max_abs_relative_error"), "%.0f%%", 100).c_str());
  if (report.contains("budget")) {
    const nlohmann::json& b = report.at("budget");
    std::fprintf(to, "budget %.0f s: used %.0f s (planned %.0f s), %d of %d rounds%s\n",
                 b.at("seconds").get<double>(), b.at("used_s").get<double>(), b.at("planned_s").get<double>(),
                 b.at("rounds_done").get<int>(), b.at("rounds").get<int>(),
                 b.at("cut").get<bool>() ? ": the budget ended the rounds, so each speedup rests on fewer repetitions"
                                         : "");
  }
}

int run_tune_command(const TuneArgs& a) {
  std::vector<InputPath> inputs = {{"--data", a.data_dir}};
  for (InputPath& cache : isa_inputs(a.isa)) inputs.push_back(std::move(cache));
  check_outputs({{.option = "--out", .path = a.out, .replace = a.force}}, inputs);
  TuneOptions o;
  o.model = parse_model(a.model);
  o.cores = a.cores;
  o.strategies = a.strategies;
  o.budget_s = a.budget;
  o.exhaustive = a.exhaustive;
  o.repeat = a.repeat;
  o.warmup = a.warmup;
  o.min_time = a.min_time;
  o.batch = a.batch;
  o.lr = a.lr;
  o.momentum = a.momentum;
  o.seed = a.seed;
  o.pin = !a.no_pin;
  use_isa(a.isa);
  o.isa = a.isa;
  if (!a.data_dir.empty()) o.data_dir = std::filesystem::absolute(a.data_dir);
  o.synthetic_samples = a.synthetic;
  o.launcher = a.mpirun;
  o.launcher_args = split_words(a.mpirun_args);
  o.self = std::filesystem::read_symlink("/proc/self/exe");
  o.quiet = a.quiet;
  o.emulated_hosts = a.emulate_hosts;
  o.link_rate = a.rate;
  catch_stop_signals();
  o.stop_requested = [] { return stop_signal_received() != 0; };
  const nlohmann::json report = run_tune(o);
  write_json(a.out, report);
  if (report.at("interrupted").get<bool>()) return exit_status_after_stop();
  print_table(report, a.out == "-" ? stderr : stdout);
  if (!a.quiet) std::fprintf(stderr, "report: %s\n", printable_text(a.out).c_str());
  return 0;
}

}  // namespace

void add_tune_command(CLI::App& root, Runner& runner) {
  namespace g = general_option;
  auto args = std::make_shared<TuneArgs>();
  CLI::App* cmd = root.add_subcommand(
      "tune", "Plan each strategy's settings from a profile of the step, measure the most promising "
              "paired with serial, and report the winner per strategy");
  cmd->add_option("--model", args->model, "the model to tune")
      ->check(CLI::IsMember(model_choices()))
      ->required();
  add_number_option(cmd, g::tune_cores, args->cores)->required();
  add_number_option(cmd, g::tune_nodes, args->nodes)->capture_default_str();
  cmd->add_option("--strategies", args->strategies, "strategies to tune, comma separated")
      ->delimiter(',')
      ->check(CLI::IsMember(tunable_strategies()))
      ->capture_default_str();
  CLI::Option* budget = add_number_option(cmd, g::tune_budget, args->budget)->capture_default_str();
  cmd->add_flag("--exhaustive", args->exhaustive,
                "measure every candidate, with no budget: the ground truth the planner is judged by")
      ->excludes(budget);
  add_number_option(cmd, g::repeat, args->repeat)->capture_default_str();
  add_number_option(cmd, g::warmup, args->warmup)->capture_default_str();
  add_number_option(cmd, g::min_time, args->min_time)
      ->description("seconds a serial repetition takes at least (sets the steps per repetition)")
      ->capture_default_str();
  add_isa_option(cmd, args->isa);
  CLI::Option* data = cmd->add_option("--data", args->data_dir, "MNIST folder (default: synthetic data)")
                          ->check(input_path_rule(PathKind::folder, false));
  add_number_option(cmd, g::synthetic, args->synthetic)
      ->excludes(data)
      ->description("synthetic training samples when --data is not given")
      ->capture_default_str();
  add_number_option(cmd, g::batch, args->batch)->capture_default_str();
  add_number_option(cmd, g::lr, args->lr)->capture_default_str();
  add_number_option(cmd, g::momentum, args->momentum)->capture_default_str();
  add_number_option(cmd, g::seed, args->seed)->capture_default_str();
  cmd->add_flag("--no-pin", args->no_pin, "do not bind worker threads to cores");
  cmd->add_flag("--oversubscribe", args->oversubscribe, "allow more threads than this machine has hardware threads");
  cmd->add_option("--mpirun", args->mpirun, "mpirun command of cluster points")->capture_default_str();
  cmd->add_option("--mpirun-args", args->mpirun_args, "extra mpirun arguments, one string");
  cmd->add_option("--emulate-hosts", args->emulate_hosts,
                  "tune the cluster over N emulated hosts, one rank each (network namespaces on this "
                  "machine, TCP between them; root; docs/cluster.md)")
      ->check(CLI::Range(2, 64));
  cmd->add_option("--rate", args->rate, "cap each emulated host's link, e.g. 1gbit, 100mbit");
  cmd->add_option("--out", args->out, "the tune report (JSON; '-' for standard output)")
      ->check(output_path_rule(OutputKind::json))
      ->capture_default_str();
  add_force_flag(cmd, args->force, "--out report");
  cmd->add_flag("--quiet", args->quiet, "no progress lines");
  cmd->callback([args, cmd, &runner] {
    take_isa_from_environment(cmd, args->isa);
    check_tune_args(*args, *cmd);
    runner = [args] { return run_tune_command(*args); };
  });
}

}  // namespace cnnbench::cli
