// The input rules of `train` and `sweep` (input_rules.hpp): the general flags' specs, the flags
// both commands share, the machine checks, repeated list items and "did you mean".
#include "input_rules.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sstream>
#include <thread>

#include "cnnbench/core.hpp"

namespace cnnbench::cli {

namespace general_option {

namespace {
OptionSpec whole(std::string name, std::string help, double minimum, std::optional<double> maximum,
                 std::string range, std::string value_name = "N") {
  return {.name = std::move(name), .kind = OptionKind::whole_number,
          .value_name = std::move(value_name), .help = std::move(help), .minimum = minimum,
          .maximum = maximum, .range = std::move(range)};
}
OptionSpec real(std::string name, std::string help, double minimum, bool exclusive_minimum,
                std::optional<double> maximum, std::string range, std::string value_name) {
  return {.name = std::move(name), .kind = OptionKind::number, .value_name = std::move(value_name),
          .help = std::move(help), .minimum = minimum, .maximum = maximum,
          .exclusive_minimum = exclusive_minimum, .range = std::move(range)};
}
}  // namespace

const OptionSpec batch = whole("batch", "mini-batch size", 1, 1 << 20, "in 1..1048576");
const OptionSpec lr = real("lr", "learning rate", 0, true, std::nullopt, "> 0", "LR");
const OptionSpec momentum = real("momentum", "SGD momentum", 0, false, 1, "in [0, 1]", "MU");
const OptionSpec weight_decay =
    real("weight-decay", "L2 weight decay", 0, false, std::nullopt, ">= 0", "WD");
const OptionSpec seed = whole("seed", "seed of the init, the synthetic data and the shuffling", 0,
                              std::nullopt, ">= 0");
const OptionSpec train_steps = whole(
    "steps", "total optimizer steps of the run (resume included)", 1, std::nullopt, ">= 1");
const OptionSpec train_epochs = whole("epochs", "epochs to train", 1, std::nullopt, ">= 1");
const OptionSpec sweep_steps = whole(
    "steps", "optimizer steps per repetition of every point (given, it wins: nothing is calibrated; "
    "not given, each point calibrates its own to --min-time)", 1, std::nullopt, ">= 1");
const OptionSpec sweep_epochs =
    whole("epochs", "epochs per repetition (instead of --steps)", 1, std::nullopt, ">= 1");
const OptionSpec synthetic = whole(
    "synthetic", "use N deterministic synthetic samples instead of MNIST", 1, std::nullopt, ">= 1");
const OptionSpec shards = whole(
    "shards", "visit the training set as N per-node blocks (docs/design.md, \"Sample order\")", 1,
    1 << 20, "in 1..1048576");
const OptionSpec threads = whole(
    "threads", "cores/threads the strategy may use (stream: cores; cluster: threads per rank)", 1,
    4096, "in 1..4096");
const OptionSpec sweep_cores = whole(
    "cores", "threads per node / pinned cores, comma separated (default 1..nproc)", 1, 4096,
    "in 1..4096", "LIST");
const OptionSpec nodes = whole(
    "nodes", "MPI ranks of cluster points (processes of pytorch-ddp), comma separated (default 1..min(4, nproc))", 1, 65536,
    "in 1..65536", "LIST");
const OptionSpec repeat = whole("repeat", "measured repetitions per point", 1, 1000, "in 1..1000");
const OptionSpec tune_cores = whole("cores", "the cores of the node to tune for", 1, 4096, "in 1..4096");
const OptionSpec tune_nodes = whole("nodes", "nodes to tune for (tune measures one node)", 1, 65536, "in 1..65536");
const OptionSpec tune_budget = real(
    "budget", "seconds the whole tune may take, profile and measurements: no round starts that would "
    "end after it; the profile and one round of each strategy's default and predicted best run "
    "whatever it is", 0, true, 604800, "in (0, 604800]", "SECONDS");
const OptionSpec warmup = whole("warmup", "unmeasured repetitions before them", 0, 1000, "in 0..1000");
const OptionSpec eval_every = whole(
    "eval-every", "time to accuracy: steps between test evaluations", 1, std::nullopt, ">= 1");
const OptionSpec tta_max_steps = whole(
    "tta-max-steps", "time to accuracy: give up after this many steps", 1, std::nullopt, ">= 1");
const OptionSpec checkpoint_every = whole(
    "checkpoint-every",
    "also write the checkpoint to --save after every N steps (the last good one survives a failure)",
    1, std::nullopt, ">= 1");
const OptionSpec min_time = real(
    "min-time", "without --steps or --epochs: each point grows its steps per repetition until one "
    "takes at least S seconds (the steps chosen are in the report)", 0, true, 3600, "in (0, 3600]", "S");
const OptionSpec target_accuracy =
    real("target-accuracy", "also measure wall time until test accuracy first reaches this fraction",
         0, true, 1, "in (0, 1]", "A");

}  // namespace general_option

std::string number_problem(const OptionSpec& spec, const std::string& text,
                           std::optional<double> value, const std::string& highest) {
  if (value && spec.admits(*value)) return "";
  const bool whole = spec.kind == OptionKind::whole_number;
  std::string problem = text + ": expected " + (whole ? "a whole number" : "a finite number") +
                        (spec.range.empty() ? "" : " " + spec.range);
  // Digits that the type cannot hold: say how far it goes (never a double's 309 digits).
  const bool digits = !text.empty() && text.find_first_not_of("+0123456789") == std::string::npos;
  if (whole && !value && digits) problem += " (at most " + highest + ")";
  return problem;
}

CLI::Validator output_path_rule(OutputKind kind) {
  return CLI::Validator(
      [kind](const std::string& text) {
        if (!text.empty()) return std::string();
        return std::string("the path is empty; give a ") +
               (kind == OutputKind::folder ? "folder name"
                : kind == OutputKind::json ? "file name ('-' for standard output)"
                                           : "file name");
      },
      "", "output path");
}

CLI::Option* add_force_flag(CLI::App* cmd, bool& force, const std::string& outputs) {
  return cmd->add_flag("--force", force,
                       "overwrite an existing " + outputs + " (without it, an existing file is refused "
                       "before any work)");
}

void add_common_flags(CLI::App* cmd, CommonArgs& a, OptionFlags which) {
  namespace g = general_option;
  const bool train = which == OptionFlags::train;
  add_isa_option(cmd, a.isa);
  CLI::Option* data = cmd->add_option(
      "--data", a.data_dir,
      train ? "folder with the MNIST IDX files" : "MNIST folder (default: synthetic data)")
      ->check(input_path_rule(PathKind::folder, false));
  CLI::Option* synthetic = add_number_option(cmd, g::synthetic, a.synthetic)->excludes(data);
  CLI::Option* epochs = add_number_option(cmd, train ? g::train_epochs : g::sweep_epochs, a.epochs);
  // The sweep's --steps shows no default: without it each point calibrates its steps to --min-time.
  add_number_option(cmd, train ? g::train_steps : g::sweep_steps, a.steps)->excludes(epochs);
  if (train) {
    data->capture_default_str();
    epochs->capture_default_str();
  } else {
    synthetic->description("synthetic training samples when --data is not given")
        ->capture_default_str();
  }
  add_number_option(cmd, g::batch, a.batch)->capture_default_str();
  add_number_option(cmd, g::lr, a.lr)->capture_default_str();
  add_number_option(cmd, g::momentum, a.momentum)->capture_default_str();
  add_number_option(cmd, g::seed, a.seed)->capture_default_str();
  cmd->add_flag("--no-pin", a.no_pin, "do not bind worker threads to cores");
  cmd->add_flag("--oversubscribe", a.oversubscribe,
                "allow more threads than this machine has hardware threads" +
                    std::string(train ? "" : " (passed on to the points)"));
  cmd->add_flag("--quiet", a.quiet, train ? "no progress bar and no summary line" : "no progress lines");
  add_strategy_option_flags(cmd, a.options, which);
}

const std::vector<std::string>& model_choices() {
  static const std::vector<std::string> names = {model_name(ModelKind::fc3),
                                                 model_name(ModelKind::lenet5)};
  return names;
}

int machine_threads() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int ranks_on_this_node() {
  // Open MPI, then MPICH and Intel MPI; a launcher that says neither counts as one rank.
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    const std::optional<double> ranks = read_exactly<int>(value);
    if (ranks && *ranks >= 1) return static_cast<int>(*ranks);
  }
  return 1;
}

