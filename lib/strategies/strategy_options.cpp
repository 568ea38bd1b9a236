// Every strategy option, declared once, and the checks made from the declarations: the CLI flags,
// the sweep's pass-through and the reports are made from the same table.
#include "strategy_options.hpp"

#include <cmath>
#include <stdexcept>
#include <utility>

#include "cnnbench/core.hpp"

namespace cnnbench {

namespace strategy_option {

const OptionSpec consistency{
    .name = "consistency", .kind = OptionKind::choice, .choices = {"strict", "group-async", "async"},
    .value_name = "MODE", .value_noun = "mode", .default_value = "strict",
    .help = "strict, group-async or async", .strategies = {"stream"}, .in_sweep = true};
const OptionSpec microbatches{
    .name = "microbatches", .kind = OptionKind::whole_number, .value_name = "N",
    .default_note = "2 under strict (1 with copies of the net), 4 otherwise",
    .help = "micro-batches per group (must divide the batch)", .strategies = {"stream"},
    .minimum = 1, .range = ">= 1", .in_sweep = true};
const OptionSpec graph{
    .name = "graph", .kind = OptionKind::text, .value_name = "FILE",
    .help = "write the dataflow graph (Graphviz .dot)", .strategies = {"stream"}, .output_file = true};
const OptionSpec widths{
    .name = "widths", .kind = OptionKind::text, .value_name = "LIST",
    .default_note = "chosen for the cores",
    .help = "splitjoin widths, e.g. s=1,c1k=2,c2c=2,f1=2 (s: copies of the net, each on a slice of "
            "every micro-batch; c1k/c1c/c2k/c2c: conv kernel/channel groups; f1/f2/f3: dense "
            "blocks); unnamed ones keep the default",
    .strategies = {"stream"}};
const OptionSpec overlap{
    .name = "overlap", .kind = OptionKind::choice, .choices = {"on", "off"}, .value_name = "on|off",
    .default_value = "on", .help = "overlap allreduce with backward", .strategies = {"cluster"}};
const OptionSpec node_update{
    .name = "node-update", .kind = OptionKind::choice,
    .choices = {"auto", "replicas", "slices", "factors"},
    .value_name = "auto|replicas|slices|factors", .value_noun = "mode", .default_value = "auto",
    .help = "how a rank's threads step the model: replicas (each its own copy), slices (each its "
            "slice of one shared model), factors (slices, f1's weight gradient computed by rows "
            "from every thread's f1 input and output gradient; one rank) or auto (replicas for a "
            "model of at most 16 MB)",
    .strategies = {"cluster"}};
const OptionSpec rank_update{
    .name = "rank-update", .kind = OptionKind::choice, .choices = {"replicated", "sharded"},
    .value_name = "replicated|sharded", .value_noun = "mode", .default_value = "replicated",
    .help = "how ranks step the model on the summed gradient: replicated (every rank receives "
            "the whole sum and steps all of it) or sharded (each rank receives the sum of its own "
            "segment, steps it, then the ranks share the new weights)",
    .strategies = {"cluster"}};
const OptionSpec balance{
    .name = "balance", .kind = OptionKind::choice, .choices = {"static", "dynamic"},
    .value_name = "static|dynamic", .value_noun = "mode", .default_value = "static",
    .help = "static (even shares) or dynamic (shares by measured compute time: over ranks and a "
            "rank's threads, or over the stream's copies of the net)",
    .strategies = {"cluster", "stream"}, .in_sweep = true, .sweep_default = "dynamic"};
const OptionSpec slowdown{
    .name = "slowdown", .kind = OptionKind::part_factor, .value_name = "N:FACTOR",
    .help = "part N (a cluster rank, a copy of the stream's net) computes FACTOR times slower, "
            "for testing balancing; e.g. 1:2",
    .strategies = {"cluster", "stream"}, .minimum = 1, .maximum = 1000, .range = "1..1000"};
const OptionSpec comm_timeout{
    .name = "comm-timeout", .kind = OptionKind::number, .value_name = "SECONDS",
    .default_value = "30",
    .help = "end the job with an error naming the lost rank when a collective waits longer than "
            "this for the other ranks (a cut link, a hung or stopped rank)",
    .strategies = {"cluster"}, .minimum = 0.1, .maximum = 86400, .range = "in 0.1..86400",
    .in_sweep = true};
const OptionSpec gpu_data{
    .name = "gpu-data", .kind = OptionKind::choice, .choices = {"resident", "stream"},
    .value_name = "resident|stream", .value_noun = "mode", .default_value = "resident",
    .help = "resident or stream", .strategies = {"gpu"}};
const OptionSpec gpu_graph{
    .name = "gpu-graph", .kind = OptionKind::choice, .choices = {"on", "off"}, .value_name = "on|off",
    .default_value = "on", .help = "capture the step as a CUDA graph", .strategies = {"gpu"}};
const OptionSpec device{
    .name = "device", .kind = OptionKind::whole_number, .value_name = "N",
    .default_note = "the rank on its machine modulo the device count", .help = "CUDA device index",
    .strategies = {"gpu"}, .minimum = 0, .range = ">= 0"};
const OptionSpec pin_core{
    .name = "pin-core", .kind = OptionKind::whole_number, .value_name = "N",
    .default_note = "the last core", .help = "the core to run on", .strategies = {"serial"},
    .minimum = 0, .range = ">= 0"};

}  // namespace strategy_option

namespace {

std::string joined(const std::vector<std::string>& words, const std::string& last_separator) {
  std::string text;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (i > 0) text += i + 1 == words.size() ? last_separator : ", ";
    text += words[i];
  }
  return text;
}

// The whole text read by `read` (std::stoi, std::stod); nothing when it is not one number or
// does not fit the type.
template <class Read>
auto parse_entire(const std::string& text, Read read) -> std::optional<decltype(read(text, nullptr))> {
  try {
    std::size_t used = 0;
    const auto value = read(text, &used);
    if (used == text.size()) return value;
  } catch (const std::logic_error&) {  // not a number, or out of range
  }
  return std::nullopt;
}

std::optional<double> parse_number(const std::string& text) {
  return parse_entire(text, [](const std::string& t, std::size_t* used) { return std::stod(t, used); });
}

std::string range_words(const OptionSpec& spec) {
  return spec.range.empty() ? "" : " " + spec.range;
}

// What is wrong with N:FACTOR, "" when nothing.
std::string part_factor_problem(const OptionSpec& spec, const std::string& value, PartFactor* out) {
  const std::string head = spec.flag() + " " + value + ": expected ";
  const auto colon = value.find(':');
  if (colon == std::string::npos) return head + spec.value_name;
  const std::optional<int> part = parse_whole_number(value.substr(0, colon));
  const std::optional<double> factor = parse_number(value.substr(colon + 1));
  if (!part || *part < 0 || !factor) {
    return head + spec.value_name + " (N a whole number >= 0, FACTOR a number" + range_words(spec) + ")";
  }
  if (!spec.admits(*factor)) return head + "a FACTOR of" + range_words(spec) + " in " + spec.value_name;
  if (out != nullptr) *out = {*part, *factor};
  return "";
}

std::string options_of(const std::string& strategy) {
  std::vector<std::string> flags;
  for (const OptionSpec* spec : strategy_option_specs()) {
    if (spec->applies_to(strategy)) flags.push_back(spec->flag() + " " + spec->value_name);
  }
  return flags.empty() ? "it has none" : "its options: " + joined(flags, ", ");
}

}  // namespace

