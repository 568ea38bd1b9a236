// The cluster strategy's report: per-rank counters gathered to every rank, the metrics built from
// them (docs/cluster.md, "Metrics in the report"), and every rank's pin records on rank 0.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../rank_group.hpp"
#include "cnnbench/cluster.hpp"
#include "cnnbench/time_breakdown.hpp"
#include "cnnbench/topology.hpp"

namespace cnnbench {

// One rank's counters over the whole run. reduce_bytes: the most bytes one thread's share of the
// intra-node reduction and the update read and wrote (gradients summed, the sum written and read,
// parameters and momentum stepped), a count, not a time.
struct RankCounters {
  double steps = 0, samples = 0, compute_s = 0, reduce_s = 0, allreduce_exposed_s = 0,
         allreduce_in_flight_s = 0, update_s = 0, step_s = 0, last_share = 0, throughput = 0,
         reduce_bytes = 0;
  static constexpr int fields = 11;
  std::array<double, fields> as_array() const {
    return {steps,    samples, compute_s,  reduce_s,  allreduce_exposed_s, allreduce_in_flight_s,
            update_s, step_s,  last_share, throughput, reduce_bytes};
  }
  static RankCounters from(const double* v) {
    return {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10]};
  }
};

// A rank's counters and how its last share was cut over its threads.
struct RankReport {
  RankCounters counters;
  std::vector<int> last_thread_shares;
};

// The run's shape and options, as the report states them.
struct ClusterShape {
  int ranks = 1, threads_per_rank = 1, ranks_per_node = 1;
  bool overlap = true;         // --overlap on
  bool overlap_active = false;  // on, and there are ranks to overlap with
  bool dynamic_balance = false;
  int slow_rank = -1;
  double slow_factor = 1.0;
  std::size_t parameters = 0;  // floats in a gradient
  std::vector<double> allreduce_bytes;  // allreduce_schedule_bytes(): one step's sums over the ranks
  NodeUpdate node_update = NodeUpdate::replicas;
  RankUpdate rank_update = RankUpdate::sharded;
};

// Collective: every rank's report, in rank order, on every rank. `last_thread_shares` has
// threads_per_rank entries on every rank. Exact: each value has one rank that is not zero.
std::vector<RankReport> gather_rank_reports(RankGroup& group, const RankCounters& mine,
                                            const std::vector<int>& last_thread_shares);

// Where the ranks ran and what joined them. A rank's host is CNNBENCH_HOST when set (emulated
// hosts share one machine's hostname; scripts/emulate-hosts.sh sets it), else the hostname; the
// link rate is rank 0's CNNBENCH_LINK_RATE (a tc rate such as 1gbit), absent when unset or empty.
struct ClusterNetwork {
  std::vector<std::string> rank_hosts;  // rank r's host
  std::optional<std::string> link_rate;
};

// Collective: every rank's host, on every rank, and rank 0's link rate.
ClusterNetwork gather_network(RankGroup& group);

// strategy_metrics of a cluster run.
nlohmann::json cluster_metrics(const ClusterShape& shape, const std::vector<RankReport>& ranks,
                               const ClusterNetwork& network);

// Collective: the steps each of this rank's threads recorded since the ranks last met (every
// rank the same number), on every rank: result[step][rank][thread]. Exact, as above.
std::vector<std::vector<std::vector<StepTimes>>> gather_step_times(
    RankGroup& group, const std::vector<const StepTimeline*>& threads);

// The breakdown of a job of ranks x threads: a worker per (rank, thread) share, named a rank
// when ranks have one thread; the straggler is a rank when there are several ranks.
BreakdownBuilder cluster_breakdown_builder(int ranks, int threads_per_rank);

// Collective: every rank's trace tracks, in rank order, on rank 0 (process = rank); the others
// get none.
std::vector<TraceTrack> gather_trace_tracks(RankGroup& group, const std::vector<TraceTrack>& own);

// Collective: every rank's pin records, in rank order, on rank 0; the others keep their own.
std::vector<PinRecord> gather_pins(RankGroup& group, const std::vector<PinRecord>& own);

}  // namespace cnnbench