namespace {
constexpr std::size_t mnist_train_samples = 60000;
}  // namespace

void check_memory_for(const CommonArgs& args, const PointSpec& point, std::size_t test_samples) {
  constexpr double bytes_per_sample = 28 * 28 + 1;  // the image and its label
  const std::size_t samples = args.synthetic > 0 ? args.synthetic : mnist_train_samples;
  if (args.synthetic > 0) {
    check_memory("--synthetic " + std::to_string(args.synthetic),
                 bytes_per_sample * static_cast<double>(args.synthetic + test_samples), "the images");
  }
  const double bytes = static_cast<double>(
      estimate_point_bytes(point, args.batch, samples, test_samples));
  check_memory("--batch " + std::to_string(args.batch) + " with " + point.id(), bytes,
               "the data, the model and a batch's activations");
}

std::string path_kind_problem(const std::string& path, PathKind kind, bool must_exist) {
  if (path.empty()) return "an empty path";
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (!std::filesystem::exists(status)) {
    return must_exist ? path + ": no such " + (kind == PathKind::file ? "file" : "folder") : "";
  }
  const bool folder = std::filesystem::is_directory(status);
  if (kind == PathKind::file && folder) return path + ": is a folder; expected a file";
  if (kind == PathKind::folder && !folder) return path + ": is a file; expected a folder";
  return "";
}