bool OptionSpec::applies_to(const std::string& strategy) const {
  for (const std::string& s : strategies) {
    if (s == strategy) return true;
  }
  return false;
}

bool OptionSpec::admits(double value) const {
  if (finite && !std::isfinite(value)) return false;
  if (minimum && (exclusive_minimum ? value <= *minimum : value < *minimum)) return false;
  return !maximum || value <= *maximum;
}

std::string OptionSpec::strategies_text() const { return joined(strategies, " and "); }

std::string OptionSpec::help_text() const { return strategies_text() + ": " + help; }

std::string OptionSpec::default_text() const {
  return default_value.empty() ? default_note : default_value;
}

const std::vector<const OptionSpec*>& strategy_option_specs() {
  using namespace strategy_option;
  static const std::vector<const OptionSpec*> specs = {
      &consistency, &microbatches, &graph,    &widths,    &overlap, &node_update, &rank_update,
      &balance,     &slowdown,     &comm_timeout, &gpu_data, &gpu_graph, &device, &pin_core};
  return specs;
}

const OptionSpec* find_option_spec(const std::string& name) {
  for (const OptionSpec* spec : strategy_option_specs()) {
    if (spec->name == name) return spec;
  }
  return nullptr;
}

std::string option_value_problem(const OptionSpec& spec, const std::string& value) {
  switch (spec.kind) {
    case OptionKind::choice:
      for (const std::string& choice : spec.choices) {
        if (value == choice) return "";
      }
      return spec.flag() + ": unknown " + spec.value_noun + " '" + value + "' (expected " +
             joined(spec.choices, " or ") + ")";
    case OptionKind::whole_number: {
      const std::optional<int> number = parse_whole_number(value);
      if (number && spec.admits(*number)) return "";
      return spec.flag() + " " + value + ": expected a whole number" + range_words(spec);
    }
    case OptionKind::number: {
      const std::optional<double> number = parse_number(value);
      if (number && spec.admits(*number)) return "";
      return spec.flag() + " " + value + ": expected a " + (spec.finite ? "finite " : "") +
             "number" + range_words(spec);
    }
    case OptionKind::part_factor:
      return part_factor_problem(spec, value, nullptr);
    case OptionKind::text:
      return "";
  }
  return "";
}

