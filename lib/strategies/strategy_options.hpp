// Reading a strategy's config.options (keys are the CLI flags without dashes), shared by the
// strategies so that each one only states its own rules and messages.
#pragma once

#include <optional>
#include <string>

#include "cnnbench/train.hpp"

namespace cnnbench {

// The option's text, or `fallback` when it was not given.
std::string option_or(const TrainConfig& config, const std::string& key, const std::string& fallback);

// The whole text as a decimal int; nothing when it is not one (or does not fit an int).
std::optional<int> parse_whole_number(const std::string& text);

}  // namespace cnnbench