CLI::Validator input_path_rule(PathKind kind, bool must_exist) {
  return CLI::Validator(
      [kind, must_exist](std::string& path) { return path_kind_problem(path, kind, must_exist); },
      kind == PathKind::file ? "FILE" : "DIR", "path kind");
}

void check_threads(const std::string& flag, int threads, int ranks, int batch, bool oversubscribe) {
  const std::string given = flag + " " + std::to_string(threads);
  const int have = machine_threads();
  if (!oversubscribe && static_cast<long long>(threads) * ranks > have) {
    throw CLI::ValidationError(
        given + (ranks > 1 ? " x " + std::to_string(ranks) + " ranks on this node" : "") +
        ": this machine has " + std::to_string(have) + " hardware thread" + (have == 1 ? "" : "s") +
        "; pass --oversubscribe to run more threads than that");
  }
  if (threads > batch) {
    throw CLI::ValidationError(given + ": more than the " + std::to_string(batch) +
                               " samples of a batch (--batch); at most one thread per sample");
  }
}

namespace {

template <class T>
void drop_repeated(const std::string& flag, std::vector<T>& items) {
  std::vector<T> kept;
  std::vector<std::string> repeated;
  for (const T& item : items) {
    if (std::find(kept.begin(), kept.end(), item) == kept.end()) {
      kept.push_back(item);
    } else {
      std::string text;
      if constexpr (std::is_same_v<T, std::string>) text = item; else text = std::to_string(item);
      if (std::find(repeated.begin(), repeated.end(), text) == repeated.end()) repeated.push_back(text);
    }
  }
  if (repeated.empty()) return;
  std::string list;
  for (const std::string& text : repeated) list += (list.empty() ? "" : ", ") + text;
  std::fprintf(stderr, "cnnbench: note: %s lists %s more than once; each is measured once\n",
               flag.c_str(), list.c_str());
  items = std::move(kept);
}

// Edits (insert, delete, replace, swap two neighbours) that turn a into b.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::string without_dashes(const std::string& word) {
  return word.substr(std::min(word.find_first_not_of('-'), word.size()));
}

std::string suggestion(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string meant = closest_word(word, candidates);
  return meant.empty() ? "" : "; did you mean '" + meant + "'?";
}

// The long and short flags of a command, with their dashes.
std::vector<std::string> flags_of(const CLI::App* command) {
  std::vector<std::string> flags;
  for (const CLI::Option* option : command->get_options()) {
    for (const std::string& name : option->get_lnames()) flags.push_back("--" + name);
    for (const std::string& name : option->get_snames()) flags.push_back("-" + name);
  }
  return flags;
}

}  // namespace