void check_strategy_options(const std::map<std::string, std::string>& options,
                            const std::string& strategy) {
  for (const auto& [name, value] : options) {
    const OptionSpec* spec = find_option_spec(name);
    if (spec == nullptr) {
      fail("strategy '" + strategy + "' has no option --" + name + " (" + options_of(strategy) + ")");
    }
    if (!spec->applies_to(strategy)) {
      fail(spec->flag() + " does not apply to --strategy " + strategy + " (it is an option of " +
           spec->strategies_text() + "; " + options_of(strategy) + ")");
    }
    const std::string problem = option_value_problem(*spec, value);
    if (!problem.empty()) fail(problem);
  }
}

PartFactor parse_part_factor(const OptionSpec& spec, const std::string& value) {
  PartFactor parsed;
  const std::string problem = part_factor_problem(spec, value, &parsed);
  if (!problem.empty()) fail(problem);
  return parsed;
}

std::optional<int> parse_whole_number(const std::string& text) {
  return parse_entire(text, [](const std::string& t, std::size_t* used) { return std::stoi(t, used); });
}

StrategyOptions::StrategyOptions(const TrainConfig& config, std::string strategy)
    : values_(config.options), strategy_(std::move(strategy)) {
  check_strategy_options(values_, strategy_);
}

const OptionSpec& StrategyOptions::own(const OptionSpec& option) const {
  if (!option.applies_to(strategy_)) {
    throw std::logic_error("strategy '" + strategy_ + "' reads option --" + option.name +
                           ", which is not one of its own");
  }
  return option;
}

bool StrategyOptions::given(const OptionSpec& option) const {
  return values_.count(own(option).name) > 0;
}

std::string StrategyOptions::text(const OptionSpec& option) const {
  const auto it = values_.find(own(option).name);
  return it == values_.end() ? option.default_value : it->second;
}

bool StrategyOptions::is(const OptionSpec& option, const std::string& choice) const {
  if (option.kind != OptionKind::choice || !option_value_problem(option, choice).empty()) {
    throw std::logic_error("'" + choice + "' is not a choice of --" + option.name);
  }
  return text(option) == choice;
}

std::optional<int> StrategyOptions::whole_number(const OptionSpec& option) const {
  const std::string value = text(option);
  if (value.empty()) return std::nullopt;
  return parse_whole_number(value);  // checked by the constructor
}

std::optional<double> StrategyOptions::number(const OptionSpec& option) const {
  const std::string value = text(option);
  if (value.empty()) return std::nullopt;
  return parse_number(value);  // checked by the constructor
}

std::optional<PartFactor> StrategyOptions::part_factor(const OptionSpec& option) const {
  if (!given(option)) return std::nullopt;
  return parse_part_factor(option, text(option));
}

}  // namespace cnnbench
