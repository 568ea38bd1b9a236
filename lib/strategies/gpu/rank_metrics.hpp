// What rank 0 reports of a GPU run over several MPI ranks: every rank's device, timings and pin
// record, and the gradient exchange's cost.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../rank_group.hpp"
#include "cnnbench/topology.hpp"

namespace cnnbench::gpu {

struct RankMetrics {
  nlohmann::json per_rank = nlohmann::json::array();  // rank order, without the pin records
  nlohmann::json allreduce = nlohmann::json::object();
  std::vector<PinRecord> pins;                         // rank order
};

// This rank's entry: what the caller puts in it, plus "rank", "host" and "pin".
nlohmann::json rank_entry(const RankGroup& ranks, nlohmann::json entry, const PinRecord& pin);

// Collective: every rank passes its rank_entry (with "allreduce_s", its seconds in the gradient
// sum), the bytes of one step's gradient and the steps that summed them.
RankMetrics gather_rank_metrics(RankGroup& ranks, const nlohmann::json& mine,
                                double payload_bytes, std::int64_t allreduce_steps);

}  // namespace cnnbench::gpu
