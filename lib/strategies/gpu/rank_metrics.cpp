// Gathers every rank's entry to every rank and sums up the gradient exchange (rank_metrics.hpp).
#include "rank_metrics.hpp"

#include <unistd.h>

#include <algorithm>

namespace cnnbench::gpu {

namespace {
std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}
}  // namespace

nlohmann::json rank_entry(const RankGroup& ranks, nlohmann::json entry, const PinRecord& pin) {
  entry["rank"] = ranks.rank();
  entry["host"] = host_name();
  entry["pin"] = {{"worker", pin.worker},
                  {"core", pin.core},
                  {"pu", pin.pu},
                  {"observed_cpu", pin.observed_cpu}};
  return entry;
}

RankMetrics gather_rank_metrics(RankGroup& ranks, const nlohmann::json& mine,
                                double payload_bytes, std::int64_t allreduce_steps) {
  RankMetrics out;
  double sum = 0, max = 0;
  for (const std::string& text : ranks.gather_to_all(mine.dump())) {
    nlohmann::json rank = nlohmann::json::parse(text);
    const nlohmann::json pin = rank.at("pin");
    out.pins.push_back({pin.at("worker").get<std::string>(), pin.at("core").get<int>(),
                        pin.at("pu").get<int>(), pin.at("observed_cpu").get<int>()});
    rank.erase("pin");
    const double seconds = rank.at("allreduce_s").get<double>();
    sum += seconds;
    max = std::max(max, seconds);
    out.per_rank.push_back(std::move(rank));
  }
  const int size = ranks.size();
  const double mean = sum / size;
  const auto steps = static_cast<double>(allreduce_steps);
  // Reduce-scatter + allgather: each rank sends (and receives) 2 (p - 1) / p of the payload.
  const double moved = payload_bytes * 2.0 * (size - 1) / size * steps;
  out.allreduce = {
      {"method", "host-staged: gradients device -> pinned host, MPI reduce-scatter summed in "
                 "rank order + allgather, host -> device; one exchange per step"},
      {"seconds_mean", mean},
      {"seconds_max", max},
      {"ms_per_step_mean", allreduce_steps > 0 ? 1e3 * mean / steps : 0.0},
      {"ms_per_step_max", allreduce_steps > 0 ? 1e3 * max / steps : 0.0},
      {"payload_bytes_per_step", payload_bytes},
      {"bytes_moved_per_rank", moved},
      {"gbps_per_rank", mean > 0 ? moved / mean / 1e9 : 0.0}};
  return out;
}

}  // namespace cnnbench::gpu
