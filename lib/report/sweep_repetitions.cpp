// What a sweep point keeps of its repetitions beyond their times: which one stands for the point
// (the median's), and whether its workers lost enough time to descheduling to distrust it.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/sweep.hpp"

namespace cnnbench {

std::size_t median_repetition(std::span<const double> times) {
  CNNBENCH_CHECK(!times.empty(), "the median repetition of no repetitions");
  std::vector<std::size_t> order(times.size());
  std::iota(order.begin(), order.end(), 0);
  // Stable: of equal times the first repetition comes first.
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return times[a] < times[b]; });
  return order[(times.size() - 1) / 2];
}

namespace {

// The fraction of `entry`'s wall time it lost to descheduling; nothing when it does not say.
std::optional<double> descheduled_fraction(const nlohmann::json& entry) {
  if (!entry.is_object()) return std::nullopt;
  const auto lost = entry.find("descheduled_s");
  const auto wall = entry.find("wall_s");
  if (lost == entry.end() || wall == entry.end() || !lost->is_number() || !wall->is_number()) return std::nullopt;
  const double wall_s = wall->get<double>();
  if (!(wall_s > 0)) return std::nullopt;
  return lost->get<double>() / wall_s;
}

// "thread 1", "rank 0 thread 2", or "the critical path" for the breakdown itself.
std::string worker_name(const nlohmann::json& entry) {
  if (!entry.contains("kind")) return "the critical path";
  const std::string kind = entry.value("kind", std::string("worker"));
  const std::string name = kind + " " + std::to_string(entry.value("id", 0));
  if (!entry.contains("rank") || kind == "rank") return name;
  return "rank " + std::to_string(entry.value("rank", 0)) + " " + name;
}

}  // namespace

std::optional<std::string> noise_warning(const nlohmann::json& time_breakdown) {
  if (!time_breakdown.is_object()) return std::nullopt;
  std::vector<const nlohmann::json*> entries;
  const auto workers = time_breakdown.find("workers");
  if (workers != time_breakdown.end() && workers->is_array() && !workers->empty()) {
    for (const auto& worker : *workers) entries.push_back(&worker);
  } else {
    entries.push_back(&time_breakdown);
  }
  const nlohmann::json* worst = nullptr;
  double worst_fraction = descheduled_warning_fraction;
  for (const nlohmann::json* entry : entries) {
    const std::optional<double> fraction = descheduled_fraction(*entry);
    if (fraction && *fraction > worst_fraction) {
      worst = entry;
      worst_fraction = *fraction;
    }
  }
  if (worst == nullptr) return std::nullopt;
  char text[200];
  std::snprintf(text, sizeof text, "%s lost %.0f%% of its wall time (%.3g of %.3g s) to descheduling",
                worker_name(*worst).c_str(), 100 * worst_fraction, worst->at("descheduled_s").get<double>(),
                worst->at("wall_s").get<double>());
  return std::string(text);
}

}  // namespace cnnbench
