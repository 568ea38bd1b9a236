// The strategy options' specs, and how a strategy reads its own: checked once against the specs,
// then read by spec (never by key), so that names, defaults and messages live in one place.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "cnnbench/train.hpp"

namespace cnnbench {

// Every option, defined in strategy_options.cpp; strategy_option_specs() lists the same.
namespace strategy_option {
extern const OptionSpec consistency, microbatches, graph, widths;  // stream
extern const OptionSpec overlap, node_update, rank_update, comm_timeout;        // cluster
extern const OptionSpec balance, slowdown;                         // cluster and stream
extern const OptionSpec gpu_data, gpu_graph, device;               // gpu
extern const OptionSpec pin_core;                                  // serial
}  // namespace strategy_option

// N:FACTOR of a part_factor option.
struct PartFactor {
  int part = 0;
  double factor = 1.0;
};
// Error naming the flag when `value` is not N:FACTOR within the spec's range.
PartFactor parse_part_factor(const OptionSpec& spec, const std::string& value);

// The whole text as a decimal int; nothing when it is not one (or does not fit an int).
std::optional<int> parse_whole_number(const std::string& text);

// One strategy's options of a config. The constructor checks them (check_strategy_options); the
// readers take a spec of this strategy (another one is a programming error).
class StrategyOptions {
 public:
  StrategyOptions(const TrainConfig& config, std::string strategy);

  bool given(const OptionSpec& option) const;
  // The value given, else the spec's default ("" when it has none).
  std::string text(const OptionSpec& option) const;
  // Whether a choice option's value is `choice` (which must be one of its choices).
  bool is(const OptionSpec& option, const std::string& choice) const;
  // The value of a whole_number option; nothing when neither given nor defaulted.
  std::optional<int> whole_number(const OptionSpec& option) const;
  // The value of a number option; nothing when neither given nor defaulted.
  std::optional<double> number(const OptionSpec& option) const;
  // The value of a part_factor option; nothing when not given.
  std::optional<PartFactor> part_factor(const OptionSpec& option) const;

 private:
  const OptionSpec& own(const OptionSpec& option) const;

  std::map<std::string, std::string> values_;
  std::string strategy_;
};

}  // namespace cnnbench
