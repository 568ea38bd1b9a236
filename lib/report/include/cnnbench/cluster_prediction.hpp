// Each measured cluster point of a sweep held against the communication model
// (cnnbench/collective_model.hpp): the step it predicts from the sweep's own allreduce
// measurement, next to the step measured.
#pragma once

#include <optional>

#include "cnnbench/collective_model.hpp"
#include "cnnbench/records.hpp"

namespace cnnbench {

// Sets `prediction` of every measured cluster point with more than one node and one thread per
// rank: {predicted_step_s, measured_step_s, relative_error ((predicted - measured) / measured),
// algorithm (the one run for its largest allreduce), algorithm_rule, hidden_fraction, hidden_rule,
// compute_s, replicated_s, core_share, communication_s, communication_from, profile}. The step is
// the compute (serial's step over the nodes, its update whole, over the share of a core a thread
// gets) + (1 - hidden) x each of the point's allreduces (strategy_metrics.allreduce.schedule_bytes),
// priced by the bench's own times where it timed the point's call on its ranks, else by the
// algorithm libnbc runs on the link of the sweep's allreduce-bench fit (docs/cluster.md). Points
// stay without one when the sweep has no serial point or no fit.
void add_cluster_predictions(SweepRecord& sweep);

// The MPI_Iallreduce algorithm a cluster run's libnbc was asked for, from its strategy_metrics
// (allreduce.iallreduce_algorithm_id; open_mpi_default when absent or null). Error for an id
// libnbc does not have.
AllreduceAlgorithm iallreduce_asked(const nlohmann::json& strategy_metrics);

// The link of an allreduce-bench report: its fit's own inversion (fit.link), else its one line
// read as a ring without arithmetic (older reports); nullopt when it has no fit.
std::optional<CollectiveCost> allreduce_report_link(const nlohmann::json& allreduce);

}  // namespace cnnbench