std::string drop_repeated_keys(const std::string& flag, const std::string& list) {
  std::vector<std::string> keys, repeated;
  std::string kept;
  for (std::size_t at = 0; at <= list.size();) {
    const std::size_t end = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, end - at);
    at = end + 1;
    if (item.empty() && end == list.size()) break;
    const std::string key = item.substr(0, item.find('='));
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) {
      repeated.push_back(item);
      continue;
    }
    keys.push_back(key);
    kept += (kept.empty() ? "" : ",") + item;
  }
  if (repeated.empty()) return list;
  std::string text;
  for (const std::string& item : repeated) text += (text.empty() ? "" : ", ") + item;
  std::fprintf(stderr, "cnnbench: note: %s names a key more than once; the first is used, not %s\n",
               flag.c_str(), text.c_str());
  return kept;
}

void drop_repeats(const std::string& flag, std::vector<std::string>& items) {
  drop_repeated(flag, items);
}
void drop_repeats(const std::string& flag, std::vector<int>& items) { drop_repeated(flag, items); }

std::string closest_word(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string bare = without_dashes(word);
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(1, bare.size() / 3) + 1;
  for (const std::string& candidate : candidates) {
    const std::size_t distance = edit_distance(bare, without_dashes(candidate));
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::string failure_message(const CLI::App* app, const CLI::Error& error) {
  const std::vector<CLI::App*>& chosen = app->get_subcommands();
  const CLI::App* where = chosen.empty() ? app : chosen.back();
  const std::string prefix = chosen.empty() ? "cnnbench" : "cnnbench " + where->get_name();
  std::string unknown_flag, unknown_word;
  for (const std::string& word : app->remaining(true)) {
    const bool flag = word.size() > 1 && word[0] == '-' &&
                      !std::isdigit(static_cast<unsigned char>(word[1]));
    std::string& first = flag ? unknown_flag : unknown_word;
    if (first.empty()) first = flag ? word.substr(0, word.find('=')) : word;
  }
  std::string hint;
  if (chosen.empty() && !unknown_word.empty()) {
    std::vector<std::string> commands;
    for (const CLI::App* sub : app->get_subcommands([](const CLI::App*) { return true; })) {
      commands.push_back(sub->get_name());
    }
    hint = "unknown command '" + unknown_word + "'" + suggestion(unknown_word, commands);
  } else if (!unknown_flag.empty() && (chosen.empty() || dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr)) {
    hint = "unknown option '" + unknown_flag + "'";
    const OptionSpec* spec = find_option_spec(without_dashes(unknown_flag));
    if (spec != nullptr) {
      hint += " (an option of " + spec->strategies_text() + " that this command does not take)";
    } else {
      hint += suggestion(unknown_flag, flags_of(where));
    }
  }
  // A one-value flag given twice: neither value silently wins.
  const std::string said = error.what();
  const std::size_t at_most = said.find(": At Most 1 required but received ");
  if (hint.empty() && at_most != std::string::npos) {
    hint = said.substr(0, at_most) + " is given " + said.substr(at_most + 34) +
           " times; give it once";
  }
  // Every error starts "cnnbench: error: ", usage errors too; the command run says where.
  const std::string what = hint.empty() ? said : hint;
  return "cnnbench: error: " + printable_text(what) + "\nRun '" + prefix +
         " --help' for more information.\n";
}

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

namespace {
std::atomic<int> stop_signal{0};  // the first SIGINT or SIGTERM; 0 = none
extern "C" void on_long_command_stop_signal(int signal) {
  int none = 0;
  stop_signal.compare_exchange_strong(none, signal);
}
}  // namespace

void catch_stop_signals() {
  std::signal(SIGINT, on_long_command_stop_signal);
  std::signal(SIGTERM, on_long_command_stop_signal);
}

int stop_signal_received() { return stop_signal.load(); }

int exit_status_after_stop() {
  const int signal = stop_signal.load();
  return 128 + (signal != 0 ? signal : SIGINT);
}

// A rate as tc takes it: a positive decimal number and a unit (bit, kbit, mbit, gbit, tbit, or
// bps, kbps, mbps, gbps, tbps for bytes per second).
bool is_link_rate(const std::string& rate) {
  static const std::regex form(R"(([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps|tbps))",
                               std::regex::icase);
  std::smatch match;
  return std::regex_match(rate, match, form) && std::stod(match[1].str()) > 0;
}

}  // namespace cnnbench::cli
