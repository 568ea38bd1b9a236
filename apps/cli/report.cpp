// `cnnbench report SWEEP.json [--baseline OLD.json] [--out report.html]`: one self-contained HTML
// page of a sweep, written by plots/html_report.py. This side adds what only cnnbench knows: the
// command line that measures each point again (built as the sweep builds it) and, with
// --baseline, compare's verdict per point.
#include <iostream>

#include "cnnbench/core.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/sweep.hpp"
#include "cnnbench/train.hpp"
#include "commands.hpp"
#include "input_rules.hpp"
#include "python_script.hpp"

namespace cnnbench::cli {

namespace {

using nlohmann::json;

constexpr PlotsScript page_script{.name = "html_report.py",
                                  .env_variable = "CNNBENCH_REPORT_SCRIPT"};

struct ReportArgs {
  HtmlReportRequest request;
  std::string threshold = "5%";
  std::string script;
  std::string python;
  bool force = false;
};

// A strategy option's value as a report's config records it (sweep options_json): text, or a
// whole number where 0 means not given. "" when not given.
std::string option_text(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_integer()) return value.get<long long>() == 0 ? "" : value.dump();
  return value.is_null() ? "" : value.dump();
}

// The point's TrainConfig as the sweep made it (SweepRunner::train_config) from the report's
// config: the sweep's settings, the point's model, strategy and cores, its calibrated steps
// where the sweep calibrated them, and the options the sweep passes on to that strategy.
TrainConfig point_train_config(const json& config, const json& point) {
  TrainConfig train;
  train.model = parse_model(point.at("model").get<std::string>());
  train.strategy = point.at("strategy").get<std::string>();
  train.batch = config.at("batch").get<int>();
  train.sgd.lr = config.at("lr").get<float>();
  train.sgd.momentum = config.at("momentum").get<float>();
  train.seed = config.at("seed").get<std::uint64_t>();
  const json& steps = config.at("steps");
  train.steps = steps.is_null() ? point.value("steps", std::int64_t{-1}) : steps.get<std::int64_t>();
  if (train.steps < 0 && config.contains("epochs") && !config.at("epochs").is_null()) {
    train.epochs = config.at("epochs").get<std::int64_t>();
  }
  train.threads = point.at("cores").get<int>();
  train.pin = config.value("pin", true);
  train.shards = config.value("shards", 1);
  for (const OptionSpec* spec : strategy_option_specs()) {
    if (!spec->in_sweep || !spec->applies_to(train.strategy) || !config.contains(spec->name)) continue;
    const std::string value = option_text(config.at(spec->name));
    if (!value.empty()) train.options[spec->name] = value;
  }
  // A point of its own settings (sweep --tuned's winners) ran them over the sweep's.
  if (point.contains("options") && point.at("options").is_object()) {
    for (const auto& [name, value] : point.at("options").items()) {
      if (value.is_string()) train.options[name] = value.get<std::string>();
    }
  }
  return train;
}

// A word as a POSIX shell reads it back: bare when it is plain, else in single quotes.
std::string shell_word(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789-_=.,/:@%+") == std::string::npos) {
    return word;
  }
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string shell_line(const std::vector<std::string>& words) {
  std::string line;
  for (const std::string& word : words) line += (line.empty() ? "" : " ") + shell_word(word);
  return line;
}

// The command line that measures one repetition of a point again, writing run.json. A launched
// point's recorded command is used as it ran (its scratch report renamed); an in-process point's
// is `cnnbench train` with the flags the sweep gave it (Launcher::train, without the launcher).
// Null for a PyTorch peer point without a recorded command.
json reproduce_command(const json& config, const json& point) {
  if (point.contains("launch") && point.at("launch").is_object()) {
    std::vector<std::string> words = point.at("launch").at("command").get<std::vector<std::string>>();
    for (std::size_t i = 0; i + 1 < words.size(); ++i) {
      if (words[i] == "--report") words[i + 1] = "run.json";
    }
    return shell_line(words);
  }
  // A PyTorch peer is not a cnnbench strategy: it has a command only where it recorded one.
  if (point.value("peer", false)) return nullptr;
  std::vector<std::string> words;
  const int ranks = point.value("nodes", 1);
  if (point.at("strategy") == "cluster" || ranks > 1) {
    const json launcher = config.value("launcher", json::object());
    words = {launcher.value("command", std::string("mpirun")), "-np", std::to_string(ranks)};
  }
  words.push_back("cnnbench");
  words.push_back("train");
  for (std::string& word : to_argv(point_train_config(config, point))) words.push_back(std::move(word));
  const json data = config.value("data", json::object());
  if (data.value("source", std::string()) == "mnist") {
    words.insert(words.end(), {"--data", data.value("dir", std::string("datasets/mnist"))});
  } else if (data.contains("train_samples")) {
    words.insert(words.end(), {"--synthetic", data.at("train_samples").dump()});
  }
  if (config.contains("isa") && config.at("isa").is_string()) {
    words.insert(words.end(), {"--isa", config.at("isa").get<std::string>()});
  }
  words.insert(words.end(), {"--report", "run.json"});
  return shell_line(words);
}

// What the page needs from cnnbench itself: {"commands": {id: line}, "comparison": compare's
// JSON against the baseline or null}.
json page_inputs(const HtmlReportRequest& r, const json& report) {
  json commands = json::object();
  for (const json& point : report.at("points")) {
    // A point whose strategy or model this build does not know cannot be rebuilt: none is shown.
    try {
      commands[point.at("id").get<std::string>()] = reproduce_command(report.at("config"), point);
    } catch (const std::exception&) {
      commands[point.at("id").get<std::string>()] = nullptr;
    }
  }
  json comparison = nullptr;
  if (!r.baseline.empty()) {
    comparison = comparison_json(compare_reports(read_report(r.baseline), report, r.threshold, r.alpha));
  }
  return {{"commands", commands}, {"comparison", comparison}};
}

int run_report(const ReportArgs& a) {
  const HtmlReportRequest& r = a.request;
  check_page_name(r.out, "--out");
  const std::filesystem::path script = find_plots_script(page_script, a.script);
  std::vector<InputPath> inputs = script_inputs(script, !a.script.empty());
  inputs.push_back({"SWEEP", r.sweep});
  if (!r.baseline.empty()) inputs.push_back({"--baseline", r.baseline});
  check_outputs({{.option = "--out", .path = r.out, .replace = a.force}}, inputs);
  return write_html_report(r, script.string(), a.python);
}

}  // namespace

