#include "strategy_options.hpp"

#include <stdexcept>

namespace cnnbench {

std::string option_or(const TrainConfig& config, const std::string& key, const std::string& fallback) {
  const auto it = config.options.find(key);
  return it == config.options.end() ? fallback : it->second;
}

std::optional<int> parse_whole_number(const std::string& text) {
  try {
    std::size_t used = 0;
    const int value = std::stoi(text, &used);
    if (used == text.size()) return value;
  } catch (const std::logic_error&) {  // not a number, or out of int's range
  }
  return std::nullopt;
}

}  // namespace cnnbench
