// `cnnbench sweep`: the benchmark users come for. Serial baselines, then every model x strategy x
// cores x nodes point, repeated; a JSON report with speedups, fits and the scaling prediction.
#include <algorithm>
#include <cstdlib>
#include <cstdio>

#include "cnnbench/core.hpp"
#include "cnnbench/isa_choice.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/sweep.hpp"
#include "commands.hpp"
#include "input_rules.hpp"

namespace cnnbench::cli {

namespace {

struct SweepArgs : CommonArgs {
  SweepArgs() {
    synthetic = 8192;
    steps = 60;
    epochs = -1;
  }
  std::vector<std::string> models = {"fc3", "lenet5"};
  std::vector<std::string> strategies;
  std::vector<int> cores, nodes;
  int repeat = 3, warmup = 1;
  int shards = 1;
  bool resume = false, force = false;
  double target_accuracy = -1;
  double min_time = 0.2;
  bool steps_given = false;
  std::int64_t eval_every = 25, tta_max_steps = 3000;
  std::string launcher = "mpirun";  // --launcher: mpirun or srun
  std::string mpirun = "mpirun", mpirun_args, hostfile;
  std::string srun = "srun", srun_args;
  int emulate_hosts = 0;  // --emulate-hosts N: cluster points over N emulated hosts
  std::string rate;       // --rate: their links' cap
  // --python: the Python of the PyTorch peers; empty: /usr/bin/python3 (where Debian installs
  // python3-torch) when it exists, else python3 in PATH.
  std::string python;
  std::string out = "results/sweep.json";
  std::string trace_dir;  // --trace-dir: a Chrome trace per point, from one extra traced repetition
  std::string html;       // --html: the report as one HTML page at the end (cnnbench report)
  std::vector<std::string> tuned;  // --tuned: tune reports whose winners run beside their defaults
  // Internal: one time-to-accuracy job of a cluster point, run by the sweep under the launcher.
  std::string tta_job, tta_out;
  std::vector<const OptionSpec*> given_options;  // the strategy options given on the command line
};

// The flags of one launcher given with the other one.
void check_launcher_flags(const SweepArgs& a, const CLI::App& cmd) {
  const bool srun = a.launcher == "srun";
  for (const char* flag : {"--mpirun", "--mpirun-args", "--hostfile"}) {
    if (srun && cmd.count(flag) > 0) {
      throw CLI::ValidationError(flag, std::string("applies to --launcher mpirun, not srun") +
                                           (std::string(flag) == "--hostfile"
                                                ? " (srun places the ranks on the Slurm allocation's nodes)"
                                                : ""));
    }
  }
  for (const char* flag : {"--srun", "--srun-args"}) {
    if (!srun && cmd.count(flag) > 0) {
      throw CLI::ValidationError(flag, "applies to --launcher srun; add --launcher srun");
    }
  }
}

// srun's ranks of one thread each must fit the allocation's CPUs unless --oversubscribe (outside
// an allocation the sweep stops before its first point).
void check_nodes_fit_allocation(const SweepArgs& a) {
  const int cpus = slurm_allocation_cpus();
  if (cpus == 0 || a.oversubscribe) return;
  for (int nodes : a.nodes) {
    if (nodes > cpus) {
      throw CLI::ValidationError(
          "--nodes " + std::to_string(nodes) + ": the Slurm allocation has " + std::to_string(cpus) +
          " CPU" + (cpus == 1 ? "" : "s") + " (SLURM_JOB_CPUS_PER_NODE); ask sbatch for more tasks, "
          "or pass --oversubscribe to let srun overcommit them");
    }
  }
}

// --emulate-hosts runs the cluster points over N network namespaces on this machine, through
// their own mpirun: one rank per host, so --nodes is at most N (default 1..N); no other launcher,
// hostfile or mpirun goes with it, and --rate needs it.
void check_emulated_hosts(SweepArgs& a, const CLI::App& cmd) {
  if (a.emulate_hosts == 0) {
    if (cmd.count("--rate") > 0) throw CLI::ValidationError("--rate", "caps the links of --emulate-hosts; add --emulate-hosts N");
    return;
  }
  for (const char* flag : {"--hostfile", "--mpirun", "--launcher", "--srun", "--srun-args"}) {
    if (cmd.count(flag) > 0) {
      throw CLI::ValidationError(flag, "does not go with --emulate-hosts (the emulated hosts bring "
                                       "their own mpirun and hostfile)");
    }
  }
  if (!a.strategies.empty() &&
      std::find(a.strategies.begin(), a.strategies.end(), "cluster") == a.strategies.end()) {
    throw CLI::ValidationError("--emulate-hosts", "only cluster points run over hosts; add cluster to --strategies");
  }
  if (cmd.count("--rate") > 0 && !is_link_rate(a.rate)) {
    throw CLI::ValidationError("--rate", "'" + a.rate + "' is not a rate: a positive number and a "
                                         "unit of tc, e.g. 100mbit, 1gbit, 500kbit");
  }
  if (a.nodes.empty()) {
    for (int n = 1; n <= a.emulate_hosts; ++n) a.nodes.push_back(n);
  }
  for (int nodes : a.nodes) {
    if (nodes > a.emulate_hosts) {
      throw CLI::ValidationError("--nodes", std::to_string(nodes) + " nodes need " + std::to_string(nodes) +
                                                " hosts but --emulate-hosts is " + std::to_string(a.emulate_hosts));
    }
  }
}

// Repeated list items are measured once; the cores per node (and, for mpirun without a
// hostfile, the ranks of one thread each) must fit the machine unless --oversubscribe; srun's
// ranks must fit the allocation.
void check_sweep_args(SweepArgs& a, const CLI::App& cmd) {
  check_launcher_flags(a, cmd);
  check_emulated_hosts(a, cmd);
  drop_repeats("--model", a.models);
  drop_repeats("--strategies", a.strategies);
  drop_repeats("--cores", a.cores);
  drop_repeats("--nodes", a.nodes);
  for (int cores : a.cores) check_threads("--cores", cores, 1, a.batch, a.oversubscribe);
  if (a.launcher == "srun") {
    check_nodes_fit_allocation(a);
  } else if (a.hostfile.empty() && a.emulate_hosts == 0) {
    for (int nodes : a.nodes) check_threads("--nodes", nodes, 1, a.batch, a.oversubscribe);
  }
  if (a.shards > a.batch) {
    throw CLI::ValidationError("--shards", std::to_string(a.shards) + " shards but a batch of " +
                                               std::to_string(a.batch) +
                                               " (each shard gives every batch at least one sample)");
  }
}

// Every rank runs the job; rank 0 writes the result where the sweep reads it.
int run_time_to_accuracy_job(const SweepArgs& a) {
  const auto job = nlohmann::json::parse(read_file(a.tta_job)).get<TimeToAccuracyJob>();
  bool primary = true;
  const nlohmann::json result = measure_time_to_accuracy(job, &primary);
  if (primary) write_json(a.tta_out, result);
  return 0;
}

// A strategy option that none of the chosen strategies reads is a mistake, as it is for train.
void check_options_apply(const SweepArgs& a) {
  if (a.strategies.empty()) return;  // every strategy
  std::string chosen;
  for (const std::string& s : a.strategies) chosen += (chosen.empty() ? "" : ",") + s;
  for (const OptionSpec* spec : a.given_options) {
    bool applies = false;
    for (const std::string& s : a.strategies) applies = applies || spec->applies_to(s);
    if (!applies) {
      fail(spec->flag() + " does not apply to --strategies " + chosen + " (it is an option of " +
           spec->strategies_text() + ")");
    }
  }
}

int run_sweep_command(const SweepArgs& a) {
  if (!a.tta_job.empty()) return run_time_to_accuracy_job(a);
  check_options_apply(a);
  // Before the first point, not after the last; never over the data or the hostfile. Hours of
  // measurements must not vanish under a repeated command: an existing report is kept unless
  // --force, or continued with --resume, which makes the page and the traces the sweep's own too.
  const bool replace = a.force || a.resume;
  std::vector<OutputPath> outputs = {
      {.option = "--out", .path = a.out, .replace = replace,
       .advice = "pass --resume to keep its finished points and measure the rest, or --force to overwrite it"}};
  // Its files are checked against the plan's points when the sweep starts.
  if (!a.trace_dir.empty()) {
    outputs.push_back({.option = "--trace-dir", .path = a.trace_dir, .folder = true, .replace = replace, .probe = true});
  }
  if (!a.html.empty()) {
    if (a.out == "-") fail_usage("--html renders the report --out writes: give --out a file, not '-'");
    check_page_name(a.html, "--html");
    outputs.push_back({.option = "--html", .path = a.html, .replace = replace, .probe = true});
  }
  std::vector<InputPath> inputs = {{"--data", a.data_dir}, {"--hostfile", a.hostfile}};
  for (const std::string& tune : a.tuned) inputs.push_back({"--tuned", tune});
  for (InputPath& cache : isa_inputs(a.isa)) inputs.push_back(std::move(cache));
  check_outputs(outputs, inputs);
  SweepOptions o;
  o.models.clear();
  for (const auto& m : a.models) o.models.push_back(parse_model(m));
  o.strategies = a.strategies;
  o.cores = a.cores;
  o.nodes = a.nodes;
  o.repeat = a.repeat;
  o.warmup = a.warmup;
  o.steps = a.epochs > 0 ? -1 : a.steps;
  // --steps or --epochs given: every point runs them; else each calibrates its own steps.
  o.min_time = a.epochs > 0 || a.steps_given ? 0 : a.min_time;
  o.epochs = a.epochs;
  o.batch = a.batch;
  o.lr = a.lr;
  o.momentum = a.momentum;
  o.seed = a.seed;
  o.pin = !a.no_pin;
  o.shards = a.shards;
  o.oversubscribe = a.oversubscribe;
  for (const auto& [name, value] : a.options) {
    if (!value.empty()) o.options[name] = value;
  }
  use_isa(a.isa);
  if (!o.models.empty()) check_memory_for(a, PointSpec{o.models.front(), "serial", 1, 1}, 0);
  o.isa = a.isa;
  if (!a.data_dir.empty()) o.data_dir = std::filesystem::absolute(a.data_dir);
  o.synthetic_samples = a.synthetic;
  if (a.target_accuracy > 0) o.target_accuracy = a.target_accuracy;
  o.eval_every = a.eval_every;
  o.tta_max_steps = a.tta_max_steps;
  if (a.launcher == "srun") {
    o.launcher_kind = LauncherKind::srun;
    o.launcher = a.srun;
    o.launcher_args = split_words(a.srun_args);
  } else {
    o.launcher = a.mpirun;
    o.launcher_args = split_words(a.mpirun_args);
  }
  if (!a.hostfile.empty()) o.hostfile = std::filesystem::absolute(a.hostfile);
  o.emulated_hosts = a.emulate_hosts;
  o.link_rate = a.rate;
  for (const std::string& tune : a.tuned) o.tuned.push_back({tune, read_tune_report(tune)});
  o.python = !a.python.empty()                           ? a.python
             : std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3"
                                                           : "python3";
  o.self = std::filesystem::read_symlink("/proc/self/exe");
  o.out = a.out;
  if (!a.trace_dir.empty()) o.trace_dir = a.trace_dir;
  o.resume = a.resume;
  o.force = a.force;
  o.quiet = a.quiet;
  // Tests only: makes one core probe read slow, to reach the slow-core warning (docs/design.md).
  if (const char* slowdown = std::getenv("CNNBENCH_TEST_PROBE_SLOWDOWN"); slowdown != nullptr && *slowdown != 0) {
    o.probe_slowdown = parse_probe_slowdown(slowdown);
  }
  catch_stop_signals();
  o.stop_requested = [] { return stop_signal_received() != 0; };

  const SweepRecord report = run_sweep(o);
  if (!a.quiet) std::fprintf(stderr, "report: %s\n", a.out.c_str());
  if (report.interrupted) return exit_status_after_stop();
  HtmlReportRequest page_request;
  page_request.sweep = a.out;
  page_request.out = a.html;
  const int page = a.html.empty() ? 0 : write_html_report(page_request);
  return report.failed_points().empty() && page == 0 ? 0 : 1;
}

}  // namespace

void add_sweep_command(CLI::App& root, Runner& runner) {
  auto args = std::make_shared<SweepArgs>();
  CLI::App* cmd = root.add_subcommand(
      "sweep", "Run the benchmark sweep: serial baseline, then every strategy x cores x nodes point");
  cmd->add_option("--model", args->models, "models, comma separated")
      ->delimiter(',')
      ->check(CLI::IsMember(model_choices()))
      ->capture_default_str();
  cmd->add_option("--strategies", args->strategies,
                  "strategies, comma separated (default: every strategy; missing ones are listed as "
                  "skipped); the PyTorch peers pytorch and pytorch-ddp run only when named")
      ->delimiter(',');
  add_number_option(cmd, general_option::sweep_cores, args->cores);
  add_number_option(cmd, general_option::nodes, args->nodes);
  add_number_option(cmd, general_option::shards, args->shards)->capture_default_str();
  add_common_flags(cmd, *args, OptionFlags::sweep);
  add_number_option(cmd, general_option::repeat, args->repeat)->capture_default_str();
  add_number_option(cmd, general_option::warmup, args->warmup)->capture_default_str();
  add_number_option(cmd, general_option::min_time, args->min_time)
      ->capture_default_str()
      ->excludes("--steps")
      ->excludes("--epochs");
  add_number_option(cmd, general_option::target_accuracy, args->target_accuracy);
  add_number_option(cmd, general_option::eval_every, args->eval_every)->capture_default_str();
  add_number_option(cmd, general_option::tta_max_steps, args->tta_max_steps)->capture_default_str();
  cmd->add_option("--launcher", args->launcher,
                  "how cluster points start their ranks: mpirun, or srun inside a Slurm allocation")
      ->check(CLI::IsMember({"mpirun", "srun"}))
      ->capture_default_str();
  cmd->add_option("--mpirun", args->mpirun, "mpirun command of cluster points")->capture_default_str();
  cmd->add_option("--mpirun-args", args->mpirun_args, "extra mpirun arguments, one string");
  cmd->add_option("--hostfile", args->hostfile, "mpirun hostfile")
      ->check(input_path_rule(PathKind::file, true));
  cmd->add_option("--srun", args->srun, "srun command of cluster points (--launcher srun)")
      ->capture_default_str();
  cmd->add_option("--srun-args", args->srun_args,
                  "extra srun arguments, one string (--launcher srun); an --mpi=... replaces --mpi=pmix");
  cmd->add_option("--emulate-hosts", args->emulate_hosts,
                  "run the cluster points over N emulated hosts (network namespaces on this "
                  "machine, TCP between them; root; docs/cluster.md)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--rate", args->rate, "cap each emulated host's link, e.g. 1gbit, 100mbit");
  cmd->add_option("--python", args->python,
                  "the Python of the PyTorch peers (--strategies pytorch,pytorch-ddp), which must "
                  "import torch (default: /usr/bin/python3, else python3)");
  cmd->add_option("--out", args->out, "the JSON report (rewritten after every point's preparation and every round)")
      ->check(output_path_rule(OutputKind::json))
      ->capture_default_str();
  cmd->add_option("--trace-dir", args->trace_dir,
                  "after each point's timed repetitions run one more, traced, and write its Chrome "
                  "trace here as MODEL-STRATEGY-nNcC.json (serial, blas, stream, cluster)")
      ->check(output_path_rule(OutputKind::folder));
  cmd->add_option("--html", args->html,
                  "at the end, write the report as one self-contained HTML page here (cnnbench report)")
      ->check(output_path_rule(OutputKind::file));
  cmd->add_option("--tuned", args->tuned,
                  "a report of cnnbench tune (repeat it for other models): each strategy's winner "
                  "runs beside its default point, in the same rounds, marked tuned in the report")
      ->check(input_path_rule(PathKind::file, true));
  cmd->add_flag("--resume", args->resume, "keep the finished points of --out and run the rest");
  cmd->add_flag("--force", args->force,
                "overwrite an existing --out report, --html page and --trace-dir traces (without it "
                "or --resume, an existing one is refused before the first point)");
  cmd->add_option("--tta-job", args->tta_job)->group("");
  cmd->add_option("--tta-out", args->tta_out)->group("");
  cmd->callback([args, cmd, &runner] {
    take_isa_from_environment(cmd, args->isa);
    for (const OptionSpec* spec : strategy_option_specs()) {
      if (spec->in_sweep && cmd->count(spec->flag()) > 0) args->given_options.push_back(spec);
    }
    args->steps_given = cmd->count("--steps") > 0;
    if (args->tta_job.empty()) check_sweep_args(*args, *cmd);
    runner = [args] { return run_sweep_command(*args); };
  });
}

}  // namespace cnnbench::cli
