// The input rules of `train` and `sweep`: each number flag declared with its rule (an OptionSpec
// of kind number or whole_number, as the strategy options are), the flags both commands share
// declared once, what the machine allows (threads against the batch and the cores), repeated list
// items, and "did you mean" for a mistyped command or flag.
#pragma once

#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include "cnnbench/sweep.hpp"
#include "cnnbench/train.hpp"
#include "commands.hpp"

namespace cnnbench::cli {

// The general flags' rules: whole numbers and numbers with their ranges said for people.
namespace general_option {
extern const OptionSpec batch, lr, momentum, weight_decay, seed;
extern const OptionSpec train_steps, train_epochs, sweep_steps, sweep_epochs, synthetic, shards;
extern const OptionSpec threads, sweep_cores, nodes, repeat, warmup;
extern const OptionSpec tune_cores, tune_nodes, tune_budget;
extern const OptionSpec eval_every, tta_max_steps, target_accuracy, checkpoint_every, min_time;
}  // namespace general_option

// "" when `value` (what T read from `text`, nothing when T could not hold it) is within the spec's
// kind and range; else "TEXT: expected a finite number > 0". `highest` is T's largest value.
std::string number_problem(const OptionSpec& spec, const std::string& text,
                           std::optional<double> value, const std::string& highest);

// `text` read as T exactly: the whole text, in T's range (a float that would overflow or round to
// 0 is refused, as is -1 for an unsigned T); nothing otherwise.
template <class T>
std::optional<double> read_exactly(const std::string& text) {
  const char* first = text.data();
  const char* const last = first + text.size();
  if (first != last && *first == '+') ++first;
  T value{};
  const auto [end, error] = std::from_chars(first, last, value);
  if (first == last || error != std::errc() || end != last) return std::nullopt;
  return static_cast<double>(value);
}

// `names` (default: the spec's flag) bound to `value`, or to each item of a comma-separated list,
// checked by number_problem: a usage error (exit 2) that says the range for people.
template <class T>
CLI::Validator number_rule(const OptionSpec& spec) {
  const std::string highest = std::to_string(std::numeric_limits<T>::max());
  return CLI::Validator(
      [spec, highest](std::string& text) {
        return number_problem(spec, text, read_exactly<T>(text), highest);
      },
      "", spec.name);
}
template <class T>
CLI::Option* add_number_option(CLI::App* cmd, const OptionSpec& spec, T& value,
                               const std::string& names = "") {
  return cmd->add_option(names.empty() ? spec.flag() : names, value, spec.help)
      ->type_name(spec.value_name)
      ->check(number_rule<T>(spec));
}
template <class T>
CLI::Option* add_number_option(CLI::App* cmd, const OptionSpec& spec, std::vector<T>& values) {
  return cmd->add_option(spec.flag(), values, spec.help)
      ->type_name(spec.value_name)
      ->delimiter(',')
      ->check(number_rule<T>(spec));
}

// An output path's usage rule: not empty ("--report ''" would otherwise read as no report).
// check_outputs (lib/core/output.cpp) checks the rest before any work.
// An output path's form: a file, a JSON file ('-' writes it to standard output) or a folder.
enum class OutputKind { file, json, folder };
CLI::Validator output_path_rule(OutputKind kind);
// --force on cmd: an existing file among `outputs` ("--report") may be replaced; without it, one
// is refused before any work (check_outputs, OutputPath::replace).
CLI::Option* add_force_flag(CLI::App* cmd, bool& force, const std::string& outputs);

// The flags `train` and `sweep` share, with the same rules; which one says the defaults and help
// that differ (train: one run, steps in total; sweep: steps per repetition, synthetic by default).
struct CommonArgs {
  std::string isa = "best";
  std::string data_dir;
  std::size_t synthetic = 0;
  std::int64_t steps = -1, epochs = 1;
  int batch = 64;
  float lr = 0.01f, momentum = 0.9f;
  std::uint64_t seed = 1;
  bool no_pin = false, oversubscribe = false, quiet = false;
  std::map<std::string, std::string> options;  // strategy options by name; "" = not given
};
void add_common_flags(CLI::App* cmd, CommonArgs& args, OptionFlags which);

// The values of --model (train) and --model's items (sweep).
const std::vector<std::string>& model_choices();

// The hardware threads this machine runs (what the sweep's default cores count up to).
int machine_threads();
// Ranks of this MPI job on this node, from the launcher's environment; 1 when not launched so.
int ranks_on_this_node();
// Usage error (CLI::ValidationError) when `threads` workers per rank (`flag` names them) exceed
// the batch, or, `ranks` of them on this node, the machine's hardware threads and oversubscribing
// was not asked for.
void check_threads(const std::string& flag, int threads, int ranks, int batch, bool oversubscribe);

// Usage error (exit 2) when the data, the model and a batch's activations of `point` (with
// `test_samples` more for --eval) need more than this machine's free memory: said before any
// allocation ("--synthetic 1000000000 needs 785.0 GB for the images; this machine has 23.0 GB
// free"), never a std::bad_alloc.
void check_memory_for(const CommonArgs& args, const PointSpec& point, std::size_t test_samples);

// Input paths: a folder where a file belongs or the reverse is refused with its own message
// ("PATH: is a folder; expected a file"); a missing path too when `must_exist`, else its reader
// names what is missing. "" when the path is fine.
enum class PathKind { file, folder };
std::string path_kind_problem(const std::string& path, PathKind kind, bool must_exist);
CLI::Validator input_path_rule(PathKind kind, bool must_exist);

// Every list and key=value option treats a repeat alike: the first is kept, the rest dropped, and
// a note on stderr says so. drop_repeats for lists of values ("--cores 1,1"), drop_repeated_keys
// for lists of NAME=VALUE ("--widths c1k=2,c1k=3" keeps c1k=2).
std::string drop_repeated_keys(const std::string& flag, const std::string& list);
void drop_repeats(const std::string& flag, std::vector<std::string>& items);
void drop_repeats(const std::string& flag, std::vector<int>& items);

// The candidate closest to `word` within a few edits ("trian" -> "train"); "" when none is.
std::string closest_word(const std::string& word, const std::vector<std::string>& candidates);
// The root app's failure message: CLI11's, or for a mistyped command or flag, what was meant.
std::string failure_message(const CLI::App* app, const CLI::Error& error);

// The words of a launcher's argument string (--mpirun-args "..."), split at white space.
std::vector<std::string> split_words(const std::string& text);
// A link rate as tc takes it ("100mbit", "1gbit", "500kbit"): the form of --rate.
bool is_link_rate(const std::string& rate);

// A long command (sweep, tune) stops between points on the first SIGINT or SIGTERM:
// catch_stop_signals() installs the handler, stop_signal_received() is that signal, 0 while none.
void catch_stop_signals();
int stop_signal_received();
// The exit status of a command a signal stopped: 128 + the signal (SIGINT when none was caught).
int exit_status_after_stop();

}  // namespace cnnbench::cli