void check_page_name(const std::string& path, const std::string& option) {
  if (path.ends_with('/')) fail(option + " " + path + ": names a folder; give the page a file name");
}

int write_html_report(const HtmlReportRequest& r, const std::string& script, const std::string& python) {
  const json report = read_report(r.sweep);
  if (report.at("kind") != "sweep") fail(r.sweep + ": report renders sweep reports, this is a single run report");
  const std::filesystem::path found = find_plots_script(page_script, script);
  const ScratchFolder scratch("cnnbench-report");
  const std::filesystem::path inputs = scratch.path / "inputs.json";
  write_output(inputs, page_inputs(r, report).dump());
  const FileStamp before = file_stamp(r.out);
  const int code = run_plots_script(found, {r.sweep, "--inputs", inputs.string(), "--out", r.out}, python);
  if (code != 0) return code;
  check_script_output(r.out, before, "</html>", found);
  std::cout << "wrote " << r.out << "\n";
  return 0;
}

void add_report_command(CLI::App& root, Runner& runner) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* cmd = root.add_subcommand(
      "report", "Write a sweep report as one self-contained HTML page: summary, points, plots, "
                "how to reproduce each point, provenance and, with --baseline, the comparison");
  // Not CLI::ExistingFile: a missing report is a runtime error (exit 1) as in compare and plot.
  cmd->add_option("SWEEP", args->request.sweep, "sweep report (JSON)")->required();
  cmd->add_option("--baseline", args->request.baseline,
                  "an older sweep report: the page shows compare's verdict per point against it");
  cmd->add_option("--out", args->request.out, "the HTML page")
      ->check(output_path_rule(OutputKind::file))
      ->capture_default_str();
  cmd->add_option("--threshold", args->threshold,
                  "with --baseline: slowdown tolerated, e.g. 5% or 0.05 (as in compare)")
      ->capture_default_str();
  add_force_flag(cmd, args->force, "--out page");
  add_script_options(*cmd, page_script, "page generator", args->script, args->python);
  cmd->callback([args, &runner] {
    args->request.threshold = parse_threshold(args->threshold);  // a bad one is a usage error (exit 2)
    runner = [args] { return run_report(*args); };
  });
}

}  // namespace cnnbench::cli
